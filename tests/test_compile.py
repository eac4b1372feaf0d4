"""Every variant renders to plain CUDA C and compiles through NVRTC for sm_80 and sm_90,
at every point of its sweep space and every specialisation, with no register spills.
No GPU needed: NVRTC comes from the nvidia-cuda-nvrtc wheel, driven by cuda-bindings."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

import xgemm

ARCHS = ("sm_80", "sm_90")
CASES = [
    (name, point, flags)
    for name in xgemm.variants()
    for point in xgemm.get_variant(name).points()
    for flags in xgemm.get_variant(name).flag_values()
]


def _id(case) -> str:
    name, point, flags = case
    return "-".join([name, *(f"{k}{v}" for k, v in point.items()),
                     *(k if v else f"not_{k}" for k, v in flags.items())])


@pytest.fixture(scope="module")
def reports():
    """Compile every case for every arch once, in parallel threads (NVRTC releases the GIL)."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="the compile check needs cuda-bindings")

    def build(job):
        (name, point, flags), arch = job
        source = xgemm.get_variant(name).source(point, **flags)
        try:
            return xgemm.compile_offline(source, arch, name=f"{name}.cu")
        except xgemm.CompileError as exc:
            return exc

    jobs = [(case, arch) for case in CASES for arch in ARCHS]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(build, jobs))
    return {(_id(case), arch): result for (case, arch), result in zip(jobs, results, strict=True)}


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_renders_plain_cuda(case):
    name, point, flags = case
    v = xgemm.get_variant(name)
    source = v.source(point, **flags)
    assert "{{" not in source and "{%" not in source and "#}" not in source
    assert source.startswith("// xgemm rung ")  # the header that says what the rung adds
    assert f"xgemm_{name}(" in source
    for param, value in point.items():
        assert re.search(rf"\b{param} = {value}\b", source, re.IGNORECASE), param


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_compiles_without_spills(reports, case, arch):
    report = reports[(_id(case), arch)]
    if isinstance(report, Exception):
        pytest.fail(str(report))
    assert report.spill_store_bytes == 0 and report.spill_load_bytes == 0, report.log
    assert report.stack_bytes == 0, f"local memory in use:\n{report.log}"
    assert report.registers <= 255


def test_compile_error_carries_the_log():
    pytest.importorskip("cuda.bindings.nvrtc", reason="the compile check needs cuda-bindings")
    with pytest.raises(xgemm.CompileError, match="undefined_name"):
        xgemm.compile_offline('extern "C" __global__ void k() { undefined_name(); }', "sm_80")


def test_strict_undefined():
    import jinja2

    from xgemm.render import render

    with pytest.raises(jinja2.UndefinedError, match="tile"):
        render("gemm/03_tiled.cu.j2", dtype="float")


def test_source_fills_defaults_and_flags():
    src = xgemm.source("vectorized")
    assert "constexpr int BM = 128" in src
    assert "one 16-byte access." in src and "Rows are not 16-byte aligned" not in src
    src = xgemm.source("vectorized", aligned=False)
    assert "one 16-byte access." not in src and "Rows are not 16-byte aligned" in src
    with pytest.raises(TypeError, match="supports float32, not float64"):
        xgemm.source("tiled", dtype="float64")
