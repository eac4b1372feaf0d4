"""Rungs 1-10, on the CUDA cores: from one thread a value of C to warp tiles, a
pipeline of cp.async stages and K split across blocks.
"""

from __future__ import annotations

from ..registry import Variant, register

register(Variant(
    name="naive",
    template="gemm/01_naive.cu.j2",
    adds="one thread per output; threadIdx.x walks rows, so warps read A and write C strided",
    tile_shape=("block", "block", "1"),
    defaults={"block": 8},
    space={"block": [8, 16, 32]},
    constraints=[],
    block=("block", "block"),
    grid=("cdiv(M, block)", "cdiv(N, block)"),
))

register(Variant(
    name="coalesced",
    template="gemm/02_coalesced.cu.j2",
    adds="threadIdx.x walks columns: a warp reads a contiguous row of B and writes one of C",
    tile_shape=("block", "block", "1"),
    defaults={"block": 32},
    space={"block": [8, 16, 32]},
    constraints=[],
    block=("block", "block"),
    grid=("cdiv(N, block)", "cdiv(M, block)"),
))

register(Variant(
    name="tiled",
    template="gemm/03_tiled.cu.j2",
    adds="tile x tile blocks stage A and B in shared memory: each global load is used tile times",
    tile_shape=("tile", "tile", "tile"),
    candidates=[{}],
    defaults={"tile": 16},
    space={"tile": [8, 16, 32]},
    constraints=[],
    block=("tile", "tile"),
    grid=("cdiv(N, tile)", "cdiv(M, tile)"),
    smem_bytes="BYTES * 2 * tile * (tile + 1)",
))

register(Variant(
    name="coarse1d",
    template="gemm/04_coarse1d.cu.j2",
    adds="each thread computes TM outputs of a column: one B load from shared memory feeds TM FMAs",
    candidates=[{}],
    defaults={"BM": 32, "BN": 64, "BK": 8, "TM": 16},
    space={"BM": [32, 64, 128], "BN": [32, 64, 128], "BK": [8, 16, 32], "TM": [4, 8, 16]},
    constraints=[
        "BM % TM == 0",
        "THREADS % 32 == 0",         # whole warps
        "THREADS <= 512",            # at 1024 a thread gets 64 registers and ptxas spills
        "BYTES < 8 or THREADS * TM < 8192",  # float64 takes two registers a value: spills
        "BM * BK % THREADS == 0",    # every thread loads as many elements of A's tile
        "BK * BN % THREADS == 0",    # and of B's
    ],
    block=("BM * BN // TM",),
    grid=("cdiv(N, BN)", "cdiv(M, BM)"),
    smem_bytes="BYTES * (BM * BK + BK * BN)",
))

register(Variant(
    name="coarse2d",
    template="gemm/05_coarse2d.cu.j2",
    adds="each thread computes a TM x TN block from register fragments: TM*TN FMAs per TM+TN loads",
    defaults={"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8},
    space={"BM": [64, 128], "BN": [64, 128], "BK": [8, 16], "TM": [4, 8], "TN": [4, 8]},
    constraints=[
        "BM % TM == 0",
        "BN % TN == 0",
        "THREADS % 32 == 0",
        "BM * BK % THREADS == 0",
        "BK * BN % THREADS == 0",
        # float64 takes two registers a value: past 256 threads, or 16 values staged per
        # thread from global memory, ptxas spills
        "BYTES < 8 or THREADS <= 256 and (BM + BN) * BK // THREADS <= 16",
    ],
    block=("(BM // TM) * (BN // TN)",),
    grid=("cdiv(N, BN)", "cdiv(M, BM)"),
    smem_bytes="BYTES * (BM * BK + BK * BN)",
))

register(Variant(
    name="vectorized",
    template="gemm/06_vectorized.cu.j2",
    adds="16-byte global loads and stores, A transposed in shared memory, 16-byte fragment reads",
    candidates=[{}],
    defaults={"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8},
    space={"BM": [64, 128], "BN": [64, 128], "BK": [8, 16], "TM": [4, 8], "TN": [4, 8]},
    constraints=[
        "BM % TM == 0",
        "BN % TN == 0",
        "BK % 4 == 0 and TM % 4 == 0 and TN % 4 == 0",  # everything moves in groups of four
        "THREADS % 32 == 0",
        "BM * BK // 4 % THREADS == 0",
        "BK * BN // 4 % THREADS == 0",
        "BYTES < 8 or THREADS <= 256",  # float64: two registers a value, spills beyond
    ],
    block=("(BM // TM) * (BN // TN)",),
    grid=("cdiv(N, BN)", "cdiv(M, BM)"),
    smem_bytes="BYTES * (BM * BK + BK * BN)",
    flags=("aligned",),
    # 16-bit products run on the tensor cores and rung 23: rung 6 was the fastest candidate
    # on none of the 1,812 16-bit regret rows of either GPU, and the seven published rows
    # where its estimate came out cheapest ran it at 0.38-0.57x cuBLAS (14607 x 444 x 9:TN,
    # bf16 seed 88: 40.9 us against rung 14's 20.2; evidence/vectorized_16_bit_3a7aa70.txt)
    auto_dtypes=("float32", "float64"),
))

register(Variant(
    name="transposed_b",
    template="gemm/07_transposed_b.cu.j2",
    adds="reads B as B^T (column-major B, e.g. w.T) with coalesced loads and a padded tile",
    tile_shape=("tile", "tile", "tile"),
    defaults={"tile": 16},
    space={"tile": [8, 16, 32]},
    constraints=[],
    block=("tile", "tile"),
    grid=("cdiv(N, tile)", "cdiv(M, tile)"),
    smem_bytes="BYTES * 2 * tile * (tile + 1)",
    b_layouts=("col",),
))

# The warp-tiled rungs (8, 9 and splitk) share their geometry and these rules.
WARP_TILING_RULES = [
    "BM % WM == 0 and BN % WN == 0",
    # the warp tile is whole steps of 32 thread tiles, WNITER across (WMITER down)
    "WM * WN % (32 * TM * TN * WNITER) == 0 and WM * WN >= 32 * TM * TN * WNITER"
    " and WM % (WM * WN // (32 * TM * TN * WNITER) * TM) == 0",
    "WN % (WNITER * TN) == 0",
    "WM * WN // 32 <= 128",                              # accumulators a thread holds
    "THREADS * (WM * WN // 32) <= 32768",  # all accumulators: half an SM's 64K registers
    "THREADS >= 64",
    "BM * BK // 4 % THREADS == 0",                       # every thread copies as many groups
    "BK * BN // 4 % THREADS == 0",
]
# Where rungs 9 and 10 copy a column-major B into rows before the product: from M = 1024
# rows, and only where the product or K is long enough that the copy's launch and bytes are
# won back by the faster reads (rung 9 says more)
B_COPY_PAYS = "M >= 1024 and (K >= 2048 or M * N * K >= 2**32)"
WARP_TILING = dict(
    block=("(BM // WM) * (BN // WN) * 32",),
    grid=("cdiv(N, BN)", "cdiv(M, BM)"),
    dtypes=("float32",),  # the exact-FFMA FP32 path; 16-bit types go to the tensor-core rungs
    flags=("aligned",),
)

register(Variant(
    name="warptile",
    template="gemm/08_warptile.cu.j2",
    adds="block tile -> warp tile -> thread tile: a warp's fragment reads are few broadcasts",
    candidates=[{}],
    defaults={"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 32, "WNITER": 2, "TM": 8, "TN": 4,
              "GROUP": 8},
    space={"BM": [64, 128], "BN": [64, 128], "BK": [8, 16], "WM": [32, 64], "WN": [32, 64],
           "WNITER": [2, 4], "TM": [4, 8], "TN": [4], "GROUP": [1, 8]},
    constraints=[
        *WARP_TILING_RULES,
        # two warps of 128 accumulators each, four steps across, 16-deep tiles: ptxas spills
        "THREADS >= 128 or WM * WN < 64 * 64 or WNITER == 2 or BK == 8",
    ],
    smem_bytes="BYTES * BK * (BM + BN + 4)",
    **WARP_TILING,
))

register(Variant(
    name="pipelined",
    template="gemm/09_pipelined.cu.j2",
    adds="cp.async through a ring of STAGES tiles in dynamic shared memory: loads overlap math;"
         " fragments double-buffered",
    # 128 x 256 tiles for large outputs, narrower ones where those leave SMs idle; the
    # narrow 64 x 128 also at 8 x 8 a thread (TM 8: 64 FMAs for 16 values read from shared
    # memory, where 4 x 8 does 32 for 12), which mid-sized products ran faster (docs/ladder.md)
    candidates=[{}, {"BN": 128, "STAGES": 2},
                {"BM": 64, "BN": 128, "WM": 32, "WN": 64, "STAGES": 2},
                {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "STAGES": 3},
                {"BM": 64, "BN": 128, "WM": 32, "WN": 64, "TM": 8, "STAGES": 3}],
    defaults={"BM": 128, "BN": 256, "BK": 16, "WM": 64, "WN": 64, "WNITER": 2, "TM": 4, "TN": 4,
              "GROUP": 8, "STAGES": 3},
    space={"BM": [64, 128, 256], "BN": [64, 128, 256], "BK": [8, 16], "WM": [32, 64],
           "WN": [32, 64], "WNITER": [2, 4], "TM": [4, 8], "TN": [4], "GROUP": [1, 8],
           "STAGES": [2, 3, 4]},
    constraints=[
        *WARP_TILING_RULES,
        "THREADS >= 128 or BK == 8",  # with two warps, 16-deep tiles make ptxas spill
        "BK * (BM + BN) // THREADS <= 32",  # elements a thread copies a phase: more spill
        "WNITER == 2 or STAGES == 2 or BK == 8",   # 4 steps across, deeper 16-deep rings spill
    ],
    smem_bytes="BYTES * STAGES * BK * (BM + BN + 8)",  # + the pads of tile_a and tile_b
    dynamic_smem=True,
    # A column-major and B row-major arrive in 16-byte copies where aligned; the rest one
    # element a copy. A transpose first (bench/results/h100/evidence/transpose_first.txt,
    # measured before element copies went to consecutive threads):
    # B pays from M = 1024 (NT 8192 x 4096 x 4096: 6.89 ms in place, 5.94 + 0.05 copied) where
    # the product or K is long enough to carry the copy's launch and bytes (under 2**32
    # multiply-adds and K < 2048 in place is as fast or faster: 9000 x 800 x 40:NT 75.6 us
    # against 128.0; evidence/transpose_first_probe_df0999a.txt); A only
    # where the grid has few tiles (1024^3: 0.068 ms, 0.059 + 0.005; none from 4096^2 up) and
    # the product is not tiny (64 x 4096 x 64: 0.0071 ms in place, 0.0118 copied; evidence/
    # auto_rules.txt)
    transpose_first={"a": ("col", "cdiv(M, BM) * cdiv(N, BN) <= 2 * SMS and M * N * K >= 2**28"),
                     "b": ("row", B_COPY_PAYS)},
    **WARP_TILING,
))

register(Variant(
    name="splitk",
    template="gemm/10_splitk.cu.j2",
    adds="SPLITS blocks share a tile of C over stretches of K; the last adds the partials in order",
    # 64 x 64 tiles at five split counts (the fewer C's tiles, the more splits fill the
    # SMs); 64 x 128 at rung 9's 8 x 8 thread tiles, for few tiles over a long K; and 32
    # rows (or columns) of 16-wide warp tiles for C of a few dozen: a 64-wide tile spends
    # half its multiplies or more on rows that are not there, and rung 20's 8 rows a block
    # read B again for each 8 (docs/notes.md)
    candidates=[{"SPLITS": 4}, {"SPLITS": 8}, {"SPLITS": 16}, {"SPLITS": 32}, {"SPLITS": 64},
                {"BN": 128, "WN": 64, "TM": 8, "SPLITS": 4},
                {"BN": 128, "WN": 64, "TM": 8, "SPLITS": 16},
                *({side: 32, warp: 16, "WNITER": 1, "SPLITS": s}
                  for side, warp in (("BM", "WM"), ("BN", "WN")) for s in (8, 16))],
    defaults={"BM": 64, "BN": 64, "BK": 16, "WM": 32, "WN": 32, "WNITER": 2, "TM": 4, "TN": 4,
              "GROUP": 1, "STAGES": 3, "SPLITS": 16},
    space={"BM": [32, 64, 128], "BN": [32, 64, 128], "BK": [16], "WM": [16, 32],
           "WN": [16, 32, 64], "WNITER": [1, 2], "TM": [4, 8], "TN": [4], "GROUP": [1],
           "STAGES": [2, 3], "SPLITS": [4, 8, 16, 32, 64]},
    constraints=[
        *WARP_TILING_RULES,
        "THREADS <= 256",  # at 512 threads (128 registers each) ptxas spills
        # 16-wide warp tiles only on 32-wide block tiles (two warps across), one step
        # across each; the wider tiles keep rung 9's warp tiles
        "(BM == 32) == (WM == 16) and (BN == 32) == (WN == 16)",
        "(WM == 16 or WN == 16) == (WNITER == 1)",
    ],
    smem_bytes="BYTES * STAGES * BK * (BM + BN + 8)",  # + the pads of tile_a and tile_b
    dynamic_smem=True,
    # B row-major arrives in scattered 4-byte copies, as in rung 9: copied first where rung 9
    # copies it (8192 x 64 x 8192 with B transposed: 0.40 ms read in place, 0.31 from a
    # row-major B; bench/results/h100/evidence/auto_rules.txt)
    transpose_first={"b": ("row", B_COPY_PAYS)},
    **WARP_TILING,
    splits="SPLITS",
    # a partial is whole tiles, in the order the threads hold them (the template says why)
    partial_sums="SPLITS * cdiv(M, BM) * BM * cdiv(N, BN) * BN",
    extra_args=("partials", "arrivals"),
))
