"""The memory-bound families (transpose, reverse, sum, stencil3x3): every variant, every
dtype, odd sizes, against float64 or exact references, outputs poisoned with NaN first;
the checks that need no GPU run anywhere."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DTYPES, REFERENCE_TOLERANCE, FakeGpuArray, frobenius_error

import xgemm
import xgemm.gpu
from xgemm import memory_bound
from xgemm.tools.tolerances import TOLERANCE

gpu = pytest.mark.gpu


def _names(family):
    return [(family, name) for name in xgemm.variants(family)]


def _corners(family):
    return [(name, p) for name in xgemm.variants(family)
            for p in xgemm.get_variant(name, family).corners()]


def _poisoned_run(run):
    """Fill the result with NaN before the run, so an element nobody writes shows."""
    import cupy

    if run.result.dtype.kind == "f":
        run.result.fill(cupy.nan)
    return run()


# -- no GPU needed ----------------------------------------------------------------------------
def test_families_and_kernel_names():
    assert xgemm.families() == ["gemm", "transpose", "reverse", "sum", "stencil", "grouped"]
    assert xgemm.variants("transpose") == ["naive", "tiled", "tiled_padded", "vectorized"]
    assert xgemm.variants("sum") == ["interleaved", "sequential", "warp_shuffle", "two_pass",
                                     "atomic"]
    assert xgemm.get_variant("naive", "transpose").kernel_name == "xgemm_transpose_naive"
    assert xgemm.get_variant("naive").kernel_name == "xgemm_naive"  # the GEMM rung
    with pytest.raises(ValueError, match="unknown family 'fft': the families are gemm, "):
        xgemm.variants("fft")
    with pytest.raises(ValueError, match="unknown sum variant 'warp': did you mean "
                                         "'warp_shuffle'"):
        xgemm.get_variant("warp", "sum")


def test_host_arrays_are_refused(no_cupy):
    x = np.ones((4, 4), np.float32)
    for call in (xgemm.transpose, xgemm.sum, lambda x: xgemm.reverse(x.ravel()),
                 lambda x: xgemm.stencil3x3(x, np.ones((3, 3), np.float32))):
        with pytest.raises(TypeError, match=r"x is a host \(CPU\) array .* cupy.asarray\(x\)"):
            call(x)


def test_bad_input_is_refused_before_cupy(no_cupy):
    """Each family's checks on stand-in GPU arrays, with CuPy unavailable: the errors come
    before anything is converted, compiled or launched."""
    def f32(*shape):
        return FakeGpuArray(shape)

    with pytest.raises(TypeError, match="x has dtype int32; xgemm.transpose takes float32, "):
        xgemm.transpose(FakeGpuArray((4, 4), "<i4"))
    with pytest.raises(ValueError, match=r"x must be 2-D, got shape \(2, 4, 4\)"):
        xgemm.transpose(f32(2, 4, 4))
    with pytest.raises(ValueError, match="breaks: TILE % BLOCK_ROWS == 0"):
        xgemm.transpose(f32(4, 4), "tiled", TILE=16, BLOCK_ROWS=32)
    with pytest.raises(ValueError, match=r"x must be 1-D, got shape \(3, 4\)"):
        xgemm.reverse(f32(3, 4))
    with pytest.raises(ValueError, match="unknown reverse variant 'static'"):
        xgemm.reverse(f32(5), "static")
    with pytest.raises(ValueError, match="axis must be None or the last axis"):
        xgemm.sum(f32(4, 5), axis=0)
    with pytest.raises(ValueError, match="a 0-D array has no axis"):
        xgemm.sum(f32(), axis=-1)
    with pytest.raises(ValueError, match="70000 segments to sum: xgemm.sum takes at most 65535"):
        xgemm.sum(f32(70_000, 3), axis=-1)
    with pytest.raises(ValueError, match=r"x must be 2-D"):
        xgemm.stencil3x3(f32(8), f32(3, 3))
    for weights in (f32(2, 2), np.ones((2, 2), np.float32)):  # on the GPU, or to upload
        with pytest.raises(ValueError, match=r"weights has shape \(2, 2\)"):
            xgemm.stencil3x3(f32(8, 8), weights)
    for weights in (FakeGpuArray((3, 3), "<f2"), np.ones((3, 3), np.float16)):
        with pytest.raises(TypeError, match="weights has dtype float16 and x float32"):
            xgemm.stencil3x3(f32(8, 8), weights)


def test_parameters_are_checked_against_the_declaration():
    v = xgemm.get_variant("tiled", "transpose")
    with pytest.raises(ValueError, match="breaks: TILE % BLOCK_ROWS == 0"):
        v.resolve({"TILE": 16, "BLOCK_ROWS": 32})
    with pytest.raises(ValueError, match="no parameter 'tile' .*did you mean 'TILE'"):
        v.resolve({"tile": 16})
    assert xgemm.get_variant("static_smem", "reverse").resolve({"ITEMS": 8}) == {
        "BLOCK": 256, "ITEMS": 8, "DYNAMIC": 0}
    with pytest.raises(ValueError, match="shared memory 65536 bytes <= 49152"):
        xgemm.get_variant("static_smem", "reverse").resolve({"BLOCK": 1024, "ITEMS": 8},
                                                            "float64")


def test_sum_error_bound_grows_with_depth():
    small, large = memory_bound.sum_error_bound(1000), memory_bound.sum_error_bound(2**28)
    assert 0 < small < large < 2e-4
    assert memory_bound.sum_error_bound(2**28, "two_pass", sms=114) > large  # fewer SMs: deeper
    assert memory_bound.sum_error_bound(1000, dtype="float64") < 1e-13
    assert memory_bound.sum_error_bound(1000, dtype="bfloat16") > 2.0**-8


# -- on the GPU --------------------------------------------------------------------------------
TRANSPOSE_SHAPES = [(1, 1), (1, 7), (7, 1), (33, 65), (127, 129), (300, 1000), (64, 64)]


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family, name", _names("transpose"))
def test_transpose(rng, family, name, dtype):
    for shape in TRANSPOSE_SHAPES:
        x = rng.array(shape, dtype)
        run = memory_bound.plan_transpose(x, name)
        got = _poisoned_run(run)
        assert got.shape == shape[::-1] and bool((got == x.T).all()), (name, shape)
    wide = rng.array((129, 77), dtype)[:, 3:68]  # a slice: ld = 77, read in place
    run = memory_bound.plan_transpose(wide, name)
    assert run.copies == () and bool((_poisoned_run(run) == wide.T).all())
    stepped = rng.array((40, 60), dtype)[:, ::2]  # no unit stride: copied, and said so
    run = memory_bound.plan_transpose(stepped, name)
    assert run.copies == ("x",) and bool((run() == stepped.T).all())


@gpu
@pytest.mark.parametrize("name, params", _corners("transpose"))
def test_transpose_corners(rng, name, params):
    x = rng.array((257, 131))
    assert bool((memory_bound.plan_transpose(x, name, **params)() == x.T).all()), params


@gpu
def test_transpose_vectorized_takes_the_aligned_path_only_when_it_may(rng):
    aligned = memory_bound.plan_transpose(rng.array((64, 128)), "vectorized")
    assert dict(aligned.steps[0].spec.flags) == {"aligned": True}
    x = rng.array((68, 132))  # aligned, not whole tiles
    run = memory_bound.plan_transpose(x, "vectorized", TILE=32, BLOCK_ROWS=4)
    assert dict(run.steps[0].spec.flags) == {"aligned": True} and bool((run() == x.T).all())
    for x in (rng.array((64, 127)), rng.array((63, 128)), rng.array((64, 130))[:, 1:129]):
        run = memory_bound.plan_transpose(x, "vectorized")
        assert dict(run.steps[0].spec.flags) == {"aligned": False}
        assert bool((run() == x.T).all())


REVERSE_LENGTHS = [1, 2, 255, 256, 257, 1023, 1025, 4097, 1_000_003]


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family, name", _names("reverse"))
def test_reverse(rng, family, name, dtype):
    for n in REVERSE_LENGTHS:
        x = rng.array((n,), dtype)
        got = _poisoned_run(memory_bound.plan_reverse(x, name))
        assert bool((got == x[::-1]).all()), (name, n)


@gpu
@pytest.mark.parametrize("name, params", _corners("reverse"))
def test_reverse_corners(rng, name, params):
    x = rng.array((100_003,))
    assert bool((memory_bound.plan_reverse(x, name, **params)() == x[::-1]).all()), params


@gpu
def test_reverse_copies_a_strided_x_and_takes_an_empty_one(rng):
    x = rng.array((1000,))[::3]
    run = memory_bound.plan_reverse(x)
    assert run.copies == ("x",) and bool((run() == x[::-1]).all())
    assert xgemm.reverse(rng.array((0,))).shape == (0,)


def _check_sum(x, got, name, params=None, axis=None):
    """|got - sum| <= the documented bound times sum(|x|), per segment, in float64."""
    import cupy

    wide = x.astype(cupy.float64)
    exact = wide.sum(axis=axis)
    scale = cupy.abs(wide).sum(axis=axis)
    bound = memory_bound.sum_error_bound(x.size if axis is None else x.shape[-1], name,
                                         x.dtype.name, sms=xgemm.gpu.multiprocessors(0),
                                         **(params or {}))
    error = cupy.abs(got.astype(cupy.float64) - exact)
    assert got.dtype == x.dtype and got.shape == exact.shape
    assert bool((error <= bound * scale).all()), (name, float(error.max()), bound)


SUM_SIZES = [1, 3, 1000, 1025, 2**20 + 7]


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family, name", _names("sum"))
def test_sum(rng, family, name, dtype):
    for n in SUM_SIZES:
        x = rng.array((n,), dtype)
        _check_sum(x, xgemm.sum(x, variant=name), name)
    rows = rng.array((37, 1001), dtype)
    _check_sum(rows, xgemm.sum(rows, axis=-1, variant=name), name, axis=-1)
    cube = rng.array((3, 4, 5), dtype)
    _check_sum(cube, xgemm.sum(cube, variant=name), name)
    _check_sum(cube, xgemm.sum(cube, axis=2, variant=name), name, axis=-1)


@gpu
@pytest.mark.parametrize("name, params", _corners("sum"))
def test_sum_corners(rng, name, params):
    x = rng.array((300_007,))
    _check_sum(x, xgemm.sum(x, variant=name, **params), name, params)


@gpu
def test_sum_passes_and_finishes(rng):
    x = rng.array((2**22,))
    assert len(memory_bound.plan_sum(x, variant="two_pass").steps) == 2
    assert len(memory_bound.plan_sum(x, variant="atomic").steps) == 1
    assert len(memory_bound.plan_sum(x, variant="warp_shuffle").steps) == 3  # 4096, 4, 1 sums
    import cupy

    positive = cupy.abs(x)  # a sum far from 0: a running total would double it
    run = memory_bound.plan_sum(positive, variant="atomic")  # zeroed before each call
    first, second = float(run()), float(run())
    exact = float(positive.astype(cupy.float64).sum())
    bound = memory_bound.sum_error_bound(positive.size, "atomic",
                                         sms=xgemm.gpu.multiprocessors(0)) * exact
    assert abs(first - exact) <= bound and abs(second - exact) <= bound
    deterministic = memory_bound.plan_sum(x, variant="two_pass")
    assert float(deterministic()) == float(deterministic())


@gpu
def test_sum_edges(rng):
    import cupy

    assert float(xgemm.sum(rng.array((0,)))) == 0.0
    assert xgemm.sum(rng.array((4, 0)), axis=-1).tolist() == [0.0] * 4
    x = rng.array((50, 60))[:, ::2]
    run = memory_bound.plan_sum(x, axis=-1)
    assert run.copies == ("x",)
    _check_sum(cupy.ascontiguousarray(x), run(), "two_pass", axis=-1)


def _correlate(x, w):
    """The 3 x 3 correlation with zero padding, in float64."""
    import cupy

    x, w = x.astype(cupy.float64), w.astype(cupy.float64)
    padded = cupy.pad(x, 1)
    rows, cols = x.shape
    return sum(w[i, j] * padded[i:i + rows, j:j + cols] for i in range(3) for j in range(3))


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family, name", _names("stencil"))
def test_stencil(rng, family, name, dtype):
    for shape in [(1, 1), (2, 3), (33, 65), (127, 129), (300, 257)]:
        x, w = rng.array(shape, dtype), rng.array((3, 3), dtype)
        got = _poisoned_run(memory_bound.plan_stencil3x3(x, w, name))
        err = frobenius_error(got, _correlate(x, w))
        assert got.shape == shape and err < REFERENCE_TOLERANCE[dtype], (name, shape, err)


@gpu
@pytest.mark.parametrize("name, params", _corners("stencil"))
def test_stencil_corners(rng, name, params):
    x, w = rng.array((131, 257)), rng.array((3, 3))
    got = memory_bound.plan_stencil3x3(x, w, name, **params)()
    assert frobenius_error(got, _correlate(x, w)) < REFERENCE_TOLERANCE["float32"], params


@gpu
def test_stencil_uploads_host_weights(rng):
    import cupy

    x = rng.array((8, 8))
    host = np.full((3, 3), 0.5, np.float32)  # a host array of nine weights is uploaded
    got = xgemm.stencil3x3(x, host)
    assert frobenius_error(got, _correlate(x, cupy.asarray(host))) < REFERENCE_TOLERANCE["float32"]


@gpu
def test_bandwidth_bench_runs_every_variant(rng, capsys):
    from xgemm.tools import bandwidth, cli

    for family, shape in [("transpose", "130x257"), ("reverse", "100003"), ("sum", "100003"),
                          ("stencil", "130x257")]:
        assert cli.main(["bench", "--family", family, "--shapes", shape, "--repeat", "3"]) == 0
        out = capsys.readouterr().out
        for name in ["copy", "cupy", *xgemm.variants(family)]:
            assert f" {name} " in out, (family, name)
    rows = list(bandwidth.iterate("sum", [(4096,)], "float16", ["two_pass"], repeat=3))
    assert [r.variant for r in rows] == ["copy", "cupy", "two_pass"] and all(r.ok for r in rows)
    # a sum near zero is judged over the sum of |x|, not over itself
    import cupy

    v = rng.array(4096, "float16")
    x = cupy.concatenate([v, -v[::-1]])  # exactly zero in float64
    err = bandwidth._error(xgemm.sum(x, variant="two_pass"), *bandwidth._reference("sum", x, None))
    assert err < TOLERANCE["CuPy"]["float16"]
    swept = bandwidth.sweep("reverse", "dynamic_smem", (100_003,), repeat=3)
    points = list(xgemm.get_variant("dynamic_smem", "reverse").points())
    assert len(swept) == 2 + len(points) and all(r.ok for r in swept)
    assert sorted(map(str, (r.params for r in swept[2:]))) == sorted(map(str, points))
