"""What ``auto``'s rules look at (``Asked``: the product, its dtype and precision, the GPU)
and what each answers (``Pick``: a variant's name and parameters), shared by ``xgemm.choice``
and ``xgemm.choice_8bit``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .expressions import cdiv

#: A rule's answer: the variant's name and its parameters.
Pick = tuple[str, dict[str, int]]


@dataclass(frozen=True)
class Asked:
    """What the rules look at: the product, its dtype and precision, the GPU."""

    m: int
    n: int
    k: int
    dtype: str
    cc: int
    precision: str | None
    sms: int
    batch: int
    a_row_major: bool
    scale_vectors: bool
    b_col_major: bool

    def tiles(self, bm: int, bn: int) -> int:
        """Tiles of ``bm`` x ``bn`` in the whole batch's outputs."""
        return cdiv(self.m, bm) * cdiv(self.n, bn) * self.batch
