"""From a rendered template to a kernel: CuPy's NVRTC at run time, and an offline
NVRTC build (no GPU needed) that reports what ptxas did with every variant."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .expressions import MAX_STATIC_SMEM_BYTES
from .registry import get_variant
from .specs import Spec

#: NVRTC options for every kernel, at run time and in the offline check alike.
NVRTC_OPTIONS = ("-std=c++17",)


@functools.cache
def cuda_include_dirs() -> tuple[str, ...]:
    """Where the CUDA headers the kernels include are (``cuda_fp16.h`` and ``cuda_bf16.h``
    for the 16-bit kernels, ``mma.h`` and its ``crt/`` headers for the WMMA rung): the
    CUDA headers wheels (``nvidia-cuda-runtime``, ``nvidia-cuda-crt``) as cuda-pathfinder
    finds them, then the toolkit under $CUDA_PATH, $CUDA_HOME or /usr/local/cuda. Every
    one of them that has ``cuda_fp16.h``, in that order: a header missing from the first
    (a wheel without ``crt/``) is found in the next."""
    candidates = []
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        candidates.append(find_nvidia_header_directory("cudart"))
    except Exception:  # noqa: BLE001  (no cuda-pathfinder, or it found nothing)
        pass
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "include"))
    candidates.append("/usr/local/cuda/include")
    found = [str(folder) for folder in candidates
             if folder and (Path(folder) / "cuda_fp16.h").is_file()]
    return tuple(dict.fromkeys(found))


def nvrtc_options() -> tuple[str, ...]:
    return NVRTC_OPTIONS + tuple(f"-I{folder}" for folder in cuda_include_dirs())


@functools.cache
def _kernel(name: str, params: tuple[tuple[str, int], ...], spec: Spec, device: int,
            family: str = "gemm", entry: str = ""):
    import cupy

    variant = get_variant(name, family)
    source = variant.source(dict(params), spec)
    # A variant with a target of its own (sm_90a) names it; CuPy adds the GPU's plain one
    # (sm_90) after it, and NVRTC given both builds for sm_90a (tests/test_compile.py).
    target = (f"-arch={variant.target}",) if variant.target else ()
    kernel = cupy.RawKernel(source, variant.kernel_name + entry,
                            options=(*target, *nvrtc_options()))
    kernel.compile()  # now, for the current device, so that errors surface here
    if entry:  # a second kernel of the source (a split-K sum pass): no shared memory to size
        return kernel
    smem = variant.shared_memory(dict(params), spec.dtype)
    # opt in beyond 48 KiB, counting the kernel's static arrays: the two together must fit
    if variant.dynamic_smem and smem + kernel.shared_size_bytes > MAX_STATIC_SMEM_BYTES:
        kernel.max_dynamic_shared_size_bytes = smem
    return kernel


def get_kernel(name: str, params: Mapping[str, int], spec: Spec, device: int,
               family: str = "gemm", entry: str = ""):
    """The compiled ``cupy.RawKernel`` for a variant (of ``family``) at resolved ``params``
    and ``spec``; with ``entry``, its source's kernel of that name after the variant's
    (``"_sum"``: a split-K sum pass, ``Variant.sum_pass``).

    Cached in-process by (variant, parameters, spec, device): the second call for the
    same key compiles nothing. CuPy's on-disk cache keeps the binaries across
    processes, so a new process pays only for the module load.
    """
    return _kernel(name, tuple(sorted(params.items())), spec, device, family, entry)


#: The pad kernel's block and the loads each thread has in flight before it stores.
PAD_THREADS, PAD_UNROLL = 256, 4


def pad_source() -> str:
    """The pad kernel's CUDA C (``kernels/copy/pad_rows.cu.j2`` at ``PAD_THREADS``,
    ``PAD_UNROLL``).

    >>> "xgemm_pad_rows(" in pad_source()
    True
    """
    from .render import render

    return render("copy/pad_rows.cu.j2", THREADS=PAD_THREADS, UNROLL=PAD_UNROLL)


#: The split pre-pass's threads a block (``kernels/copy/split_tf32.cu.j2``), and the
#: transposing one's tile and the rows of threads that walk it.
SPLIT_THREADS = 256
SPLIT_TILE, SPLIT_TILE_ROWS = 32, 8


def split_source() -> str:
    """The split pre-pass's CUDA C (``kernels/copy/split_tf32.cu.j2`` at ``SPLIT_TILE``,
    ``SPLIT_TILE_ROWS``): each float32 value of an operand as its two TF32 parts, for rung
    33, in the operand's layout or transposed.

    >>> source = split_source()
    >>> "xgemm_split_tf32(" in source and "xgemm_split_tf32_transposed(" in source
    True
    """
    from .render import render

    return render("copy/split_tf32.cu.j2", TILE=SPLIT_TILE, TILE_ROWS=SPLIT_TILE_ROWS)


@functools.cache
def split_kernel(device: int, transposed: bool = False):
    """The compiled split pre-pass, for GPU ``device`` (cached per device). Arguments:
    the operand and the parts' buffer (pointers), the small parts' offset in values (long
    long), then for ``xgemm_split_tf32`` a line's values, the lines a matrix (int), the
    leading dimension (long long), the matrices (int), their stride, the parts' leading
    dimension and stride (long long); for ``transposed`` (``xgemm_split_tf32_transposed``,
    one matrix written as its transpose) a line's values, the lines (int), the leading
    dimension and the parts' (long long).

    >>> kernel = split_kernel(0, transposed=True)  # doctest: +SKIP
    """
    return _compiled(split_source(),
                     "xgemm_split_tf32_transposed" if transposed else "xgemm_split_tf32")


@functools.cache
def pad_kernel(device: int):
    """The compiled kernel that copies one or two operands' lines into lines padded to 16
    bytes for TMA (``kernels/copy/pad_rows.cu.j2``), for GPU ``device`` (cached per
    device). Arguments, for the first operand and the second: source and padded
    (pointers), their pitches (bytes, long long), a line's bytes (int) and the 16-byte
    chunks of padded lines to write (unsigned, below 2^31); then the first's blocks
    (``xgemm.operands.plan_pad_launch``).

    >>> kernel = pad_kernel(0)  # doctest: +SKIP
    """
    return _compiled(pad_source(), "xgemm_pad_rows")


def _compiled(source: str, name: str):
    """Kernel ``name`` of one of xgemm's own pre-passes, compiled now for the current
    device, so that errors surface here rather than at its first launch."""
    import cupy

    kernel = cupy.RawKernel(source, name, options=nvrtc_options())
    kernel.compile()
    return kernel


#: Statistics of the in-process kernel cache (hits, misses, size).
kernel_cache_info = _kernel.cache_info


@dataclass(frozen=True)
class PtxasReport:
    """What ptxas said about one kernel: resources and spills."""

    arch: str
    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int
    log: str

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0 or self.stack_bytes > 0


class CompileError(RuntimeError):
    """NVRTC rejected a rendered template; the message holds its log."""


def compile_offline(source: str, arch: str, name: str = "kernel.cu",
                    extra_options: Sequence[str] = ()) -> PtxasReport:
    """Compile ``source`` to a cubin for ``arch`` (e.g. "sm_90") with NVRTC, no GPU needed;
    ``extra_options`` go after the others.

    Uses the NVRTC that ``cuda-bindings`` finds (the ``nvidia-cuda-nvrtc`` wheel), with
    ptxas in verbose mode, and parses its report.

    >>> from xgemm import get_variant
    >>> v = get_variant("tiled")
    >>> compile_offline(v.source(v.defaults), "sm_80").spills
    False
    """
    from cuda.bindings import nvrtc

    def check(result):
        err, *rest = result
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC: {err}")
        return rest

    (prog,) = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []))
    try:
        options = [o.encode() for o in (*nvrtc_options(), f"--gpu-architecture={arch}",
                                          "--ptxas-options=-v", *extra_options)]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        (size,) = check(nvrtc.nvrtcGetProgramLogSize(prog))
        log_bytes = b" " * size
        check(nvrtc.nvrtcGetProgramLog(prog, log_bytes))
        log = log_bytes.rstrip(b"\0 ").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"{name} for {arch} failed to compile:\n{log}")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return _parse_ptxas(log, arch)


def _parse_ptxas(log: str, arch: str) -> PtxasReport:
    def number(pattern: str) -> int:
        found = re.search(pattern, log)
        if not found:
            raise CompileError(f"no {pattern!r} in the ptxas report:\n{log}")
        return int(found.group(1))

    smem = re.search(r"(\d+) bytes smem", log)
    return PtxasReport(
        arch=arch,
        registers=number(r"Used (\d+) registers"),
        stack_bytes=number(r"(\d+) bytes stack frame"),
        spill_store_bytes=number(r"(\d+) bytes spill stores"),
        spill_load_bytes=number(r"(\d+) bytes spill loads"),
        shared_bytes=int(smem.group(1)) if smem else 0,
        log=log,
    )
