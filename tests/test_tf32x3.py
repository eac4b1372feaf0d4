"""precision="tf32x3" (rung 31, wgmma_tf32x3): who takes it, and its error beside cuBLAS
SGEMM's on the inputs that break a plain split (GPU); how auto picks (no GPU)."""

from __future__ import annotations

import pytest

import xgemm
from xgemm import gpu
from xgemm.choice import heuristic
from xgemm.tools.tf32x3_suite import inputs


# -- no GPU needed ----------------------------------------------------------------------------
@pytest.mark.parametrize("m, n, cc, expected", [
    (4096, 4096, 90, "wgmma_tf32x3"),   # Hopper, a large output: rung 31
    (64, 64, 90, None),                 # a small output: an exact rung, as accurate
    (4096, 4096, 80, None),             # before Hopper: an exact rung
])
def test_tf32x3_is_taken_only_where_asked_and_where_it_runs(m, n, cc, expected):
    name, _ = heuristic(m, n, 4096, "float32", cc, "tf32x3")
    if expected:
        assert name == expected
    else:
        assert xgemm.get_variant(name).precision is None
    assert heuristic(m, n, 4096, "float32", cc)[0] != "wgmma_tf32x3"
    assert heuristic(m, n, 4096, "float32", cc, "tf32")[0] != "wgmma_tf32x3"


def test_tf32x3_refuses_other_dtypes_first():
    from conftest import FakeGpuArray

    a, b = FakeGpuArray((64, 64), "<f2"), FakeGpuArray((64, 64), "<f2")
    with pytest.raises(ValueError, match="precision='tf32x3' lets float32 inputs run on"):
        xgemm.matmul(a, b, precision="tf32x3")


# -- on the GPU -------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["wgmma_tf32x3", "wgmma_tf32x3_rs", "wgmma_tf32x3_parts"])
@pytest.mark.parametrize("k", [16, 4096])
@pytest.mark.parametrize("kind", ["normal", "uniform", "scaled_rows", "cancel"])
def test_tf32x3_errs_as_sgemm_does(kind, k, variant, monkeypatch):
    """Relative Frobenius error against the float64 product: rung 31's and rung 32's
    within 3x cuBLAS SGEMM's on the same inputs (the issue's bar is 2x; the suite part
    reports the ratio), where TF32 alone errs a thousand times more; auto takes rung 31."""
    import cupy

    if gpu.compute_capability(0) != 90:
        pytest.skip("rung 31 runs on Hopper (sm_90a) only")
    monkeypatch.setenv("CUPY_TF32", "0")
    a, b = inputs(kind, 640, 384, k, b_col=False)  # the suite's: normal, uniform, ...
    ref = a.astype(cupy.float64) @ b.astype(cupy.float64)

    def error(c):
        return float(cupy.linalg.norm(c.astype(cupy.float64) - ref) / cupy.linalg.norm(ref))

    sgemm = error(cupy.matmul(a, b))
    assert xgemm.prepare(a, cupy.asfortranarray(b), precision="tf32x3").variant.name == \
        "wgmma_tf32x3"
    got = error(xgemm.matmul(a, cupy.asfortranarray(b), variant=variant))
    assert got < 3 * sgemm, (got, sgemm)
    # TF32 alone by name: at K=16 auto takes an exact kernel for precision="tf32"
    assert error(xgemm.matmul(a, cupy.asfortranarray(b), variant="wgmma_tf32")) > 30 * sgemm
