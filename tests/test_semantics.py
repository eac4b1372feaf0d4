"""numpy.matmul semantics, BLAS gemm and the fused epilogues, on the GPU, for every dtype:
1-D operands, broadcast batches, zero-size dimensions, out=, alpha/beta, bias and
activations, each against a float64 reference computed from the rounded inputs."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    DTYPES,
    REFERENCE_TOLERANCE,
    b_order,
    cupy_dtype,
    f64,
    float_variants,
    frobenius_error,
    home_dtype,
    poisoned,
    tma_copies,
    tolerance,
    variant_dtypes,
)

import xgemm

pytestmark = pytest.mark.gpu

# (a shape, b shape): every class of numpy.matmul's shape rules.
PAIRS = [
    ((7,), (7,)),                    # vector . vector -> scalar
    ((7,), (7, 5)),                  # vector @ matrix -> (5,)
    ((6, 7), (7,)),                  # matrix @ vector -> (6,)
    ((3, 6, 7), (7,)),               # batch @ vector
    ((7,), (3, 7, 5)),               # vector @ batch
    ((8, 33, 19), (19, 21)),         # batch @ matrix: b broadcast (stride 0)
    ((33, 19), (4, 19, 21)),         # matrix @ batch: a broadcast
    ((2, 3, 9, 11), (2, 3, 11, 5)),  # two batch dimensions
    ((2, 1, 9, 11), (3, 11, 5)),     # broadcast inside the batch: (2, 3)
    ((1, 9, 11), (4, 11, 5)),        # a batch of one against four
    ((0, 9, 11), (11, 5)),           # an empty batch
    ((3, 0, 11), (11, 5)),           # M = 0
    ((9, 11), (11, 0)),              # N = 0
    ((9, 0), (0, 5)),                # K = 0: zeros
    ((2, 9, 0), (2, 0, 5)),          # K = 0 in a batch
    ((0,), (0,)),                    # an empty dot product: 0
]


def _id(pair):
    return "@".join("x".join(map(str, s)) or "scalar" for s in pair)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a_shape, b_shape", PAIRS, ids=[_id(p) for p in PAIRS])
def test_matches_numpy_matmul(rng, a_shape, b_shape, dtype):
    a, b = rng.array(a_shape, dtype), rng.array(b_shape, dtype)
    expected = np.matmul(f64(a).get(), f64(b).get())
    c = xgemm.matmul(a, b)
    assert c.shape == expected.shape and c.dtype == cupy_dtype(dtype)
    # Relative to the sums of magnitudes |a| @ |b|, which bound the rounding in the sums:
    # a dot product of seven terms can cancel to near zero, and its relative error with it
    magnitudes = np.matmul(np.abs(f64(a).get()), np.abs(f64(b).get()))
    diff = float(np.linalg.norm((f64(c).get() - expected).ravel()))
    scale = float(np.linalg.norm(magnitudes.ravel()))
    err = diff / scale if scale > 0 else diff
    assert err < REFERENCE_TOLERANCE[dtype], f"error {err} (seed {rng.seed})"


@pytest.mark.parametrize("name", float_variants())
def test_batches_run_in_one_launch(rng, name):
    import cupy

    dtype = home_dtype(name)
    a = rng.array((6, 33, 19), dtype)
    b = (cupy.swapaxes(rng.array((6, 21, 19), dtype), -1, -2)  # a batch of w.T
         if xgemm.get_variant(name).b_layouts == ("col",) else rng.array((6, 19, 21), dtype))
    launch = xgemm.prepare(a, b, variant=name)
    # one argument tuple: one kernel launch, its grid's z the batch (times split-K's splits)
    splits = launch.variant.splits_of(launch.params)
    assert len(launch.grids) == 1 and launch.grid[2] == 6 * splits
    assert launch.copies == tma_copies(name, a, b)  # a TMA rung pads unaligned rows
    c = launch()
    assert frobenius_error(c, cupy.matmul(f64(a), f64(b))) < tolerance(name, dtype)


def test_batch_larger_than_one_grid_dimension(rng):
    import cupy

    a, b = rng.array((70_000, 3, 5)), rng.array((70_000, 5, 2))
    launch = xgemm.prepare(a, b, variant="tiled")
    assert [g[2] for g in launch.grids] == [65535, 70_000 - 65535]
    c = launch()
    assert frobenius_error(c, cupy.matmul(f64(a), f64(b))) < REFERENCE_TOLERANCE["float32"]


def test_transposed_batches_read_in_place(rng):
    import cupy

    a = cupy.swapaxes(rng.array((5, 19, 33)), -1, -2)  # a batch of column-major matrices
    b = cupy.swapaxes(rng.array((5, 21, 19)), -1, -2)
    launch = xgemm.prepare(a, b, variant="vectorized")
    assert launch.copies == () and launch.spec.a_col and launch.spec.b_col
    c = launch()
    assert frobenius_error(c, cupy.matmul(f64(a), f64(b))) < REFERENCE_TOLERANCE["float32"]


def test_batch_no_single_stride_walks_is_copied(rng):
    import cupy

    a, b = rng.array((2, 1, 9, 11)), rng.array((1, 3, 11, 5))
    launch = xgemm.prepare(a, b, variant="tiled")
    assert launch.copies == ("a", "b")  # (2, 3) batches with strides (s, 0) and (0, s)
    assert frobenius_error(launch(), cupy.matmul(f64(a), f64(b))) < REFERENCE_TOLERANCE["float32"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_with_batches_and_vectors(rng, dtype):
    import cupy

    a, b = rng.array((4, 9, 11), dtype), rng.array((11,), dtype)
    out = poisoned(4, 9, dtype=dtype)
    assert xgemm.matmul(a, b, out=out) is out
    assert frobenius_error(out, cupy.matmul(f64(a), f64(b))) < REFERENCE_TOLERANCE[dtype]
    with pytest.raises(ValueError, match=r"out has shape \(4, 9, 1\); a @ b has shape \(4, 9\)"):
        xgemm.matmul(a, b, out=cupy.empty((4, 9, 1), cupy_dtype(dtype)))


@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_out_overlapping_an_input(rng, kind):
    """An out that shares bytes with an input is written through a temporary: the same
    array, and a window of a buffer that starts inside an input's span (found from each
    array's address and strides: CuPy's count bytes, PyTorch's elements)."""
    import cupy

    if kind == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("PyTorch was built without CUDA")
        framework = torch.from_dlpack
    else:
        framework = cupy.asarray
    a = rng.array((3, 16, 16))
    b = rng.array((3, 16, 16))
    expected = cupy.matmul(f64(a), f64(b))
    xgemm.matmul(framework(a), framework(b), out=framework(b))  # b read while written
    assert frobenius_error(b, expected) < REFERENCE_TOLERANCE["float32"]
    x = rng.array((40, 40))
    expected = cupy.matmul(f64(x[:20, :20]), f64(x[:20, 20:]))
    y = framework(x)  # windows of one buffer
    xgemm.matmul(y[:20, :20], y[:20, 20:], out=y[10:30, 10:30])
    assert frobenius_error(x[10:30, 10:30], expected) < REFERENCE_TOLERANCE["float32"]
    if kind == "cupy":  # rows read backwards (PyTorch has no negative strides)
        x = rng.array((40, 40))
        expected = cupy.matmul(f64(x[19::-1, :20]), f64(x[:20, 20:]))
        xgemm.matmul(x[19::-1, :20], x[:20, 20:], out=x[10:30, 10:30])
        assert frobenius_error(x[10:30, 10:30], expected) < REFERENCE_TOLERANCE["float32"]


# -- gemm: alpha, beta, in place -----------------------------------------------------------
@pytest.mark.parametrize("name, dtype", variant_dtypes())
def test_gemm_alpha_beta(rng, name, dtype):
    import cupy

    b_order = "F" if xgemm.get_variant(name).b_layouts == ("col",) else "C"
    a, b = rng.matrix(37, 23, dtype=dtype), rng.matrix(23, 29, b_order, dtype)
    c = rng.matrix(37, 29, dtype=dtype)
    expected = 2.0 * cupy.matmul(f64(a), f64(b)) - 0.5 * f64(c)
    assert xgemm.gemm(a, b, c, alpha=2.0, beta=-0.5, variant=name) is c
    assert frobenius_error(c, expected) < tolerance(name, dtype), f"seed {rng.seed}"


@pytest.mark.parametrize("name", float_variants())
def test_gemm_beta_zero_never_reads_c(rng, name):
    import cupy

    b_order = "F" if xgemm.get_variant(name).b_layouts == ("col",) else "C"
    dtype = home_dtype(name)
    a, b = rng.matrix(37, 23, dtype=dtype), rng.matrix(23, 29, b_order, dtype)
    c = poisoned(37, 29, dtype=dtype)
    launch = xgemm.prepare(a, b, name, c=c, alpha=3.0, beta=0.0)
    assert not launch.spec.read_c
    launch()
    assert frobenius_error(c, 3.0 * cupy.matmul(f64(a), f64(b))) < tolerance(name, dtype)


def test_gemm_batched_and_c_in_other_layouts(rng):
    import cupy

    a, b = rng.array((3, 20, 30)), rng.array((30, 10))
    for c in (rng.array((3, 20, 10)), cupy.swapaxes(rng.array((3, 10, 20)), -1, -2)):
        expected = 0.5 * cupy.matmul(f64(a), f64(b)) + 2.0 * f64(c)
        xgemm.gemm(a, b, c, alpha=0.5, beta=2.0, variant="vectorized")
        assert frobenius_error(c, expected) < REFERENCE_TOLERANCE["float32"]


def test_gemm_k_zero_scales_c(rng):
    import cupy

    c = rng.matrix(5, 7)
    expected = 0.25 * f64(c)
    xgemm.gemm(cupy.empty((5, 0), cupy.float32), cupy.empty((0, 7), cupy.float32), c,
               alpha=2.0, beta=0.25)
    # K = 0: C is only scaled by 0.25, a power of two, exact in float32, so far stricter
    # than the 1e-5 of a float32 product's sums.
    assert frobenius_error(c, expected) < 1e-7


def test_gemm_checks_c(rng):
    import cupy

    a, b = rng.matrix(4, 3), rng.matrix(3, 2)
    with pytest.raises(ValueError, match=r"c has shape \(2, 4\); a @ b has shape \(4, 2\)"):
        xgemm.gemm(a, b, cupy.empty((2, 4), cupy.float32))
    with pytest.raises(TypeError, match="c has dtype float64"):
        xgemm.gemm(a, b, cupy.empty((4, 2), cupy.float64))
    with pytest.raises(TypeError, match="alpha must be a real number"):
        xgemm.gemm(a, b, cupy.empty((4, 2), cupy.float32), alpha="2")


# -- fused epilogues -----------------------------------------------------------------------
def _activate(x, activation):
    import cupy

    if activation == "relu":
        return cupy.maximum(x, 0)
    if activation == "gelu":
        return 0.5 * x * (1 + cupy.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))
    if activation == "silu":
        return x / (1 + cupy.exp(-x))
    return x


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
@pytest.mark.parametrize("name, dtype", variant_dtypes())
def test_epilogue_matches_the_unfused_composition(rng, name, dtype, activation):
    b_order = "F" if xgemm.get_variant(name).b_layouts == ("col",) else "C"
    a, b = rng.array((2, 45, 23), dtype), rng.matrix(23, 29, b_order, dtype)
    bias = rng.array((29,), dtype)
    c = rng.array((2, 45, 29), dtype)
    unfused = _activate(1.5 * (f64(a) @ f64(b)) + 0.5 * f64(c) + f64(bias), activation)
    launch = xgemm.prepare(a, b, name, c=c, alpha=1.5, beta=0.5, bias=bias,
                           activation=activation)
    assert len(launch.grids) == 1  # one kernel, epilogue included
    launch()
    assert frobenius_error(c, unfused) < tolerance(name, dtype), f"seed {rng.seed}"
    y = xgemm.matmul(a, b, variant=name, bias=bias, activation=activation)
    expected = _activate(f64(a) @ f64(b) + f64(bias), activation)
    assert frobenius_error(y, expected) < tolerance(name, dtype), f"seed {rng.seed}"


def test_bias_is_checked(rng):
    a, b = rng.matrix(4, 3), rng.matrix(3, 5)
    with pytest.raises(ValueError, match=r"bias has shape \(4,\).*shape \(5,\)"):
        xgemm.matmul(a, b, bias=rng.array((4,)))
    with pytest.raises(TypeError, match="bias has dtype float64"):
        xgemm.matmul(a, b, bias=rng.array((5,), "float64"))
    with pytest.raises(TypeError, match=r"bias is a host \(CPU\) array"):
        xgemm.matmul(a, b, bias=np.ones(5, np.float32))


# -- dtypes through PyTorch ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_pytorch_tensors_of_every_dtype(dtype):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    t = getattr(torch, dtype)
    a = torch.randn(3, 70, 40, device="cuda").to(t)
    w = torch.randn(30, 40, device="cuda").to(t)
    c = xgemm.matmul(a, w.T)  # a transposed weight, through DLPack, read in place
    assert isinstance(c, torch.Tensor)  # PyTorch in, PyTorch out
    expected = (a.double() @ w.double().T).cpu().numpy()
    got = c.double().cpu().numpy()
    assert got.shape == expected.shape
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < REFERENCE_TOLERANCE[dtype]


SPLIT_K = [n for n in float_variants() if xgemm.get_variant(n).splits != "1"]


@pytest.mark.parametrize("shape", [(128, 128, 65536), (70, 50, 5000), (3, 200, 999),
                                   (16, 300, 64)])  # one phase of K: the later splits get none
@pytest.mark.parametrize("name", SPLIT_K)
def test_split_k_is_deterministic_and_right(rng, name, shape):
    import cupy

    if not xgemm.get_variant(name).runs_on(xgemm.gpu.compute_capability(0)):
        pytest.skip(f"{name} needs a newer GPU")
    dtype = home_dtype(name)
    m, n, k = shape
    a, b = rng.matrix(m, k, dtype=dtype), rng.matrix(k, n, b_order(name), dtype)
    bias, c = rng.array((n,), dtype), rng.matrix(m, n, dtype=dtype)
    expected = 0.5 * (f64(a) @ f64(b)) + 2.0 * f64(c) + f64(bias)
    launch = xgemm.prepare(a, b, name, c=c, alpha=0.5, beta=2.0, bias=bias, SPLITS=8)
    assert launch.grid[2] == 8  # eight blocks per tile of C
    first = c.copy()
    launch()
    assert frobenius_error(c, expected) < REFERENCE_TOLERANCE[dtype]
    once = c.copy()
    for _ in range(3):  # the same inputs give the same bits, whichever block ends last
        c[...] = first
        launch()
        assert bool((c == once).all())
    batched = xgemm.matmul(cupy.stack([a, a]), b, variant=name, SPLITS=4)
    assert frobenius_error(batched[1], f64(a) @ f64(b)) < REFERENCE_TOLERANCE[dtype]


@pytest.mark.parametrize("shape", [(1047, 97, 14458), (100, 1501, 16139)])
def test_auto_splits_few_tiles_to_fill_the_sms(rng, shape):
    """Few tiles of C over a long K: on 132 SMs auto hands rung 16's pick to rung 35 with
    K split as many ways as the tiles leave SMs for (7 and 5 here, counts no test that
    names the rung takes), right with a bias and bit-identical run to run."""
    import cupy

    from xgemm.expressions import cdiv

    sms = xgemm.gpu.multiprocessors(0)
    if xgemm.gpu.compute_capability(0) < 90 or sms != 132:
        pytest.skip(f"auto's split for these tiles is counted for 132 SMs of sm_90 (here {sms})")
    m, n, k = shape
    a, b = rng.matrix(m, k, dtype="bfloat16"), rng.matrix(k, n, dtype="bfloat16")
    bias, c = rng.array((n,), "bfloat16"), poisoned(m, n, dtype="bfloat16")
    launch = xgemm.prepare(a, b, out=c, bias=bias)
    tiles = cdiv(m, 64) * cdiv(n, 128)  # rung 35's 64 x 128 tiles
    assert (launch.variant.name, launch.params["SPLITS"]) == ("wgmma_splitk_sum", sms // tiles)
    launch()
    assert frobenius_error(c, f64(a) @ f64(b) + f64(bias)) < REFERENCE_TOLERANCE["bfloat16"]
    once = c.copy()
    for _ in range(3):  # the same bits, whichever split's block ends last
        c.fill(cupy.nan)
        launch()
        assert bool((c == once).all())


@pytest.mark.parametrize("name", SPLIT_K)
def test_split_k_counters_per_stream(rng, name):
    """Split-K's counters are zeroed once per stream and left at zero by each launch:
    C += A @ B queued 20 times on each of two streams at once (a launch that missed its
    last arrival would leave C short by one product) gives 20 A @ B on both, and the
    plan's two sets of counters are back at zero (a rung that sums its partials in a second
    kernel has none, and its partials are per stream too)."""
    import cupy

    if not xgemm.get_variant(name).runs_on(xgemm.gpu.compute_capability(0)):
        pytest.skip(f"{name} needs a newer GPU")
    dtype = home_dtype(name)
    a, b = rng.matrix(30, 3000, dtype=dtype), rng.matrix(3000, 130, b_order(name), dtype)
    outs = [cupy.zeros((30, 130), dtype=a.dtype) for _ in range(2)]
    launches = [xgemm.prepare(a, b, name, c=out, beta=1.0, SPLITS=4) for out in outs]
    # made on the default stream, which a non-blocking stream does not wait for
    cupy.cuda.get_current_stream().synchronize()
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in outs]
    for _ in range(20):
        for launch, stream in zip(launches, streams, strict=True):
            with stream:
                launch()
    for stream in streams:
        stream.synchronize()
    for out in outs:
        assert frobenius_error(out, 20 * (f64(a) @ f64(b))) < REFERENCE_TOLERANCE[dtype]
    counters = {id(c): c for launch in launches
                for c, _, _ in launch.plan.counters.values()}  # (counters, address, partials)
    assert len(counters) == 2 and all(not c.size or int(c.max()) == 0 for c in counters.values())


#: Rung 25's regimes (128 x 256 tiles on 132 SMs): fewer tiles than SMs, each cut in 3;
#: 144 tiles, the last round's 12 cut in 2; one tile of long K in 32 pieces; one tile too
#: short to cut; 25 tiles in 5 pieces (in 128-column tiles, 45 in 5: two pieces for some
#: blocks); rows and columns no tile's multiple; K = 0.
LAST_ROUND_SHAPES = [(1000, 1100, 700), (2000, 2100, 300), (64, 64, 65536), (100, 90, 64),
                     (517, 1029, 4099), (300, 200, 0)]


@pytest.mark.parametrize("shape", LAST_ROUND_SHAPES)
@pytest.mark.parametrize("params", [{}, {"BN": 128}, {"BN": 128, "TMA_STORE": 0}])
def test_last_round_is_deterministic_and_right(rng, shape, params):
    """Every product right, with the epilogue (alpha, beta, bias), bit-identical from run
    to run whichever piece of a shared tile arrives last; a batch; the counters back at
    zero after each launch."""
    import cupy

    name = "wgmma_last_round"
    if not xgemm.get_variant(name).runs_on(xgemm.gpu.compute_capability(0)):
        pytest.skip(f"{name} needs a newer GPU")
    m, n, k = shape
    dtype = "float16"  # (CuPy's own: the test copies and compares C)
    a, b = rng.matrix(m, k, dtype=dtype), rng.matrix(k, n, dtype=dtype)
    bias, c = rng.array((n,), dtype), rng.matrix(m, n, dtype=dtype)
    expected = 0.5 * (f64(a) @ f64(b)) + 2.0 * f64(c) + f64(bias)
    launch = xgemm.prepare(a, b, name, c=c, alpha=0.5, beta=2.0, bias=bias, **params)
    first = c.copy()
    launch()
    assert frobenius_error(c, expected) < REFERENCE_TOLERANCE[dtype], f"seed {rng.seed}"
    once = c.copy()
    for _ in range(3):
        c[...] = first
        launch()
        assert bool((c == once).all()), f"not bit-identical (seed {rng.seed})"
    counters = [x for x, _, _ in launch.plan.counters.values()]
    assert counters and all(int(x.max()) == 0 for x in counters)
    out = poisoned(m, n, dtype=dtype)
    xgemm.matmul(a, b, variant=name, out=out, **params)
    assert frobenius_error(out, f64(a) @ f64(b)) < REFERENCE_TOLERANCE[dtype], f"seed {rng.seed}"
    # a batch of B too (a batch against one B folds into one product): grid z, each
    # product's own partial sums and counters
    a3, b3 = rng.array((3, m, k), dtype), rng.array((3, k, n), dtype)
    batched = xgemm.matmul(a3, b3, variant=name, **params)
    assert frobenius_error(batched, cupy.matmul(f64(a3), f64(b3))) < REFERENCE_TOLERANCE[dtype]


def test_splitk_refuses_a_huge_workspace():
    import cupy

    a = cupy.empty((8192, 16), cupy.float32)
    with pytest.raises(ValueError, match="needs 16.0 GiB of partial sums.*fewer SPLITS"):
        xgemm.prepare(a, a.T, "splitk", SPLITS=64)
