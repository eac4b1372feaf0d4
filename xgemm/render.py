"""Render a variant's Jinja2 template into plain CUDA C."""

from __future__ import annotations

import functools
from pathlib import Path

import jinja2


def _kernels_dir() -> Path:
    """The folder of CUDA templates: ``xgemm/kernels`` in an installed wheel (where
    ``kernels/`` is shipped as the package ``xgemm.kernels``), ``kernels/`` beside the
    package in a source checkout or an editable install."""
    package = Path(__file__).resolve().parent
    for candidate in (package / "kernels", package.parent / "kernels"):
        if (candidate / "gemm").is_dir():
            return candidate
    raise FileNotFoundError(f"xgemm's CUDA templates are missing: no kernels/ beside {package}")


KERNELS_DIR = _kernels_dir()

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(KERNELS_DIR),
    undefined=jinja2.StrictUndefined,  # a template variable nobody passed is an error, not ""
    trim_blocks=True,                  # {% ... %} lines leave no blank line behind
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


#: wgmma's k (the k one instruction covers: 32 bytes of each row) by the CUDA input type
_WGMMA_K = {"float": 8, "__half": 16, "__nv_bfloat16": 16, "__nv_fp8_e4m3": 32,
            "__nv_fp8_e5m2": 32, "signed char": 32}


def _accumulators(values: int, kind: str) -> tuple[list[str], list[str]]:
    """A wgmma wrapper's accumulator operands: the asm's registers (%0 on, 16 a line) and
    their bindings to ``acc`` (``kind``: "f" or "r"; 5 a line)."""
    registers = [f"%{i}" for i in range(values)]
    register_lines = [", ".join(registers[i:i + 16]) + (", " if i + 16 < values else "")
                      for i in range(0, values, 16)]
    bound = [f'"+{kind}"(acc[{i}])' for i in range(values)]
    return register_lines, [", ".join(bound[i:i + 5]) for i in range(0, values, 5)]


def _wrapper(name: str, comment: list[str], first: str, second: str, asm: list[str],
             bound: list[str], inputs: str) -> list[str]:
    """One asm wrapper's lines: ``comment``, its signature (parameters ``first`` and, on
    the next line, aligned, ``second``), the asm, its outputs ``bound`` and ``inputs``."""
    indent = " " * 17
    return [*comment,
            f"__device__ __forceinline__ void {name}({first},",
            " " * (33 + len(name)) + f"{second})",
            "{",
            "    asm volatile(" + f"\n{indent}".join(asm),
            f"{indent}: " + f",\n{indent}  ".join(bound),
            f"{indent}: {inputs});",
            "}", ""]


def wgmma_function(dtype: str, n: int, mn_major: tuple[bool, bool], from_zero: bool = False
                   ) -> str:
    r"""The C++ of ``wgmma(acc, desc_a, desc_b)``: one ``wgmma.mma_async`` of shape
    m64n``n``k (k from the CUDA input type ``dtype``), its ``n / 2`` accumulators a thread
    bound one register each. ``mn_major``: whether A and B are MN-major (transposed), an
    immediate pair 16-bit inputs take; tf32 and 8-bit inputs are K-major only, and int8's
    (exact int32 sums) take no sign immediates either. Templates call it (a Jinja global)
    with their tile's n; the input kinds come from the ``WGMMA_INPUTS`` macro of
    ``_hopper.cuh.j2``. ``from_zero``: also ``wgmma_from_zero(acc, desc_a, desc_b)``, the
    same instruction writing ``acc = A * B`` (its scale-d predicate false).

    >>> "m64n8k16.f32" in (text := wgmma_function("__nv_bfloat16", 8, (False, True)))
    True
    >>> "%4, %5, p, 1, 1, 0, 1;" in text
    True
    """
    integer = dtype == "signed char"
    values = n // 2
    kind, sums = ("r", "s32") if integer else ("f", "f32")
    immediates = ("" if integer else ", 1, 1") + (
        f", {int(mn_major[0])}, {int(mn_major[1])}" if dtype in ("__half", "__nv_bfloat16")
        else "")
    register_lines, bound = _accumulators(values, kind)
    asm = [r'"{\n.reg .pred p;\nsetp.ne.b32 p, %' + f'{values + 2}, 0;' + r'\n"',
           f'"wgmma.mma_async.sync.aligned.m64n{n}k{_WGMMA_K[dtype]}.{sums}." '
           'WGMMA_INPUTS " "',
           '"{"', *(f'"{line}"' for line in register_lines), '"}, "',
           f'"%{values}, %{values + 1}, p{immediates};' + r'\n}\n"']

    def function(name: str, accumulate: int, says: str) -> list[str]:
        comment = [f"// acc (64 x {n}, {values} values a thread) {says} A (64 x K_STEP) * B"
                   f" (K_STEP x {n}),", "// both read from shared memory."]
        return _wrapper(name, comment, f"Sum (&acc)[{values}], unsigned long long desc_a",
                        "unsigned long long desc_b", asm, bound,
                        f'"l"(desc_a), "l"(desc_b), "r"({accumulate})')

    return "\n".join(function("wgmma", 1, "+=")
                     + (function("wgmma_from_zero", 0, "=") if from_zero else []))


def wgmma_registers_function(n: int) -> str:
    r"""The C++ of ``wgmma_rs(acc, a, desc_b)`` and ``wgmma_rs_from_zero(acc, a, desc_b)``:
    a TF32 ``wgmma.mma_async`` of shape m64n``n``k8 whose A comes from registers, four
    TF32 values a thread (``a``: their bits, laid out as mma.sync's m16n8k8 A fragment,
    one 16-row slice a warp), B from shared memory; the first adds into ``acc``, the second
    overwrites it.

    >>> "m64n8k8.f32.tf32.tf32" in (text := wgmma_registers_function(8))
    True
    >>> "{%4, %5, %6, %7}, %8, p, 1, 1;" in text
    True
    """
    values = n // 2
    register_lines, bound = _accumulators(values, "f")
    a = ", ".join(f"%{values + i}" for i in range(4))
    asm = [r'"{\n.reg .pred p;\nsetp.ne.b32 p, %' + f'{values + 5}, 0;' + r'\n"',
           f'"wgmma.mma_async.sync.aligned.m64n{n}k8.f32.tf32.tf32 "',
           '"{"', *(f'"{line}"' for line in register_lines), '"}, "',
           f'"{{{a}}}, %{values + 4}, p, 1, 1;' + r'\n}\n"']

    def function(name: str, accumulate: int, says: str) -> list[str]:
        comment = [f"// acc (64 x {n}, {values} values a thread) {says} A (64 x 8, four values"
                   " a thread,", f"// in registers) * B (8 x {n}, shared memory)."]
        return _wrapper(name, comment, f"float (&acc)[{values}], const unsigned (&a)[4]",
                        "unsigned long long desc_b", asm, bound,
                        '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), '
                        f'"r"({accumulate})')

    return "\n".join(function("wgmma_rs", 1, "+=") + function("wgmma_rs_from_zero", 0, "="))


#: A split-K sum pass's threads a block (``Variant.sum_pass``): its template's
#: ``__launch_bounds__`` and the plan's launch.
SUM_THREADS = 256

_env.globals["wgmma_function"] = wgmma_function
_env.globals["SUM_THREADS"] = SUM_THREADS
_env.globals["wgmma_registers_function"] = wgmma_registers_function


@functools.cache
def _render(template: str, items: tuple[tuple[str, object], ...]) -> str:
    return _env.get_template(template).render(dict(items))


def render(template: str, **variables: object) -> str:
    """Render ``template`` (a path under ``kernels/``) with the given template variables.

    Rendering is cached: the same template and variables return the same string.

    A variant's source (``Variant.source``) renders its template with every variable its
    templates read: its parameters and its specialisation's.

    >>> import xgemm
    >>> tiled = xgemm.get_variant("tiled")
    >>> "constexpr int TILE = 16;" in tiled.source({"tile": 16}, xgemm.Spec("float32"))
    True
    """
    return _render(template, tuple(sorted(variables.items())))
