"""The plan cache and the per-call path: a signature's plan is built once and found
again; what changes a kernel or its arguments changes the signature; each call makes its
own copies, outputs and workspaces on its own stream; a call can be captured in a CUDA
graph; PyTorch tensors in give PyTorch tensors out, on PyTorch's stream."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import (
    REFERENCE_TOLERANCE,
    auto_copies,
    f64,
    frobenius_error,
    poisoned,
    relative_error,
)

import xgemm
from xgemm import plan as planning
from xgemm.registry import Variant

gpu = pytest.mark.gpu


# -- no GPU needed -----------------------------------------------------------------------
def test_the_cache_is_bounded_and_drops_a_plan_not_looked_up_lately():
    cache = planning.PlanCache(size=3)
    for key in "abc":
        cache.put(key, key.upper())
    assert cache.get("a") == "A"  # looked up: passed over once
    cache.put("d", "D")
    assert cache.get("b") is None and [cache.get(k) for k in "acd"] == ["A", "C", "D"]
    assert len(cache) == 3 and (cache.hits, cache.misses) == (4, 1)
    cache.put("e", "E")  # every plan looked up since (c, a, d): c goes, never the new one
    assert cache.get("c") is None and [cache.get(k) for k in "ade"] == ["A", "D", "E"]


def test_a_variant_declares_its_extra_arguments():
    wgmma = xgemm.get_variant("wgmma")
    assert wgmma.extra_args == ("tensor_map_a", "tensor_map_b", "tensor_map_c") and wgmma.tma
    assert wgmma.tma_box("c", {**wgmma.defaults, "CONSUMERS": 2}) == wgmma.defaults["BM"] // 2
    assert wgmma.tma_box("c", {**wgmma.defaults, "TMA_STORE": 0}) == 0
    assert wgmma.tma_box("c", {**wgmma.defaults, "TMA_STORE": 2}) == 0  # the threads store C
    assert xgemm.get_variant("splitk").extra_args == ("partials", "arrivals")
    assert not xgemm.get_variant("pipelined").extra_args  # the same template, one split
    with pytest.raises(ValueError, match="unknown extra arguments \\['workspace'\\]"):
        Variant(name="x", template="gemm/03_tiled.cu.j2", adds="", defaults={}, space={},
                constraints=[], block=("1",), grid=("1",), extra_args=("workspace",))


@pytest.mark.parametrize(("layout", "promoted"), [("NT", (256, 256, 128)), ("NN", (256, 128, 128)),
                                                  ("TN", (128, 128, 128))])
def test_tensor_maps_promote_256_bytes_only_along_k(layout, promoted):
    """A's and B's maps whose lines run along K promote 256 bytes to L2 (the next phase's
    128 bytes of each line come with this one's); maps along M or N, and C's, 128."""
    import numpy as np

    from xgemm.checks.arguments import Layout, Shapes
    from xgemm.extras import extra_arg

    v = xgemm.get_variant("wgmma")
    m, n, k = 256, 512, 1024
    shapes = Shapes((), m, n, k, (m, n), False, False)
    a_col, b_col = layout[0] == "T", layout[1] == "T"
    layouts = (Layout(a_col, m if a_col else k, 0), Layout(b_col, k if b_col else n, 0),
               Layout(False, n, 0))
    arrays = tuple(np.empty(1, np.float16) for _ in range(3))  # only their dtype is read
    args = [extra_arg(name, v, dict(v.defaults), shapes, arrays, layouts, (0, 0, 0), 0, 1,
                      (0, 0), (0, 0)) for name in v.extra_args]
    assert tuple(arg.geometry[-1] for arg in args) == promoted


def test_choice_is_cached_per_gpu_not_per_device_number():
    """Planning offline as one GPU, then another (``gpu.standing_in``, as the replay tools
    do over files of two GPUs), asks each afresh: device 0 is not the same GPU twice."""
    from xgemm import gpu
    from xgemm.choice import choose

    wide = {"gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "sm_count": 132}
    splits = []
    for sms in (132, 16):  # 64 tiles of 16 x 64: two splits on 132 SMs, one on 16
        with gpu.standing_in({**wide, "sm_count": sms}):
            splits.append(choose(16, 4096, 4096, "float16", 0)[1]["SPLITS"])
    assert splits == [2, 1]


def test_heuristic_sizes_tiles_by_the_gpus_multiprocessors():
    from xgemm.choice import heuristic

    # 2048^2 in 128 x 256 tiles is 128 tiles: under two per SM of 132, not of 16
    assert heuristic(2048, 2048, 2048, sms=132)[1]["BN"] == 128
    assert heuristic(2048, 2048, 2048, sms=16)[1]["BN"] == 256
    assert heuristic(1024, 1024, 1024, "float16", 90, sms=132)[1]["BN"] == 128
    assert heuristic(1024, 1024, 1024, "float16", 90, sms=16)[1]["BN"] == 256
    # 16 bits, one product: 128 x 128 tiles at 6 stages where they fill three quarters of a
    # round or more (128 x 14336: 112 of them); fewer (1024 x 1536: 96), or a batch, 64 x 128
    # at 8 stages
    def tile(m: int, n: int, batch: int = 1) -> tuple:
        params = heuristic(m, n, 4096, "bfloat16", 90, sms=132, batch=batch)[1]
        return params["BM"], params["BN"], params["STAGES"]

    assert tile(128, 14336) == (128, 128, 6)
    assert tile(1024, 1536) == (64, 128, 8)
    assert tile(128, 7168, batch=2) == (64, 128, 8)
    # 1024^2 in 128 x 128 tiles is 64: under 1.5 per SM of 132, so 64 x 128 tiles
    assert heuristic(1024, 1024, 2048, sms=132)[1]["BM"] == 64
    assert heuristic(1024, 1024, 2048, sms=16)[1]["BM"] == 128
    # float64 1024^2 in 64 x 128 tiles is 128: fewer than 132 SMs, so 64 x 64 tiles
    assert heuristic(1024, 1024, 1024, "float64", 90, sms=132)[1]["BN"] == 64
    assert heuristic(1024, 1024, 1024, "float64", 90, sms=16)[1]["BN"] == 128
    # 16 bits: 8192 x 512 in 128 x 256 tiles is 128 tiles, most of a round of 132 SMs:
    # kept, at four stages; TF32 takes 128 x 128 tiles there
    assert {k: v for k, v in heuristic(8192, 512, 2048, "bfloat16", 90, sms=132)[1].items()
            if k in ("BM", "BN", "STAGES")} == {"BM": 128, "BN": 256, "STAGES": 4}
    assert heuristic(8192, 512, 2048, "float32", 90, "tf32", sms=132)[1]["BN"] == 128
    # a batch counts all its tiles: 16 x 1024^2 keeps 128 x 256 tiles (512 of them)
    assert heuristic(1024, 1024, 1024, "float16", 90, batch=16)[1]["BN"] == 256
    # a phase a tile (K = 64): the batch's products share the SMs; one product keeps its
    # 128 x 256 tiles
    assert heuristic(1024, 1024, 64, "float16", 90, batch=64)[1]["SPREAD"] == 1
    assert {k: v for k, v in heuristic(8192, 8192, 8, "bfloat16", 90, sms=132)[1].items()
            if k in ("BN", "SPREAD")} == {"BN": 256, "SPREAD": 0}
    # at most 32 rows and long K: A's rows as wgmma's n (wgmma_rows); below the tiles that
    # fill the SMs unsplit, 64 columns a tile while two blocks a tile fit in the SMs, else
    # 128; K split in two, or in four where that leaves under a block per two SMs
    name, params = heuristic(16, 4096, 4096, "float16", 90, sms=132)
    assert (name, params["BM"], params["BN"], params["SPLITS"]) == ("wgmma_rows", 16, 64, 2)
    assert heuristic(16, 4096, 4096, "float16", 90, sms=16)[1]["SPLITS"] == 1  # 64 tiles, 16 SMs
    assert heuristic(16, 1024, 4096, "float16", 90, sms=132)[1]["SPLITS"] == 4
    # where its tiles of 64 columns (32 rows: 128) fill three quarters of the SMs, no split
    name, params = heuristic(1, 18944, 3584, "bfloat16", 90, sms=132)
    assert (name, params["BM"], params["BN"], params["SPLITS"]) == ("wgmma_rows", 16, 64, 1)
    assert {k: heuristic(32, 14336, 4096, "bfloat16", 90, sms=132)[1][k]
            for k in ("BM", "BN", "SPLITS")} == {"BM": 32, "BN": 128, "SPLITS": 1}
    assert {k: heuristic(1, 6272, 4096, "bfloat16", 90, sms=132)[1][k]  # 98 tiles of 64
            for k in ("BN", "SPLITS")} == {"BN": 128, "SPLITS": 2}
    assert heuristic(1, 4096, 4096, "float16", 90)[0] == "wgmma_rows"  # under 2^16 outputs
    # K from 2048 at up to 16 rows; 17-32 rows from 4096
    assert heuristic(16, 18944, 2048, "bfloat16", 90)[0] == "wgmma_rows"
    assert heuristic(32, 18944, 2048, "bfloat16", 90)[0] != "wgmma_rows"
    # at most 64 rows over K >= 2048: rung 28's 64 x 256 tiles where they fill half the SMs
    # (74 of them at 18944 columns, 64 at 16384: 64 x 128 there; K = 1024: 64 x 128)
    for m, n, k, expected in ((32, 18944, 2048, ("wgmma_pingpong", 256)),
                              (64, 18944, 8192, ("wgmma_pingpong", 256)),
                              (32, 16384, 2048, ("wgmma", 128)),
                              (32, 18944, 1024, ("wgmma", 128))):
        name, params = heuristic(m, n, k, "bfloat16", 90, sms=132)
        assert (name, params["BN"]) == expected, (m, n, k)
    assert heuristic(32, 18944, 2048, "bfloat16", 90, batch=2)[0] == "wgmma"  # a batch
    assert heuristic(16, 18944, 1024, "bfloat16", 90)[0] == "wgmma"
    assert heuristic(16, 4096, 4096, "float16", 90, batch=4)[0] == "wgmma"  # a batch
    # a few rows more: one m64 warpgroup; with long K and 64 tiles, at most half of 132
    # SMs, K split in two (wgmma_splitk); half of 16 SMs they would not fit
    assert heuristic(64, 4096, 4096, "float16", 90, sms=16)[1]["BM"] == 64
    name, params = heuristic(64, 4096, 4096, "float16", 90, sms=132)
    assert (name, params["BM"], params["SPLITS"]) == ("wgmma_splitk", 64, 2)
    assert heuristic(64, 4096, 2048, "float16", 90, sms=132)[0] == "wgmma"  # shorter K
    # 65-128 rows from K = 65536, where 128 x 64 tiles in two splits fill half the SMs:
    # 128 x 128 tiles in four (as many blocks); shorter K, or fewer tiles, keep two
    def splitk(m: int, n: int, k: int) -> tuple:
        name, params = heuristic(m, n, k, "bfloat16", 90, sms=132)
        return name, params["BM"], params["BN"], params["SPLITS"]

    assert splitk(128, 3584, 152064) == ("wgmma_splitk", 128, 128, 4)
    assert heuristic(128, 3584, 152064, "bfloat16", 90, sms=132)[1]["STAGES"] == 6
    assert splitk(72, 2112, 65536) == ("wgmma_splitk", 128, 128, 4)  # 33 x 2 blocks
    assert splitk(128, 3584, 65535)[2:4] == (64, 2)
    assert splitk(128, 2048, 152064)[2:4] == (64, 2)  # 32 x 2 blocks, under half of 132
    assert splitk(64, 3584, 152064)[1:4] == (64, 64, 2)  # 64 rows: 64 x 64 tiles



def test_few_columns_take_rung_36_from_a_shorter_k_and_unsplit_tiles_by_rounds():
    """Few columns with B column-major: rung 36 from K = 1024 (few rows keep 2048 and
    4096), unsplit below the rows' thresholds. Unsplit, rungs 17 and 36 take 128-wide
    tiles where those leave the busiest SM no more to walk than 64-wide ones; 17-32 rows
    or columns take 64-wide unsplit tiles where those fill a round and 128-wide ones do not."""
    from xgemm.choice import heuristic

    def point(m: int, n: int, k: int, **kw) -> tuple:
        name, params = heuristic(m, n, k, "bfloat16", 90, sms=132, **kw)
        return name, params.get("BM"), params.get("BN"), params.get("SPLITS")

    assert point(6648, 7, 1720, b_col_major=True) == ("wgmma_columns", 16, 64, 1)
    assert point(2376, 32, 1080, b_col_major=True) == ("wgmma_columns", 16, 64, 1)
    assert point(7, 6648, 1720)[0] != "wgmma_rows"  # rows: from 2048
    assert point(6648, 7, 1000, b_col_major=True)[0] != "wgmma_columns"
    assert point(9576, 9, 5496, b_col_major=False)[0] != "wgmma_columns"  # B row-major
    # 150 tiles of 64 (two rounds of 132 SMs) against 75 of 128 (one): 128
    assert point(9576, 9, 5496, b_col_major=True) == ("wgmma_columns", 16, 128, 1)
    assert point(9, 9576, 5496) == ("wgmma_rows", 16, 128, 1)
    assert point(6368, 25, 3328, b_col_major=True) == ("wgmma_columns", 32, 128, 1)
    # 132 tiles of 64 (one round); 296 (three rounds) against 148 of 128 (two): 64
    assert point(8448, 8, 9184, b_col_major=True) == ("wgmma_columns", 16, 64, 1)
    assert point(18944, 1, 3584, b_col_major=True) == ("wgmma_columns", 16, 64, 1)
    # 17-32 columns (rows) over a long K: 64 tiles of 128 (under three quarters of the SMs),
    # 128 of 64 (one round): 64 wide, unsplit; 150 of 64 (two rounds): 128 wide, split
    assert point(8192, 32, 8192, b_col_major=True) == ("wgmma_columns", 32, 64, 1)
    assert point(32, 8192, 8192) == ("wgmma_rows", 32, 64, 1)
    assert point(9600, 32, 8192, b_col_major=True) == ("wgmma_columns", 32, 128, 2)


def test_a_variant_declares_which_operands_auto_transposes_first():
    v = xgemm.get_variant("pipelined")
    p = v.resolve({"BM": 64, "BN": 128, "WM": 32, "WN": 64, "STAGES": 2})
    # A: where the grid has at most two tiles per SM (128 of 64 x 128 at 1024^2), unless
    # the product is tiny
    assert v.transposed_into("a", p, 1024, 1024, 1024) == "col"
    assert v.transposed_into("a", p, 4096, 4096, 4096) is None
    assert v.transposed_into("a", p, 64, 4096, 64) is None
    # B: from 1024 rows of C on, where K or the product is long enough to pay the copy back
    assert [v.transposed_into("b", p, m, 4096, 4096) for m in (1024, 1023)] == ["row", None]
    assert [v.transposed_into("b", p, 9000, 800, k) for k in (40, 600, 2048)] == [
        None, "row", "row"]
    assert v.transposed_into("b", p, 1100, 200, 1024) is None
    splitk = xgemm.get_variant("splitk")  # the same rule
    assert splitk.transposed_into("b", splitk.defaults, 9000, 800, 40) is None
    assert xgemm.get_variant("wgmma").transposed_into("b", {}, 4096, 4096, 4096) is None
    # rung 36's B^T: a row-major B copied from 2^25 values of A, from 2^24 where B's rows are
    # not whole 16-byte lines (which other TMA rungs pad a copy of anyway)
    columns = xgemm.get_variant("wgmma_columns")
    assert [columns.transposed_into("b", columns.defaults, m, n, k) for m, n, k in (
        (4096, 5, 4096), (4096, 8, 4096), (4096, 8, 8192), (2048, 5, 4096))] == [
        "col", None, "col", None]
    with pytest.raises(ValueError, match="transpose_first takes 'a' or 'b' into 'row' or 'col'"):
        Variant(name="x", template="gemm/03_tiled.cu.j2", adds="", defaults={}, space={},
                constraints=[], block=("1",), grid=("1",), transpose_first={"c": ("row", "1")})


def test_by_value_arguments_hold_their_values_at_their_alignment():
    import ctypes

    from xgemm.kernel_args import packed

    values = (-7, 0.5, 3, 2**40, 2.5)
    args = packed("idiqf", values)
    kinds = (ctypes.c_int32, ctypes.c_double, ctypes.c_int32, ctypes.c_int64, ctypes.c_float)
    assert [kind.from_address(arg.address).value for kind, arg
            in zip(kinds, args, strict=True)] == [-7, 0.5, 3, 2**40, 2.5]
    assert all(arg.address % ctypes.sizeof(kind) == 0
               for arg, kind in zip(args, kinds, strict=True))


def test_launch_arguments_point_at_each_parameter_in_order():
    """cuLaunchKernel reads parameter i from the address at index i: device addresses
    stored as 8 bytes, by-value arguments where they lie."""
    import ctypes

    from xgemm.kernel_args import Arguments, packed

    sizes = packed("iq", (17, -2**35))
    args = Arguments([0x7F0000001000, sizes[0], 0, sizes[1]])
    table = (ctypes.c_void_p * 4).from_address(args.address)
    assert [ctypes.c_uint64.from_address(table[0]).value, ctypes.c_int32.from_address(
        table[1]).value, ctypes.c_uint64.from_address(table[2]).value,
        ctypes.c_int64.from_address(table[3]).value] == [0x7F0000001000, 17, 0, -2**35]


# -- on the GPU ------------------------------------------------------------------------------
@pytest.fixture
def counted(fresh_plans):
    """The plan cache's (hits, misses) since the last call of the returned function."""
    seen = [planning.PLANS.hits, planning.PLANS.misses]

    def since() -> tuple[int, int]:
        now = [planning.PLANS.hits, planning.PLANS.misses]
        delta = (now[0] - seen[0], now[1] - seen[1])
        seen[:] = now
        return delta

    return since


@gpu
def test_a_signature_is_planned_once(rng, counted, monkeypatch):
    """The second call with a signature finds its plan: nothing is checked or planned
    again (planning is made to fail), and the fresh operands give the right answer."""
    a, b = rng.matrix(70, 50), rng.matrix(50, 30)
    xgemm.matmul(a, b)
    assert counted() == (0, 1)

    def refuse(*args, **kwargs):
        raise AssertionError("planned again")

    monkeypatch.setattr("xgemm.api.build", refuse)
    for _ in range(3):
        a, b = rng.matrix(70, 50), rng.matrix(50, 30)
        assert relative_error(xgemm.matmul(a, b), a, b) < REFERENCE_TOLERANCE["float32"]
    assert counted() == (3, 0)


def test_pytorch_operands_keyed_inline_as_array_key_keys_them():
    """call_key keys two PyTorch tensors inline (the common call) and others one by one:
    both hold what ``array_key`` holds (shape, strides, dtype, alignment, device)."""
    torch = pytest.importorskip("torch")
    from xgemm.signature import array_key, call_key

    wide = torch.randn(64, 53)
    pairs = [(wide[:, :48], torch.randn(48, 40)),                  # lda 53, row-major b
             (wide[:, 1:49], torch.randn(40, 48).T),               # 4 bytes off, b a w.T
             (torch.randn(48, 64).T, torch.nn.Parameter(torch.randn(48, 40)))]  # two types
    for a, b in pairs:
        key = call_key(a, b, None, "out", None, "auto", {}, None, None, None, False)
        assert key[:2] == (array_key(a), array_key(b))
    assert call_key(*pairs[0], None, "out", None, "auto", {}, None, None, None, False) != \
        call_key(*pairs[1], None, "out", None, "auto", {}, None, None, None, False)


@gpu
def test_what_changes_the_kernel_or_its_arguments_changes_the_plan(rng, counted):
    """After a plan for C-ordered 64 x 48 @ 48 x 40: the same shapes with other strides (a
    transposed view, a slice of a wider array, one 4 bytes off alignment), a broadcast
    batch against a full one, an out that overlaps an input and one that does not, with
    and without bias, each plan anew and each gives the right answer."""
    import cupy

    def check(a, b, **kw):
        c = xgemm.matmul(a, b, variant="vectorized", **kw)
        assert frobenius_error(c, f64(a) @ f64(b) + (f64(kw["bias"]) if "bias" in kw else 0)
                               ) < REFERENCE_TOLERANCE["float32"]
        return c

    a, b = rng.matrix(64, 48), rng.matrix(48, 40)
    check(a, b)
    assert counted() == (0, 1)
    check(rng.matrix(64, 48), rng.matrix(48, 40))
    assert counted() == (1, 0)
    wide = rng.matrix(64, 53)
    variants = [(rng.matrix(64, 48, "F"), b),     # column-major a
                (wide[:, :48], b),                # lda 53
                (wide[:, 1:49], b),               # lda 53, 4 bytes off 16-byte alignment
                (wide[:, 4:52], b)]               # lda 53, 16 bytes in
    launches = [xgemm.prepare(x, y, variant="vectorized") for x, y in variants]
    assert counted() == (0, 4)
    assert [dict(launch.spec.flags)["aligned"] for launch in launches] == [True] + [False] * 3
    for launch, (x, y) in zip(launches, variants, strict=True):
        assert relative_error(launch(), x, y) < REFERENCE_TOLERANCE["float32"]
    batch = rng.array((3, 64, 48))
    check(batch, b)                                # b broadcast: batch stride 0
    check(batch, rng.array((3, 48, 40)))           # b a batch of its own
    check(batch, rng.array((1, 48, 40)))           # a batch of one, broadcast
    assert counted() == (0, 3)
    check(a, b, bias=rng.array((40,)))
    assert counted() == (0, 1)
    buffer = rng.matrix(128, 96)
    x, y = buffer[:64, :48], rng.matrix(48, 40)
    expected = f64(x) @ f64(y)
    out = buffer[64:, 8:48]  # no byte in x's span: written in place
    xgemm.matmul(x, y, variant="vectorized", out=out)
    assert frobenius_error(out, expected) < REFERENCE_TOLERANCE["float32"]
    overlapping = buffer[:64, 8:48]  # the same strides and alignment, over x: staged
    xgemm.matmul(x, y, variant="vectorized", out=overlapping)
    assert frobenius_error(overlapping, expected) < REFERENCE_TOLERANCE["float32"]
    assert counted() == (0, 2)
    assert cupy.cuda.runtime.getDevice() == 0


@gpu
def test_a_plan_reuses_its_arguments_only_for_the_same_addresses_and_scalars(rng):
    """A plan keeps the last call's launch arguments for the next call with the same
    addresses, alpha and beta: other arrays, another alpha, values changed in place, and
    an output the memory pool hands back each get the right answer, TMA maps included."""
    import cupy

    for name, dtype in (("vectorized", "float32"), ("wgmma", "float16")):
        if name == "wgmma" and cupy.cuda.Device().compute_capability != "90":
            continue
        a, b = rng.matrix(96, 64, dtype=dtype), rng.matrix(64, 80, dtype=dtype)
        c = poisoned(96, 80, dtype=dtype)
        for alpha in (1.0, 1.0, -2.0, -2.0, 1.0):
            a[:3] = rng.matrix(3, 64, dtype=dtype)  # new values, the same address
            xgemm.gemm(a, b, c, alpha=alpha, variant=name)
            assert frobenius_error(c, alpha * (f64(a) @ f64(b))) < REFERENCE_TOLERANCE[dtype]
        for _ in range(3):  # new inputs; a freed output's address comes back from the pool
            a, b = rng.matrix(96, 64, dtype=dtype), rng.matrix(64, 80, dtype=dtype)
            err = relative_error(xgemm.matmul(a, b, variant=name), a, b)
            assert err < REFERENCE_TOLERANCE[dtype]


@gpu
@pytest.mark.parametrize("m, n, k", [(1024, 1024, 256), (1031, 1029, 257)])
def test_auto_transposes_an_operand_into_its_fast_layout_first(rng, m, n, k):
    """auto on float32 with a column-major b (w.T): the operands its pick's
    transpose_first moves (pipelined: a row-major a where the grid has few tiles, a
    column-major b from 1024 rows of C) are copied by the transpose kernel first and
    named in copies; the product is right with the epilogue and with beta, aligned or
    not; a named variant reads them in place."""
    import cupy

    a, w = rng.matrix(m, k), rng.matrix(n, k)  # b = w.T: column-major
    bias = rng.array((n,))
    launch = xgemm.prepare(a, w.T, bias=bias, activation="relu")
    assert launch.copies == auto_copies(launch, a, w.T), launch.variant.name
    assert launch.layouts[0].col == ("a" in launch.copies)
    assert launch.layouts[1].col == ("b" not in launch.copies)
    out = launch()
    expected = cupy.maximum(f64(a) @ f64(w).T + f64(bias), 0)
    assert frobenius_error(out, expected) < REFERENCE_TOLERANCE["float32"]
    c = rng.matrix(m, n)
    expected = 2 * (f64(a) @ f64(w).T) - 0.5 * f64(c)
    xgemm.gemm(a, w.T, c, alpha=2.0, beta=-0.5)
    assert frobenius_error(c, expected) < REFERENCE_TOLERANCE["float32"]
    assert xgemm.prepare(a, w.T, "pipelined").copies == ()
    b = rng.matrix(k, n)  # row-major
    row_major_b = xgemm.prepare(a, b)
    assert row_major_b.copies == auto_copies(row_major_b, a, b)
    c = xgemm.matmul(a, b, out=poisoned(m, n))
    assert relative_error(c, a, b) < REFERENCE_TOLERANCE["float32"]


@gpu
def test_a_pool_of_threads_calling_with_mixed_shapes(rng, fresh_plans):
    """Eight threads, 240 calls over six signatures (three dtypes, auto and named
    variants, a batch, an epilogue), plans built and found concurrently: every result
    right."""
    cases = [((130, 70), (70, 90), "float32", {}),
             ((64, 64), (64, 64), "float16", {"variant": "mma"}),
             ((4, 33, 20), (20, 17), "float32", {"variant": "tiled"}),
             ((300, 256), (256, 512), "bfloat16", {}),
             ((100, 1000), (1000, 60), "float32", {"variant": "splitk", "SPLITS": 4}),
             ((257, 129), (129, 65), "float16", {"activation": "relu"})]
    inputs = [(rng.array(sa, dtype), rng.array(sb, dtype), kw) for sa, sb, dtype, kw in cases]

    def call(i: int) -> float:
        a, b, kw = inputs[i % len(inputs)]
        c = xgemm.matmul(a, b, **kw)
        expected = f64(a) @ f64(b)
        if kw.get("activation") == "relu":
            expected = expected * (expected > 0)
        return frobenius_error(c, expected) / REFERENCE_TOLERANCE[a.dtype.name]

    with ThreadPoolExecutor(max_workers=8) as pool:
        errors = list(pool.map(call, range(240)))
    assert max(errors) < 1, f"worst error {max(errors)} of the tolerance (seed {rng.seed})"


@gpu
@pytest.mark.parametrize("name, dtype, k", [
    ("auto", "float32", 192), ("tiled", "float64", 192), ("wgmma", "float16", 192),
    ("wgmma", "float16", 190),  # 380-byte rows: both operands padded for TMA by the pad kernel
    ("splitk", "float32", 192)])
def test_a_call_captured_in_a_cuda_graph_replays(rng, name, dtype, k):
    """matmul on a CuPy stream, captured in a CUDA graph: nothing in the call waits for
    the GPU or copies to the host (a capture refuses both), and the replay computes with
    the values the inputs hold then."""
    import cupy

    if name == "wgmma" and xgemm.gpu.compute_capability(0) != 90:
        pytest.skip("wgmma needs an sm_90 GPU")
    a, b = rng.array((256, k), dtype), rng.array((k, 128), dtype)
    out = poisoned(256, 128, dtype=dtype)
    # made on the default stream, which a non-blocking stream does not wait for
    cupy.cuda.get_current_stream().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        xgemm.matmul(a, b, variant=name, out=out)  # plans and compiles outside the capture
        stream.begin_capture()
        xgemm.matmul(a, b, variant=name, out=out)
        graph = stream.end_capture()
        a[...] = rng.array((256, k), dtype)  # new values, same memory
        out.fill(cupy.nan)
        graph.launch(stream)
    stream.synchronize()
    assert frobenius_error(out, f64(a) @ f64(b)) < REFERENCE_TOLERANCE[dtype]


@gpu
@pytest.mark.parametrize("name, dtype, k", [
    ("splitk", "float32", 192),  # split-K's partials and counters, made for the graph
    ("wgmma", "float16", 190)])  # A and B padded for TMA into copies made for the graph
def test_a_call_captured_by_pytorch_replays(name, dtype, k):
    """matmul of PyTorch tensors captured by torch.cuda.graph, which captures in global
    mode (where cudaMalloc is refused), from an emptied CuPy pool: the workspace the
    call makes for the graph is allocated all the same, and the replay is right."""
    import cupy

    torch = pytest.importorskip("torch")
    if name == "wgmma" and xgemm.gpu.compute_capability(0) != 90:
        pytest.skip("wgmma needs an sm_90 GPU")
    t = getattr(torch, dtype)
    a = torch.randn(256, k, device="cuda", dtype=t)
    b = torch.randn(k, 128, device="cuda", dtype=t)
    xgemm.matmul(a, b, variant=name)  # plans and compiles outside the capture
    torch.cuda.synchronize()
    cupy.get_default_memory_pool().free_all_blocks()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = xgemm.matmul(a, b, variant=name)
    a.copy_(torch.randn_like(a))  # new values, same memory
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert frobenius_error(out, f64(a) @ f64(b)) < REFERENCE_TOLERANCE[dtype]


@gpu
def test_a_prepared_launch_reads_its_inputs_as_they_are_when_it_runs(rng):
    """A Launch keeps references, not snapshots: copied and padded operands, and gemm's
    staged c, are taken afresh on each run."""
    import cupy

    stepped = rng.matrix(64, 2 * 48)[:, ::2]  # no unit stride: copied per run
    b = rng.matrix(48, 40)
    launch = xgemm.prepare(stepped, b, variant="tiled")
    assert launch.copies == ("a",)
    launch()
    stepped[...] = rng.matrix(64, 48)
    assert relative_error(launch(), stepped, b) < REFERENCE_TOLERANCE["float32"]
    if xgemm.gpu.compute_capability(0) == 90:  # rows TMA cannot read: padded per run
        h, g = rng.array((96, 60), "float16"), rng.array((60, 64), "float16")
        padded = xgemm.prepare(h, g, variant="wgmma")
        assert padded.copies == ("a",)
        padded()
        h[...] = rng.array((96, 60), "float16")
        assert relative_error(padded(), h, g) < REFERENCE_TOLERANCE["float16"]
    square = rng.matrix(40, 40)
    c = square[:, :]  # gemm into an operand: c is staged, and read (beta) on each run
    update = xgemm.prepare(square, square, c=c, alpha=1.0, beta=1.0, variant="tiled")
    before = f64(square)
    update()
    assert frobenius_error(square, before @ before + before) < REFERENCE_TOLERANCE["float32"]
    again = f64(square)
    update()
    assert frobenius_error(square, again @ again + again) < REFERENCE_TOLERANCE["float32"]
    assert cupy.cuda.runtime.getDevice() == 0


@gpu
@pytest.mark.parametrize(("k", "pitch"), [(685, 704), (27, 32)])
def test_a_copy_padded_for_tma_starts_its_lines_on_128_bytes(rng, k, pitch):
    """Rows TMA cannot read are copied at a pitch of whole 128 bytes (TMA reads lines
    that start 16 bytes past one at two-thirds the rate), or 16 where a row is shorter
    than 128 bytes; the product is right either way. A call that only pads takes the
    short path (``Plan.plain``)."""
    if xgemm.gpu.compute_capability(0) != 90:
        pytest.skip("TMA (wgmma) runs on sm_90 only")
    a, b = rng.array((96, k), "float16"), rng.array((k, 64), "float16")
    launch = xgemm.prepare(a, b, variant="wgmma")
    assert launch.copies == ("a",) and launch.plan.plain
    assert launch.plan.a.layout.ld == pitch
    assert relative_error(launch(), a, b) < REFERENCE_TOLERANCE["float16"]


@gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("rows", [1, 5])
def test_a_batch_of_rows_times_one_matrix_is_one_product(rng, dtype, rows):
    """x (batch, rows, K) @ w.T, as a linear layer calls it: the batch's rows, one stride
    apart, are one product of batch x rows rows (B read once), with or without out=;
    so is a B broadcast along the batch, or a batch of one (copied each call where it has
    no unit stride). Rows with a gap between the batch's matrices (a slice) stay a batch
    of products."""
    import cupy

    x, w = rng.array((6, rows, 200), dtype), rng.array((72, 200), dtype)
    launch = xgemm.prepare(x, w.T)
    assert (launch.plan.shapes.count, launch.plan.shapes.m) == (1, 6 * rows)
    y = launch()
    assert y.shape == (6, rows, 72) and relative_error(y, x, w.T) < REFERENCE_TOLERANCE[dtype]
    strided_one = cupy.swapaxes(rng.array((1, 144, 400), dtype)[:, ::2, ::2], -1, -2)
    for shared in (cupy.broadcast_to(w.T, (6, 200, 72)), strided_one):
        launch = xgemm.prepare(x, shared)
        assert launch.plan.shapes.count == 1
        assert relative_error(launch(), x, shared) < REFERENCE_TOLERANCE[dtype]
    out = poisoned(6, rows, 72, dtype=dtype)
    assert xgemm.prepare(x, w.T, out=out).plan.shapes.count == 1
    assert xgemm.matmul(x, w.T, out=out) is out
    assert relative_error(out, x, w.T) < REFERENCE_TOLERANCE[dtype]
    gapped = rng.array((6, rows + 1, 200), dtype)[:, :rows]  # one row's gap a matrix
    launch = xgemm.prepare(gapped, w.T, out=poisoned(6, rows, 72, dtype=dtype))
    assert launch.plan.shapes.count == (1 if rows == 1 else 6)  # one row: one stride
    assert relative_error(launch(), gapped, w.T) < REFERENCE_TOLERANCE[dtype]


@gpu
def test_a_split_k_launch_run_on_two_streams_at_once(rng):
    """One Launch run on two streams at once, five times each: each run has its own
    partial sums and counters, zeroed on its own stream, so the runs do not mix (both
    write the same values to c)."""
    import cupy

    a, b = rng.matrix(128, 8192), rng.matrix(8192, 96)
    c = poisoned(128, 96)
    launch = xgemm.prepare(a, b, variant="splitk", out=c, SPLITS=16)
    # made on the default stream, which a non-blocking stream does not wait for
    cupy.cuda.get_current_stream().synchronize()
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    for _ in range(5):
        for stream in streams:
            with stream:
                launch()
    for stream in streams:
        stream.synchronize()
    assert frobenius_error(c, f64(a) @ f64(b)) < REFERENCE_TOLERANCE["float32"]
    once = c.copy()
    launch()
    assert bool((c == once).all())  # split-K adds its partials in a fixed order


@gpu
@pytest.mark.parametrize("operands", [
    [(1, 2, 2, 0)],                         # one 16-bit value
    [(7, 30, 30, 2)],                       # narrower than a chunk, lines at every offset
    [(33, 46, 52, 14), (5, 130, 130, 6)],   # a line across three source chunks, a view 14
    #                                         bytes in; chunk after chunk, the last short
    [(3000, 998, 998, 0), (1, 2, 2, 0)],    # many blocks, each thread several chunks;
    #                                         a second operand of one block
    [(2, 18, 18, 4), (3000, 998, 998, 10)],  # the second operand many blocks
])
def test_pad_kernel_copies_lines_at_any_alignment(operands):
    """One launch of the pad kernel copies each of one or two operands (``lines`` of
    ``width`` bytes, ``pitch`` apart from ``offset`` bytes into an allocation) into lines
    padded to 16 bytes: every byte of every line, whatever the source's alignment; the
    padding is not the caller's concern."""
    cupy = pytest.importorskip("cupy")
    from xgemm.launch import pad_rows
    from xgemm.operands import padding, plan_pad_launch

    sources, padded, pads = [], [], []
    for lines, width, pitch, offset in operands:
        rng = cupy.random.RandomState(lines * width + offset)
        sources.append(rng.randint(0, 256, size=offset + lines * pitch + 64).astype(cupy.uint8))
        padded_pitch = -(-width // 16) * 16
        padded.append(cupy.full(lines * padded_pitch, 0xFF, dtype=cupy.uint8))
        pads.append(padding(lines, width, pitch, padded_pitch, lines * padded_pitch))
    pad_rows(plan_pad_launch(tuple(pads), 0),
             tuple(s.data.ptr + o[3] for s, o in zip(sources, operands, strict=True)),
             tuple(p.data.ptr for p in padded), cupy.cuda.get_current_stream().ptr)
    for source, target, (lines, width, pitch, offset) in zip(sources, padded, operands,
                                                             strict=True):
        expected = source[offset:offset + lines * pitch].reshape(lines, pitch)[:, :width]
        got = target.reshape(lines, -1)[:, :width]
        assert bool((got == expected).all())


@gpu
@pytest.mark.parametrize("layout", ["NN", "NT", "TN"])
def test_pytorch_operands_padded_on_pytorchs_stream(layout):
    """PyTorch operands whose rows TMA cannot read (202 x 140 x 100: rows of 200, 280 or
    404 bytes), padded for wgmma on PyTorch's current stream:
    queued behind a long wait and a fill on a side stream, the product sees the filled
    values, call after call."""
    torch = pytest.importorskip("torch")
    if xgemm.gpu.compute_capability(0) != 90:
        pytest.skip("wgmma needs an sm_90 GPU")
    m, n, k = 202, 140, 100

    def operand(rows, cols, transposed):
        x = torch.randn(cols, rows, device="cuda", dtype=torch.float16)
        return x.T if transposed else x.T.contiguous()

    a, b = operand(m, k, layout[0] == "T"), operand(k, n, layout[1] == "T")
    launch = xgemm.prepare(a, b, variant="wgmma")
    assert launch.copies == ("a", "b") and launch.plan.plain  # the pad kernel, then the product
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    for step in range(3):
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)
            a.uniform_(-1, 1)
            c = xgemm.matmul(a, b, variant="wgmma")
        side.synchronize()
        expected = a.double() @ b.double()
        # Stricter than float16's 1e-2 on purpose: K = 100 and one float16 rounding of
        # each result keep the error near 2^-12, while a read of the stale a is O(1) off.
        assert float((c.double() - expected).norm() / expected.norm()) < 2e-3, step


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_pytorch_in_pytorch_out_on_pytorchs_stream(dtype):
    """PyTorch tensors give a PyTorch tensor (from PyTorch's allocator), launched on
    PyTorch's current stream: queued behind a long wait and an in-place fill on a side
    stream, the product sees the filled values, as a PyTorch op there would."""
    torch = pytest.importorskip("torch")
    t = getattr(torch, dtype)
    side = torch.cuda.Stream()
    a = torch.randn(256, 128, device="cuda", dtype=t)
    w = torch.randn(64, 128, device="cuda", dtype=t)
    bias = torch.randn(64, device="cuda", dtype=t)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # the side stream is busy for tens of milliseconds
        a.fill_(0.5)
        c = xgemm.matmul(a, w.T, bias=bias)
        wide = xgemm.matmul(a, w.T, out_dtype="float32")
    side.synchronize()
    assert isinstance(c, torch.Tensor) and c.dtype == t and c.device == a.device
    assert c.shape == (256, 64) and wide.dtype == torch.float32
    expected = a.double() @ w.double().T
    # One bound for float32, float16 and bfloat16 with the bias added (twice bfloat16's
    # 1e-2): it tells a stale read of a (O(1) off) from rounding, not one dtype's rounding.
    assert float((c.double() - expected - bias.double()).norm() / expected.norm()) < 2e-2
    wide_error = float((wide.double() - expected).norm() / expected.norm())
    assert wide_error < REFERENCE_TOLERANCE["float32"]
    out = torch.empty(256, 64, device="cuda", dtype=t)
    assert xgemm.matmul(a, w.T, out=out) is out
    batch = torch.randn(3, 20, 128, device="cuda", dtype=t)
    got = xgemm.matmul(batch, w.T)
    assert isinstance(got, torch.Tensor) and got.shape == (3, 20, 64)


@pytest.mark.parametrize("ranked, picked", [
    # the cheapest candidate clears the margin by its call
    ([(10e-6, 10e-6, "mma_staged_c"), (11e-6, 5e-6, "wgmma")], "mma_staged_c"),
    # it does not; the next is as fast a call (host-bound) and far faster on the GPU
    ([(23.5e-6, 23.5e-6, "mma_staged_c"), (24.0e-6, 15.9e-6, "wgmma")], "wgmma"),
    # none clears it: a candidate slower a call than the rules' pick is not weighed
    ([(23.5e-6, 23.5e-6, "mma_staged_c"), (26.0e-6, 9.0e-6, "wgmma")], "mma"),
], ids=["cheapest", "next-on-the-gpu", "rules"])
def test_auto_takes_the_cheapest_candidate_that_clears_the_margin(monkeypatch, ranked, picked):
    # The rules pick mma, priced 25.2 us on the GPU and a call; the model's ranking is
    # given, cheapest call first.
    rule = xgemm.get_variant("mma")
    from xgemm import ranking

    monkeypatch.setattr(ranking.gpu, "multiprocessors", lambda device: 132)
    monkeypatch.setattr(ranking, "ruled", lambda *args: (rule, dict(rule.defaults), False,
                                                         ["row", "row"], None))
    monkeypatch.setattr(ranking, "priced_copies", lambda *args: None)
    monkeypatch.setattr(ranking.cost, "estimate_near", lambda *args: 25.2e-6)
    monkeypatch.setattr(ranking.cost, "call_time", lambda gpu_seconds, shape: gpu_seconds)
    monkeypatch.setattr(ranking, "ranked", lambda *args: [
        (call, t, xgemm.get_variant(name), {}) for call, t, name in ranked])
    shapes = planning.Shapes((), 444, 1242, 674, (444, 1242), False, False)
    v, _ = ranking.pick((None, None), [None, None], shapes, "float16", 0, None)
    assert v.name == picked


def test_autotune_times_the_cut_width_beside_the_rules_pick(monkeypatch):
    """Where auto's call cuts rung 14's tiles to fill the SMs' last round (B column-major),
    autotuning times that width as well as the rules' pick, so the width a call would run
    is the one it can store."""
    from xgemm import ranking

    wgmma = xgemm.get_variant("wgmma")
    monkeypatch.setattr(ranking.gpu, "multiprocessors", lambda device: 132)
    monkeypatch.setattr(ranking.gpu, "gpu_name", lambda device: "a GPU nothing was tuned on")
    monkeypatch.setattr(ranking, "ruled", lambda *args: (
        wgmma, wgmma.resolve({}, "bfloat16"), False, ["row", "col"], [False, False]))
    monkeypatch.setattr(ranking, "ranked", lambda *args: [])
    shapes = planning.Shapes((), 128, 18944, 3584, (128, 18944), False, False)
    chosen = ranking.contenders_to_time((None, None), [None, None], shapes, "bfloat16", 0,
                                        None, 3)
    assert [p["BN"] for _, p in chosen] == [256, 144]
