"""Rungs 11-17, on the tensor cores: wmma and mma.sync (sm_80 on), then Hopper's wgmma
fed by TMA (a ring, a producer warp, C stored by TMA; TF32 and float64 twins), split
along K, and few rows a block.
"""

from __future__ import annotations

from ..registry import Variant, register
from .cuda_cores import WARP_TILING

# The tensor-core rungs: warp tiles as above, 16-bit inputs (float32 as TF32 where a rung
# says so), float accumulators, sm_80 on.
TENSOR_CORES = dict(
    block=WARP_TILING["block"],
    grid=WARP_TILING["grid"],
    dtypes=("float16", "bfloat16"),
    min_cc=80,
)

register(Variant(
    name="wmma",
    template="gemm/11_wmma.cu.j2",
    adds="tensor cores through the WMMA API: a warp multiplies 16 x 16 x 16 fragments at once",
    defaults={"BM": 128, "BN": 128, "BK": 32, "WM": 64, "WN": 32},
    space={"BM": [64, 128], "BN": [64, 128], "BK": [16, 32], "WM": [32, 64], "WN": [32, 64]},
    constraints=[
        "BM % WM == 0 and BN % WN == 0",
        "WM % 16 == 0 and WN % 16 == 0 and BK % 16 == 0",
        "BM * BK % THREADS == 0 and BK * BN % THREADS == 0",
    ],
    smem_bytes="BYTES * (BM * (BK + 8) + BK * (BN + 8)) + 4 * 256 * (BM // WM) * (BN // WN)",
    **TENSOR_CORES,
))

# What a TF32 rung (12', 14') is: float32 inputs on the tensor cores as TF32, only when
# asked for (by name, or precision="tf32"), read K-major.
TF32 = dict(dtypes=("float32",), a_layouts=("row",), b_layouts=("col",), precision="tf32",
            # auto copies an operand that is not K-major into K-major first, always: the
            # copy costs two passes over it; the exact rung auto took instead ran at 0.12x
            # cuBLAS's TF32 (NN 4096^3)
            transpose_first={"a": ("row", "True"), "b": ("col", "True")})
TF32_ADDS = "(10-bit mantissas): K-major operands (a row-major A, a column-major B such as w.T)"

# Rung 12 for 16-bit inputs and for float32 inputs as TF32.
MMA = dict(
    template="gemm/12_mma.cu.j2",
    defaults={"BM": 128, "BN": 128, "BK": 32, "WM": 64, "WN": 64, "STAGES": 3, "GROUP": 8},
    space={"BM": [64, 128, 256], "BN": [64, 128, 256], "BK": [32, 64], "WM": [32, 64],
           "WN": [32, 64], "STAGES": [2, 3, 4], "GROUP": [8]},
    constraints=[
        "BM % WM == 0 and BN % WN == 0",
        "WM % 16 == 0 and WN % 16 == 0",
        "128 <= THREADS <= 256",               # with fewer warps ptxas spills
        "BK == 32 or WM * WN < 64 * 64",       # 128 accumulators and 64-deep phases spill
        # a thread copies as many 16-byte chunks as every other, at most 8 of A's and of B's
        "BM * BK * BYTES // 16 % THREADS == 0 and BK * BN * BYTES // 16 % THREADS == 0",
        "BM * BK * BYTES // 16 <= 8 * THREADS and BK * BN * BYTES // 16 <= 8 * THREADS",
    ],                                         # (16 a thread: tf32 64 x 256 tiles spill)
    smem_bytes="BYTES * STAGES * BK * (BM + BN)",
    dynamic_smem=True,
    flags=("aligned16",),
    **TENSOR_CORES,
)

register(Variant(
    name="mma",
    candidates=[{}, {"BM": 64, "BN": 64, "WM": 32, "WN": 32}],
    adds="mma.sync from ldmatrix on swizzled tiles, fed by a cp.async ring",
    **MMA,
))

register(Variant(
    name="mma_tf32",
    candidates=[{}, {"BM": 64, "BN": 64, "WM": 32, "WN": 32}],
    adds="mma.sync m16n8k8 for float32 inputs as TF32 " + TF32_ADDS,
    **{**MMA, **TF32},
))

# The Hopper rungs: wgmma fed by a TMA ring (13), and its C through TMA stores (14), for
# 16-bit inputs and (14') float32 inputs as TF32.
#: The Hopper rungs' tiles: whole m64 rows a consumer warpgroup, whole 64-wide boxes (an
#: MN-major operand arrives in boxes 128 bytes wide, C leaves in such boxes)
WHOLE_BOXES = "BM % (64 * CONSUMERS) == 0 and BN % 64 == 0"
#: ... and rung 14's: any width in 16s from one box up, for B read K-major (one box of BN
#: rows; the plan refuses a row-major B at such a width) and C stored a row at a time where
#: its boxes would not be whole (TMA_STORE 2: ``plan._store``). A width cut to fill the
#: SMs' last round (``ranking.filling_width``) takes less time a round than 64-wide steps
#: allow.
ANY_WIDTH = "BM % (64 * CONSUMERS) == 0 and BN % 16 == 0 and BN >= 64"
HOPPER = dict(
    constraints=[
        "STAGES >= 2",      # a consumer hands a slot back only once the next one is full
        "CONSUMERS <= 2 and BM <= 256",  # a TMA box has at most 256 rows
        # whole m64 rows per consumer warpgroup, whole 64-wide boxes
        WHOLE_BOXES,
        "BM // CONSUMERS // 64 * BN // 2 <= 128",  # accumulators a consumer thread holds
    ],
    block=("128 * (CONSUMERS + 1)",),
    # one block per SM, at most one per tile, for each product of the batch (grid z); with
    # SPREAD, the SMs shared among the products: SMS // BATCH blocks each, at least one
    grid=("min(max(1, SMS // BATCH) if SPREAD else SMS, cdiv(M, BM) * cdiv(N, BN))", "1"),
    dynamic_smem=True,
    min_cc=90,
    target="sm_90a",
    dtypes=("float16", "bfloat16"),
    tile_shape=("BM", "BN", "128 // BYTES"),  # a K step: one 128-byte row of each operand
)
# the ring (128 bytes of k per row a stage), its 2 x STAGES mbarriers, 1 KiB to align it
RING_BYTES = "STAGES * (BM + BN) * 128 + 16 * STAGES + 1024"


def c_staging_bytes(rows: str) -> str:
    """The shared memory (an expression, to add to the ring's) where rung 14 stages
    ``rows`` rows of C at once (every consumer warpgroup's): two 128-byte boxes of each
    row (one where BN is one box) for TMA stores (TMA_STORE 1), or the rows whole and a
    16-byte line wider where TMA cannot write them (2)."""
    return (f" + (TMA_STORE == 1) * {rows} * 128 * min(BN * BYTES // 128, 2)"
            f" + (TMA_STORE == 2) * {rows} * (BN * BYTES + 16)")

register(Variant(
    name="wgmma_ring",
    template="gemm/13_wgmma_ring.cu.j2",
    adds="Hopper: warpgroups issue wgmma on shared-memory tiles that TMA brings into an mbarrier"
         " ring; a producer warpgroup, CONSUMERS consumer warpgroups, a persistent grid",
    defaults={"BM": 128, "BN": 256, "CONSUMERS": 2, "STAGES": 4, "GROUP": 8, "SPREAD": 0},
    space={"BM": [64, 128, 256], "BN": [64, 128, 256], "CONSUMERS": [1, 2],
           "STAGES": [2, 3, 4, 5, 6], "GROUP": [8], "SPREAD": [0]},
    smem_bytes=RING_BYTES,
    tma_boxes={"a": "BM", "b": "BN"},  # A's box: BM rows; B's: BN
    extra_args=("tensor_map_a", "tensor_map_b"),
    **HOPPER,
))

WGMMA = dict(
    **{**HOPPER, "constraints": [
        *HOPPER["constraints"],
        "TMA_STORE in (0, 1, 2)",  # 2: planned, for rows TMA cannot write
        # ptxas spills staging a float32 C from two m64 row blocks of 128 accumulators
        # in the 168 registers a thread of 384 gets
        "not (TMA_STORE and BYTES == 4 and CONSUMERS == 2 and BN == 128 and BM == 256)",
    ]},
    template="gemm/14_wgmma.cu.j2",
    # Four stages at 128 x 256, since C leaves a box at a time: on 80 aligned random
    # products (evidence/wgmma_stages_0bceb40.txt) 0.96-0.97x the time of
    # three stages in the geometric mean, never more than 1.008x, and 0.81x where the
    # operand streamed has few tiles to share it (11008 x 256 x 2368:TN)
    defaults={"BM": 128, "BN": 256, "CONSUMERS": 2, "STAGES": 4, "GROUP": 8, "TMA_STORE": 1,
              "SPREAD": 0},
    space={"BM": [64, 128, 256], "BN": [64, 128, 192, 256], "CONSUMERS": [1, 2],
           "STAGES": [2, 3, 4, 5, 6], "GROUP": [8], "TMA_STORE": [0, 1], "SPREAD": [0]},
    # with C staged: the consumer warpgroups' rows of a tile, BM of them
    smem_bytes=RING_BYTES + c_staging_bytes("BM"),
    # C's box: one consumer warpgroup's rows, when C leaves through TMA
    tma_boxes={"a": "BM", "b": "BN", "c": "(TMA_STORE == 1) * BM // CONSUMERS"},
    extra_args=("tensor_map_a", "tensor_map_b", "tensor_map_c"),
)

register(Variant(
    name="wgmma",
    # 128 x 256 tiles, narrower ones for outputs of few tiles (one m64 warpgroup and a
    # deeper ring under 128 rows: 8 stages at 64 x 128, 10 at 64 x 64, as deep as shared
    # memory leaves them, 0.978x and 0.966x the time of 6 on 32 published rows, up to 0.83x
    # over a long K; evidence/plain_pads_53fe4c5.txt), 128 x 192 where their waves are
    # whole and 256's ragged (512 x 18944 x 3584: 4 x 99 tiles, three waves of 132), and
    # blocks sharing the SMs among a batch's products
    candidates=[{}, {"BN": 128, "STAGES": 6}, {"BM": 64, "BN": 128, "CONSUMERS": 1, "STAGES": 8},
                {"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 10}, {"BN": 192, "STAGES": 4},
                {"BN": 128, "STAGES": 6, "SPREAD": 1}],
    adds="C staged in shared memory and written by TMA stores while the next tile runs",
    fills_last_round=True,
    **{**WGMMA, "constraints": [ANY_WIDTH if rule == WHOLE_BOXES else rule
                                for rule in WGMMA["constraints"]]},
))

register(Variant(
    name="wgmma_tf32",
    candidates=[{}, {"BN": 128}, {"BM": 64, "BN": 128, "CONSUMERS": 1, "STAGES": 6}],
    adds="wgmma for float32 inputs as TF32 " + TF32_ADDS,
    # C of float32 through shared memory would leave room for only two stages of 128 x 256
    **{**WGMMA, **TF32, "defaults": {**WGMMA["defaults"], "STAGES": 4, "TMA_STORE": 0}},
))


register(Variant(
    name="dmma",
    template="gemm/15_dmma.cu.j2",
    adds="rung 12 for float64 on the FP64 tensor cores (mma.sync .f64): each lane loads its"
         " own doubles, so every layout is read in place; padded tiles",
    candidates=[{}, {"BM": 64, "BN": 64, "WM": 32, "WN": 32}],
    defaults={"BM": 64, "BN": 128, "BK": 8, "WM": 64, "WN": 32, "STAGES": 3, "GROUP": 8},
    space={"BM": [64, 128], "BN": [64, 128], "BK": [8, 16], "WM": [32, 64],
           "WN": [32, 64], "STAGES": [2, 3, 4], "GROUP": [8]},
    constraints=[
        "BM % WM == 0 and BN % WN == 0",
        "WM % 16 == 0 and WN % 8 == 0",
        "128 <= THREADS <= 256",
        "WM * WN <= 64 * 32",  # 64 double accumulators (128 registers) a thread
        "WM * WN < 64 * 32 or BK == 8",  # with those, 16-deep phases spill (sm_90)
        # a thread copies as many 16-byte chunks as every other
        "BM * BK // 2 % THREADS == 0 and BK * BN // 2 % THREADS == 0",
    ],
    # each operand's tile and 4 doubles of padding a row (BM or BN rows K-major, else BK)
    smem_bytes="BYTES * STAGES * ((BM + BN) * BK + 4 * (max(BM, BK) + max(BN, BK)))",
    dynamic_smem=True,
    flags=("aligned16",),
    block=WARP_TILING["block"],
    grid=WARP_TILING["grid"],
    dtypes=("float64",),
    min_cc=80,
))

# Rungs 16 and 17: the Hopper ring with rung 10's split of K, for outputs of few tiles.
# Each consumer warp counts its own fragment in (one counter a warp), and the grid shares
# the SMs among the products and splits (grid z), one block per tile at most.
HOPPER_SPLIT_K = dict(
    **{**HOPPER, "grid": ("min(max(1, SMS // (BATCH * SPLITS)), cdiv(M, BM) * cdiv(N, BN))",
                          "1")},
    smem_bytes=RING_BYTES,
    tma_boxes={"a": "BM", "b": "BN"},
    extra_args=("tensor_map_a", "tensor_map_b", "partials", "arrivals"),
    splits="SPLITS",
    counters="4 * CONSUMERS",
)

register(Variant(
    name="wgmma_splitk",
    template="gemm/16_wgmma_splitk.cu.j2",
    adds="rung 13 with K split across blocks (rung 10's idea), for outputs of few tiles such"
         " as few rows: SPLITS blocks a tile, each warp's last adds the partials in order",
    # 128 x 128 for outputs of a few dozen such tiles over a long K (weight gradients:
    # 512-2048 square, K = tokens), where two splits of each fill most of the SMs; in four
    # for a dozen to a few dozen such tiles over K > 10^4 (81 x 1043 x 13229:TN 0.70x the
    # kernel time of 64 x 64 tiles; evidence/splitk_four_splits.txt). Timed on the H200's
    # calibration files only, so the H100 does not weigh it.
    candidates=[{}, {"SPLITS": 4}, {"BM": 128, "CONSUMERS": 2},
                {"BM": 128, "BN": 128, "CONSUMERS": 2},
                {"BM": 128, "BN": 128, "CONSUMERS": 2, "SPLITS": 4}],
    # where its tiles leave SMs for K split four ways or more, rung 35 splits it that many
    # (its partials summed by a second kernel: no counters, no last warp summing alone)
    splits_to_fill="wgmma_splitk_sum",
    defaults={"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 6, "GROUP": 8, "SPLITS": 2},
    # SPLITS 3 and 4 measured slower at 16 x 4096 x 4096, 8 or 10 stages no faster (evidence/
    # wgmma_splitk.txt): the grid stays at SMS blocks, so more splits only walk more tiles
    space={"BM": [64, 128], "BN": [64, 128], "CONSUMERS": [1, 2], "STAGES": [4, 6],
           "GROUP": [8], "SPLITS": [2, 4]},
    **{**HOPPER_SPLIT_K, "constraints": [
        *HOPPER["constraints"],
        # K split: one split is rung 13's kernel, so it is refused here rather than run
        # untested (rung 17 takes SPLITS 1, measured)
        "SPLITS >= 2",
        # with the partials' loops, 128 accumulators a consumer thread spill (128 x 128,
        # one consumer)
        "BM // CONSUMERS * BN <= 64 * 128",
    ]},
))

register(Variant(
    name="wgmma_rows",
    template="gemm/17_wgmma_rows.cu.j2",
    adds="rung 16 for few rows: A's rows are the instruction's n (from 8) and B's columns its"
         " m, so no m64 instruction computes rows that are not there",
    # 64 columns a tile and four splits for outputs of a few dozen tiles over a long K (M and
    # N in the hundreds, K in the thousands), where two splits leave SMs idle and 128
    # columns make half the tiles
    candidates=[{"BN": 64}, {}, {"SPLITS": 4}, {"BM": 32}, {"BN": 64, "SPLITS": 4}],
    defaults={"BM": 16, "BN": 128, "CONSUMERS": 1, "STAGES": 8, "GROUP": 8, "SPLITS": 2},
    # SPLITS 1: no split, C stored from the accumulators (outputs of many tiles)
    space={"BM": [16, 32], "BN": [64, 128], "CONSUMERS": [1, 2], "STAGES": [4, 8],
           "GROUP": [8], "SPLITS": [1, 2, 4]},
    **{**HOPPER_SPLIT_K, "constraints": [
        "STAGES >= 2",  # a consumer hands a slot back only once the next one is full
        "CONSUMERS <= 2 and BN <= 256",  # a TMA box has at most 256 rows
        # whole m64 column blocks per consumer warpgroup; n a multiple of 8, at most 256
        "BN % (64 * CONSUMERS) == 0 and BM % 8 == 0 and BM <= 256",
        "BN // CONSUMERS // 64 * BM // 2 <= 128",  # accumulators a consumer thread holds
    ]},
    # A's rows are wgmma's B operand, with n = BM: read K-major only. A column-major A (M x K,
    # few rows: a small copy) is copied row-major first.
    a_layouts=("row",),
    transpose_first={"a": ("row", "True")},
))
