"""Checks of what a call names: tile parameters, which only a named variant takes, and an
operand's layout, which a named variant may read in one way only.
"""

from __future__ import annotations

from .arguments import AUTO, TUNE


def check_params_named(variant: str, params: dict[str, int]) -> None:
    """ValueError where tile parameters come with ``auto`` or ``tune``, which pick their own.

    >>> check_params_named("auto", {"BM": 64})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: variant='auto' picks its own parameters, so ['BM'] cannot be given; ...
    """
    if variant in (AUTO, TUNE) and params:
        raise ValueError(
            f"variant={variant!r} picks its own parameters, so {sorted(params)} cannot be "
            "given; name a variant to set them (xgemm.variants() lists the names)"
        )


def check_layout_read(variant: str, name: str, layouts: tuple[str, ...], col: bool) -> None:
    """ValueError for an operand ``name`` that lies column-major (``col``) or row-major
    where the named ``variant`` reads only ``layouts`` ("row", "col") and the call may
    not copy it.

    >>> check_layout_read("wgmma", "b", ("col",), col=True)
    """
    have = "col" if col else "row"
    if have not in layouts:
        raise ValueError(
            f"variant {variant!r} reads {name} {' or '.join(layouts)}-major only, and {name} is "
            f"{'column' if col else 'row'}-major; name a variant that reads both (e.g. "
            f"'tiled'), or pass {name} in the layout this one reads"
        )


def check_box_width(variant: str, bn: int, box: int, b_col: bool) -> None:
    """ValueError for tiles ``bn`` columns wide over a row-major B (``b_col`` False) on a
    TMA rung: such a B arrives in boxes ``box`` values wide, so its tiles are whole boxes;
    only a column-major B (K-major: one box of BN rows) takes any width rung 14 allows.

    >>> check_box_width("wgmma", 144, 64, b_col=True)
    >>> check_box_width("wgmma", 144, 64, b_col=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: variant 'wgmma' at BN=144 reads B column-major only ...
    """
    if not b_col and bn % box:
        raise ValueError(
            f"variant {variant!r} at BN={bn} reads B column-major only (a weight's "
            f"transpose, w.T): a row-major B arrives in boxes {box} columns wide; give BN a "
            f"multiple of {box}, or B column-major"
        )
