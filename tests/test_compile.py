"""Every variant renders to plain CUDA C, and compiles through NVRTC with no register
spills. Rendered: for every dtype, its defaults, every point auto weighs and a spread of
its sweep space (row-major operands, plain store, flags on), and at its defaults every
specialisation (each layout pair with each flag setting, each epilogue option). Built
(about 2.5 s a build on CI's two cores, so a subset): every variant and dtype at its
defaults for its newest target (sm_90, or the one it names: sm_90a for wgmma), and in
its first dtype for sm_80 too, and every point auto weighs for its newest target (163
builds); with XGEMM_COMPILE_EVERY_POINT=1 every rendered case for every target, and
every point of every sweep space (about 6500 builds: hours on two cores, minutes on a
GPU machine's sixteen). The GPU suite builds and runs every specialisation its tests
take. No GPU needed: NVRTC comes from the nvidia-cuda-nvrtc
wheel, driven by cuda-bindings, and the 16-bit headers from nvidia-cuda-runtime."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

import xgemm
from xgemm.declarations.turned import TURNED_OVER
from xgemm.registry import PRODUCT_FAMILIES
from xgemm.specs import C_TYPES, Spec

#: Set to 1 to build every point of every sweep space and every rendered case (module
#: text); by default the rendered cases are the defaults, every point auto weighs
#: (``Variant.candidates``) and SPREAD points spread evenly over the space.
EVERY_POINT = os.environ.get("XGEMM_COMPILE_EVERY_POINT") == "1"
SPREAD = 3


def _points(v, dtype: str) -> list[dict[str, int]]:
    """The points of ``v`` the check builds for ``dtype`` (see EVERY_POINT)."""
    every = list(v.points(dtype))
    if EVERY_POINT:
        return every
    chosen = [v.resolve({}, dtype), *v.candidate_points(dtype),
              *every[::max(1, len(every) // SPREAD)][:SPREAD]]
    return [dict(p) for p in dict.fromkeys(tuple(sorted(p.items())) for p in chosen)]


def _cases():
    for family in xgemm.families():
        for name in xgemm.variants(family):
            v = xgemm.get_variant(name, family)
            for dtype in v.dtypes:
                a_layouts, b_layouts = v.layouts(dtype)
                plain = dict(a_col=a_layouts[0] == "col", b_col=b_layouts[0] == "col")
                first_flags = tuple(sorted(next(v.flag_values()).items()))  # all True
                specs = [Spec(dtype, **plain, flags=first_flags)]
                for point in _points(v, dtype):
                    for spec in specs:
                        yield v, point, spec
                defaults = v.resolve({}, dtype)
                for spec in v.specs(dtype):
                    if spec not in specs:
                        yield v, defaults, spec


def _builds(cases):
    """The (case, arch) pairs built (module text): all of them with EVERY_POINT."""
    if EVERY_POINT:
        return [(case, arch) for case in cases for arch in case[0].archs]
    jobs = []
    for v, point, spec in cases:
        a_layouts, b_layouts = v.layouts(spec.dtype)
        plain = spec == Spec(spec.dtype, a_col=a_layouts[0] == "col",
                             b_col=b_layouts[0] == "col", flags=spec.flags) and all(
            value for _, value in spec.flags)
        if not plain:
            continue
        if point == v.resolve({}, spec.dtype):  # older targets in its first dtype only
            archs = v.archs if spec.dtype == v.dtypes[0] else v.archs[-1:]
            jobs += [((v, point, spec), arch) for arch in archs]
        elif point in v.candidate_points(spec.dtype):
            jobs.append(((v, point, spec), v.archs[-1]))
    return jobs


def _narrow():
    """Rungs 14 and 28 at widths in 16s (``ranking.filling_width``): B K-major, C staged a
    row at a time (TMA_STORE 2, as the plan stores such tiles), a stage fewer where that
    fits only."""
    for name, point in (("wgmma", {"BN": 144, "STAGES": 4}), ("wgmma", {"BN": 224, "STAGES": 3}),
                        ("wgmma_pingpong", {"BN": 112, "STAGES": 5}),
                        ("wgmma_pingpong", {"BM": 64, "BN": 240, "STAGES": 4})):
        v = xgemm.get_variant(name)
        point = v.resolve({**point, "TMA_STORE": 2}, "bfloat16")
        yield v, point, Spec("bfloat16", b_col=True, bias=True)


NARROW = list(_narrow())
CASES = list(_cases()) + NARROW
JOBS = _builds(CASES) + [(case, case[0].archs[-1]) for case in NARROW]


def _id(case) -> str:
    v, point, spec = case
    layout = ("T" if spec.a_col else "N") + ("T" if spec.b_col else "N")
    epilogue = [*(["bias"] if spec.bias else []), *(["beta"] if spec.read_c else []),
                *([spec.activation] if spec.activation != "none" else []),
                *([f"out_{spec.out_dtype}"] if spec.out_dtype else []),
                *([f"b_{spec.b_dtype}"] if spec.b_dtype else []),
                *([f"scales_{spec.scale_a}_{spec.scale_b}"] if spec.scale_a != "none"
                  or spec.scale_b != "none" else [])]
    family = [] if v.family == "gemm" else [v.family]
    products = v.family in PRODUCT_FAMILIES  # (which read A and B in a layout)
    return "-".join([*family, v.name, spec.dtype, *([layout] if products else []),
                     *(f"{k}{v}" for k, v in point.items()),
                     *(k if v else f"not_{k}" for k, v in spec.flags), *epilogue])


@pytest.fixture(scope="module")
def reports():
    """Compile every case for every arch once, in parallel threads (NVRTC releases the GIL)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="the compile check needs cuda-bindings")

    def build(job):
        (v, point, spec), arch = job
        source = v.source(point, spec)
        try:
            return xgemm.compile_offline(source, arch, name=f"{v.kernel_name}.cu")
        except xgemm.CompileError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(build, JOBS))
    return {(_id(case), arch): result for (case, arch), result in zip(JOBS, results, strict=True)}


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_renders_plain_cuda(case):
    v, point, spec = case
    source = v.source(point, spec)
    # no Jinja left over ("{%0, %1}" in an asm string is PTX's register list, not a tag)
    assert "{{" not in source and not re.search(r"\{%[\s+-]", source) and "#}" not in source
    # the header that says what the rung adds
    assert source.startswith("// xgemm rung " if v.family in PRODUCT_FAMILIES
                             else f"// xgemm {v.family} ")
    assert f"{v.kernel_name}(" in source
    for param, value in point.items():
        said = rf"({value}|{'true' if value else 'false'})" if value in (0, 1) else value
        assert re.search(rf"\b{param} = {said}\b", source, re.IGNORECASE), param
    cuda_type = xgemm.DTYPES[spec.dtype].cuda
    assert f"using T = {cuda_type};" in source
    if v.family in PRODUCT_FAMILIES:
        assert f"using TC = {C_TYPES[spec.c_dtype]};" in source
        # a kernel that walks the product turned over names B^T its A and A^T its B
        turned = v.name in TURNED_OVER
        a_col, b_col = (not spec.b_col, not spec.a_col) if turned else (spec.a_col, spec.b_col)
        assert f"A_COL = {str(a_col).lower()};" in source
        assert f"B_COL = {str(b_col).lower()};" in source
        assert f"Activation::{spec.activation};" in source


@pytest.mark.parametrize("case, arch", JOBS, ids=[f"{_id(c)}-{arch}" for c, arch in JOBS])
def test_compiles_without_spills(reports, case, arch):
    report = reports[(_id(case), arch)]
    if isinstance(report, Exception):
        pytest.fail(str(report))
    assert report.spill_store_bytes == 0 and report.spill_load_bytes == 0, report.log
    assert report.stack_bytes == 0, f"local memory in use:\n{report.log}"
    assert report.registers <= 255


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("kernel", ["pad_rows", "split_tf32"])
def test_the_copy_kernels_compile_without_spills(kernel, arch):
    """The kernels no variant declares: the one that pads operands' lines for TMA, and
    rung 33's split pre-pass (both of its entry points)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="the compile check needs cuda-bindings")
    from xgemm.compile import pad_source, split_source

    source = {"pad_rows": pad_source, "split_tf32": split_source}[kernel]()
    report = xgemm.compile_offline(source, arch, name=f"{kernel}.cu")
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_bytes == 0


def test_the_target_wins_over_the_gpus_own_arch():
    """At run time CuPy puts the GPU's own -arch=sm_90 after a variant's -arch=sm_90a:
    NVRTC must still build for sm_90a, where wgmma exists (sm_90 alone refuses it)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="the compile check needs cuda-bindings")
    v = xgemm.get_variant("wgmma")
    source = v.source(v.resolve({}, "float16"), Spec("float16"))
    assert xgemm.compile_offline(source, "sm_90a", extra_options=("-arch=sm_90",)).registers
    with pytest.raises(xgemm.CompileError, match="not supported on .target 'sm_90'"):
        xgemm.compile_offline(source, "sm_90")


def test_compile_error_carries_the_log():
    pytest.importorskip("cuda.bindings.nvrtc", reason="the compile check needs cuda-bindings")
    with pytest.raises(xgemm.CompileError, match="undefined_name"):
        xgemm.compile_offline('extern "C" __global__ void k() { undefined_name(); }', "sm_80")


def test_strict_undefined():
    import jinja2

    from xgemm.render import render

    with pytest.raises(jinja2.UndefinedError, match="tile"):
        render("gemm/03_tiled.cu.j2", dtype="float", out_type="float", acc="float",
               a_col=False, b_col=False, bias=False, activation="none", read_c=False)


def test_source_fills_defaults_and_flags():
    src = xgemm.source("vectorized")
    assert "constexpr int BM = 128" in src and "ALIGNED = true;" in src
    assert "ALIGNED = false;" in xgemm.source("vectorized", aligned=False)
    src = xgemm.source("tiled", "bfloat16", a_col=True, bias=True, read_c=True,
                       activation="gelu")
    assert "#include <cuda_bf16.h>" in src and "using Acc = float;" in src
    assert "A_COL = true;" in src and "HAS_BIAS = true;" in src and "READ_C = true;" in src
    assert "using Acc = double;" in xgemm.source("naive", "float64")
    assert "B_COL = true;" in xgemm.source("transposed_b")


def test_source_refuses_what_a_variant_lacks():
    with pytest.raises(ValueError, match="reads B col-major only"):
        xgemm.source("transposed_b", b_col=False)
    with pytest.raises(TypeError, match="supports float32, float64, float16, bfloat16, not int8"):
        xgemm.source("tiled", dtype="int8")
    with pytest.raises(ValueError, match="unknown activation 'tanh'.*'relu', 'gelu', 'silu'"):
        xgemm.source("tiled", activation="tanh")


def test_cuda_headers_are_found():
    from pathlib import Path

    from xgemm.compile import cuda_include_dirs

    folders = [Path(f) for f in cuda_include_dirs()]
    assert folders, "pip install nvidia-cuda-runtime (the test extra)"
    assert any((f / "crt" / "mma.h").is_file() for f in folders), "pip install nvidia-cuda-crt"
