"""``variant="auto"``: which variant and parameters run a product nobody named one for.
The tuning file's entry for the GPU, dtype and shape where ``xgemm tune`` wrote one, else
a rule from the H100 measurements in bench/. Choices are cached per device, dtype, shape
and precision, and forgotten when this process writes the tuning file.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from . import gpu, tunefile
from .asked import Asked, Pick
from .choice_8bit import eight_bit_hopper, eight_bit_small
from .expressions import cdiv
from .registry import get_variant

#: SMs of the H100 the rules were measured on: the default where no GPU is asked.
H100_SMS = 132
#: M x N x K from which a TMA rung pads operands whose rows TMA cannot read (a copy per
#: call) rather than give way to one that reads them in place: float16 wgmma with the
#: padded copies against mma, 1023^3 to 8191^3 and three oblong shapes, ran 1.5-3.3x
#: faster (bench/results/h100/evidence/misaligned_float16.json); smaller, not measured.
TMA_PADDING_PAYS = 10**9


#: K from which a 16-bit product of at most 32 columns over 1024 rows or more, B read
#: column-major, takes rung 36 (few rows keep 2048 and 4096: 32 rows ran 0.98-1.13x slower
#: there below 4096). Read off a stratum of few columns (bf16 seed 1, K from 1024): rung 36
#: was the fastest candidate on every such product it could read.
COLUMNS_MIN_K = 1024
#: K from which rung 16 over 65-128 rows takes 128 x 128 tiles in four splits (``_split_k``).
FOUR_SPLITS_K = 65536
#: K from which one product of a few rows over many columns takes rung 28's 64 x 256 tiles
#: where they fill half the SMs (``_hopper``).
WIDE_ROWS_K = 2048


def heuristic(m: int, n: int, k: int, dtype: str = "float32", cc: int = 90,
              precision: str | None = None, sms: int = H100_SMS, batch: int = 1,
              a_row_major: bool = True, scale_vectors: bool = False,
              b_col_major: bool = True) -> tuple[str, dict[str, int]]:
    """The variant ``auto`` uses for a shape nobody tuned, on a GPU of compute capability
    ``cc`` x 10 with ``sms`` multiprocessors, from the H100 measurements in bench/: for one
    16-bit product of at most 32 rows and K >= 4096 (16 rows and K >= 2048), N >= 1024,
    ``wgmma_rows`` on sm_90 (``a_row_major``: A reaches the kernel row-major, in place or
    copied), and of as few columns, M >= 1024, ``wgmma_columns`` (``b_col_major``: B lies
    column-major; a row-major B only the first pick, which knows no layout, takes to it,
    copied where its ``transpose_first`` says); for 16-bit outputs of 2^16 elements or more
    the tensor cores, ``wgmma`` on sm_90 (``wgmma_splitk`` for at most 128 rows where its
    tiles would fill at most half the SMs and K >= 4096, 128 x 128 in four splits from
    ``FOUR_SPLITS_K``; 128 x 128 tiles at 6 stages where one product's fill three quarters
    of the SMs to under a round; ``wgmma_pingpong`` for 256 <= K <= 768 over three waves or more of
    128 x 128 tiles, and at 64 x 256 for one product of at most 64 rows over K >= 2048 whose
    64 x 256 tiles fill half the SMs; for operands TMA cannot read in place, with padded
    copies from ``TMA_PADDING_PAYS``, else the plan takes ``mma``), ``mma`` on sm_80 and
    newer; the same for float32 with ``precision="tf32"`` through ``wgmma_tf32`` or
    ``mma_tf32``, and for float64 through ``dmma`` (the FP64 tensor cores) from sm_80; 8-bit
    inputs (FP8, int8) ``wgmma_8bit`` on sm_90 (``scale_vectors``: a scale per row of A or
    per column of B, which take 128-column tiles below K = 1024; one 8-bit product of few
    tiles and K >= ``choice_8bit.CUT_TILES_K``: ``wgmma_8bit_last_round``; both at 64 x 128
    tiles where those fit in a round, ``choice_8bit.NARROW_8BIT``), int8 ``mma_int8`` before
    it and for small products (at most 2^18 outputs, K <= 1024), ``skinny`` for at most 16
    rows or columns with K >= 16 times the other side; splitk for float32 outputs of few
    tiles with K >= 4096; for outputs of a million elements or more the fastest large-tile
    rung for the dtype (``pipelined`` for float32, ``vectorized`` for the others), for
    mid-sized ones ``pipelined`` on 64 x 64 tiles (float32) or coarse1d, tiled for small
    ones. Tiles shrink where the large ones, over all ``batch`` products, would leave SMs
    idle. All variants are correct for every shape, so this only ever costs speed.

    >>> heuristic(4096, 4096, 4096)[0], heuristic(64, 64, 64)[0]
    ('pipelined', 'tiled')
    >>> [heuristic(1024, 512, 64, dtype)[0] for dtype in ("float32", "float64")]
    ['pipelined', 'dmma']
    >>> [heuristic(4096, 4096, 4096, "float16", cc)[0] for cc in (90, 100, 80, 75)]
    ['wgmma', 'mma', 'mma', 'vectorized']
    >>> [heuristic(4096, 4096, 4096, "float32", cc, "tf32")[0] for cc in (90, 80)]
    ['wgmma_tf32', 'mma_tf32']
    >>> [heuristic(4096, 4096, 4096, "float64", cc)[0] for cc in (90, 80, 75)]
    ['dmma', 'dmma', 'vectorized']
    >>> heuristic(128, 128, 65536)[1]["SPLITS"]  # K split across 32 blocks per tile
    32
    >>> [heuristic(m, 4096, 4096, "float16")[0] for m in (16, 64, 256)]
    ['wgmma_rows', 'wgmma_splitk', 'wgmma']
    >>> heuristic(14336, 8, 4096, "bfloat16")[0]  # few columns: the product turned over
    'wgmma_columns'
    >>> [heuristic(32, n, 3584, "bfloat16")[1]["BN"] for n in (4096, 14336)]  # 32, 112 tiles
    [64, 128]
    >>> [heuristic(32, 18944, k, "bfloat16")[0] for k in (1024, 3584)]  # 74 tiles 256 wide
    ['wgmma', 'wgmma_pingpong']
    >>> [heuristic(4096, 4096, k, "bfloat16")[0] for k in (128, 512, 2048)]
    ['wgmma', 'wgmma_pingpong', 'wgmma']
    >>> [heuristic(84, 384, k, dtype)[0] for dtype in ("int8", "float8_e4m3fn")
    ...  for k in (4096, 12960)]
    ['wgmma_8bit', 'wgmma_8bit_last_round', 'wgmma_8bit', 'wgmma_8bit_last_round']
    >>> [heuristic(m, 384, 12960, "int8")[1]["BM"] for m in (84, 2816)]  # 6 or 132 64 x 128 tiles
    [64, 128]
    """
    asked = Asked(m, n, k, dtype, cc, precision, sms, batch, a_row_major, scale_vectors,
                   b_col_major)
    for rule in _RULES:
        found = rule(asked)
        if found is not None:
            return found
    return _cuda_cores(asked)


def _few_rows(q: Asked) -> Pick | None:
    """One 16-bit product of a few rows over a long K, A read row-major: rung 17; of a few
    columns, B read column-major: rung 36, rung 17 on the product turned over (C^T = B^T
    A^T), whose rows are those columns."""
    k, dtype, cc, precision, sms = q.k, q.dtype, q.cc, q.precision, q.sms
    for few, many, name, readable in ((q.m, q.n, "wgmma_rows", q.a_row_major),
                                      (q.n, q.m, "wgmma_columns", q.b_col_major)):
        rows = get_variant(name)
        long_k = few <= 32 and k >= 4096 or few <= 16 and k >= 2048  # the rows' thresholds
        columns = name == "wgmma_columns"
        if (dtype in rows.dtypes and rows.runs_on(cc) and precision is None
                and (long_k or columns and few <= 32 and k >= COLUMNS_MIN_K)
                and many >= 1024 and q.batch == 1 and readable):
            break
    else:
        return None

    def tiles(bm: int, bn: int) -> int:  # the walked product's: BM of its few rows by BN
        return cdiv(few, bm) * cdiv(many, bn)

    if not long_k:  # (columns only)
        # Few columns over a K the rows' thresholds below leave out (1024 up): rung 36
        # unsplit ran fastest of every rung timed on each such product of a stratum of
        # few columns (bf16 seed 1: 6648 x 7 x 1720:NT 1.50x faster than auto's rung 14
        # then, 2328 x 19 x 3120:NT 1.15x, 2376 x 32 x 1080:NT 1.04x), 16 columns a tile
        # (32 for 17-32 columns where 128-wide tiles are taken: next)
        wide_bm = 16 if few <= 16 else 32
        if _wide_tiles_pay(tiles(16, 64), tiles(wide_bm, 128), sms):
            return name, {**rows.defaults, "BM": wide_bm, "BN": 128, "SPLITS": 1}
        return name, {**rows.defaults, "BM": 16, "BN": 64, "SPLITS": 1}
    # few rows (columns), one product: A's rows (B's columns) as the instruction's n;
    # the thresholds are the rows' below, taken over for columns (the same kernel, the
    # product turned over: evidence/few_columns_b961ba1.txt). Below the tiles that
    # fill the SMs unsplit (next), 64 columns a tile while two blocks a tile fit in
    # the SMs, K split in two, in four where that leaves under a block per two SMs.
    # Measured when every such product split K, so some of these now take the unsplit
    # branch (16 x 11008 x 4096, 1 x 152064 x 3584) (evidence/wgmma_rows.txt, x cuBLAS
    # against auto's pick before:
    # 16 x 4096 x 4096 1.00 / 0.89, 1 x 4096 x 4096 0.94 / 0.11, 8 x 4096 x 4096 0.92 /
    # 0.11, 24 x 4096 x 4096 0.88 / 0.81, 16 x 11008 x 4096 0.87 / 0.81 on 128 columns,
    # 16 x 1024 x 4096 0.96 / 0.07 in four; K = 1024 and batches ran slower). Down to
    # K = 2048 for at most 16 rows: 0.62-1.02x the time of auto's pick before on 38
    # products (1 x 152064 x 3584:NT 598 -> 374 us, cuBLAS 391), where 32 rows ran
    # 0.98-1.13x below K = 4096 (evidence/wgmma_rows_shorter_k_f93561f.txt)
    bm = 16 if few <= 16 else 32
    if wide := _unsplit_width(tiles, bm, sms):
        return rows.name, {**rows.defaults, "BM": bm, "BN": wide, "SPLITS": 1}
    bn = 64 if 2 * tiles(bm, 64) <= sms else 128
    return rows.name, {**rows.defaults, "BM": bm, "BN": bn,
                       "SPLITS": 2 if 4 * tiles(bm, bn) >= sms else 4}


def _unsplit_width(tiles: Callable[[int, int], int], bm: int, sms: int) -> int | None:
    """The width of rung 17's (36's) tiles of ``bm`` rows that walk K unsplit, if any: where 64
    (17-32 rows: 128; 16 rows take 128 where ``_wide_tiles_pay``) fill three quarters of the
    SMs, as the split's hand-in through L2 and its tail cost more than the SMs it fills
    (evidence/wgmma_rows_one_split.txt, us against two splits: 1 x 14336 x 4096:NT 57.2 -> 54.6,
    cuBLAS 54.2; 8 x 128256 x 4096:NT 387 -> 368; 32 x 14336 x 4096:NT 59.5 -> 56.1 on 32 x 128;
    1 x 4096 x 14336 in 64 tiles 52.9 -> 57.4). 17-32 rows (columns) short of that take 64 where
    those fill a round: columns 0.92x the kernel time of 32 x 128 in two splits on 117 products,
    0.88x a call (37 drawn after: 0.919, 0.883, worst 1.01 and 1.06), rows 0.93x and 0.90x on 50
    where it stands (H200: evidence/columns_64_unsplit.txt, few_rows_tall_tiles.txt: with the
    cost model weighing no 128-row tiles over them)."""
    wide = 64 if bm == 16 else 128
    if 4 * tiles(bm, wide) >= 3 * sms:
        return 128 if bm == 16 and _wide_tiles_pay(tiles(16, 64), tiles(16, 128), sms) else wide
    if bm == 32 and 3 * sms <= 4 * tiles(32, 64) <= 4 * sms:  # 64 wide, in one round
        return 64
    return None


def _wide_tiles_pay(narrow: int, wide: int, sms: int) -> bool:
    """Whether tiles twice as wide (128 of the walked product's many columns, ``wide`` of
    them, against ``narrow`` of 64) leave the busiest SM no more columns to walk: it walks
    cdiv(tiles, sms) of them, and one wide tile fills its ring once where two narrow ones
    fill it twice. Unsplit rungs 17 and 36, kernel us (evidence/few_columns_rule_7361c2f.txt):
    where 64-row tiles take two rounds and 128-row ones one, 128 ran 0.81-0.98x the time
    (1 x 9216 x 4096:NT 38.3 -> 31.1, 9576 x 9 x 5496:NT 49.5 -> 41.5 on 32 x 128 tiles,
    1 x 14336 x 4096:NT 42.4 -> 41.4); at three rounds against two, 1.06x (1 x 18944 x
    3584:NT 50.7 -> 53.7); as many rows a round, even (1 x 152064 x 3584: 260.1 -> 260.0).

    >>> _wide_tiles_pay(150, 75, 132), _wide_tiles_pay(296, 148, 132), _wide_tiles_pay(132, 66, 132)
    (True, False, False)
    """
    return 2 * cdiv(wide, sms) <= cdiv(narrow, sms)


def _hopper(q: Asked) -> Pick | None:
    """Outputs of 2^16 elements or more on sm_90's tensor cores: rung 14, rung 16 for few
    tiles over a long K (``_split_k``), rung 28 for many tiles over a short K."""
    m, n, k, dtype, cc, precision, sms = q.m, q.n, q.k, q.dtype, q.cc, q.precision, q.sms
    outputs, tiles = m * n, q.tiles
    wgmma = get_variant("wgmma_tf32" if precision == "tf32" else "wgmma")
    if dtype in wgmma.dtypes and wgmma.runs_on(cc) and outputs >= 1 << 16:
        # 16-bit measurements in bench/results/h100/evidence/small_shape_sweeps.txt and
        # auto_rules.txt, ms or x cuBLAS
        params = dict(wgmma.defaults)
        bm = 64 if m <= 64 else 128
        if (dtype in get_variant("wgmma_splitk").dtypes and m <= 128
                and 2 * tiles(bm, 64) <= sms and k >= 4096):
            return _split_k(q, bm)
        if m <= 64 and 2 * tiles(64, 128) >= sms and q.batch == 1 and precision is None:
            # one product of a few rows over many columns: 64 x 128 tiles at 8 stages (batches
            # not measured). Where those fill half the SMs, 64 x 64 tiles stream B in twice the
            # tiles, each a pass over A and an epilogue: 64 x 128 ran 0.89x their time on the
            # 28 such rows of the H100's 16-bit regret files (0.81-0.98) and the 23 of the
            # H200's (0.81-0.95); on fewer, 64 x 64 keeps the SMs busier (1.03-1.04x below a
            # quarter of them; bench/results/h200/evidence/few_rows_tiles.txt)
            params.update(BM=64, BN=128, CONSUMERS=1, STAGES=8)
            if k >= WIDE_ROWS_K:  # 256 columns a tile, where those fill half the SMs
                return _wide_rows(q) or (wgmma.name, params)
        elif min(m, n) <= 64 and precision is None:  # a few rows (columns): one m64
            # warpgroup, narrow tiles, a deep ring (16 x 4096 x 4096: 0.027 ms against
            # 0.031 for 128 x 128 tiles; 10 stages against 6: 0.966x the time on 19
            # published rows, 0.83-0.89x over a long K, evidence/plain_pads_53fe4c5.txt)
            params.update(BM=64, BN=64, CONSUMERS=1, STAGES=10)
        elif tiles(128, 128) < sms and precision is None:  # under a round of 128 x 128:
            if 4 * tiles(128, 128) >= 3 * sms and q.batch == 1:  # one product's, 3/4 of it
                # or more, at 6 stages: 0.87x the time of 64 x 128 at 8, 0.98x rung 28's on 49
                # such rows of the H200's regret files; the 33 products moved 0.97x the kernel
                # time, 0.92x a call (evidence/one_round_128x128.txt; batches not measured)
                params.update(BN=128, STAGES=6)
            else:  # 64 x 128 (1024^3: 0.90x against 0.65x for 128 x 128 at 3 stages; 8
                # stages against 6: 0.978x on 13 published rows)
                params.update(BM=64, BN=128, CONSUMERS=1, STAGES=8)
        elif tiles(params["BM"], params["BN"]) < sms and precision == "tf32":
            # fewer tiles than SMs: 128 x 128. 16 bits keep 128 x 256 at 4 stages there:
            # where those fill half a round to a round (and 128 x 128 more than one), they
            # ran 0.67-1.02x the time of 128 x 128 at 6 stages, 0.88x in the geometric
            # mean, on 55 products of two aligned random seeds and the 16-bit calibration
            # files (evidence/wgmma_stages_0bceb40.txt)
            params.update(BN=128)
        pingpong = get_variant("wgmma_pingpong")
        if (dtype in pingpong.dtypes and precision is None and 256 <= k <= 768
                and tiles(128, 128) >= 3 * sms):
            # many tiles over a short K: C's store is a large part of a tile's time, and
            # rung 28 hides it behind the other warpgroup's main loop (two short-K strata of
            # 36 products, 2048-15424 rows and columns: at K <= 768 0.70-1.00 of the time of
            # 128 x 256 tiles, geomean 0.85; from K = 1300 1.05; evidence/pingpong_rule.txt)
            return pingpong.name, dict(pingpong.defaults)
        if k <= 2 * 64 and q.batch > 1:  # a phase or two a tile: blocks walk the whole
            # batch's tiles, 128 wide (64 x (1024 x 1024 x 64): 0.83-0.86x cuBLAS against
            # 0.53x, and 0.81x 256 wide; batched_grid.txt, auto_rules.txt). One product
            # keeps its tiles: on aligned tiny-K products of large outputs 128 x 128 took
            # 1.03-1.18x the time of 128 x 256 (both at 2 stages; 152064 x 3584 x 8:TN 399.6
            # us against 372.2, 376.7 at the default 4), 0.95x on 6000 x 7000 x 16
            # (evidence/regimes_probe_96a0deb.txt)
            params.update(SPREAD=1, BN=min(params["BN"], 128))
        return wgmma.name, params
    return None


def _split_k(q: Asked, bm: int) -> Pick:
    """Few tiles of ``bm`` rows, long K: rung 16, two blocks a tile, each half of K, so twice as
    many SMs stream the operands (evidence/wgmma_splitk.txt, x cuBLAS against wgmma's: 64 x 4096
    x 4096 0.82 / 0.76, 128 x 4096 x 4096 0.81 / 0.77; more tiles than half the SMs, slower).
    From ``FOUR_SPLITS_K``, where 128 x 64 tiles in two fill half the SMs, 128 x 128 in four
    (the candidate's 6 stages; 4 ran 1.06x slower on 25): as many blocks, each reading 2/3 the
    bytes, 256 K steps a split to pay a tile's fill, epilogue and partials: H200, 0.90x the
    kernel time, 0.88x a call on 31 products drawn after (0.69-0.98), 1.01-1.10x below 65536
    (evidence/four_splits_long_k.txt). Fewer blocks: each SM's loads bound them, and the cost
    model weighs more splits."""
    splitk = get_variant("wgmma_splitk")
    if bm == 128 and q.k >= FOUR_SPLITS_K and 4 * q.tiles(128, 64) >= q.sms:
        return splitk.name, {**splitk.defaults, "BM": 128, "BN": 128, "CONSUMERS": 2,
                             "SPLITS": 4}
    return splitk.name, {**splitk.defaults, "BM": bm, "CONSUMERS": bm // 64}


def _wide_rows(q: Asked) -> Pick | None:
    """One 16-bit product of at most 64 rows over many columns and K >= WIDE_ROWS_K: rung 28's
    64 x 256 tiles where they fill half the SMs. Over a long K, B streams from memory, and 256
    columns a block read it faster than 128 (ncu, 32 x 18944 x 3584:NT: 75% of the DRAM
    bandwidth against 62%, the same bytes): they ran 0.89x and 0.955x the time of 64 x 128 on
    two unseen seeds of such products (15 rows, 0.72-1.04); from K = 1024, as first set, the
    seed after ran 1.01x (K = 1288 and 1680) (bench/results/h200/evidence/wide_rows.txt)."""
    pingpong = get_variant("wgmma_pingpong")
    if 2 * q.tiles(64, 256) >= q.sms and q.dtype in pingpong.dtypes:
        return pingpong.name, {**pingpong.defaults, "BM": 64, "BN": 256, "STAGES": 4}
    return None


def _tensor_cores(q: Asked) -> Pick | None:
    """Outputs of 2^16 elements or more on sm_80's tensor cores: rungs 12, 12' and 15."""
    dtype, cc, precision, sms, tiles = q.dtype, q.cc, q.precision, q.sms, q.tiles
    outputs = q.m * q.n
    mma = get_variant({"tf32": "mma_tf32"}.get(precision, "dmma" if dtype == "float64" else "mma"))
    if dtype in mma.dtypes and mma.runs_on(cc) and outputs >= 1 << 16:
        params = dict(mma.defaults)
        if tiles(params["BM"], params["BN"]) < sms:  # fewer tiles than SMs
            params.update(BM=64, BN=64, WM=32, WN=32)
        return mma.name, params
    return None


def _cuda_cores(q: Asked) -> Pick:
    """The rest, on the CUDA cores: split-K for float32 outputs of few tiles over a long
    K, then by the output's size: rung 9 or rung 5 (large), rung 9 on 64 x 64 tiles
    (mid-sized float32), rung 4 or rung 3 (small)."""
    k, dtype, sms, outputs, tiles = q.k, q.dtype, q.sms, q.m * q.n, q.tiles
    splitk = get_variant("splitk")
    blocks = tiles(splitk.defaults["BM"], splitk.defaults["BN"])
    if dtype in splitk.dtypes and blocks < 2 * sms and k >= 4096:
        # few tiles of C, a long K: split K until there are two blocks per SM, 32 ways at
        # most (128 x 128 x 65536: 0.12 ms at 32, 0.13 at 64, 0.20 at 128; evidence/
        # auto_rules.txt, as for 8192 x 64 x 8192: 0.31 ms against 0.76 for coarse1d)
        splits = next((s for s in (4, 16) if blocks * s >= 2 * sms or k // s <= 512), 32)
        return "splitk", {**splitk.defaults, "SPLITS": splits}
    if outputs >= 1 << 20:
        pipelined = get_variant("pipelined")
        if dtype in pipelined.dtypes:
            params = dict(pipelined.defaults)  # 128 x 256 tiles: too few of them below 4096^2
            if tiles(128, 128) < 3 * sms // 2 or k <= 1024:  # 128 x 128: a ragged last
                # wave, or too little K to make up for it: 64 x 128 against 128 x 128 tiles,
                # ms (bench/results/h100/evidence/small_shape_sweeps.txt): 1024^3 0.068 /
                # 0.195, 1536^3 0.236 / 0.300; at 2048^3 0.432 / 0.402; 3000 x 2000 x 1000
                # 0.326 / 0.399 (evidence/auto_rules.txt)
                params.update(BM=64, BN=128, WM=32, WN=64, STAGES=2)
            elif tiles(params["BM"], params["BN"]) < 2 * sms:  # two per SM
                params.update(BN=128, STAGES=2)
            return "pipelined", params
        name = "vectorized"
    elif dtype in get_variant("pipelined").dtypes and outputs >= 1 << 16:
        # mid-sized float32: 64 x 64 tiles, 3 stages, 1.3-2.0x coarse1d's and tiled's speed
        # from 300 x 700 x 200 to 768^3 (evidence/auto_rules.txt)
        params = dict(get_variant("pipelined").defaults)
        params.update(BM=64, BN=64, WM=32, WN=32, STAGES=3)
        return "pipelined", params
    else:
        name = "coarse1d" if outputs >= 1 << 18 else "tiled"
    return name, dict(get_variant(name).defaults)


#: Rows and columns of C from which precision="tf32x3" takes rung 33: three of its
#: 128-wide tiles each way. On fewer, a ragged edge wastes a large part of each tile and
#: the pre-pass's split of the long operand is most of the work; the exact rungs win.
TF32X3_MIN_SIDE = 384
#: K from which precision="tf32x3" takes rung 33: its three-stage pipeline and epilogue
#: are a fixed cost each tile, which shorter K does not repay.
TF32X3_MIN_K = 256


def _three_tf32(q: Asked) -> Pick | None:
    """precision="tf32x3": rung 33 on sm_90 where its 128 x 128 tiles fill every SM at
    least once, C has ``TF32X3_MIN_SIDE`` rows and columns or more and K is
    ``TF32X3_MIN_K`` or more; elsewhere, and before Hopper, the exact float32 rungs (as
    accurate, and there faster). Fitted on the random suite's float32 shapes (seeds 10,
    12, 20 and 21), rung 33 against auto's exact pick a whole call at a time
    (bench/results/h100/evidence/tf32x3_rule.txt)."""
    parts = get_variant("wgmma_tf32x3_parts")
    if (q.precision == "tf32x3" and q.dtype in parts.dtypes and parts.runs_on(q.cc)
            and q.tiles(parts.defaults["BM"], parts.defaults["BN"]) >= q.sms
            and min(q.m, q.n) >= TF32X3_MIN_SIDE
            and q.k >= TF32X3_MIN_K):
        return parts.name, dict(parts.defaults)
    return None


#: The rules in the order they are asked: the first that answers picks.
_RULES = (_three_tf32, eight_bit_small, eight_bit_hopper, _few_rows, _hopper, _tensor_cores)


@functools.lru_cache(maxsize=4096)
def _choice(m: int, n: int, k: int, dtype: str, gpu_name: str, cc: int, sms: int,
            precision: str | None, batch: int) -> tuple[str, tuple[tuple[str, int], ...]]:
    found = tunefile.tune_cache().lookup(gpu_name, dtype, m, n, k)
    if found is None or (precision is not None
                         and get_variant(found[0]).precision != precision):
        found = heuristic(m, n, k, dtype, cc, precision, sms, batch)
    name, params = found
    return name, tuple(sorted(params.items()))


def choose(m: int, n: int, k: int, dtype: str, device: int, precision: str | None = None,
           batch: int = 1) -> tuple[str, dict[str, int]]:
    """The (variant, parameters) ``auto`` runs on GPU ``device`` for ``batch`` products of
    this shape: tuned for this GPU and shape (or its bucket), else the heuristic for its
    compute capability and SM count. With ``precision="tf32"`` a tuned entry counts only
    if it is a TF32 rung (tuning is exact unless TF32 rungs are named). Cached per GPU (its
    name, compute capability and SMs: a stand-in planning offline as another GPU is asked
    afresh), dtype, shape, precision and batch; forgotten when this process writes the
    tuning file.

    >>> choose(4096, 4096, 4096, "float16", 0)[0]  # doctest: +SKIP
    'wgmma'
    """
    name, params = _choice(m, n, k, dtype, gpu.gpu_name(device),
                           gpu.compute_capability(device), gpu.multiprocessors(device),
                           precision, batch)
    return name, dict(params)


def forget() -> None:
    """Drop every cached choice (the tuning file changed, or the GPU's answers did)."""
    _choice.cache_clear()


tunefile.on_change(forget)
