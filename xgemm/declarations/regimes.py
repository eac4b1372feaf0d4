"""Rungs 18-28 and 31-35: 8-bit operands, and the regimes the large squares leave out: few
rows or columns, tiny K, rows TMA cannot read, a ragged last round, C staged in shared
memory, short K (two consumers taking turns); float32's accuracy on the TF32 tensor cores.
"""

from __future__ import annotations

from ..registry import Variant, register
from ..specs import EIGHT_BIT, FLOAT_DTYPES
from .tensor_cores import HOPPER, HOPPER_SPLIT_K, MMA, RING_BYTES, TF32, WGMMA, c_staging_bytes

# Rung 18: rung 14 on 8-bit operands. Both operands K-major, C staged for TMA as
# 16-bit values (bfloat16 or float16; float32 and int32 C leave from registers), the
# quantisation scales in the epilogue.
WGMMA_8BIT = dict(
    **{**WGMMA,
       "template": "gemm/18_wgmma_8bit.cu.j2",
       "defaults": {"BM": 128, "BN": 256, "CONSUMERS": 2, "STAGES": 3, "GROUP": 8,
                    "TMA_STORE": 1, "SPREAD": 0},
       # 64 x 128 tiles (one m64 warpgroup) with a deeper ring (a stage is 24 KiB there):
       # over C of few columns or few tiles, twice the tiles of 128 x 128 keep twice the
       # SMs streaming; over few rows, a tile multiplies half as many absent rows. (BN
       # stays a multiple of 128: rung 13's boxes are 128 bytes.) Rung 29's FP8 walk
       # inherits these constraints with a space of its own.
       "space": {"BM": [64, 128, 256], "BN": [128, 256], "CONSUMERS": [1, 2],
                 "STAGES": [3, 4, 6], "GROUP": [8], "TMA_STORE": [0, 1], "SPREAD": [0]},
       "constraints": [*WGMMA["constraints"],
                       "(CONSUMERS == 1) == (BM == 64)",
                       "BM > 64 or (BN == 128 and STAGES >= 4)",
                       "STAGES < 6 or BM == 64"],
       # C staged as 16-bit values, whatever BYTES (1) says, and room in whole KiB for
       # its tile's row and column scales (staged where scale vectors meet 256 columns;
       # room kept at every point: the scales are not a parameter)
       "smem_bytes": RING_BYTES + " + min(TMA_STORE, 1) * (BM * BN * 2"
                                  " + 1024 * cdiv((BM + CONSUMERS * BN) * 4, 1024))"
                                  " + (TMA_STORE == 2) * BM * 16",
       "extra_args": ("tensor_map_a", "tensor_map_b", "tensor_map_c", "scale_a", "scale_b"),
       "dtypes": ("int8", "float8_e4m3fn", "float8_e5m2")},
    staged_c=("bfloat16", "float16", "int32"),  # int32 in two passes (the kernel's header)
    a_layouts=("row",),
    b_layouts=("col",),
)

register(Variant(
    name="wgmma_8bit",
    # the points auto's rules take (xgemm.choice)
    candidates=[{}, {"BN": 128, "STAGES": 4},
                {"BM": 64, "CONSUMERS": 1, "BN": 128, "STAGES": 6}],
    adds="rung 14 on FP8 (e4m3, e5m2) or int8 operands: 32 values a 32-byte step, twice the"
         " 16-bit rate; both K-major; per-tensor, per-row and per-column scales in the epilogue",
    **WGMMA_8BIT,
))

# Rung 19: rung 12 on int8 operands, for GPUs from sm_80 but sm_90 (rung 18's, sm_90a only).
# BK counts int8 values: 64 of them are the 64 bytes of rung 12's 32 halves. 64 x 32 warp
# tiles: with 64 x 64, ptxas spills the unaligned copy path of an int32 C on sm_80.
register(Variant(
    name="mma_int8",
    candidates=[{}, {"BM": 64, "BN": 64, "WM": 32, "WN": 32}],
    adds="rung 12 for int8 on GPUs without wgmma: mma.sync m16n8k32 into exact int32 sums;"
         " K-major operands; scales in the epilogue as in rung 18",
    **{**MMA,
       "template": "gemm/19_mma_int8.cu.j2",
       "defaults": {"BM": 128, "BN": 128, "BK": 64, "WM": 64, "WN": 32, "STAGES": 3, "GROUP": 8},
       "space": {"BM": [64, 128], "BN": [64, 128], "BK": [64, 128], "WM": [32, 64],
                 "WN": [32, 64], "STAGES": [3, 4], "GROUP": [8]},
       # rung 12's rule against 64-deep phases of 64 x 64 warp tiles, in bytes
       "constraints": [rule.replace("BK == 32", "BK == 64") for rule in MMA["constraints"]],
       "extra_args": ("scale_a", "scale_b"), "dtypes": ("int8",)},
    a_layouts=("row",),
    b_layouts=("col",),
))

# Rung 20: products of few rows (or, FEW_COLUMNS, few columns), bound by reading the big
# operand once. Every dtype, 8-bit ones K-major with their scales; its defaults are for a
# decode step (8 rows, B of 2048 x 2048); bench/skinny.py measures them and other points
# on few-row and few-column products.
register(Variant(
    name="skinny",
    template="gemm/20_skinny.cu.j2",
    adds="few rows (or columns): A's rows in shared memory, B streamed once in 16-byte"
         " loads, K split across lanes or threads and blocks, reduced in a fixed order",
    defaults={"BM": 8, "BN": 32, "BK": 512, "WARPS": 8, "SPLITS": 4, "FEW_COLUMNS": 0},
    space={"BM": [1, 2, 4, 8, 16], "BN": [16, 32, 64], "BK": [256, 512], "WARPS": [4, 8],
           "SPLITS": [2, 4, 8, 16], "FEW_COLUMNS": [0, 1]},
    constraints=[
        "BK % (32 * 16 // BYTES) == 0",   # a warp's lanes take whole 16-byte loads of a chunk
        # (B below: the big operand, A where FEW_COLUMNS)
        # at most 64 registers of sums a thread: B along K, its warp's columns by the rows
        "BN % WARPS == 0 and BN // WARPS * BM * max(BYTES, 4) <= 256",
        # ... and at most 32 of its 16-byte loads of a chunk in flight (128 registers; 16
        # in 16 bits, whose values the compiler holds converted; 8 in 8 bits, 16 values a
        # load converted into as many registers)
        "BK // (32 * 16 // BYTES) * (BN // WARPS)"
        " <= (32 if BYTES >= 4 else 16 if BYTES == 2 else 8)",
        # B along N: whole 16-byte groups across BN, every thread in one, by the rows
        # (8-bit operands are read K-major only: B along K)
        "BYTES == 1 or BN % (16 // BYTES) == 0 and THREADS % (BN // (16 // BYTES)) == 0"
        " and BM * 16 // BYTES * max(BYTES, 4) <= 256",
        "BN <= THREADS",                  # B along N: a thread adds each column's sums
        "SPLITS >= 2",                    # blocks share each tile: split-K's arguments
    ],
    block=("32 * WARPS",),
    # FEW_COLUMNS: C's columns are the walked rows (C^T = B^T A^T)
    grid=("cdiv(M if FEW_COLUMNS else N, BN)", "cdiv(N if FEW_COLUMNS else M, BM)"),
    tile_shape=("BN if FEW_COLUMNS else BM", "BM if FEW_COLUMNS else BN", "BK"),
    # A's chunk and the tile's sums (in the sums' type), the threads' sums to reduce (B
    # along N: never for 8-bit operands)
    smem_bytes="max(BYTES, 4) * (BM * BK + BM * BN + (32 * WARPS * 16 // BYTES if BYTES > 1"
               " else 0))",
    splits="SPLITS",
    extra_args=("partials", "arrivals", "scale_a", "scale_b"),
    flags=("aligned16",),
    dtypes=(*FLOAT_DTYPES, *EIGHT_BIT),
    # B along K takes 2 splits, along N wider tiles (bench/skinny.py's best points); 16
    # splits for a long K over few lines of the big operand, where 2-4 leave most SMs idle;
    # 2 rows a block for one- and two-row products (8 wasted their time on empty rows:
    # 15273 x 1 x 334 25 us at BM = 8, 16 at BM = 1), and 16 columns of half-sized chunks,
    # whose float64 sums fit two blocks an SM (8 x 4096 x 4096 136 -> 96 us; docs/notes.md)
    candidates=[{**side, **p} for side in ({}, {"FEW_COLUMNS": 1}) for p in (
        {}, {"SPLITS": 2}, {"BN": 64}, {"SPLITS": 16},
        {"BM": 2, "BN": 64, "BK": 256, "SPLITS": 2}, {"BN": 16, "BK": 256, "SPLITS": 2})],
    # 16-bit products of few rows run on rungs 21 and 22's tensor cores: rung 20 was the
    # fastest candidate on none of the 240 16-bit calibration rows, and where its noisier
    # estimates came out cheapest it ran 3-36% slower (docs/ladder.md)
    auto_dtypes=("float32", "float64", *EIGHT_BIT),
))

# Rung 21: rung 20's products in 16 bits, multiplied on the tensor cores (mma.sync), the
# big operand's 16-byte loads taken as the instruction's fragments. Its defaults are
# reasoned, not yet swept: 4 warps, two steps of loads in flight.
register(Variant(
    name="skinny_mma",
    template="gemm/21_skinny_mma.cu.j2",
    adds="few rows in 16 bits on the tensor cores: mma.sync fed straight from 16-byte loads"
         " of B, K permuted to fit each lane's fragment",
    defaults={"BM": 8, "WARPS": 4, "UNROLL": 2, "SPLITS": 4, "FEW_COLUMNS": 0},
    space={"BM": [8, 16], "WARPS": [2, 4, 8], "UNROLL": [1, 2], "SPLITS": [2, 4, 8, 16],
           "FEW_COLUMNS": [0, 1]},
    constraints=["SPLITS >= 2"],  # blocks share each tile: split-K's arguments
    block=("32 * WARPS",),
    # 64 columns of the walked product a block (C's rows where FEW_COLUMNS)
    grid=("cdiv(M if FEW_COLUMNS else N, 64)", "cdiv(N if FEW_COLUMNS else M, BM)"),
    tile_shape=("64 if FEW_COLUMNS else BM", "BM if FEW_COLUMNS else 64", "32"),
    smem_bytes="4 * WARPS * BM * 64",  # each warp's sums, added in warp order
    splits="SPLITS",
    extra_args=("partials", "arrivals"),
    flags=("aligned16",),
    # where a row is not whole 16-byte groups each fragment takes eight 2-byte loads; rung
    # 22 reads such rows by whole chunks. Another rung won 210 of the 213 such regret rows
    # that timed rung 21, which the model priced 1.4x under its time (docs/notes.md)
    auto_aligned=True,
    dtypes=("float16", "bfloat16"),
    min_cc=80,
    # more warps in flight, more splits where C is short, two fragments of rows (bench/skinny.py)
    candidates=[{}, {"WARPS": 8}, {"SPLITS": 8}, {"BM": 16}, {"FEW_COLUMNS": 1},
                {"FEW_COLUMNS": 1, "WARPS": 8}, {"FEW_COLUMNS": 1, "BM": 16}],
))

# Rung 22: rung 21 fed through a ring of cp.async stages in shared memory. Defaults: 4 warps
# (128 k's a stage), 4 slots; the fastest point on the decode LM head (bench/skinny.py).
register(Variant(
    name="skinny_ring",
    template="gemm/22_skinny_ring.cu.j2",
    adds="rung 21 with B copied through a ring in shared memory: bytes in flight without"
         " registers; whole aligned 16-byte chunks of rows at any alignment, shifted into"
         " place as they are read",
    defaults={"BM": 8, "WARPS": 4, "STAGES": 4, "SPLITS": 2, "FEW_COLUMNS": 0},
    space={"BM": [8, 16, 32], "WARPS": [2, 4, 8], "STAGES": [2, 3, 4, 6],
           "SPLITS": [2, 4, 8, 16], "FEW_COLUMNS": [0, 1]},
    constraints=["SPLITS >= 2",  # blocks share each tile: split-K's arguments
                 "STAGES * WARPS <= 24"],  # the ring in an H100's 227 KiB a block
    block=("32 * WARPS",),
    grid=("cdiv(M if FEW_COLUMNS else N, 64)", "cdiv(N if FEW_COLUMNS else M, BM)"),
    tile_shape=("64 if FEW_COLUMNS else BM", "BM if FEW_COLUMNS else 64", "32 * WARPS"),
    # STAGES slots, each as large as either layout's stage (16-byte chunks): B's 64 columns
    # of 32 x WARPS k's or its 32 x WARPS k's of 64 columns, and A's BM rows likewise, each
    # line with a spare chunk and padded (the template's SLOT_CHUNKS); the warps' sums
    # reuse the ring
    smem_bytes="16 * STAGES * (max(256 * WARPS + 256, 384 * WARPS)"
               " + max(BM * (4 * WARPS + 4), 32 * WARPS * (BM // 8 + 1)))",
    dynamic_smem=True,
    splits="SPLITS",
    extra_args=("partials", "arrivals"),
    dtypes=("float16", "bfloat16"),
    min_cc=80,
    # the best points of bench/skinny.py's sweep on the H100: the defaults for long B
    # (the decode LM head), more splits or 8 warps for shorter ones, two row fragments;
    # 16 splits (or 8 of two fragments) for long K over few lines of the big operand,
    # where 2 leave most SMs idle (47 x 18 x 11554: 17 us against 28 at 2); four
    # fragments, so that 17 to 32 rows read the big operand once (docs/notes.md); and, for
    # each side, more warps an SM than one 4-warp block with its 4-stage ring: 8 warps of
    # 3 stages, or three blocks of a 2-stage ring (17-96 rows over a long K: docs/ladder.md);
    # and 2-stage rings, which the model weighs everywhere and which win where a line is not
    # whole 16-byte groups: its copies and their realignment cost issue slots, and more
    # blocks an SM hide them (docs/notes.md)
    candidates=[{}, {"SPLITS": 4}, {"SPLITS": 8}, {"SPLITS": 16}, {"WARPS": 8, "STAGES": 3},
                {"BM": 16}, {"BM": 16, "SPLITS": 8}, {"BM": 32}, {"FEW_COLUMNS": 1},
                {"FEW_COLUMNS": 1, "SPLITS": 16}, {"FEW_COLUMNS": 1, "WARPS": 8, "STAGES": 3},
                {"FEW_COLUMNS": 1, "BM": 16}, {"FEW_COLUMNS": 1, "BM": 16, "SPLITS": 16},
                {"FEW_COLUMNS": 1, "BM": 32},
                *({**side, **p} for side in ({}, {"FEW_COLUMNS": 1}) for p in (
                    {"BM": 16, "WARPS": 8, "STAGES": 3, "SPLITS": 8},
                    {"BM": 32, "WARPS": 8, "STAGES": 3}, {"BM": 32, "STAGES": 2, "SPLITS": 8},
                    {"STAGES": 2}, {"STAGES": 2, "SPLITS": 4}, {"STAGES": 2, "SPLITS": 8},
                    {"WARPS": 2, "STAGES": 2, "SPLITS": 4}, {"BM": 16, "STAGES": 2},
                    {"BM": 16, "STAGES": 2, "SPLITS": 4}))],
))

# Rung 23: products over a few k's, stored as aligned 16-byte chunks whatever C's rows.
# Defaults: 8 warps of 2 rows, 16 k's staged, two blocks an SM (the best single point of the
# first timing on the H100's tiny-K calibration rows, and within float64's registers).
register(Variant(
    name="tiny_k",
    template="gemm/23_tiny_k.cu.j2",
    adds="for a handful of k's: each warp stages a row of results in shared memory and"
         " stores it as 16-byte chunks on C's own 16-byte boundaries, at any alignment;"
         " blocks walk down C's rows with B's stretch held",
    defaults={"WARPS": 8, "ROWS": 2, "KC": 16, "PER_SM": 2},
    space={"WARPS": [4, 8], "ROWS": [1, 2, 4, 8], "KC": [8, 16, 32], "PER_SM": [1, 2, 4]},
    # a thread's accumulators (two registers a float64) and some 36 others within what
    # PER_SM blocks an SM leave it: built without spills
    constraints=["BYTES < 8 or ROWS < 8",
                 "(8 * ROWS + 36) * (2 if BYTES == 8 else 1)"
                 " <= min(255, 2048 // (WARPS * PER_SM))"],
    block=("32 * WARPS",),
    # a block's 256 columns start up to 7 before 256 x (C's row laid from a boundary); PER_SM
    # blocks an SM, each walking down the rows
    grid=("cdiv(N + 7, 256)",
          "min(cdiv(M, WARPS * ROWS), max(1, PER_SM * SMS // (cdiv(N + 7, 256) * BATCH)))"),
    # K step 1 for the cost model: a stage multiplies only the k's there are, so the time
    # grows with each k, not with each KC
    tile_shape=("WARPS * ROWS", "256", "1"),
    # A's rows and B's columns (8 before the stretch) at KC k's, and apart from them each
    # warp's staged row of C (256 values of T, or of float for a wider C)
    smem_bytes="BYTES * KC * (WARPS * ROWS + 264) + 256 * WARPS * max(BYTES, 4)",
    dynamic_smem=True,
    # the best points of the first timing on the tiny-K calibration rows: four blocks an SM
    # for large C, 32 k's staged at K 18-32 (one row a warp, best on a few small products,
    # is left out: float64's sample holds too few rows to fit it)
    candidates=[{}, {"PER_SM": 4}, {"KC": 32}],
))

register(Variant(
    name="wgmma_inplace",
    template="gemm/24_wgmma_inplace.cu.j2",
    adds="rung 13 on 16-bit operands read where they lie, at any alignment: one producer"
         " warpgroup fetches each 128-byte line's aligned chunks by cp.async into a staging"
         " ring, another shifts them onto 16-byte boundaries into the swizzled slot; no padded"
         " copy a call",
    # Its defaults for auto, weighed against the rungs that pad and those that read in place
    # (docs/notes.md, "Rung 24"). One consumer warpgroup: the producer warps keep their
    # lines' starts in registers.
    candidates=[{}],
    defaults={"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 2, "RAW": 4, "GROUP": 8,
              "SPREAD": 0},
    space={"BM": [64, 128], "BN": [64, 128], "CONSUMERS": [1], "STAGES": [2, 3],
           "RAW": [2, 3, 4], "GROUP": [8], "SPREAD": [0]},
    **{**HOPPER, "constraints": [*HOPPER["constraints"], "RAW >= 1",
                                 "CONSUMERS == 1"],  # the producers' lines in registers
       "block": ("128 * (CONSUMERS + 2)",)},
    # rung 13's ring; 128-byte aligned after it the staging ring (144 bytes a line, BM + BN
    # lines in either layout) and its 2 x RAW mbarriers
    smem_bytes=RING_BYTES + " + RAW * (BM + BN) * 144 + 16 * RAW + 128",
))

# Rung 25: rung 14 (for 8-bit operands rung 18) with the last, ragged round of tiles cut
# along K into pieces that fill the SMs.
LAST_ROUND = dict(
    template="gemm/25_wgmma_last_round.cu.j2",
    # one block an SM, the SMs shared among a batch's products (grid z; at least one
    # block each): the rounds and the pieces are counted for the grid
    grid=("max(1, SMS // BATCH)", "1"),
    # up to two pieces of tiles a block: about 35 MB at 128 x 256 on 132 SMs, however
    # many products share them
    partial_sums="2 * max(1, SMS // BATCH) * BM * BN",
    counters="CONSUMERS",  # each consumer warpgroup counts its rows of a tile in
)

register(Variant(
    name="wgmma_last_round",
    adds="rung 14 with the last, ragged round of tiles cut along K into pieces that fill the"
         " SMs; a cut tile is summed by its last piece in",
    **{**WGMMA, **LAST_ROUND,
       "defaults": {"BM": 128, "BN": 256, "CONSUMERS": 2, "STAGES": 3, "GROUP": 8,
                    "TMA_STORE": 1},
       "space": {"BM": [128, 256], "BN": [128, 256], "CONSUMERS": [2], "STAGES": [3, 4],
                 "GROUP": [8], "TMA_STORE": [0, 1]},
       "extra_args": ("tensor_map_a", "tensor_map_b", "tensor_map_c", "partials", "arrivals")},
))

register(Variant(
    name="wgmma_8bit_last_round",
    adds="rung 25 over rung 18: the last round cut for FP8 and int8 (int32 partial sums, exact)",
    **{**WGMMA_8BIT, **LAST_ROUND,
       "defaults": {k: v for k, v in WGMMA_8BIT["defaults"].items() if k != "SPREAD"},
       "space": {k: v for k, v in WGMMA_8BIT["space"].items() if k != "SPREAD"},
       "extra_args": (*WGMMA_8BIT["extra_args"], "partials", "arrivals")},
))

# Rung 26: rung 12 with C staged in shared memory (the ring's, or more where C's tile
# with its rows' shifts outgrows it: four bytes a value covers a float32 C) and written a
# whole 16-byte line at a time.
register(Variant(
    name="mma_staged_c",
    # rung 12's two points, and 64 x 128 tiles (four warps of 32 x 64: fewer registers, so
    # more warps an SM where a tile is little work besides its store)
    candidates=[{}, {"BM": 64, "BN": 64, "WM": 32, "WN": 32},
                {"BM": 64, "BN": 128, "WM": 32, "WN": 64},
                {"BM": 64, "BN": 128, "WM": 32, "WN": 64, "STAGES": 2}],
    adds="rung 12 with C's tile staged in shared memory, each row as it lies across C's"
         " 16-byte lines, and written a whole aligned line a store at any alignment",
    **{**MMA, "template": "gemm/26_mma_staged_c.cu.j2",
       "smem_bytes": "max(BYTES * STAGES * BK * (BM + BN), 4 * BM * (BN + 8))"},
))

# Rung 27: rung 20 with both operands copied through a ring of cp.async stages. Defaults:
# rung 20's tile (8 rows, 32 columns, 8 warps), a stage of one 16-byte chunk a lane a column
# (float32; two in float64), four slots.
register(Variant(
    name="skinny_async",
    template="gemm/27_skinny_async.cu.j2",
    adds="rung 20 with both operands copied through a ring of cp.async stages: the big"
         " operand's bytes in flight take no registers and no barrier waits for them",
    defaults={"BM": 8, "BN": 32, "BK": 128, "WARPS": 8, "STAGES": 4, "SPLITS": 4,
              "FEW_COLUMNS": 0},
    space={"BM": [1, 2, 4, 8, 16], "BN": [16, 32, 64], "BK": [128, 256], "WARPS": [4, 8],
           "STAGES": [2, 4, 6], "SPLITS": [2, 4, 16], "FEW_COLUMNS": [0, 1]},
    constraints=[
        # a stage is whole 16-byte chunks for every thread, whichever way the big operand
        # runs: along K a lane's chunk of each of its warp's columns, along N a thread's
        # chunk of every LANES-th k
        "BK % (512 // BYTES) == 0 and BN % WARPS == 0",
        "BN % (16 // BYTES) == 0 and THREADS % (BN // (16 // BYTES)) == 0"
        " and BK % (THREADS // (BN // (16 // BYTES))) == 0",
        "BN <= THREADS",  # along N, a thread adds each column's sums
        # at most 64 registers of sums a thread, either way
        "max(BN // WARPS, 16 // BYTES) * BM * BYTES <= 256",
        "SPLITS >= 2",  # blocks share each tile: split-K's arguments
    ],
    block=("32 * WARPS",),
    grid=("cdiv(M if FEW_COLUMNS else N, BN)", "cdiv(N if FEW_COLUMNS else M, BM)"),
    tile_shape=("BN if FEW_COLUMNS else BM", "BM if FEW_COLUMNS else BN", "BK"),
    smem_bytes="STAGES * BK * (BN + BM) * BYTES",
    dynamic_smem=True,
    splits="SPLITS",
    extra_args=("partials", "arrivals"),
    flags=("aligned16",),
    dtypes=("float32", "float64"),
    min_cc=80,
    # where it beat rung 20 (evidence/skinny_async_against_skinny.txt): 9-16 rows a block
    # read once, two splits; four warps of 16 columns (float64's sums); rung 20's tile at
    # two splits
    candidates=[{**side, **p} for side in ({}, {"FEW_COLUMNS": 1}) for p in (
        {"SPLITS": 2}, {"BM": 16, "SPLITS": 2}, {"BN": 16, "WARPS": 4, "SPLITS": 2})],
))

# Rung 28: rung 14 with the consumer warpgroups on whole tiles of their own, taking turns.
register(Variant(
    name="wgmma_pingpong",
    adds="rung 14 with each consumer warpgroup on whole tiles of its own, their main loops in"
         " turn: one multiplies while the other stores its C",
    # 128 x 128 a warpgroup (128 x 256 a block of two) over five stages; 64 x 256, rung 14's
    # instruction, has room for four
    candidates=[{}, {"BM": 64, "BN": 256, "STAGES": 4}],
    fills_last_round=True,
    **{**WGMMA, "template": "gemm/28_wgmma_pingpong.cu.j2",
       "defaults": {"BM": 128, "BN": 128, "CONSUMERS": 2, "STAGES": 5, "GROUP": 8,
                    "TMA_STORE": 1, "SPREAD": 0},
       "space": {"BM": [64, 128], "BN": [128, 192, 256], "CONSUMERS": [2],
                 "STAGES": [2, 3, 4, 5], "GROUP": [8], "TMA_STORE": [0, 1], "SPREAD": [0]},
       "constraints": [
           "STAGES >= 2",  # a consumer hands a slot back only once the next one is full
           "CONSUMERS == 2 and BM <= 256",  # two take turns; a TMA box has at most 256 rows
           # whole m64 rows; any width in 16s from one box up over a K-major B (rung 14's)
           "BM % 64 == 0 and BN % 16 == 0 and BN >= 64",
           "BM // 64 * BN // 2 <= 128",  # accumulators a consumer thread holds: a whole tile
           "TMA_STORE in (0, 1, 2)",  # 2: planned, for rows TMA cannot write
       ],
       # C staged for each warpgroup's whole tiles: CONSUMERS x BM rows
       "smem_bytes": RING_BYTES + c_staging_bytes("CONSUMERS * BM"),
       "tma_boxes": {"a": "BM", "b": "BN", "c": "(TMA_STORE == 1) * BM"}},
))

# Rung 31: float32 products as three TF32 products of each value's big and small parts,
# for precision="tf32x3" (rung 14's TF32 point, wgmma_tf32, extended). Its slots hold both
# parts: twice rung 14's ring, so three stages at 128 x 128; a thread holds three sets of
# accumulators (the sums, the corrections', a step's big x big).
TF32X3 = dict(
    **{**WGMMA, **TF32,
       "precision": "tf32x3",
       "template": "gemm/31_wgmma_tf32x3.cu.j2",
       "constraints": [*WGMMA["constraints"],
                       "3 * (BM // CONSUMERS // 64) * BN // 2 <= 192"],  # three sets a thread
       "defaults": {"BM": 128, "BN": 128, "CONSUMERS": 2, "STAGES": 3, "GROUP": 8,
                    "TMA_STORE": 0, "SPREAD": 0},
       "space": {"BM": [64, 128, 256], "BN": [64, 128], "CONSUMERS": [1, 2],
                 "STAGES": [2, 3], "GROUP": [8], "TMA_STORE": [0, 1], "SPREAD": [0]},
       # rung 14's, and the small parts' tiles and barriers after the ring
       "smem_bytes": WGMMA["smem_bytes"] + " + STAGES * (BM + BN) * 128 + 8 * STAGES + 1024"},
)

register(Variant(
    name="wgmma_tf32x3",
    adds="float32's accuracy on the TF32 tensor cores: each value split into big and small"
         " TF32 parts in shared memory, three products a step, each half slot's summed from"
         " zero and added in round-to-nearest",
    **TF32X3,
))

# Rung 32: rung 31 with A's parts split in the consumers' registers (wgmma's A from
# registers) and only B split in shared memory: a slot's small parts are B's alone, so
# four stages fit at 128 x 128; two sets of accumulators (a K step's three products, and
# the sums). Not yet measured against rung 31: auto takes rung 31.
register(Variant(
    name="wgmma_tf32x3_rs",
    adds="rung 31 with A's big and small parts split in registers, where wgmma reads them:"
         " only B split in shared memory; a K step's three products summed from zero",
    **{**TF32X3,
       "template": "gemm/32_wgmma_tf32x3_rs.cu.j2",
       "defaults": {**TF32X3["defaults"], "STAGES": 4},
       "space": {**TF32X3["space"], "STAGES": [2, 3, 4]},
       # rung 14's, and B's small parts and the barriers after the ring
       "smem_bytes": WGMMA["smem_bytes"] + " + STAGES * BN * 128 + 8 * STAGES + 1024"},
))

# Rung 33: rung 31 on parts a pre-pass split once (kernels/copy/split_tf32.cu.j2), each
# where the operand's value lies: the copy engine lands four tiles a slot and no warp
# splits. 2.1-2.3x SGEMM at 4096^3 and 8192^3, pre-pass included (docs/ladder.md); auto
# takes it for precision="tf32x3" where it pays (choice.TF32X3_MIN_SIDE, TF32X3_MIN_K).
register(Variant(
    name="wgmma_tf32x3_parts",
    adds="rung 31 on TF32 parts a pre-pass writes once: four tiles a slot by TMA, no warp"
         " splitting in the loop",
    **{**TF32X3,
       "template": "gemm/33_wgmma_tf32x3_parts.cu.j2",
       "extra_args": (*TF32X3["extra_args"], "tensor_map_a_small", "tensor_map_b_small")},
))

# Rung 34: rung 24 with its staging ring filled by TMA: eight maps an operand, one per
# residue of its lines mod 8 (a stride of 8 x ld values: 16 x ld bytes, whatever ld), so
# that 16-bit rows of any length are read in place at the copy engine's pace; each box
# brings SPAN phases. Rung 24's producers and rung 16's split of K (SPLITS > 1), one
# consumer warpgroup.
register(Variant(
    name="wgmma_any_ld",
    template="gemm/34_wgmma_any_ld.cu.j2",
    adds="rung 24's staging ring filled by TMA: eight maps an operand, of every eighth line"
         " (8 x ld values apart: a 16-byte stride whatever ld), boxes of SPAN phases from"
         " the 16 bytes before each line's values; K split across blocks where SPLITS > 1",
    # 64 x 64 tiles over two splits for outputs of few tiles (a narrow C over a long K,
    # the product this rung is mostly for), more splits for fewer still, and no split at
    # 128 x 64 and 128 x 128 for outputs of many tiles
    candidates=[{}, {"SPLITS": 4}, {"SPLITS": 8}, {"SPAN": 2},
                {"SPLITS": 1, "BM": 128, "STAGES": 3, "SPAN": 2},
                {"SPLITS": 1, "BM": 128, "BN": 128, "STAGES": 3, "RAW": 3, "SPAN": 1}],
    defaults={"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 4, "RAW": 2, "SPAN": 3,
              "GROUP": 8, "SPLITS": 2},
    space={"BM": [64, 128], "BN": [64, 128], "CONSUMERS": [1], "STAGES": [2, 3, 4],
           "RAW": [2, 3, 4], "SPAN": [1, 2, 3], "GROUP": [8], "SPLITS": [1, 2, 4, 8]},
    **{**HOPPER_SPLIT_K,
       "constraints": [*HOPPER["constraints"], "RAW >= 1",
                       "CONSUMERS == 1",  # rung 24's producers
                       # three warpgroups hold 168 registers a thread: with the partials'
                       # loops, tiles past 64 x 64 spill (ptxas)
                       "SPLITS == 1 or BM * BN <= 64 * 64",
                       # a span's phases laid out together, into as many ring slots
                       "STAGES > SPAN"],
       "block": ("128 * (CONSUMERS + 2)",),
       "extra_args": ("tensor_maps_a", "tensor_maps_b", "partials", "arrivals"),
       # rung 13's ring, then the staging ring: each slot SPAN phases of lines of 144
       # bytes (MN-major; K-major lines of 64 x SPAN + 8 values take no more)
       "smem_bytes": RING_BYTES + " + RAW * (BM + BN) * 144 * SPAN + 16 * RAW + 128"},
))

# Rung 35: rung 16's split of K with the partials summed by a second kernel over every SM
# (kernels/gemm/35_wgmma_splitk_sum.cu.j2), so that an output of a few large tiles splits
# K dozens of ways: 128 x 64 or 64 x 128 tiles in 16 splits for a few tiles over a long K
# (92 x 280 x 16064 17.3 us where rung 17 took 19.6), 128 x 128 in 8 for a few dozen
# (512 x 512 x 16384:TN 31.9 against rung 16's 38.2; evidence/splitk_sum_c1b0ca5.txt).
# auto weighs no point of it (priced and picked, its points paid a padded copy and a
# second launch a call: docs/ladder.md): it takes rung 16's pick over a few tiles instead
# (rung 16's ``splits_to_fill``, ``ranking.split_to_fill``).
register(Variant(
    name="wgmma_splitk_sum",
    template="gemm/35_wgmma_splitk_sum.cu.j2",
    adds="rung 16 with its partials summed by a second kernel spread over the SMs, in split"
         " order: large tiles, K split dozens of ways",
    candidates=[],
    defaults={"BM": 128, "BN": 128, "CONSUMERS": 2, "STAGES": 4, "GROUP": 8, "SPLITS": 16},
    space={"BM": [64, 128], "BN": [64, 128, 256], "CONSUMERS": [1, 2], "STAGES": [4, 6],
           "GROUP": [8], "SPLITS": [2, 4, 8, 16, 32, 64]},
    **{**HOPPER_SPLIT_K,
       "constraints": [*HOPPER["constraints"], "SPLITS >= 2"],
       "extra_args": ("tensor_map_a", "tensor_map_b", "partials"),
       "counters": "0",
       "sum_pass": True},
))
