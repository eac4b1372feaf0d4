"""Every variant against a float64 reference on the GPU: fresh random inputs each test,
outputs poisoned with NaN first, relative Frobenius error below 1e-5."""

from __future__ import annotations

import pytest
from conftest import poisoned, relative_error

import xgemm

pytestmark = pytest.mark.gpu

TOLERANCE = 1e-5
SHAPES = [  # (M, N, K)
    (1, 1, 1), (7, 13, 5), (33, 65, 17), (127, 129, 255), (1000, 700, 300),
    (2048, 2048, 2048), (4097, 31, 1025), (64, 4096, 64),
]
# Every point of every sweep space runs on an odd shape and on one whose rows are all
# 16-byte aligned (which takes vectorized's `aligned` specialisation).
POINT_SHAPES = [(127, 129, 255), (96, 160, 64)]


def _params_id(params: dict) -> str:
    return "_".join(f"{k}{v}" for k, v in params.items())


def _shape_id(shape) -> str:
    return "x".join(map(str, shape))


CORNERS = [(n, p) for n in xgemm.variants() for p in xgemm.get_variant(n).corners()]
POINTS = [(n, p) for n in xgemm.variants() for p in xgemm.get_variant(n).points()]


def operands(rng, name, m, n, k):
    """A (M, K) and B (K, N) in the layout the variant reads in place."""
    a = rng.matrix(m, k)
    b = rng.matrix(n, k).T if xgemm.get_variant(name).b_order == "col" else rng.matrix(k, n)
    return a, b


def check(rng, name, a, b, **params):
    c = poisoned(a.shape[0], b.shape[1])
    result = xgemm.matmul(a, b, variant=name, out=c, **params)
    assert result is c
    err = relative_error(c, a, b)
    assert err < TOLERANCE, (
        f"{name} {params} on {a.shape} @ {b.shape}: relative error {err} (seed {rng.seed})"
    )


@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
@pytest.mark.parametrize("name, params", CORNERS,
                         ids=[f"{n}-{_params_id(p)}" for n, p in CORNERS])
def test_corners_of_the_space(rng, name, params, shape):
    check(rng, name, *operands(rng, name, *shape), **params)


@pytest.mark.parametrize("shape", POINT_SHAPES, ids=_shape_id)
@pytest.mark.parametrize("name, params", POINTS, ids=[f"{n}-{_params_id(p)}" for n, p in POINTS])
def test_every_point_of_the_space(rng, name, params, shape):
    check(rng, name, *operands(rng, name, *shape), **params)


@pytest.mark.parametrize("name", [*xgemm.variants(), "auto"])
def test_k_zero_gives_zeros(name):
    import cupy

    a, b = cupy.empty((5, 0), cupy.float32), cupy.empty((0, 7), cupy.float32)
    c = poisoned(5, 7)
    xgemm.matmul(a, b, variant=name, out=c)
    assert bool((c == 0).all())


@pytest.mark.parametrize("name", [*xgemm.variants(), "auto"])
@pytest.mark.parametrize("m, n", [(0, 7), (5, 0), (0, 0)])
def test_empty_output(rng, name, m, n):
    import cupy

    c = xgemm.matmul(cupy.ones((m, 3), cupy.float32), cupy.ones((3, n), cupy.float32),
                     variant=name)
    assert c.shape == (m, n) and c.dtype == cupy.float32


@pytest.mark.parametrize("name", xgemm.variants())
def test_without_out(rng, name):
    a, b = operands(rng, name, 129, 67, 93)
    c = xgemm.matmul(a, b, variant=name)
    assert c.shape == (129, 67) and relative_error(c, a, b) < TOLERANCE


def _layouts(rng, m, n, k):
    """(label, a, b) pairs in layouts a caller may hand over."""
    wide = rng.matrix(m, k + 9)
    yield "row slice of a wider A (lda > K)", wide[:, 3:3 + k], rng.matrix(k, n)
    yield "A offset by one float (unaligned)", wide[:, 1:1 + k], rng.matrix(k, n)
    yield "column-major A", rng.matrix(m, k, order="F"), rng.matrix(k, n)
    yield "A with a column step", rng.matrix(m, 2 * k)[:, ::2], rng.matrix(k, n)
    yield "transposed view of B", rng.matrix(m, k), rng.matrix(n, k).T
    yield "row-major B", rng.matrix(m, k), rng.matrix(k, n)
    yield "B with negative strides", rng.matrix(m, k), rng.matrix(k, n)[::-1, ::-1]
    both = rng.matrix(m, k + n)
    yield "A and B from one buffer", both[:, :k], both[:k, k:k + n]


@pytest.mark.parametrize("name", xgemm.variants())
def test_any_layout_gives_the_right_answer(rng, name):
    for label, a, b in _layouts(rng, 67, 45, 37):
        c = poisoned(67, 45)
        xgemm.matmul(a, b, variant=name, out=c)
        err = relative_error(c, a, b)
        assert err < TOLERANCE, f"{name}, {label}: error {err} (seed {rng.seed})"


def test_layouts_read_in_place_are_not_copied(rng, monkeypatch):
    import cupy

    def no_copy(*args, **kwargs):
        raise AssertionError("an operand was copied")

    monkeypatch.setattr(cupy, "ascontiguousarray", no_copy)
    monkeypatch.setattr(cupy, "asfortranarray", no_copy)
    a = rng.matrix(70, 90)[:, 5:75]  # lda = 90
    w = rng.matrix(40, 70)           # a weight stored (N, K), used as w.T
    c = xgemm.matmul(a, w.T, variant="transposed_b")
    assert relative_error(c, a, w.T) < TOLERANCE
    b = rng.matrix(70, 40)
    for name in xgemm.variants():
        if xgemm.get_variant(name).b_order == "row":
            assert relative_error(xgemm.matmul(a, b, variant=name), a, b) < TOLERANCE


def test_vectorized_picks_the_aligned_specialisation(rng, monkeypatch):
    import xgemm.api

    seen = []
    real = xgemm.api.get_kernel
    monkeypatch.setattr(xgemm.api, "get_kernel",
                        lambda name, params, dtype, flags, device:
                        seen.append(flags["aligned"]) or real(name, params, dtype, flags, device))
    wide = rng.matrix(64, 70)
    cases = [(rng.matrix(64, 64), rng.matrix(64, 32), True),
             (rng.matrix(64, 63), rng.matrix(63, 32), False),   # K % 4 != 0
             (rng.matrix(64, 64), rng.matrix(64, 30), False),   # N % 4 != 0
             (wide[:, 1:65], rng.matrix(64, 32), False),        # A starts 4 bytes off
             (wide[:, 4:68], rng.matrix(64, 32), False)]        # lda = 70
    for a, b, aligned in cases:
        c = xgemm.matmul(a, b, variant="vectorized")
        assert seen[-1] is aligned
        assert relative_error(c, a, b) < TOLERANCE


def test_second_call_compiles_nothing(rng):
    from xgemm.compile import kernel_cache_info

    a, b = rng.matrix(50, 60), rng.matrix(60, 70)
    xgemm.matmul(a, b, variant="coarse2d", BM=64, BN=64, TM=4, TN=4, BK=8)
    before = kernel_cache_info()
    xgemm.matmul(b.T, a.T, variant="coarse2d", BM=64, BN=64, TM=4, TN=4, BK=8)
    after = kernel_cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 1


def test_out_that_overlaps_an_input(rng):
    a = rng.matrix(64, 64)
    b = rng.matrix(64, 64)
    a_before = a.copy()
    xgemm.matmul(a, b, variant="tiled", out=a)
    assert relative_error(a, a_before, b) < TOLERANCE


def test_out_is_checked(rng):
    import cupy

    a, b = rng.matrix(8, 6), rng.matrix(6, 4)
    with pytest.raises(ValueError, match=r"out has shape \(4, 8\); a @ b has shape \(8, 4\)"):
        xgemm.matmul(a, b, out=cupy.empty((4, 8), cupy.float32))
    with pytest.raises(TypeError, match="out has dtype float64"):
        xgemm.matmul(a, b, out=cupy.empty((8, 4), cupy.float64))
    with pytest.raises(ValueError, match="unit column stride"):
        xgemm.matmul(a, b, out=cupy.empty((4, 8), cupy.float32).T)
    with pytest.raises(TypeError, match="out must be a CuPy array"):
        xgemm.matmul(a, b, out=a.get())


def test_wrong_dtype_with_real_arrays(rng):
    a = rng.matrix(4, 4)
    with pytest.raises(TypeError, match="b has dtype float64"):
        xgemm.matmul(a, a.astype("float64"))


def test_pytorch_tensors_through_dlpack():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    a = torch.randn(300, 200, device="cuda")
    b = torch.randn(200, 100, device="cuda")
    c = xgemm.matmul(a, b)
    expected = (a.double() @ b.double()).cpu().numpy()
    got = c.get()
    import numpy as np

    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < TOLERANCE
    with pytest.raises(TypeError, match="host"):
        xgemm.matmul(a.cpu(), b)
