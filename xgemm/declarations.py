"""The ladder: one declaration per variant, in the order a reader should meet them.

Adding a variant means a template under ``kernels/gemm/`` and one ``register(Variant(...))``
here; the tests, the compile check and the benchmark walk the registry and pick it up.
Expressions are Python over the template's own parameter names, plus ``THREADS`` (threads
per block) and ``BYTES`` (the size of one element of the dtype) in constraints and shared
memory, and ``M``, ``N`` (the output's shape), ``SMS`` (the GPU's multiprocessors) and
``BATCH`` (the products in the launch) in the grid. Every variant reads A and B
row- or column-major and takes float32, float64, float16 and bfloat16 unless its
declaration says otherwise (``a_layouts``, ``b_layouts``, ``dtypes``), on any GPU CuPy
runs on unless it names the oldest (``min_cc``).

Defaults are the fastest point of each space at 4096 x 4096 x 4096 on an H100 (from
``xgemm.tools.bench.sweep``; for mma in float16, where STAGES=3 and 4 lie within 1%), except
coarse2d, which keeps the seed text's configuration, wmma (not swept), mma_tf32 (mma's,
6% behind its own sweep's best, STAGES=2: 171.4 against 183.1 TFLOP/s,
bench/results/h100/sweeps/mma_tf32_4096.txt), wgmma_ring (the fastest point of
wgmma_bfloat16_4096.csv, C stored from registers: 4 stages), wgmma (the fastest point of
wgmma_tma_store_{float16,bfloat16}_{4096,8192}.csv), dmma (dmma_float64_4096.csv, which
swept the instruction's k too: m16n8k8 won) and
wgmma_tf32 (the fastest of wgmma_bfloat16_4096.csv and wgmma_tf32_tma_store_4096.csv:
its float32 C staged for TMA leaves room for two stages only, which lost) and
wgmma_inplace (within 3% of the fastest of bench/inplace.py's six points on its four
products with a side under 128; wider ones want 128-wide tiles, 1.5x faster on
2767 x 206 x 13614 and 2x on 4095³: evidence/inplace_bfloat16_h200_3e771ad.json); the
sweeps are in bench/results/h100/sweeps/.
Three wgmma switches that measured no gain left the template (docs/notes.md): consumers
taking whole tiles in turn (1-10% slower at 128 x 128), clusters of two sharing B by
multicast (within 1%), C stored one value at a time.
"""

from .registry import EIGHT_BIT, WIDE_DTYPES, Variant, register

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
    # B pays from M = 1024 (NT 8192 x 4096 x 4096: 6.89 ms in place, 5.94 + 0.05 copied); A only
    # where the grid has few tiles (1024^3: 0.068 ms, 0.059 + 0.005; none from 4096^2 up) and
    # the product is not tiny (64 x 4096 x 64: 0.0071 ms in place, 0.0118 copied; evidence/
    # auto_rules.txt)
    transpose_first={"a": ("col", "cdiv(M, BM) * cdiv(N, BN) <= 2 * SMS and M * N * K >= 2**28"),
                     "b": ("row", "M >= 1024")},
    **WARP_TILING,
))

register(Variant(
    name="splitk",
    template="gemm/10_splitk.cu.j2",
    adds="SPLITS blocks share a tile of C over stretches of K; the last adds the partials in order",
    # 64 x 64 tiles at five split counts (the fewer C's tiles, the more splits fill the
    # SMs); and 64 x 128 at rung 9's 8 x 8 thread tiles, for few tiles over a long K
    candidates=[{"SPLITS": 4}, {"SPLITS": 8}, {"SPLITS": 16}, {"SPLITS": 32}, {"SPLITS": 64},
                {"BN": 128, "WN": 64, "TM": 8, "SPLITS": 4},
                {"BN": 128, "WN": 64, "TM": 8, "SPLITS": 16}],
    defaults={"BM": 64, "BN": 64, "BK": 16, "WM": 32, "WN": 32, "WNITER": 2, "TM": 4, "TN": 4,
              "GROUP": 1, "STAGES": 3, "SPLITS": 16},
    space={"BM": [64, 128], "BN": [64, 128], "BK": [16], "WM": [32], "WN": [32, 64],
           "WNITER": [2], "TM": [4, 8], "TN": [4], "GROUP": [1], "STAGES": [2, 3],
           "SPLITS": [4, 8, 16, 32, 64]},
    constraints=[
        *WARP_TILING_RULES,
        "THREADS <= 256",  # at 512 threads (128 registers each) ptxas spills
    ],
    smem_bytes="BYTES * STAGES * BK * (BM + BN + 8)",  # + the pads of tile_a and tile_b
    dynamic_smem=True,
    # B row-major arrives in scattered 4-byte copies, as in rung 9: copied first from
    # M = 1024 (8192 x 64 x 8192 with B transposed: 0.40 ms read in place, 0.31 from a
    # row-major B; bench/results/h100/evidence/auto_rules.txt)
    transpose_first={"b": ("row", "M >= 1024")},
    **WARP_TILING,
    splits="SPLITS",
    # a partial is whole tiles, in the order the threads hold them (the template says why)
    partial_sums="SPLITS * cdiv(M, BM) * BM * cdiv(N, BN) * BN",
    extra_args=("partials", "arrivals"),
))

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
HOPPER = dict(
    constraints=[
        "STAGES >= 2",      # a consumer hands a slot back only once the next one is full
        "CONSUMERS <= 2 and BM <= 256",  # a TMA box has at most 256 rows
        # whole m64 rows per consumer warpgroup, whole 64-wide boxes
        "BM % (64 * CONSUMERS) == 0 and BN % 64 == 0",
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
    defaults={"BM": 128, "BN": 256, "CONSUMERS": 2, "STAGES": 3, "GROUP": 8, "TMA_STORE": 1,
              "SPREAD": 0},
    space={"BM": [64, 128, 256], "BN": [64, 128, 192, 256], "CONSUMERS": [1, 2],
           "STAGES": [2, 3, 4, 5, 6], "GROUP": [8], "TMA_STORE": [0, 1], "SPREAD": [0]},
    # with C staged (TMA_STORE 1 or 2), each consumer warpgroup's rows of a tile of C too,
    # a 16-byte line more a row where TMA cannot write them (2)
    smem_bytes=RING_BYTES + " + min(TMA_STORE, 1) * BM * BN * BYTES + (TMA_STORE == 2) * BM * 16",
    # C's box: one consumer warpgroup's rows, when C leaves through TMA
    tma_boxes={"a": "BM", "b": "BN", "c": "(TMA_STORE == 1) * BM // CONSUMERS"},
    extra_args=("tensor_map_a", "tensor_map_b", "tensor_map_c"),
)

register(Variant(
    name="wgmma",
    # 128 x 256 tiles, narrower ones for outputs of few tiles (one m64 warpgroup and a
    # deeper ring under 128 rows), 128 x 192 where their waves are whole and 256's ragged
    # (512 x 18944 x 3584: 4 x 99 tiles, three waves of 132), and blocks sharing the SMs
    # among a batch's products
    candidates=[{}, {"BN": 128, "STAGES": 6}, {"BM": 64, "BN": 128, "CONSUMERS": 1, "STAGES": 6},
                {"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 6}, {"BN": 192, "STAGES": 4},
                {"BN": 128, "STAGES": 6, "SPREAD": 1}],
    adds="C staged in shared memory and written by TMA stores while the next tile runs",
    **WGMMA,
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
    candidates=[{}, {"SPLITS": 4}, {"BM": 128, "CONSUMERS": 2}],
    defaults={"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 6, "GROUP": 8, "SPLITS": 2},
    # SPLITS 3 and 4 measured slower at 16 x 4096 x 4096, 8 or 10 stages no faster (evidence/
    # wgmma_splitk.txt): the grid stays at SMS blocks, so more splits only walk more tiles
    space={"BM": [64, 128], "BN": [64, 128], "CONSUMERS": [1, 2], "STAGES": [4, 6],
           "GROUP": [8], "SPLITS": [2, 4]},
    **{**HOPPER_SPLIT_K, "constraints": [
        *HOPPER["constraints"],
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
    candidates=[{"BN": 64}, {}, {"SPLITS": 4}, {"BM": 32}],
    defaults={"BM": 16, "BN": 128, "CONSUMERS": 1, "STAGES": 8, "GROUP": 8, "SPLITS": 2},
    space={"BM": [16, 32], "BN": [64, 128], "CONSUMERS": [1, 2], "STAGES": [4, 8],
           "GROUP": [8], "SPLITS": [2, 4]},
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

# Rung 18: rung 14 on 8-bit operands. Both operands K-major, C staged for TMA as
# 16-bit values (bfloat16 or float16; float32 and int32 C leave from registers), the
# quantisation scales in the epilogue.
WGMMA_8BIT = dict(
    **{**WGMMA,
       "template": "gemm/18_wgmma_8bit.cu.j2",
       "defaults": {"BM": 128, "BN": 256, "CONSUMERS": 2, "STAGES": 3, "GROUP": 8,
                    "TMA_STORE": 1, "SPREAD": 0},
       "space": {"BM": [128, 256], "BN": [128, 256], "CONSUMERS": [2], "STAGES": [3, 4],
                 "GROUP": [8], "TMA_STORE": [0, 1], "SPREAD": [0]},
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
    candidates=[{}, {"BN": 128, "STAGES": 4}],
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
    dtypes=(*WIDE_DTYPES, *EIGHT_BIT),
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
    # 3 stages, or three blocks of a 2-stage ring (17-96 rows over a long K: docs/ladder.md)
    candidates=[{}, {"SPLITS": 4}, {"SPLITS": 8}, {"SPLITS": 16}, {"WARPS": 8, "STAGES": 3},
                {"BM": 16}, {"BM": 16, "SPLITS": 8}, {"BM": 32}, {"FEW_COLUMNS": 1},
                {"FEW_COLUMNS": 1, "SPLITS": 16}, {"FEW_COLUMNS": 1, "WARPS": 8, "STAGES": 3},
                {"FEW_COLUMNS": 1, "BM": 16}, {"FEW_COLUMNS": 1, "BM": 16, "SPLITS": 16},
                {"FEW_COLUMNS": 1, "BM": 32},
                *({**side, **p} for side in ({}, {"FEW_COLUMNS": 1}) for p in (
                    {"BM": 16, "WARPS": 8, "STAGES": 3, "SPLITS": 8},
                    {"BM": 32, "WARPS": 8, "STAGES": 3}, {"BM": 32, "STAGES": 2, "SPLITS": 8}))],
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
    **{**WGMMA, "template": "gemm/28_wgmma_pingpong.cu.j2",
       "defaults": {"BM": 128, "BN": 128, "CONSUMERS": 2, "STAGES": 5, "GROUP": 8,
                    "TMA_STORE": 1, "SPREAD": 0},
       "space": {"BM": [64, 128], "BN": [128, 192, 256], "CONSUMERS": [2],
                 "STAGES": [2, 3, 4, 5], "GROUP": [8], "TMA_STORE": [0, 1], "SPREAD": [0]},
       "constraints": [
           "STAGES >= 2",  # a consumer hands a slot back only once the next one is full
           "CONSUMERS == 2 and BM <= 256",  # two take turns; a TMA box has at most 256 rows
           "BM % 64 == 0 and BN % 64 == 0",  # whole m64 rows, whole 64-wide boxes
           "BM // 64 * BN // 2 <= 128",  # accumulators a consumer thread holds: a whole tile
           "TMA_STORE in (0, 1, 2)",  # 2: planned, for rows TMA cannot write
       ],
       # each warpgroup's whole tile of C staged, a line more a row where TMA cannot write
       "smem_bytes": RING_BYTES + " + min(TMA_STORE, 1) * CONSUMERS * BM * BN * BYTES"
                                  " + (TMA_STORE == 2) * CONSUMERS * BM * 16",
       "tma_boxes": {"a": "BM", "b": "BN", "c": "(TMA_STORE == 1) * BM"}},
))

# -- The memory-bound families (xgemm.memory_bound): the lectures' other shared-memory kernels. --
# Their yardstick is the device's copy bandwidth. Expressions use M and N for the rows and
# columns of the input (a 1-D input of reverse: N; sum: N elements in each of M segments).
# Their defaults were reasoned before any GPU run; memory_bound.DEFAULTS picks each family's
# variant from the H100 measurements (bench/results/h100/evidence/bandwidth_*.json).

register(Variant(
    family="transpose",
    name="naive",
    template="transpose/01_naive.cu.j2",
    adds="one thread per element: coalesced reads, writes a column's length apart",
    defaults={"BX": 32, "BY": 8},
    space={"BX": [16, 32], "BY": [4, 8, 16, 32]},
    constraints=["BX * BY % 32 == 0"],
    block=("BX", "BY"),
    grid=("cdiv(N, BX)", "cdiv(M, BY)"),
))

TILED_TRANSPOSE = dict(
    template="transpose/02_tiled.cu.j2",
    constraints=["TILE % BLOCK_ROWS == 0", "TILE * BLOCK_ROWS % 32 == 0"],
    block=("TILE", "BLOCK_ROWS"),
    grid=("cdiv(N, TILE)", "cdiv(M, TILE)"),
    smem_bytes="BYTES * TILE * (TILE + PAD)",
)

register(Variant(
    family="transpose",
    name="tiled",
    adds="a TILE x TILE shared tile: coalesced reads and writes; a tile column is one bank",
    defaults={"TILE": 32, "BLOCK_ROWS": 8, "PAD": 0},
    space={"TILE": [16, 32], "BLOCK_ROWS": [4, 8, 16, 32], "PAD": [0]},
    **TILED_TRANSPOSE,
))

register(Variant(
    family="transpose",
    name="tiled_padded",
    adds="tile[TILE][TILE + 1]: a tile column spreads over every bank, no conflicts",
    defaults={"TILE": 32, "BLOCK_ROWS": 8, "PAD": 1},
    space={"TILE": [16, 32], "BLOCK_ROWS": [4, 8, 16, 32], "PAD": [1]},
    **TILED_TRANSPOSE,
))

register(Variant(
    family="transpose",
    name="vectorized",
    template="transpose/03_vectorized.cu.j2",
    adds="the padded tile moved four elements per load and per store",
    defaults={"TILE": 64, "BLOCK_ROWS": 16},
    space={"TILE": [32, 64], "BLOCK_ROWS": [4, 8, 16, 32]},
    constraints=["TILE % BLOCK_ROWS == 0", "TILE // 4 * BLOCK_ROWS % 32 == 0"],
    block=("TILE // 4", "BLOCK_ROWS"),
    grid=("cdiv(N, TILE)", "cdiv(M, TILE)"),
    smem_bytes="BYTES * TILE * (TILE + 1)",
    flags=("aligned",),
))

REVERSE = dict(
    template="reverse/01_smem.cu.j2",
    space={"BLOCK": [128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8]},
    constraints=[],
    block=("BLOCK",),
    grid=("cdiv(N, BLOCK * ITEMS)", "1"),
    smem_bytes="BYTES * BLOCK * ITEMS",
)

register(Variant(
    family="reverse",
    name="static_smem",
    adds="a chunk per block through a static shared array, read back to front",
    defaults={"BLOCK": 256, "ITEMS": 4, "DYNAMIC": 0},
    **{**REVERSE, "space": {**REVERSE["space"], "DYNAMIC": [0]}},
))

register(Variant(
    family="reverse",
    name="dynamic_smem",
    adds="the same with `extern __shared__`, sized at launch for the block it runs with",
    defaults={"BLOCK": 256, "ITEMS": 4, "DYNAMIC": 1},
    dynamic_smem=True,
    **{**REVERSE, "space": {**REVERSE["space"], "DYNAMIC": [1]}},
))

SUM_SPACE = {"BLOCK": [128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8]}
SUM = dict(
    defaults={"BLOCK": 256, "ITEMS": 4},
    space=SUM_SPACE,
    constraints=[],
    block=("BLOCK",),
    grid=("cdiv(N, BLOCK * ITEMS)", "M"),     # M segments (1 for a whole-array sum)
    smem_bytes="max(BYTES, 4) * BLOCK",        # a partial sum per thread, in Acc
)

register(Variant(
    family="sum",
    name="interleaved",
    template="sum/01_interleaved.cu.j2",
    adds="a tree in shared memory, threads 0, 2s, 4s... adding: divergent warps",
    **SUM,
))

register(Variant(
    family="sum",
    name="sequential",
    template="sum/02_sequential.cu.j2",
    adds="the tree with threads 0 .. s-1 adding: whole warps idle, no divergence",
    **SUM,
))

register(Variant(
    family="sum",
    name="warp_shuffle",
    template="sum/03_warp_shuffle.cu.j2",
    adds="warps add through register shuffles; shared memory for 32 warp sums only",
    **{**SUM, "smem_bytes": "max(BYTES, 4) * 32",
       "defaults": {"BLOCK": 256, "ITEMS": 4, "ATOMIC": 0}, "space": {**SUM_SPACE, "ATOMIC": [0]}},
))

register(Variant(
    family="sum",
    name="two_pass",
    template="sum/03_warp_shuffle.cu.j2",
    adds="PER_SM blocks per SM loop over the array; one block adds their sums: two passes",
    **{**SUM, "smem_bytes": "max(BYTES, 4) * 32",
       "grid": ("min(cdiv(N, BLOCK * ITEMS), PER_SM * SMS)", "M"),
       "defaults": {"BLOCK": 256, "ITEMS": 4, "ATOMIC": 0, "PER_SM": 4},
       "space": {**SUM_SPACE, "ATOMIC": [0], "PER_SM": [1, 2, 4, 8]}},
))

register(Variant(
    family="sum",
    name="atomic",
    template="sum/03_warp_shuffle.cu.j2",
    adds="as two_pass, but each block atomicAdds its sum into the result: one pass",
    **{**SUM, "smem_bytes": "max(BYTES, 4) * 32",
       "grid": ("min(cdiv(N, BLOCK * ITEMS), PER_SM * SMS)", "M"),
       "defaults": {"BLOCK": 256, "ITEMS": 4, "ATOMIC": 1, "PER_SM": 4},
       "space": {**SUM_SPACE, "ATOMIC": [1], "PER_SM": [1, 2, 4, 8]}},
))

STENCIL = dict(
    defaults={"BX": 32, "BY": 8},
    space={"BX": [16, 32, 64], "BY": [4, 8, 16]},
    constraints=["BX * BY % 32 == 0"],
    block=("BX", "BY"),
    grid=("cdiv(N, BX)", "cdiv(M, BY)"),
)

register(Variant(
    family="stencil",
    name="naive",
    template="stencil/01_naive.cu.j2",
    adds="one thread per output reads its nine neighbours from global memory",
    **STENCIL,
))

register(Variant(
    family="stencil",
    name="smem_halo",
    template="stencil/02_smem_halo.cu.j2",
    adds="the block's tile and a one-element halo staged once in shared memory",
    smem_bytes="BYTES * (BY + 2) * (BX + 2)",
    **STENCIL,
))
