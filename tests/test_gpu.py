"""Every variant against a float64 reference on the GPU: fresh random inputs each test,
outputs poisoned with NaN first, relative Frobenius error below the dtype's tolerance
(float32: 1e-5). The tile space is walked in float32; dtypes and layouts at the
defaults, on odd shapes (tests/test_semantics.py has the numpy.matmul semantics)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    REFERENCE_TOLERANCE,
    TF32_TOLERANCE,
    auto_copies,
    b_order,
    cupy_dtype,
    f64,
    float_variants,
    frobenius_error,
    home_dtype,
    poisoned,
    relative_error,
    tma_copies,
    variant_dtypes,
)
from conftest import tolerance as tolerance_of

import xgemm

pytestmark = pytest.mark.gpu

#: float32 against float64 of the same inputs (REFERENCE_TOLERANCE["float32"]).
FLOAT32_TOLERANCE = REFERENCE_TOLERANCE["float32"]
LAYOUTS = ("NN", "NT", "TN", "TT")
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


CORNERS = [(n, p) for n in float_variants() for p in xgemm.get_variant(n).corners(home_dtype(n))]
POINTS = [(n, p) for n in float_variants() for p in xgemm.get_variant(n).points(home_dtype(n))]


def operands(rng, name, m, n, k, layout="NN", dtype=None):
    """A (M, K) and B (K, N): "N" C-ordered, "T" a transposed view (column-major). A
    variant that reads B column-major only gets B so whatever the layout says, and one
    that reads A row-major only gets such an A. The dtype
    defaults to the variant's home dtype (float32 where it takes it)."""
    v = xgemm.get_variant(name)
    dtype = dtype or home_dtype(name)
    b_layout = "F" if layout[1] == "T" else b_order(name)
    a_order = "F" if layout[0] == "T" and "col" in v.a_layouts else "C"
    a = rng.matrix(m, k, a_order, dtype)
    return a, rng.matrix(k, n, b_layout, dtype)


def check(rng, name, a, b, tolerance=None, **params):
    tolerance = tolerance or tolerance_of(name, a.dtype.name)
    c = poisoned(a.shape[0], b.shape[1], dtype=a.dtype.name)
    launch = xgemm.prepare(a, b, variant=name, out=c, **params)
    assert launch.copies == tma_copies(name, a, b)  # every layout here is read in place
    assert launch() is c
    err = relative_error(c, a, b)
    assert err < tolerance, (
        f"{name} {params} on {a.dtype} {a.shape} @ {b.shape} (strides {a.strides}, "
        f"{b.strides}): relative error {err} (seed {rng.seed})"
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


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name, dtype", variant_dtypes())
def test_dtypes_and_layouts(rng, name, layout, dtype):
    for shape in [(1, 1, 1), (37, 29, 43), (130, 67, 259), (257, 3, 97)]:
        a, b = operands(rng, name, *shape, layout=layout, dtype=dtype)
        check(rng, name, a, b)


PERSISTENT = [(n, store) for n in float_variants() if "CONSUMERS" in xgemm.get_variant(n).space
              for store in ([{"TMA_STORE": 0}, {"TMA_STORE": 1}]
                            if "TMA_STORE" in xgemm.get_variant(n).space else [{}])]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name, store", PERSISTENT,
                         ids=[f"{n}-{_params_id(s) or 'registers'}" for n, s in PERSISTENT])
def test_persistent_blocks_walk_many_tiles(rng, name, store, layout):
    """The persistent grid: 4097 x 2049, over 500 tiles on at most one block per SM, so
    each block walks several and its ring carries on from one tile to the next (K of three
    slots, on a ring of two); a few tiles, one a block; one row. C stored from registers
    and (where the rung has it) through TMA, at its two widest tiles."""
    v = xgemm.get_variant(name)
    for dtype in v.dtypes:
        # its two widest tiles at its defaults
        widest = [bn for bn in sorted(v.space["BN"], reverse=True)
                  if not v.broken_rules({**v.defaults, "BN": bn, "STAGES": 2, **store}, dtype)]
        for shape in [(4097, 2049, 129), (129, 300, 1000), (1, 64, 64)]:
            for bn in widest[:2]:
                a, b = operands(rng, name, *shape, layout=layout, dtype=dtype)
                check(rng, name, a, b, BN=bn, STAGES=2, **store)


@pytest.mark.parametrize("name", [n for n, store in PERSISTENT if store.get("TMA_STORE") != 1])
def test_k_zero_with_many_tiles_a_block(name):
    """K = 0 on a persistent grid whose blocks walk more tiles than the ring has slots:
    no tile takes a slot (a producer that filled one a tile would wait for consumers
    that never read it), and C is zeros."""
    import cupy

    dtype = cupy_dtype(home_dtype(name))
    a, b = cupy.empty((2000, 0), dtype), cupy.empty((0, 2000), dtype)
    c = poisoned(2000, 2000, dtype=dtype.name)
    # two slots (rung 34 lays out a box's phases together: one a box, then)
    spans = {"SPAN": 1} if "SPAN" in xgemm.get_variant(name).space else {}
    xgemm.matmul(a, b, variant=name, out=c, STAGES=2, **spans)
    assert bool((c == 0).all())


@pytest.mark.parametrize("k", [64, 192])
@pytest.mark.parametrize("params",
                         [{"STAGES": 4}, {"STAGES": 5}, {"BM": 64, "BN": 256, "STAGES": 4}],
                         ids=_params_id)
def test_pingpong_turns_over_short_k(rng, params, k):
    """Rung 28 where a tile takes fewer slots than the ring holds (K of one or three
    slots), so a warpgroup waiting its turn would otherwise run ahead of the other by
    more than a slot's two phases; blocks of odd and even tile counts (2049 x 4097 at
    128 x 128: 17 x 33 tiles on 132 blocks)."""
    for dtype in ("float16", "bfloat16"):
        a, b = operands(rng, "wgmma_pingpong", 2049, 4097, k, dtype=dtype)
        check(rng, "wgmma_pingpong", a, b, **params)


STAGING = [n for n in float_variants() if "TMA_STORE" in xgemm.get_variant(n).space]
# each staging rung at the tiles of these it takes: one consumer warpgroup or two; one box
# wide (one C buffer: the narrowest width auto's last-round cut gives)
STAGED_TILES = [(n, p) for n in STAGING
                for p in ({"BN": 128}, {"BM": 64, "BN": 128, "CONSUMERS": 1}, {"BN": 256},
                          {"BM": 64, "BN": 256}, {"BN": 64})
                if not xgemm.get_variant(n).broken_rules(
                    {**xgemm.get_variant(n).defaults, **p, "TMA_STORE": 1, "STAGES": 2},
                    xgemm.get_variant(n).dtypes[0])]
STAGED_IDS = [f"{n}-{_params_id(p)}" for n, p in STAGED_TILES]


@pytest.mark.parametrize("name, params", STAGED_TILES, ids=STAGED_IDS)
def test_c_leaves_through_tma(rng, name, params):
    """TMA_STORE=1: C goes through shared memory and out in TMA stores where TMA can write
    it (launch.params keeps TMA_STORE=1): edges in M and N that TMA clips (one row; N not
    a multiple of BN; an odd number of tile rows), one consumer warpgroup or two, many
    tiles a block, the biased and activated epilogue (no bias read past N), a batch.
    Where C is read (beta != 0) or wider than A and B, C leaves from registers:
    launch.params says TMA_STORE=0."""
    import cupy

    v = xgemm.get_variant(name)
    for dtype in v.dtypes:
        tol = tolerance_of(name, dtype)
        p = {**params, "TMA_STORE": 1, "STAGES": 2}
        group = 16 // cupy.dtype(cupy_dtype(dtype)).itemsize  # elements in 16 bytes
        for shape in [(1, group, 1), (127, 33 * group, 255), (4097, 257 * group, 129),
                      (64, 4096, 64)]:
            a, b = operands(rng, name, *shape, dtype=dtype)
            c = poisoned(shape[0], shape[1], dtype=dtype)
            launch = xgemm.prepare(a, b, variant=name, out=c, **p)
            assert launch.params["TMA_STORE"] == 1
            launch()
            assert relative_error(c, a, b) < tol, f"{shape}, seed {rng.seed}"
        m, n, k = 129, 35 * group, 70
        a, b = operands(rng, name, m, n, k, dtype=dtype)
        bias = rng.array((n,), dtype)
        launch = xgemm.prepare(a, b, variant=name, bias=bias, activation="relu", alpha=0.5, **p)
        assert launch.params["TMA_STORE"] == 1
        expected = cupy.maximum(0.5 * (f64(a) @ f64(b)) + f64(bias), 0)
        assert frobenius_error(launch(), expected) < tol, f"seed {rng.seed}"
        batch = rng.array((3, m, k), dtype)
        launch = xgemm.prepare(batch, b, variant=name, **p)
        assert launch.params["TMA_STORE"] == 1
        assert frobenius_error(launch(), f64(batch) @ f64(b)) < tol, f"seed {rng.seed}"
        # C that is not staged: beta != 0; a float32 C of 16-bit inputs
        c = rng.array((m, n), dtype)
        unfused = 2.0 * (f64(a) @ f64(b)) + 0.5 * f64(c)
        fallbacks = [(xgemm.prepare(a, b, variant=name, c=c, alpha=2.0, beta=0.5, **p), unfused)]
        if dtype != "float32":
            fallbacks.append((xgemm.prepare(a, b, variant=name, out_dtype="float32", **p),
                              f64(a) @ f64(b)))
        for launch, expected in fallbacks:
            assert launch.params["TMA_STORE"] == 0
            assert frobenius_error(launch(), expected) < tol, f"seed {rng.seed}"


@pytest.mark.parametrize("name, params", STAGED_TILES, ids=STAGED_IDS)
def test_c_rows_tma_cannot_write_are_stored_by_the_threads(rng, name, params):
    """Rows of C that TMA cannot write (not 16-byte aligned: an odd width, or an out= view
    starting one value in) are staged in shared memory all the same, a 16-byte line wider
    a row, and written by bulk copies and the warpgroup (launch.params says TMA_STORE=2; 0
    where even two stages leave no room for the wider rows): widths under one 16-byte
    piece and over many, edges in M, many tiles a block, the biased and activated
    epilogue, a batch."""
    import cupy

    v = xgemm.get_variant(name)
    for dtype in v.dtypes:
        tol = tolerance_of(name, dtype)
        p = {**params, "TMA_STORE": 1, "STAGES": 2}
        room = xgemm.gpu.properties(0).max_dynamic_smem
        store = 2 if v.shared_memory({**v.defaults, **p, "TMA_STORE": 2}, dtype) <= room else 0
        group = 16 // cupy.dtype(cupy_dtype(dtype)).itemsize  # elements in 16 bytes
        for shape in [(1, 1, 1), (3, group - 1, 17), (127, 33 * group + 1, 255),
                      (4097, 257 * group + 3, 129), (64, 4095, 64)]:
            a, b = operands(rng, name, *shape, dtype=dtype)
            c = poisoned(shape[0], shape[1], dtype=dtype)
            launch = xgemm.prepare(a, b, variant=name, out=c, **p)
            assert launch.params["TMA_STORE"] == store
            launch()
            assert relative_error(c, a, b) < tol, f"{shape}, seed {rng.seed}"
        m, n, k = 129, 35 * group + 5, 70
        a, b = operands(rng, name, m, n, k, dtype=dtype)
        wide = poisoned(m, n + 1, dtype=dtype)
        launch = xgemm.prepare(a, b, variant=name, out=wide[:, 1:], **p)  # rows start 2 bytes in
        assert launch.params["TMA_STORE"] == store
        launch()
        assert relative_error(wide[:, 1:], a, b) < tol, f"seed {rng.seed}"
        bias = rng.array((n,), dtype)
        launch = xgemm.prepare(a, b, variant=name, bias=bias, activation="relu", alpha=0.5, **p)
        assert launch.params["TMA_STORE"] == store
        expected = cupy.maximum(0.5 * (f64(a) @ f64(b)) + f64(bias), 0)
        assert frobenius_error(launch(), expected) < tol, f"seed {rng.seed}"
        batch = rng.array((3, m, k), dtype)
        launch = xgemm.prepare(batch, b, variant=name, **p)
        assert launch.params["TMA_STORE"] == store
        assert frobenius_error(launch(), f64(batch) @ f64(b)) < tol, f"seed {rng.seed}"


NARROW_TILES = [("wgmma", {"BN": 144}), ("wgmma", {"BN": 224, "STAGES": 3}),
                ("wgmma", {"BM": 64, "BN": 112, "CONSUMERS": 1}),
                ("wgmma", {"BM": 64, "BN": 80, "CONSUMERS": 1, "STAGES": 8}),
                ("wgmma", {"BN": 208, "TMA_STORE": 0}),
                ("wgmma_pingpong", {"BN": 112}),
                ("wgmma_pingpong", {"BM": 64, "BN": 176, "STAGES": 4})]


@pytest.mark.parametrize("layout", ["NT", "TT"])
@pytest.mark.parametrize("name, params", NARROW_TILES,
                         ids=[f"{n}-{_params_id(p)}" for n, p in NARROW_TILES])
def test_wgmma_tiles_of_any_width_in_16s(rng, name, params, layout):
    """Rungs 14 and 28 at widths in 16s (what auto cuts their tiles to where they fill the
    SMs' last round) over a column-major B: C's edge inside a tile and inside a 64-column
    box, one row, many tiles a block, staged a row at a time (a tile of part boxes:
    launch.params says TMA_STORE=2) or from registers; the biased and activated epilogue,
    a batch over one B and over a B each (SPREAD), C read."""
    import cupy

    tol = tolerance_of(name, "bfloat16")
    store = params.get("TMA_STORE", 2)
    for shape in [(1, 200, 64), (300, 1000, 333), (4097, 2049, 129)]:
        a, b = operands(rng, name, *shape, layout=layout, dtype="bfloat16")
        c = poisoned(shape[0], shape[1], dtype="bfloat16")
        launch = xgemm.prepare(a, b, variant=name, out=c, **params)
        assert launch.params["TMA_STORE"] == store
        launch()
        assert relative_error(c, a, b) < tol, f"{shape}, seed {rng.seed}"
    m, n, k = 129, 611, 70
    a, b = operands(rng, name, m, n, k, layout=layout, dtype="bfloat16")
    bias = rng.array((n,), "bfloat16")
    launch = xgemm.prepare(a, b, variant=name, bias=bias, activation="relu", alpha=0.5,
                           **params)
    expected = cupy.maximum(0.5 * (f64(a) @ f64(b)) + f64(bias), 0)
    assert frobenius_error(launch(), expected) < tol, f"seed {rng.seed}"
    batch = rng.array((3, m, k), "bfloat16")
    launch = xgemm.prepare(batch, b, variant=name, **params)
    assert frobenius_error(launch(), f64(batch) @ f64(b)) < tol, f"seed {rng.seed}"
    # three products, each its own column-major B, the SMs shared among them (grid z)
    bs = rng.array((3, n, k), "bfloat16").swapaxes(-1, -2)
    launch = xgemm.prepare(batch, bs, variant=name, **{**params, "SPREAD": 1})
    assert frobenius_error(launch(), f64(batch) @ f64(bs)) < tol, f"seed {rng.seed}"
    # C read (beta != 0): from registers
    c = rng.array((m, n), "bfloat16")
    launch = xgemm.prepare(a, b, variant=name, c=c, alpha=2.0, beta=0.5, **params)
    assert launch.params["TMA_STORE"] == 0
    expected = 2.0 * (f64(a) @ f64(b)) + 0.5 * f64(c)
    assert frobenius_error(launch(), expected) < tol, f"seed {rng.seed}"


def test_wgmma_refuses_a_width_in_16s_over_a_row_major_b(rng):
    """A row-major B arrives in 64-column boxes: BN=144 over it is refused before anything
    is compiled, naming the fix; auto cuts tiles over it in whole boxes (128 x 18944 x
    3584: 192, where a column-major B's are cut to 144)."""
    a, b = operands(rng, "wgmma", 128, 18944, 3584, layout="NN", dtype="bfloat16")
    with pytest.raises(ValueError, match="BN=144 reads B column-major only"):
        xgemm.prepare(a, b, variant="wgmma", BN=144)
    assert xgemm.prepare(a, b).params["BN"] == 192
    assert xgemm.prepare(a, b.T.copy().T).params["BN"] == 144  # the same B, column-major


def test_ragged_rows_take_a_stage_fewer_where_their_wider_staging_does_not_fit(rng):
    """128 x 128 tiles at 6 stages fill the shared memory with C staged for TMA; rows TMA
    cannot write need a 16-byte line more each, so that point runs 5 stages there (and
    launch.params says so), with the right answer; where C's rows are whole lines, 6."""
    for n, stages, store in [(1001, 5, 2), (1000, 6, 1)]:
        a, b = operands(rng, "wgmma", 300, n, 200, dtype="bfloat16")
        c = poisoned(300, n, dtype="bfloat16")
        launch = xgemm.prepare(a, b, variant="wgmma", out=c, BN=128, STAGES=6)
        assert (launch.params["STAGES"], launch.params["TMA_STORE"]) == (stages, store)
        launch()
        assert relative_error(c, a, b) < tolerance_of("wgmma", "bfloat16"), f"seed {rng.seed}"


@pytest.mark.parametrize("name", [*float_variants(), "auto"])
def test_k_zero_gives_zeros(name):
    import cupy

    dtype = cupy_dtype(home_dtype(name) if name != "auto" else "float32")
    a, b = cupy.empty((5, 0), dtype), cupy.empty((0, 7), dtype)
    if xgemm.get_variant(name if name != "auto" else "tiled").b_layouts == ("col",):
        b = cupy.empty((7, 0), dtype).T
    c = poisoned(5, 7, dtype=dtype.name)
    xgemm.matmul(a, b, variant=name, out=c)
    assert bool((c == 0).all())


@pytest.mark.parametrize("name", [*float_variants(), "auto"])
@pytest.mark.parametrize("m, n", [(0, 7), (5, 0), (0, 0)])
def test_empty_output(rng, name, m, n):
    import cupy

    dtype = cupy_dtype(home_dtype(name) if name != "auto" else "float32")
    b = cupy.ones((n, 3), dtype).T
    c = xgemm.matmul(cupy.ones((m, 3), dtype), b, variant=name)
    assert c.shape == (m, n) and c.dtype == dtype


@pytest.mark.parametrize("name", float_variants())
def test_without_out(rng, name):
    a, b = operands(rng, name, 129, 67, 93)
    c = xgemm.matmul(a, b, variant=name)
    assert c.shape == (129, 67) and relative_error(c, a, b) < tolerance_of(name, a.dtype.name)


def _layouts(rng, m, n, k, b_col_only, dtype="float32", a_row_only=False):
    """(label, a, b, copied) in layouts a caller may hand over; ``copied`` names the
    operands that must be copied (no unit stride). Column-major A only where it is read."""
    def mat(rows, cols, order="C"):
        return rng.matrix(rows, cols, order, dtype)

    def b_(rows, cols):
        return mat(rows, cols, "F" if b_col_only else "C")

    wide = mat(m, k + 9)
    yield "row slice of a wider A (lda > K)", wide[:, 3:3 + k], b_(k, n), ()
    yield "A offset by one element (unaligned)", wide[:, 1:1 + k], b_(k, n), ()
    if not a_row_only:
        yield "column-major A", mat(m, k, "F"), b_(k, n), ()
        yield "column slice of a column-major A", mat(m + 5, k, "F")[2:2 + m], b_(k, n), ()
    yield "A with a column step", mat(m, 2 * k)[:, ::2], b_(k, n), ("a",)
    yield "transposed view of B", mat(m, k), mat(n, k).T, ()
    yield "B with negative strides", mat(m, k), b_(k, n)[::-1, ::-1], ("b",)
    both = mat(m, k + n)
    if not b_col_only:
        yield "A and B from one buffer", both[:, :k], both[:k, k:k + n], ()
        yield "row-major B", mat(m, k), mat(k, n), ()


@pytest.mark.parametrize("name", float_variants())
def test_any_layout_gives_the_right_answer(rng, name):
    v = xgemm.get_variant(name)
    dtype = home_dtype(name)
    for label, a, b, copied in _layouts(rng, 67, 45, 37, "row" not in v.b_layouts, dtype,
                                        "col" not in v.a_layouts):
        c = poisoned(67, 45, dtype=dtype)
        launch = xgemm.prepare(a, b, variant=name, out=c)
        tma = tma_copies(name, a, b)  # a TMA rung also pads rows that are not 16-byte aligned
        assert launch.copies == tuple(x for x in ("a", "b") if x in copied or x in tma), label
        launch()
        err = relative_error(c, a, b)
        assert err < tolerance_of(name, dtype), f"{name}, {label}: error {err} (seed {rng.seed})"


@pytest.mark.parametrize("splits", [1, 2, 4])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_rows_of_any_length_are_read_in_place(rng, layout, splits):
    """Rung 34 reads 16-bit rows of any length and start in place, each of its eight maps
    ending where its lines end: in the arrays the operands are views of, every value
    outside the view is Inf, which a box reaching past a line would bring into the sums.
    Odd lengths; views one value in; fewer than 8 rows, columns or k's (residues with no
    line); a batch whose matrices lie whole 16 bytes apart; a bias."""
    import cupy

    def operand(rows, cols, transposed, batch, start):
        inner, outer = (rows, cols) if transposed else (cols, rows)
        step = -(-outer * (inner + 3) // 8) * 8  # values from one matrix to the next
        flat = cupy.full(batch * step, cupy.inf, dtype=cupy_dtype("bfloat16"))
        parent = cupy.lib.stride_tricks.as_strided(
            flat, (batch, outer, inner + 3), (2 * step, 2 * (inner + 3), 2))
        x = parent[..., start:start + inner]
        x[...] = rng.array(x.shape, "bfloat16")
        x = x.swapaxes(-1, -2) if transposed else x
        return x if batch > 1 else x[0]

    cases = ((67, 45, 37, 1, 0), (5, 3, 1003, 1, 1), (130, 70, 6, 1, 0), (133, 71, 99, 3, 1),
             (200, 150, 300, 1, 1))
    for m, n, k, batch, start in cases:
        a = operand(m, k, layout[0] == "T", batch, start)
        b = operand(k, n, layout[1] == "T", batch, 0)
        bias = rng.array((n,), "bfloat16")
        c = poisoned(*(batch,) * (batch > 1), m, n, dtype="bfloat16")
        launch = xgemm.prepare(a, b, variant="wgmma_any_ld", out=c, bias=bias, SPLITS=splits)
        assert launch.copies == (), (m, n, k)
        launch()
        err = frobenius_error(c, cupy.matmul(f64(a), f64(b)) + f64(bias))
        assert err < tolerance_of("wgmma_any_ld", "bfloat16"), (
            f"{m} x {n} x {k} (batch {batch}, start {start}): error {err} (seed {rng.seed})")


SKINNY = [n for n in float_variants() if "FEW_COLUMNS" in xgemm.get_variant(n).space]


@pytest.mark.parametrize("name", SKINNY)
def test_few_columns_in_every_layout_with_the_epilogue(rng, name):
    """FEW_COLUMNS=1 (C^T = B^T A^T): every layout of A and B, leading dimensions wider
    than the matrices, and gemm's bias (indexed by C's column) and beta."""
    import cupy

    dtype = home_dtype(name)
    m, n, k = 70, 5, 45
    for a_col in (False, True):
        for b_col in (False, True):
            a = rng.matrix(m + 3, k + 5, "F" if a_col else "C", dtype)[:m, :k]
            b = rng.matrix(k + 7, n + 2, "F" if b_col else "C", dtype)[:k, :n]
            c = rng.array((m, n), dtype)
            bias = rng.array((n,), dtype)
            expected = 1.5 * (f64(a) @ f64(b)) + 0.5 * f64(c) + f64(bias)
            got = xgemm.gemm(a, b, c, alpha=1.5, beta=0.5, bias=bias, variant=name,
                             FEW_COLUMNS=1)
            label = f"A {'col' if a_col else 'row'}, B {'col' if b_col else 'row'}"
            assert frobenius_error(got, expected) < tolerance_of(name, dtype), (
                f"{label} (seed {rng.seed})")
            assert isinstance(got, cupy.ndarray)


def test_layouts_read_in_place_are_not_copied(rng, monkeypatch):
    import cupy

    def no_copy(*args, **kwargs):
        raise AssertionError("an operand was copied")

    arrays = {}
    for dtype in ("float32", "float64", "float16"):
        a = rng.matrix(70, 90, dtype=dtype)[:, 5:75]  # lda = 90
        w = rng.matrix(40, 70, dtype=dtype)           # a weight stored (N, K), used as w.T
        b = rng.matrix(70, 40, dtype=dtype)
        arrays[dtype] = ((a, a.T.copy().T), (w.T, b))
    monkeypatch.setattr(cupy, "ascontiguousarray", no_copy)
    monkeypatch.setattr(cupy, "asfortranarray", no_copy)
    for name in float_variants():
        v = xgemm.get_variant(name)
        dtype = home_dtype(name)
        xs, ys = arrays[dtype]
        for x in xs:
            for y in ys:
                if ("col" if x.flags.f_contiguous else "row") in v.a_layouts and \
                        ("col" if y.flags.f_contiguous else "row") in v.b_layouts:
                    launch = xgemm.prepare(x, y, variant=name)
                    assert launch.copies == tma_copies(name, x, y), name
                    err = relative_error(launch(), x, y)
                    assert err < tolerance_of(name, dtype), name


def test_a_layout_the_variant_cannot_read_is_refused(rng):
    with pytest.raises(ValueError, match="reads b col-major only, and b is row-major.*'tiled'"):
        xgemm.matmul(rng.matrix(8, 8), rng.matrix(8, 8), variant="transposed_b")


def test_vectorized_picks_the_aligned_specialisation(rng):
    wide = rng.matrix(64, 70)
    cases = [(rng.matrix(64, 64), rng.matrix(64, 32), True),
             (rng.matrix(64, 63), rng.matrix(63, 32), False),   # K % 4 != 0
             (rng.matrix(64, 64), rng.matrix(64, 30), False),   # N % 4 != 0
             (wide[:, 1:65], rng.matrix(64, 32), False),        # A starts 4 bytes off
             (wide[:, 4:68], rng.matrix(64, 32), False),        # lda = 70
             (rng.matrix(64, 64, "F"), rng.matrix(64, 32, "F"), True),
             (rng.matrix(62, 64, "F"), rng.matrix(64, 32), False),  # M % 4 != 0, A col-major
             (rng.matrix(64, 64), rng.matrix(62, 32, "F"), False)]  # K % 4 != 0, B col-major
    for a, b, aligned in cases:
        if a.shape[1] != b.shape[0]:
            a = rng.matrix(a.shape[0], b.shape[0], "F" if a.flags.f_contiguous else "C")
        launch = xgemm.prepare(a, b, variant="vectorized")
        assert dict(launch.spec.flags)["aligned"] is aligned
        assert relative_error(launch(), a, b) < FLOAT32_TOLERANCE


def test_mma_picks_the_16_byte_specialisation(rng):
    def mat(rows, cols, order="C"):
        return rng.matrix(rows, cols, order, "float16")

    wide = mat(64, 80)
    cases = [(mat(64, 64), mat(64, 32), True),
             (mat(64, 60), mat(60, 32), False),             # K % 8 != 0 (but % 4 == 0)
             (wide[:, 4:68], mat(64, 32), False),           # A starts 8 bytes off
             (wide[:, 8:72], mat(64, 32), True),            # lda = 80, 16 bytes in
             (mat(64, 64, "F"), mat(64, 32, "F"), True),
             (mat(60, 64, "F"), mat(64, 32), False)]        # M % 8 != 0, A col-major
    for a, b, aligned in cases:
        launch = xgemm.prepare(a, b, variant="mma")
        assert dict(launch.spec.flags)["aligned16"] is aligned
        assert relative_error(launch(), a, b) < REFERENCE_TOLERANCE["float16"]


@pytest.mark.parametrize("cc, name, needs", [
    (75, "mma", "8.0 or newer"),
    (80, "wgmma", r"9.0 exactly \(it is built for sm_90a\)"),
    (100, "wgmma", r"9.0 exactly \(it is built for sm_90a\)")])
def test_a_variant_the_gpu_cannot_run_is_refused(rng, monkeypatch, fresh_plans, cc, name, needs):
    import xgemm.gpu

    monkeypatch.setattr(xgemm.gpu, "compute_capability", lambda device: cc)
    a = rng.matrix(512, 512, dtype="float16")
    with pytest.raises(ValueError, match=rf"'{name}' needs compute capability {needs};"
                                         rf" GPU \d+ has {cc / 10}: use one of .*vectorized"):
        xgemm.matmul(a, a, variant=name)
    launch = xgemm.prepare(a, a)  # auto never picks it there
    assert launch.variant.runs_on(cc)
    assert relative_error(launch(), a, a) < REFERENCE_TOLERANCE["float16"]


def test_wgmma_pads_only_rows_tma_cannot_read(rng):
    def mat(rows, cols, order="C"):
        return rng.matrix(rows, cols, order, "bfloat16")

    wide = mat(64, 80)
    cases = [(mat(64, 64), mat(64, 32), ()),
             (mat(64, 60), mat(60, 32), ("a",)),           # lda = 60: 120-byte rows
             (wide[:, 4:68], mat(64, 32), ("a",)),         # A starts 8 bytes off
             (wide[:, 8:72], mat(64, 32), ()),             # lda = 80, 16 bytes in
             (mat(64, 64, "F"), mat(64, 30, "F"), ()),      # column-major, ld 64 each
             (mat(64, 64), mat(64, 30), ("b",)),           # ldb = 30
             (mat(60, 64, "F"), mat(64, 32), ("a",))]      # column-major A, ld = 60
    for a, b, copies in cases:
        launch = xgemm.prepare(a, b, variant="wgmma")
        assert launch.copies == copies, (a.shape, a.strides, b.shape, b.strides)
        assert relative_error(launch(), a, b) < REFERENCE_TOLERANCE["bfloat16"]


def test_auto_on_few_rows(rng):
    """auto on sm_90 for few rows and long K (N = 4096): a Hopper rung (the cost model's
    pick: wgmma_rows, wgmma_splitk or wgmma), which copies only what its plan says
    (wgmma_rows reads A row-major only: a column-major A is copied first), each right;
    a 1-D A is one row."""
    if xgemm.gpu.compute_capability(0) < 90:
        pytest.skip("wgmma needs sm_90")
    b = rng.matrix(4096, 4096, dtype="float16")
    for a in (rng.matrix(16, 4096, dtype="float16"), rng.matrix(16, 4096, "F", "float16"),
              rng.array((4096,), "float16"), rng.matrix(64, 4096, dtype="float16")):
        launch = xgemm.prepare(a, b)
        assert launch.variant.name.startswith("wgmma"), a.shape
        if a.ndim == 2:
            assert launch.copies == auto_copies(launch, a, b), (a.shape, a.strides)
        c = launch()
        expected = np.matmul(f64(a).get(), f64(b).get())
        assert c.shape == expected.shape
        assert frobenius_error(c, expected) < REFERENCE_TOLERANCE["float16"], (a.shape, a.strides)


def test_auto_copies_16_bit_operands_only_for_its_pick(rng):
    """auto on Hopper, rows TMA can read or not: whichever rung the cost model picks, the
    plan copies exactly what that rung needs (a TMA rung pads rows that are not 16-byte
    multiples; mma reads any layout in place), and the product is right."""
    import xgemm.gpu

    if xgemm.gpu.compute_capability(0) < 90:
        pytest.skip("wgmma needs an sm_90 GPU")
    for (m, k, n) in ((512, 512, 512), (512, 500, 512), (1023, 1023, 1023)):
        a, b = rng.matrix(m, k, dtype="float16"), rng.matrix(k, n, dtype="float16")
        launch = xgemm.prepare(a, b)
        assert launch.copies == auto_copies(launch, a, b), (m, k, n, launch.variant.name)
        assert relative_error(launch(), a, b) < REFERENCE_TOLERANCE["float16"]
    aligned = xgemm.prepare(rng.matrix(512, 512, dtype="float16"),
                            rng.matrix(512, 512, dtype="float16"))
    assert aligned.copies == ()  # every rung reads aligned row-major operands in place


@pytest.mark.parametrize("shapes, copies", [
    (((5, 64, 48), (48, 40)), ()),
    (((64, 48), (5, 48, 40)), ()),
    (((3, 1, 64, 48), (1, 4, 48, 40)), ("a", "b")),  # no single stride walks either batch
    (((5, 64, 44), (44, 40)), ("a",)),  # a batch with 88-byte rows: padded
    (((5, 64, 48), (48, 36)), ("b",)),  # a broadcast b with 72-byte rows: padded once
    (((70_000, 8, 16), (16, 8)), ()),  # two launches (grid z at most 65535)
    (((150, 1000, 72), (150, 72, 520)), ()),  # SPREAD: one block walks a product's 24 tiles
])
@pytest.mark.parametrize("params", [{"CONSUMERS": 2}, {"CONSUMERS": 1, "BM": 64},
                                    {"CONSUMERS": 2, "SPREAD": 1}], ids=_params_id)
def test_wgmma_batches_and_broadcasts(rng, shapes, copies, params):
    import cupy

    a, b = rng.array(shapes[0], "float16"), rng.array(shapes[1], "float16")
    launch = xgemm.prepare(a, b, variant="wgmma", **params)
    assert launch.copies == copies
    if b.ndim == 2:  # a broadcast b stays one matrix (batch stride 0), padded or not
        assert launch.layouts[1].batch_stride == 0
    c = launch()
    ref = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
    assert c.shape == ref.shape
    assert frobenius_error(c, ref) < REFERENCE_TOLERANCE["float16"]


def test_tf32_only_when_asked(rng):
    """float32 runs exact unless precision="tf32" is given; then auto takes wgmma_tf32 on
    sm_90 and mma_tf32 on other GPUs from sm_80 (and on sm_90 where TMA cannot read the
    rows), whose error shows the rounding (above exact float32's, within TF32's
    tolerance). A batch that is not K-major stays exact: only single matrices are copied
    (and a batch of A's rows times one B, which is one matrix)."""
    import xgemm.gpu

    a, w = rng.matrix(512, 384), rng.matrix(256, 384)  # a @ w.T: K-major both
    exact = xgemm.prepare(a, w.T)
    assert exact.variant.precision is None
    assert relative_error(exact(), a, w.T) < FLOAT32_TOLERANCE
    batch, b = rng.array((3, 512, 384), "float32"), rng.array((3, 384, 256), "float32")
    fallback = xgemm.prepare(batch, b, precision="tf32")  # a batch of row-major b
    assert fallback.variant.precision is None and fallback.copies == ()
    assert frobenius_error(fallback(), f64(batch) @ f64(b)) < FLOAT32_TOLERANCE
    cc = xgemm.gpu.compute_capability(0)
    if cc < 80:
        pytest.skip("the TF32 rungs need an sm_80 GPU or newer")
    big, w_big = rng.matrix(2048, 2048), rng.matrix(2048, 2048)  # TF32 at 8x FP32's rate
    tf32 = xgemm.prepare(big, w_big.T, precision="tf32")
    assert tf32.variant.name == ("wgmma_tf32" if cc == 90 else "mma_tf32")
    for name in ("mma_tf32", "wgmma_tf32"):
        if xgemm.get_variant(name).runs_on(cc):
            err = relative_error(xgemm.matmul(a, w.T, variant=name), a, w.T)
            assert FLOAT32_TOLERANCE < err < TF32_TOLERANCE, (name, err)  # TF32 did round
    with pytest.raises(ValueError, match="precision='tf32' lets float32 inputs run on the TF32"):
        xgemm.matmul(a.astype("float16"), w.T.astype("float16"), precision="tf32")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(512, 256, 384), (257, 257, 383), (2049, 33, 1001)],
                         ids=_shape_id)
def test_tf32_reads_every_layout(rng, shape, layout):
    """precision="tf32" with a and b in any layout: whichever rung auto's cost model
    picks, TF32 or exact, the plan copies what that rung's transpose_first asks (a TF32
    rung reads K-major copies of an operand that is not) and nothing else, `copies`
    names it, and with a bias and an activation the result is within TF32's tolerance.
    K of 383 or 1001 floats: rows TMA cannot read, so no TMA rung."""
    import cupy

    import xgemm.gpu

    if xgemm.gpu.compute_capability(0) < 80:
        pytest.skip("the TF32 rungs need an sm_80 GPU or newer")
    m, n, k = shape
    a = rng.matrix(m, k) if layout[0] == "N" else rng.matrix(k, m).T
    b = rng.matrix(k, n) if layout[1] == "N" else rng.matrix(n, k).T
    bias = rng.array((n,), "float32")
    launch = xgemm.prepare(a, b, precision="tf32", bias=bias, activation="relu")
    assert launch.copies == auto_copies(launch, a, b), launch.variant.name
    if launch.variant.tma:  # a TMA rung reads only copies whose rows it can read
        assert k % 4 == 0
    expected = cupy.maximum(f64(a) @ f64(b) + f64(bias), 0)
    assert frobenius_error(launch(), expected) < TF32_TOLERANCE, f"seed {rng.seed}"


@pytest.mark.parametrize("name, dtype", variant_dtypes(["float16", "bfloat16"]))
def test_float32_output_of_16_bit_inputs(rng, name, dtype):
    """out_dtype="float32" (or a float32 out / c) keeps the float32 sums unrounded: the
    error against float64 of the rounded inputs is float32's, not the 16-bit type's."""
    import cupy

    for shape in [(67, 45, 37), (128, 64, 96)]:
        a, b = operands(rng, name, *shape, dtype=dtype)
        c = xgemm.matmul(a, b, variant=name, out_dtype="float32")
        assert c.dtype == cupy.float32
        assert relative_error(c, a, b) < FLOAT32_TOLERANCE, (name, shape)
        out = poisoned(shape[0], shape[1])
        bias = rng.array((shape[1],))
        launch = xgemm.prepare(a, b, variant=name, out=out, bias=bias)
        assert launch.spec.out_dtype == "float32" and launch() is out
        expected = f64(a) @ f64(b) + f64(bias)
        assert frobenius_error(out, expected) < FLOAT32_TOLERANCE, (name, shape)
        c0 = rng.array(shape[:2])
        expected = 2.0 * (f64(a) @ f64(b)) + 0.5 * f64(c0)
        xgemm.gemm(a, b, c0, alpha=2.0, beta=0.5, variant=name)
        assert frobenius_error(c0, expected) < FLOAT32_TOLERANCE, (name, shape)


def test_float32_output_of_a_batch_over_one_launch(rng):
    """The second launch of a 70000-product batch writes C at float32 offsets."""
    import cupy

    a, b = rng.array((70_000, 2, 3), "float16"), rng.array((70_000, 3, 2), "float16")
    launch = xgemm.prepare(a, b, variant="tiled", out_dtype="float32")
    assert len(launch.grids) == 2
    c = launch()
    assert c.dtype == cupy.float32
    assert frobenius_error(c, f64(a) @ f64(b)) < FLOAT32_TOLERANCE


def test_second_call_compiles_nothing(rng):
    from xgemm.compile import kernel_cache_info

    a, b = rng.matrix(50, 60), rng.matrix(60, 70)
    xgemm.matmul(a, b, variant="coarse2d", BM=64, BN=64, TM=4, TN=4, BK=8)
    before = kernel_cache_info()
    xgemm.matmul(a[:20], b[:, :30], variant="coarse2d", BM=64, BN=64, TM=4, TN=4, BK=8)
    after = kernel_cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 1


def test_out_is_checked(rng):
    import cupy

    a, b = rng.matrix(8, 6), rng.matrix(6, 4)
    with pytest.raises(ValueError, match=r"out has shape \(4, 8\); a @ b has shape \(8, 4\)"):
        xgemm.matmul(a, b, out=cupy.empty((4, 8), cupy.float32))
    with pytest.raises(TypeError, match="out has dtype float64"):
        xgemm.matmul(a, b, out=cupy.empty((8, 4), cupy.float64))
    with pytest.raises(TypeError, match="out must be a CuPy array"):
        xgemm.matmul(a, b, out=a.get())


@pytest.mark.parametrize("label", ["F-ordered", "column step", "row slice"])
def test_out_in_any_layout(rng, label):
    import cupy

    a, b = rng.matrix(33, 20), rng.matrix(20, 17)
    base = {"F-ordered": lambda: cupy.full((17, 33), cupy.nan, cupy.float32).T,
            "column step": lambda: cupy.full((33, 34), cupy.nan, cupy.float32)[:, ::2],
            "row slice": lambda: cupy.full((33, 40), cupy.nan, cupy.float32)[:, 3:20]}[label]()
    assert xgemm.matmul(a, b, variant="coarse2d", out=base) is base
    assert relative_error(base, a, b) < FLOAT32_TOLERANCE

