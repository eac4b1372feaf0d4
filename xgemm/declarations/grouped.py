"""The grouped products (``xgemm.grouped_matmul``): G products in one launch, each group's
extent read on the GPU (a mixture-of-experts layer). Their own family, so that
``matmul``'s registry, tests and ``auto`` leave them out: a launch needs the groups' ends
besides A, B and C.
"""

from __future__ import annotations

from typing import Any

from ..registry import Variant, register
from .regimes import WGMMA_8BIT
from .tensor_cores import WGMMA


def grouped(rung: dict[str, Any], template: str, **declared: Any) -> dict[str, Any]:
    """A grouped rung's declaration from the ladder rung whose kernel it walks: its family,
    its template, one block an SM (the tiles are counted on the GPU), the groups' ends and
    count after that rung's extra arguments, and what ``declared`` names besides."""
    return {**rung, "family": "grouped", "template": template, "grid": ("SMS", "1"),
            "extra_args": (*rung["extra_args"], "group_ends", "groups"), **declared}


def grouped_rows(rung: dict[str, Any], **declared: Any) -> dict[str, Any]:
    """Rung 29's declaration on ``rung``'s kernel (rung 14's, or rung 18's for FP8): the
    walk over groups of rows, whose C leaves from registers or staged and sent a row at a
    time (TMA_STORE 0 or 2): a tensor store's box would run on into the next group's rows."""
    return grouped(rung, "gemm/29_wgmma_grouped.cu.j2",
                   constraints=[*rung["constraints"], "TMA_STORE in (0, 2)"], **declared)


# Rung 29: rung 14 walking the tiles of every group in turn, the groups' ends read on the
# GPU. Defaults swept on --suite grouped's cases (nine points, H100): 128 x 256 tiles in
# three stages were fastest, or within 3% of it, on all ten, and up to 15% faster than
# 128 x 128 in four (skewed Mixtral); C staged and written a row at a time (a tensor
# store's box would run on into the next group's rows).
register(Variant(
    name="wgmma",
    adds="rung 14 over groups of rows of A, each with its own matrix of B, in one launch:"
         " the blocks walk every group's tiles, finding each group's rows from its end",
    **grouped_rows(WGMMA,
                   defaults={"BM": 128, "BN": 256, "CONSUMERS": 2, "STAGES": 3, "GROUP": 8,
                             "TMA_STORE": 2},
                   space={"BM": [64, 128], "BN": [64, 128, 256], "CONSUMERS": [1, 2],
                          "STAGES": [2, 3, 4, 5, 6], "GROUP": [8], "TMA_STORE": [0, 2]},
                   # a group's tiles start on any row: TMA reads a column-major A's lines
                   # only from 16-byte boundaries
                   a_layouts=("row",)),
))

# Rung 30: rung 14 over groups that split K (the weight gradient's tokens), each into its
# own matrix of C. The tokens are both operands' rows of boxes (X^T column-major, dY
# row-major), so the next group's tokens in a group's last slot are whole rows to zero.
# Defaults reasoned, not yet swept: rung 14's 128 x 128 point, C by TMA (a tile lies in one
# group's matrix).
register(Variant(
    name="wgmma_k",
    adds="rung 14 over groups that split K, each into its own matrix of C; the next group's"
         " tokens in a group's last slot zeroed in shared memory",
    **grouped(WGMMA, "gemm/30_wgmma_grouped_k.cu.j2",
              defaults={"BM": 128, "BN": 128, "CONSUMERS": 2, "STAGES": 4, "GROUP": 8,
                        "TMA_STORE": 1},
              space={"BM": [64, 128, 256], "BN": [64, 128, 256], "CONSUMERS": [1, 2],
                     "STAGES": [2, 3, 4, 5, 6], "GROUP": [8], "TMA_STORE": [0, 1, 2]},
              a_layouts=("col",), b_layouts=("row",)),
))

# Rung 29 on FP8 operands: the same template on rung 18's kernel (K-major operands, 128
# values a 128-byte row, the scales in the epilogue), C staged as 16-bit values or from
# registers. Defaults reasoned, not yet swept: rung 18's 128 x 128 candidate point.
register(Variant(
    name="wgmma_8bit",
    adds="rung 29 on FP8 operands (rung 18's kernel): the walk over groups, A's row scales"
         " and each group's column scales of B",
    **grouped_rows(WGMMA_8BIT,
                   defaults={"BM": 128, "BN": 128, "CONSUMERS": 2, "STAGES": 4, "GROUP": 8,
                             "TMA_STORE": 2},
                   space={"BM": [128, 256], "BN": [128, 256], "CONSUMERS": [2],
                          "STAGES": [3, 4, 5], "GROUP": [8], "TMA_STORE": [0, 2]},
                   dtypes=("float8_e4m3fn", "float8_e5m2")),
))
