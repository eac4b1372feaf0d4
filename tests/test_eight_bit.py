"""The 8-bit rungs (``wgmma_8bit``, ``mma_int8`` and ``skinny``'s few rows and columns):
FP8 (e4m3, e5m2, mixed) and int8 operands, their formats, outputs, scales, layouts,
epilogue and batches, against a float64 product of the dequantised inputs. Their inputs
name their format and their results have another dtype than their inputs, so they are
walked here rather than by tests/test_gpu.py's loops.

Tolerances, relative Frobenius error: an int32 result is the exact sums (0); a float one
is bounded by its rounding (bfloat16 2^-9, float16 2^-12 relative) and by FP8 wgmma's
sums, which keep fewer bits than float32 (measured on the H100: 1.3e-3 at K = 4096 for
a float32 result of e4m3 inputs, growing about as sqrt(K)). The checks that need no GPU
come first."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FakeGpuArray, f64, frobenius_error, poisoned

import xgemm
from xgemm.checks import Meta, input_dtypes, output_dtype, scaling
from xgemm.specs import EIGHT_BIT_OUTPUTS, Spec, check_eight_bit_spec
from xgemm.tools.tolerances import TOLERANCE

E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"
NAME = "wgmma_8bit"
#: Error allowed per output dtype against float64 of the dequantised inputs (the "8-bit"
#: row of xgemm.tools.tolerances.TOLERANCE, which says why).
EIGHT_BIT_TOLERANCE = TOLERANCE["8-bit"]
PAIRS = [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3), (E5M2, E5M2), ("int8", "int8")]


# -- without a GPU ---------------------------------------------------------------------------
def test_formats_name_what_the_bytes_hold():
    u8, i8, f16 = np.dtype("uint8"), np.dtype("int8"), np.dtype("float16")
    assert input_dtypes(u8, u8, E4M3) == (E4M3, None)
    assert input_dtypes(u8, u8, (E4M3, E5M2)) == (E4M3, E5M2)
    assert input_dtypes(i8, i8) == ("int8", None)
    with pytest.raises(TypeError, match="a is a uint8 array: name the FP8 format"):
        input_dtypes(u8, u8)
    with pytest.raises(TypeError, match="FP8 formats mix with each other only, int8 with int8"):
        input_dtypes(u8, i8, (E4M3, None))
    with pytest.raises(TypeError, match="does not mix 8-bit and wider operands"):
        input_dtypes(i8, f16)
    with pytest.raises(TypeError, match="formats= names the format of 8-bit operands"):
        input_dtypes(f16, f16, E4M3)
    with pytest.raises(ValueError, match="unknown format 'e4m3'"):
        input_dtypes(u8, u8, "e4m3")
    with pytest.raises(TypeError, match="b is an int8 array, not float8_e4m3fn"):
        input_dtypes(u8, i8, E4M3)


def test_uint8_operands_without_a_format_are_refused_before_cupy(no_cupy):
    a, b = FakeGpuArray((4, 8), "|u1"), FakeGpuArray((8, 4), "|u1")
    with pytest.raises(TypeError, match="name the FP8 format"):
        xgemm.matmul(a, b)


def test_what_8_bit_products_are_stored_as():
    assert output_dtype(E4M3, None, None, "out") == "bfloat16"
    assert output_dtype("int8", None, None, "out") == "int32"
    assert output_dtype("int8", None, np.empty(1, np.float32), "out") == "float32"
    with pytest.raises(ValueError, match="stored as bfloat16 or float16 or float32"):
        output_dtype(E5M2, "int32", None, "out")
    with pytest.raises(TypeError, match="out has dtype float16 but out_dtype is 'float32'"):
        output_dtype("int8", "float32", np.empty(1, np.float16), "out")


def test_scales_are_one_or_one_per_row_or_column():
    f32 = np.dtype("float32")
    assert scaling("scale_a", Meta((1,), f32), 5) == "tensor"
    assert scaling("scale_a", Meta((5, 1), f32), 5) == "vector"
    assert scaling("scale_b", Meta((7,), f32), 7) == "vector"
    with pytest.raises(ValueError, match=r"one per column of B: shape \(7,\) or \(1, 7\)"):
        scaling("scale_b", Meta((7, 1), f32), 7)
    with pytest.raises(TypeError, match="scales are float32"):
        scaling("scale_a", Meta((), np.dtype("float16")), 5)


def test_an_int32_result_takes_no_epilogue():
    check_eight_bit_spec(Spec("int8", b_col=True))
    for spec in [Spec("int8", b_col=True, bias=True), Spec("int8", b_col=True, scale_a="tensor"),
                 Spec("int8", b_col=True, activation="relu")]:
        with pytest.raises(ValueError, match="int8 product stored as int32 is the exact sums"):
            check_eight_bit_spec(spec)
    check_eight_bit_spec(Spec("int8", b_col=True, bias=True, out_dtype="float32"))


def test_int8_runs_on_rung_19_before_hopper_and_when_small():
    from xgemm.choice import heuristic

    assert heuristic(4096, 4096, 4096, "int8", 90)[0] == NAME
    assert heuristic(263, 48, 480, "int8", 90) == ("mma_int8", {
        "BM": 64, "BN": 64, "BK": 64, "WM": 32, "WN": 32, "STAGES": 4, "GROUP": 8})
    assert heuristic(263, 48, 4800, "int8", 90)[0] == NAME  # long K
    assert heuristic(263, 48, 480, E4M3, 90)[0] == NAME  # rung 19 multiplies int8 only
    assert heuristic(4096, 4096, 4096, "int8", 80)[0] == "mma_int8"
    assert heuristic(4096, 4096, 4096, E4M3, 80)[0] == NAME  # which the plan then refuses


def test_auto_names_what_runs_where_its_pick_cannot(monkeypatch):
    """Before sm_90 auto's FP8 pick for most shapes (rung 18) cannot run: the refusal
    says so and names the rung that can; a variant named by the caller is refused as
    before."""
    from xgemm import checks, gpu

    monkeypatch.setattr(gpu, "compute_capability", lambda device: 80)
    v = xgemm.get_variant(NAME)
    with pytest.raises(ValueError, match="auto multiplies float8_e4m3fn products of this "
                       "shape on 'wgmma_8bit', built for sm_90a only.*only 'skinny'"):
        checks.check_arch(v, E4M3, 0, auto=True)
    with pytest.raises(ValueError, match="needs compute capability 9.0 exactly"):
        checks.check_arch(v, E4M3, 0)


def test_few_rows_or_columns_over_a_long_k_take_rung_20():
    from xgemm.choice import heuristic

    for dtype in (E4M3, "int8"):
        assert heuristic(153, 16, 13424, dtype) == ("skinny", {
            "BM": 16, "BN": 32, "BK": 512, "WARPS": 8, "SPLITS": 16, "FEW_COLUMNS": 1})
        assert heuristic(3, 100, 1600, dtype)[1]["BM"] == 4
        assert heuristic(3, 3152, 5552, dtype)[0] != "skinny"  # K short beside N


def test_scale_vectors_take_128_column_tiles_below_a_long_k():
    """Where C's stores are most of the work (K < 1024), a scale per row or column takes
    128 x 128 tiles; from K = 1024, and without them, 128 x 256 where those fill the SMs."""
    from xgemm.choice import heuristic

    for dtype in (E4M3, "int8"):
        assert heuristic(8192, 8192, 8192, dtype, scale_vectors=True)[1]["BN"] == 256
        assert heuristic(8192, 8192, 64, dtype, scale_vectors=True)[1]["BN"] == 128
        assert heuristic(8192, 8192, 64, dtype)[1]["BN"] == 256


def test_the_compile_check_builds_every_output_scaling_and_mixed_format():
    v = xgemm.get_variant(NAME)
    for dtype in v.dtypes:
        specs = list(v.specs(dtype))
        assert {s.c_dtype for s in specs} == set(EIGHT_BIT_OUTPUTS[dtype])
        assert {(s.scale_a, s.scale_b) for s in specs} >= {("tensor", "tensor"),
                                                           ("vector", "vector")}
        assert all(not s.a_col and s.b_col for s in specs)  # K-major only
        if dtype != "int8":
            assert {s.b_dtype for s in specs} >= {E5M2 if dtype == E4M3 else E4M3}
    source = xgemm.source(NAME, E4M3, b_col=True, b_dtype=E5M2, scale_a="vector")
    assert '#define WGMMA_INPUTS "e4m3.e5m2"' in source and "Scaling::vector" in source
    assert "k32.s32" in xgemm.source(NAME, "int8", b_col=True)


# -- on the GPU -----------------------------------------------------------------------------
def _host(fmt):
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, fmt))


def quantised(rng, shape, fmt, order="C"):
    """Fresh random values of format ``fmt`` as CuPy holds them: int8, or the bytes of FP8
    values (uint8). ``order="F"``: a column-major view of the last two dimensions."""
    import cupy

    if order == "F":
        shape = (*shape[:-2], shape[-1], shape[-2])
    values = rng.array(shape)
    if fmt == "int8":
        x = cupy.clip(cupy.rint(values * 40), -127, 127).astype(cupy.int8)
    else:
        x = cupy.asarray(values.get().astype(_host(fmt)).view(np.uint8))
    return cupy.swapaxes(x, -1, -2) if order == "F" else x


def decoded(x, fmt):
    """The values ``x`` holds, in float64."""
    import cupy

    if fmt == "int8":
        return x.astype(cupy.float64)
    table = cupy.asarray(np.arange(256, dtype=np.uint8).view(_host(fmt)).astype(np.float64))
    return table[x]


def product(rng, m, n, k, pair, out_dtype=None, a_order="C", b_order="F", **kwargs):
    """Run one product of fresh inputs; returns (launch, result, expected)."""
    a, b = quantised(rng, (m, k), pair[0], a_order), quantised(rng, (k, n), pair[1], b_order)
    out_dtype = out_dtype or EIGHT_BIT_OUTPUTS[pair[0]][0]
    c = poisoned(m, n, dtype=out_dtype)
    formats = None if pair[0] == "int8" else pair
    launch = xgemm.prepare(a, b, out=c, formats=formats, **kwargs)
    assert launch() is c
    return launch, c, decoded(a, pair[0]) @ decoded(b, pair[1])


SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 255), (257, 300, 1000), (4097, 31, 1025),
          (33, 2049, 129)]


@pytest.mark.gpu
@pytest.mark.parametrize("pair", PAIRS, ids=["x".join(p) for p in PAIRS])
def test_formats_outputs_and_odd_shapes(rng, pair):
    """Every format pair into every output it may be stored as, on odd shapes (one, primes,
    no tile's multiple, tall, wide), on auto's rung; A row-major and B column-major, read
    in place where their rows are 16-byte aligned or the rung needs no TMA, else padded."""
    from xgemm.choice import heuristic

    for out_dtype in EIGHT_BIT_OUTPUTS[pair[0]]:
        # int8 sums pass float16's largest value (65504): scaled into its range
        scale = 2.0**-8 if (pair[0], out_dtype) == ("int8", "float16") else 1.0
        for m, n, k in SHAPES:
            launch, c, expected = product(rng, m, n, k, pair, out_dtype, scale_a=scale)
            assert launch.variant.name == heuristic(m, n, k, pair[0])[0]
            tma = launch.variant.name == NAME  # rows TMA cannot read are padded
            assert launch.copies == (("a", "b") if k % 16 and tma else ())
            err = frobenius_error(c, scale * expected)
            assert err <= EIGHT_BIT_TOLERANCE[out_dtype], (
                f"{pair} -> {out_dtype} {m}x{n}x{k}: error {err} (seed {rng.seed})")


POINTS = [(name, dtype, p) for name, dtypes in ((NAME, ("int8", E4M3)), ("mma_int8", ("int8",)))
          for dtype in dtypes for p in xgemm.get_variant(name).points(dtype)]


@pytest.mark.gpu
@pytest.mark.parametrize("name, dtype, params", POINTS,
                         ids=[f"{n}-{d}-" + "_".join(f"{k}{v}" for k, v in p.items())
                              for n, d, p in POINTS])
def test_every_point_of_the_space(rng, name, dtype, params):
    """Each point on an odd shape, on one of whole tiles, and on many tiles (for rung 18
    the persistent grid walking over 500 tiles, the ring carrying on from tile to tile)."""
    for m, n, k in [(127, 129, 255), (256, 512, 128), (4097, 2049, 129)]:
        _, c, expected = product(rng, m, n, k, (dtype, dtype), variant=name, **params)
        out_dtype = EIGHT_BIT_OUTPUTS[dtype][0]
        err = frobenius_error(c, expected)
        assert err <= EIGHT_BIT_TOLERANCE[out_dtype], f"{m}x{n}x{k}: error {err} (seed {rng.seed})"


#: Few rows (B streamed: a decode step) or few columns (A streamed), K of no multiple of 16
#: (the loads of B turn narrow) or of many chunks; the last a batch against one weight.
SKINNY_SHAPES = [(1, 300, 1000), (3, 129, 4100), (16, 2049, 1025), (7, 64, 31),
                 (1000, 5, 777), (4097, 16, 2048), (9, 1, 17)]


@pytest.mark.gpu
@pytest.mark.parametrize("pair", PAIRS, ids=["x".join(p) for p in PAIRS])
def test_skinny_reads_8_bit_operands(rng, pair):
    """Rung 20 on 8-bit operands, read in place whatever K: few rows and few columns
    (FEW_COLUMNS), 2 or 8 splits, every output on one shape, scales per row and column
    with a bias and an activation after them; the same bits on a second run (split-K's
    fixed order; an int8 product's int32 sums exact)."""
    import cupy

    def skinny(m, n, splits):
        few = min(m, n)
        return dict(variant="skinny", BM=min(16, 1 << (few - 1).bit_length()),
                    SPLITS=splits, FEW_COLUMNS=int(n < m))

    for i, (m, n, k) in enumerate(SKINNY_SHAPES):
        launch, c, expected = product(rng, m, n, k, pair, **skinny(m, n, 2 if i % 2 else 8))
        assert launch.variant.name == "skinny" and launch.copies == ()
        out_dtype = EIGHT_BIT_OUTPUTS[pair[0]][0]
        err = frobenius_error(c, expected)
        assert err <= EIGHT_BIT_TOLERANCE[out_dtype], f"{m}x{n}x{k}: error {err} (seed {rng.seed})"
        first = c.copy()
        launch()
        assert bool((c == first).all()), f"{m}x{n}x{k}: a second run differs"
    for out_dtype in EIGHT_BIT_OUTPUTS[pair[0]][1:]:
        scale = 2.0**-8 if (pair[0], out_dtype) == ("int8", "float16") else 1.0
        _, c, expected = product(rng, 16, 2049, 1025, pair, out_dtype, scale_a=scale,
                                 **skinny(16, 2049, 4))
        err = frobenius_error(c, scale * expected)
        assert err <= EIGHT_BIT_TOLERANCE[out_dtype], f"{out_dtype}: error {err} (seed {rng.seed})"
    m, n, k = 700, 13, 300
    rows, cols = rng.array((m,)) ** 2 + 0.5, rng.array((1, n)) ** 2 + 0.5
    bias = rng.array((n,), "bfloat16")
    _, c, expected = product(rng, m, n, k, pair, "bfloat16", scale_a=rows, scale_b=cols,
                             bias=bias, activation="silu", **skinny(m, n, 4))
    pre = rows.astype(cupy.float64)[:, None] * expected * cols.astype(cupy.float64) \
        + bias.astype(cupy.float64)
    err = frobenius_error(c, pre / (1 + cupy.exp(-pre)))
    assert err <= EIGHT_BIT_TOLERANCE["bfloat16"], f"error {err} (seed {rng.seed})"
    a, b = quantised(rng, (3, 5, 300), pair[0]), quantised(rng, (300, 77), pair[1], "F")
    formats = None if pair[0] == "int8" else pair
    c = xgemm.matmul(a, b, formats=formats, **skinny(5, 77, 2))
    err = frobenius_error(c, decoded(a, pair[0]) @ decoded(b, pair[1]))
    allowed = EIGHT_BIT_TOLERANCE[EIGHT_BIT_OUTPUTS[pair[0]][0]]
    assert err <= allowed, f"batch: {err} (seed {rng.seed})"


@pytest.mark.gpu
def test_mma_int8_outputs_scales_and_epilogue(rng):
    """Rung 19 (int8 before Hopper, run here on the H100): every output on the odd shapes,
    read in place (it needs no TMA, so no padding); per-row and per-column scales with a
    bias and an activation after them."""
    import cupy

    for out_dtype in EIGHT_BIT_OUTPUTS["int8"]:
        scale = 2.0**-8 if out_dtype == "float16" else 1.0  # into float16's range
        for m, n, k in SHAPES:
            launch, c, expected = product(rng, m, n, k, ("int8", "int8"), out_dtype,
                                          variant="mma_int8", scale_a=scale)
            assert launch.copies == ()
            err = frobenius_error(c, scale * expected)
            assert err <= EIGHT_BIT_TOLERANCE[out_dtype], (
                f"{out_dtype} {m}x{n}x{k}: {err} (seed {rng.seed})")
    m, n, k = 129, 200, 130
    rows, cols = rng.array((m,)) ** 2 + 0.5, rng.array((1, n)) ** 2 + 0.5
    bias = rng.array((n,), "bfloat16")
    _, c, expected = product(rng, m, n, k, ("int8", "int8"), "bfloat16", variant="mma_int8",
                             scale_a=rows, scale_b=cols, bias=bias, activation="silu")
    pre = rows.astype(cupy.float64)[:, None] * expected * cols.astype(cupy.float64) \
        + bias.astype(cupy.float64)
    err = frobenius_error(c, pre / (1 + cupy.exp(-pre)))
    assert err <= EIGHT_BIT_TOLERANCE["bfloat16"], f"error {err} (seed {rng.seed})"


@pytest.mark.gpu
def test_int8_before_hopper(rng, monkeypatch, fresh_plans):
    """On an sm_80 GPU (as the plan sees it) auto runs int8 on rung 19, and refuses FP8
    products rung 20 does not take, naming why and what runs there."""
    import xgemm.gpu

    monkeypatch.setattr(xgemm.gpu, "compute_capability", lambda device: 80)
    launch, c, expected = product(rng, 300, 200, 96, ("int8", "int8"))
    assert launch.variant.name == "mma_int8" and frobenius_error(c, expected) == 0
    with pytest.raises(ValueError, match="auto multiplies float8_e4m3fn products of this "
                       "shape on 'wgmma_8bit', built for sm_90a only"):
        product(rng, 64, 64, 64, (E4M3, E4M3))


@pytest.mark.gpu
def test_layouts_read_in_place_or_copied(rng):
    """wgmma reads 8-bit operands K-major only: A row-major and B column-major (a weight
    stored N x K, used as w.T) are read in place, slices of wider arrays too; any other
    layout is copied first, and ``copies`` says so."""
    m, n, k = 67, 45, 96
    wide_a = quantised(rng, (m, k + 32), E4M3)
    wide_w = quantised(rng, (n + 5, k + 16), E4M3)
    cases = [("row-major A, B = w.T", quantised(rng, (m, k), E4M3),
              quantised(rng, (k, n), E4M3, "F"), ()),
             ("slices of wider arrays", wide_a[:, 16:16 + k], wide_w[2:2 + n, :k].T, ()),
             ("column-major A", quantised(rng, (m, k), E4M3, "F"),
              quantised(rng, (k, n), E4M3, "F"), ("a",)),
             ("row-major B", quantised(rng, (m, k), E4M3), quantised(rng, (k, n), E4M3),
              ("b",)),
             ("negative strides", quantised(rng, (m, k), E4M3)[::-1],
              quantised(rng, (k, n), E4M3, "F")[:, ::-1], ("a", "b"))]
    for label, a, b, copies in cases:
        c = poisoned(m, n, dtype="bfloat16")
        launch = xgemm.prepare(a, b, out=c, formats=E4M3)
        assert launch.copies == copies, label
        launch()
        err = frobenius_error(c, decoded(a, E4M3) @ decoded(b, E4M3))
        assert err <= EIGHT_BIT_TOLERANCE["bfloat16"], f"{label}: error {err} (seed {rng.seed})"


@pytest.mark.gpu
@pytest.mark.parametrize("pair, out_dtype", [((E4M3, E4M3), "bfloat16"),
                                             (("int8", "int8"), "float32")])
def test_scales(rng, pair, out_dtype):
    """Scales as numbers, GPU scalars, and one per row of A / column of B (as (M,) or
    (M, 1), (N,) or (1, N)): the product is scale_a * (a @ b) * scale_b."""
    import cupy

    m, n, k = 130, 300, 257
    rows, cols = rng.array((m,)) ** 2 + 0.5, rng.array((n,)) ** 2 + 0.5
    given = [(0.25, 3.0), (cupy.asarray(0.25, cupy.float32), cupy.full((1,), 3.0, cupy.float32)),
             (rows, cols), (rows[:, None], cols[None, :]), (2.0, cols)]
    for scale_a, scale_b in given:
        launch, c, expected = product(rng, m, n, k, pair, out_dtype, scale_a=scale_a,
                                      scale_b=scale_b)
        sa, sb = (cupy.asarray(s, cupy.float64).reshape(shape)
                  for s, shape in ((scale_a, (-1, 1)), (scale_b, (1, -1))))
        err = frobenius_error(c, sa * expected * sb)
        assert err <= EIGHT_BIT_TOLERANCE[out_dtype], (
            f"scales {type(scale_a).__name__} {getattr(scale_a, 'shape', '')}: error {err} "
            f"(seed {rng.seed})")
    # C staged for the TMA store with the scales staged beside it, the tile's scales
    # refilled as each block walks many tiles; and from registers (TMA_STORE=0)
    m, n, k = 1000, 1096, 256  # rows of C on 16 bytes: TMA stores them
    rows, cols = rng.array((m,)) ** 2 + 0.5, rng.array((n,)) ** 2 + 0.5
    for params in ({"BN": 256}, {"BM": 256, "BN": 128}, {"BN": 256, "TMA_STORE": 0}):
        launch, c, expected = product(rng, m, n, k, pair, out_dtype, variant=NAME,
                                      scale_a=rows, scale_b=cols, **params)
        staged = out_dtype != "float32" and "TMA_STORE" not in params
        assert launch.params["TMA_STORE"] == (1 if staged else 0), params
        expected = rows.astype(cupy.float64)[:, None] * expected * cols.astype(cupy.float64)
        err = frobenius_error(c, expected)
        assert err <= EIGHT_BIT_TOLERANCE[out_dtype], f"{params}: error {err} (seed {rng.seed})"


@pytest.mark.gpu
def test_epilogue_after_the_scales(rng):
    """bias and activation after the scales (FP8, bfloat16 out); gemm's alpha and beta * C
    with an int8 product dequantised to float32."""
    import cupy

    m, n, k = 129, 200, 130
    bias = rng.array((n,), "bfloat16")
    launch, c, expected = product(rng, m, n, k, (E4M3, E5M2), scale_a=0.5, bias=bias,
                                  activation="relu")
    expected = cupy.maximum(0.5 * expected + bias.astype(cupy.float64), 0)
    assert frobenius_error(c, expected) <= EIGHT_BIT_TOLERANCE["bfloat16"], f"seed {rng.seed}"

    a, b = quantised(rng, (m, k), "int8"), quantised(rng, (k, n), "int8", "F")
    c = rng.array((m, n))
    scale_b = rng.array((n,)) ** 2
    expected = (2.0 * (decoded(a, "int8") @ decoded(b, "int8")) * scale_b.astype(cupy.float64)
                + 0.5 * c.astype(cupy.float64))
    assert xgemm.gemm(a, b, c, alpha=2.0, beta=0.5, scale_b=scale_b) is c
    assert frobenius_error(c, expected) <= EIGHT_BIT_TOLERANCE["float32"], f"seed {rng.seed}"


@pytest.mark.gpu
def test_batches(rng):
    """A batch against one weight (broadcast, read in place), and a batch of both, in one
    launch each."""
    import cupy

    a = quantised(rng, (3, 65, 96), E4M3)
    b = quantised(rng, (96, 130), E4M3, "F")
    launch = xgemm.prepare(a, b, formats=E4M3)
    assert len(launch.grids) == 1 and launch.copies == ()
    expected = decoded(a, E4M3) @ decoded(b, E4M3)
    err = frobenius_error(launch(), expected)
    assert err <= EIGHT_BIT_TOLERANCE["bfloat16"], f"seed {rng.seed}"

    a = quantised(rng, (2, 65, 100), "int8")
    b = cupy.swapaxes(quantised(rng, (2, 33, 100), "int8"), -1, -2)  # (2, K, N) column-major
    c = xgemm.matmul(a, b)
    assert c.shape == (2, 65, 33) and c.dtype == cupy.int32
    assert frobenius_error(c, decoded(a, "int8") @ decoded(b, "int8")) == 0, f"seed {rng.seed}"


@pytest.mark.gpu
def test_empty_and_k_zero(rng):
    import cupy

    a, b = cupy.empty((5, 0), cupy.uint8), cupy.empty((7, 0), cupy.uint8).T
    c = xgemm.matmul(a, b, formats=E4M3, out_dtype="float32")
    assert c.dtype == cupy.float32 and bool((c == 0).all())
    empty = xgemm.matmul(cupy.empty((0, 16), cupy.int8), cupy.empty((9, 16), cupy.int8).T)
    assert empty.shape == (0, 9) and empty.dtype == cupy.int32


@pytest.mark.gpu
def test_int32_sums_are_exact_beyond_float(rng):
    """Positive int8 values over K = 8192: sums past 2^24, where float32 would round."""
    import cupy

    a = cupy.asarray(rng.array((64, 8192)).get() > 0, cupy.int8) * 27 + 100  # 100 or 127
    b = (cupy.asarray(rng.array((64, 8192)).get() > 0, cupy.int8) * 27 + 100).T
    expected = a.astype(cupy.int64) @ b.astype(cupy.int64)
    assert int(expected.min()) > 2**24
    assert bool((xgemm.matmul(a, b) == expected).all()), f"seed {rng.seed}"


@pytest.mark.gpu
def test_int32_results_leave_staged_in_two_halves(rng):
    """int32 C goes through shared memory in two passes of half a tile's columns: out by
    TMA where its rows are 16-byte aligned (many tiles a block; a second half past C's
    last column, skipped), by the warpgroup's own stores where they are not, from
    registers when asked; the sums exact every time."""
    import cupy

    cases = [((2053, 1028, 64), {}, 1), ((300, 100, 48), {}, 1), ((300, 60, 48), {"BN": 128}, 1),
             ((517, 999, 32), {}, 2), ((517, 999, 32), {"BN": 128, "STAGES": 4}, 2),
             ((517, 1000, 32), {"TMA_STORE": 0}, 0)]
    for (m, n, k), params, store in cases:
        launch, c, expected = product(rng, m, n, k, ("int8", "int8"), variant=NAME, **params)
        assert launch.params["TMA_STORE"] == store, params
        assert bool((c == expected.astype(cupy.int32)).all()), (
            f"{m}x{n}x{k} {params}: not exact (seed {rng.seed})")
    a = quantised(rng, (3, 130, 64), "int8")
    b = quantised(rng, (64, 260), "int8", "F")  # one weight for the batch
    launch = xgemm.prepare(a, b, variant=NAME)
    assert launch.params["TMA_STORE"] == 1
    assert bool((launch() == (decoded(a, "int8") @ decoded(b, "int8")).astype(cupy.int32)).all())


@pytest.mark.gpu
@pytest.mark.parametrize("pair, out_dtype", [(("int8", "int8"), "int32"),
                                             ((E4M3, E4M3), "float16")], ids=["int8", "e4m3"])
def test_last_round_on_8_bit_operands(rng, pair, out_dtype):
    """Rung 25 over rung 18: tiles cut into pieces (few tiles over a long K, a ragged last
    round, few columns), the int32 sums exact and every result bit-identical run to run,
    FP8 with a scale per row and per column; a batch (grid z)."""
    import cupy

    name = "wgmma_8bit_last_round"
    # 3 tiles in 8 pieces; 180 tiles, the last round's 48 in 2; 8 tiles of few columns
    # in 8, and 16 of one consumer warpgroup's 64 rows; 8 tiles too short to cut
    narrow = {"BM": 64, "CONSUMERS": 1, "BN": 128, "STAGES": 6}
    for m, n, k, params in [(300, 200, 8192, {}), (2200, 1200, 1024, {"BN": 128, "STAGES": 4}),
                            (1000, 16, 8192, {"BN": 128, "STAGES": 4}), (1000, 16, 8192, narrow),
                            (129, 1000, 100, {})]:
        kwargs = {}
        if out_dtype != "int32":
            kwargs = {"scale_a": rng.array((m,)) ** 2 + 0.5, "scale_b": rng.array((n,)) ** 2 + 0.5}
        launch, c, expected = product(rng, m, n, k, pair, out_dtype, variant=name,
                                      **kwargs, **params)
        if out_dtype == "int32":
            assert bool((c == expected.astype(cupy.int32)).all()), f"{m}x{n}x{k}: not exact"
        else:
            expected = (kwargs["scale_a"].astype(cupy.float64)[:, None] * expected
                        * kwargs["scale_b"].astype(cupy.float64))
            err = frobenius_error(c, expected)
            assert err <= EIGHT_BIT_TOLERANCE[out_dtype], (
                f"{m}x{n}x{k}: error {err} (seed {rng.seed})")
        once = c.copy()
        launch()
        assert bool((c.view(cupy.uint8) == once.view(cupy.uint8)).all()), "not bit-identical"
    a = quantised(rng, (3, 130, 4096), pair[0])
    b = quantised(rng, (3, 4096, 260), pair[1], "F")
    c = xgemm.matmul(a, b, variant=name, formats=None if pair[0] == "int8" else pair,
                     out_dtype=out_dtype)
    expected = decoded(a, pair[0]) @ decoded(b, pair[1])
    assert frobenius_error(c, expected) <= EIGHT_BIT_TOLERANCE[out_dtype], f"seed {rng.seed}"


@pytest.mark.gpu
def test_pytorch_float8_tensors(rng):
    """PyTorch float8 tensors are read as they are (their dtype names the format) and agree
    with torch._scaled_mm on the same data and scales."""
    torch = pytest.importorskip("torch")

    a = torch.randn(257, 512, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(384, 512, device="cuda").to(torch.float8_e5m2)
    scale_a = torch.full((), 0.5, device="cuda")
    scale_b = torch.rand(1, 384, device="cuda") + 0.5
    c = xgemm.matmul(a, w.T, scale_a=scale_a, scale_b=scale_b)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.bfloat16
    expected = scale_a.double() * (a.double() @ w.double().T) * scale_b.double()
    err = float((c.double() - expected).norm() / expected.norm())
    assert err <= EIGHT_BIT_TOLERANCE["bfloat16"]
    scale = torch.full((), 2.0, device="cuda")  # per-tensor scales, as _scaled_mm mixes them
    ours = xgemm.matmul(a, w.T, scale_a=scale_a, scale_b=scale)
    theirs = torch._scaled_mm(a, w.T, scale_a, scale, out_dtype=torch.bfloat16)
    expected = scale_a.double() * (a.double() @ w.double().T) * scale.double()
    # _scaled_mm is cuBLASLt's FP8 GEMM: both results rounded to bfloat16, as the benchmark
    # compares a variant with cuBLAS.
    vs_cublas = float((ours.double() - theirs.double()).norm() / expected.norm())
    assert vs_cublas <= TOLERANCE["cuBLAS"]["bfloat16"]
    with pytest.raises(TypeError, match="a is a float8_e4m3fn tensor but formats names"):
        xgemm.matmul(a, w.T, formats=E5M2)


@pytest.mark.gpu
@pytest.mark.parametrize("framework", ["cupy", "torch"])
def test_scaled_plans_run_plainly_and_read_each_calls_scales(rng, framework):
    """A plan whose kernel takes scales runs by launch's plain path; calls on the same
    operands and output with other scale arrays read those, not the arguments the last
    call's addresses built; an int8 product's new int32 result holds the exact sums."""
    import cupy

    m, n, k = 130, 300, 272  # rows of K bytes TMA reads in place: no padded copy
    a, b = quantised(rng, (m, k), E4M3), quantised(rng, (k, n), E4M3, "F")
    a8, b8 = quantised(rng, (m, k), "int8"), quantised(rng, (k, n), "int8", "F")
    scales = [(rng.array((m, 1)) ** 2 + 0.5, rng.array((1, n)) ** 2 + 0.5) for _ in range(2)]
    expected = decoded(a, E4M3) @ decoded(b, E4M3)
    sums = decoded(a8, "int8") @ decoded(b8, "int8")
    c = poisoned(m, n, dtype="bfloat16")
    kw = {"formats": (E4M3, E4M3)}
    if framework == "torch":
        torch = pytest.importorskip("torch")
        fp8 = torch.float8_e4m3fn
        a, b = (torch.from_dlpack(x).view(fp8) for x in (a, b))
        a8, b8 = torch.from_dlpack(a8), torch.from_dlpack(b8)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        scales = [tuple(torch.from_dlpack(s) for s in pair) for pair in scales]
        kw = {}
    assert xgemm.prepare(a, b, out=c, scale_a=scales[0][0], scale_b=scales[0][1], **kw).plan.plain
    for scale_a, scale_b in scales * 2:  # the same addresses again after other ones
        xgemm.matmul(a, b, out=c, scale_a=scale_a, scale_b=scale_b, **kw)
        want = f64(scale_a) * expected * f64(scale_b)
        got = f64(c.double()) if framework == "torch" else c
        assert frobenius_error(got, want) <= EIGHT_BIT_TOLERANCE["bfloat16"]
    assert xgemm.prepare(a8, b8).plan.plain
    exact = xgemm.matmul(a8, b8)
    assert str(exact.dtype).endswith("int32")
    assert cupy.array_equal(cupy.asarray(exact).astype(cupy.float64), sums)


@pytest.mark.gpu
def test_what_a_plan_does_not_hold_is_checked_on_every_call(rng):
    """A plan's signature holds neither alpha nor scale numbers: a call that finds the plan
    of an int32 product, or of a float one, is still refused what those cannot take."""
    import cupy

    a, b = quantised(rng, (8, 32), "int8"), quantised(rng, (32, 16), "int8", "F")
    xgemm.matmul(a, b, scale_a=1.0)
    with pytest.raises(ValueError, match="int8 product stored as int32 is the exact sums"):
        xgemm.matmul(a, b, scale_a=2.0)
    c = cupy.zeros((8, 16), cupy.int32)
    xgemm.gemm(a, b, c)
    with pytest.raises(ValueError, match="scales and alpha other than 1 need a float output"):
        xgemm.gemm(a, b, c, alpha=2.0)
    x = rng.array((8, 32), "float16")
    xgemm.matmul(x, x.T)
    with pytest.raises(TypeError, match="scale_a and scale_b are an 8-bit product's"):
        xgemm.matmul(x, x.T, scale_a=1.0)


@pytest.mark.gpu
def test_bad_8_bit_calls_are_refused(rng):
    import cupy

    a, b = quantised(rng, (8, 32), "int8"), quantised(rng, (32, 16), "int8", "F")
    with pytest.raises(ValueError, match="int8 product stored as int32 is the exact sums"):
        xgemm.matmul(a, b, bias=cupy.zeros(16, cupy.int32))
    with pytest.raises(ValueError, match="scales and alpha other than 1 need a float output"):
        xgemm.matmul(a, b, scale_a=2.0)
    with pytest.raises(ValueError, match=r"one per row of A: shape \(8,\) or \(8, 1\)"):
        xgemm.matmul(a, b, scale_a=cupy.ones(16, cupy.float32), out_dtype="float32")
    with pytest.raises(TypeError, match="scales are float32"):
        xgemm.matmul(a, b, scale_b=cupy.ones(16, cupy.float16), out_dtype="float32")
    with pytest.raises(ValueError, match="strided"):
        xgemm.matmul(a, b, scale_b=cupy.ones(32, cupy.float32)[::2], out_dtype="float32")
    with pytest.raises(TypeError, match="scale_a is a host"):
        xgemm.matmul(a, b, scale_a=np.ones(8, np.float32), out_dtype="float32")
    x = rng.array((8, 32), "float16")
    with pytest.raises(TypeError, match="scale_a and scale_b are an 8-bit product's"):
        xgemm.matmul(x, x.T, scale_a=0.5)
