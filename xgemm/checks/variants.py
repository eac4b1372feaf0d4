"""Checks of what a call names: tile parameters, which only a named variant takes, and an
operand's layout, which a named variant may read in one way only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..tma import BOX_BYTES as TMA_BOX_BYTES
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


def whole_boxes(v: Any, p: Mapping[str, int], itemsize: int, b_col: bool) -> bool:
    """Whether B's tiles of TMA rung ``v`` at ``p`` are whole boxes, as a row-major B
    (``b_col`` False) arrives: 128-byte boxes along N. A column-major B is one box of BN
    rows, any width; a rung whose B box is not BN (rung 36's roles swapped) is not asked.

    >>> import xgemm
    >>> whole_boxes(xgemm.get_variant("wgmma"), {"BN": 144}, 2, b_col=False)
    False
    """
    return (b_col or v.tma_boxes.get("b") != "BN"
            or p.get("BN", 0) * itemsize % TMA_BOX_BYTES == 0)


def check_box_width(v: Any, p: Mapping[str, int], itemsize: int, b_col: bool) -> None:
    """ValueError for tiles of TMA rung ``v`` at ``p`` that a row-major B (``b_col``
    False) cannot fill (:func:`whole_boxes`): only a column-major B takes any width rungs
    14 and 28 allow.

    >>> import xgemm
    >>> wgmma = xgemm.get_variant("wgmma")
    >>> check_box_width(wgmma, {"BN": 144}, 2, b_col=True)
    >>> check_box_width(wgmma, {"BN": 144}, 2, b_col=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: variant 'wgmma' at BN=144 reads B column-major only ...
    """
    if not whole_boxes(v, p, itemsize, b_col):
        box = TMA_BOX_BYTES // itemsize
        raise ValueError(
            f"variant {v.name!r} at BN={p['BN']} reads B column-major only (a weight's "
            f"transpose, w.T): a row-major B arrives in boxes {box} columns wide; give BN a "
            f"multiple of {box}, or B column-major"
        )
