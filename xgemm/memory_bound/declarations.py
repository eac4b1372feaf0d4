"""The memory-bound families' variants, one declaration each (transpose, reverse, sum and
stencil, the lectures' other shared-memory kernels), registered with the GEMM ladder's
when ``xgemm.declarations`` is imported.
"""

from __future__ import annotations

from ..registry import Variant, register

# Their yardstick is the device's copy bandwidth. Expressions use M and N for the rows and
# columns of the input (a 1-D input of reverse: N; sum: N elements in each of M segments).
# Their defaults were reasoned before any GPU run; FAMILY_DEFAULTS picks each family's
# variant from the H100 measurements (bench/results/h100/evidence/bandwidth_*.json).

#: Each memory-bound family's variant when none is named: the fastest measured on the
#: H100 (bench/results/h100/evidence/bandwidth_*.json); for sum the deterministic one
#: (two_pass: fastest at 10^7 elements, 0.90x warp_shuffle at 2^28). The GEMM's transposed copies
#: (``Variant.transpose_first``) use the transpose named here.
FAMILY_DEFAULTS = {"transpose": "vectorized", "reverse": "static_smem", "sum": "two_pass",
                   "stencil": "naive"}

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
