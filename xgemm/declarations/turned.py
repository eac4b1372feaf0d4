"""Rung 36: rung 17's kernel on the product turned over (C^T = B^T A^T), for few columns."""

from __future__ import annotations

import dataclasses

from ..registry import get_variant, register

# The same points, constraints and ring; the tile and grid count C's columns by BM and its
# rows by BN. Its candidates are rung 17's and the unsplit points its rule takes
# (choice._few_rows): regret runs time them, but no calibration prices them, so auto runs
# rung 36 by its rule alone. Priced (fitted on a stratum of few columns, or as rung 17 on
# C^T), the model replaced the rule's picks by rung 14's wide tiles, which it prices at
# about half what they take over a few columns (evidence/few_columns_b961ba1.txt,
# few_columns_rule_7361c2f.txt). B is read as B^T's rows (column-major, K-major): a
# row-major B is copied first where A is large (few columns, a small copy), as rung 17
# copies a column-major A.
_ROWS = get_variant("wgmma_rows")
#: The rungs whose kernel walks the product turned over (C^T = B^T A^T): their template sees
#: B^T as its A and A^T as its B, so its A_COL is B's layout turned, and B_COL A's.
TURNED_OVER = frozenset({"wgmma_columns"})
register(dataclasses.replace(
    _ROWS,
    name="wgmma_columns",
    template="gemm/36_wgmma_columns.cu.j2",
    adds="rung 17 for few columns: the product turned over (C^T = B^T A^T), B's columns the"
         " instruction's n, C stored transposed",
    candidates=[*_ROWS.candidates, {"BN": 64, "SPLITS": 1}, {"SPLITS": 1},
                {"BM": 32, "SPLITS": 1}],
    grid=("min(max(1, SMS // (BATCH * SPLITS)), cdiv(N, BM) * cdiv(M, BN))", "1"),
    tile_shape=("BN", "BM", "128 // BYTES"),
    tma_boxes={"a": "BN", "b": "BM"},
    a_layouts=("row", "col"),
    b_layouts=("col",),
    # the copy's launch and host time are paid back only over a large A, 2^25 values and
    # more; from 2^24 where B's rows are not whole 16-byte lines (N not a multiple of 8 in
    # 16 bits), which every other TMA rung pads a copy of anyway. Fitted on a stratum of
    # row-major B under 2^25 (bf16 seed 8: the calls moved from 2^24 took 0.47-0.99x the
    # time of another rung's, below 2^23 1.1-1.7x) and checked on fp16 seed 9 and a grid of
    # 4096 x N x 4096, where B's rows read in place (N = 16) lost 1.3x a call
    # (evidence/few_columns_b_row_major_0120550.txt); below, auto reads such a B with
    # another rung
    transpose_first={"b": ("col", "M * K >= 2**25 or M * K >= 2**24 and N % 8 != 0")},
))
