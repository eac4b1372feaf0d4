"""What a memory-bound family's call must hold, checked before CuPy is imported: each
family's rules take the input's shape and dtype and the call's own arguments, and raise
with the fix named. ``planning`` runs them before it converts or allocates anything.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..checks import dtype_name, meta, on_gpu
from ..registry import get_variant
from ..specs import FLOAT_DTYPES
from .declarations import FAMILY_DEFAULTS


def check_dtype(family: str, dtype: Any) -> str:
    """``dtype``'s name, where ``family`` takes it; TypeError naming those it takes."""
    name = dtype_name(dtype)
    if name not in FLOAT_DTYPES:
        raise TypeError(f"x has dtype {name}; xgemm.{family} takes {', '.join(FLOAT_DTYPES)}")
    return name


def check_declared(family: str, variant: str | None, params: dict, dtype: str) -> None:
    """The variant exists and ``params`` keep its declared rules for ``dtype``."""
    get_variant(variant or FAMILY_DEFAULTS[family], family).resolve(params, dtype)


def check_two_d(shape: tuple[int, ...]) -> None:
    """x is a matrix."""
    if len(shape) != 2:
        raise ValueError(f"x must be 2-D, got shape {shape}")


def transpose_rules(shape: tuple[int, ...], dtype: str, /, variant: str | None = None,
                    **params: int) -> None:
    """``xgemm.transpose(x, variant, **params)``: x is 2-D, the parameters declared."""
    check_two_d(shape)
    check_declared("transpose", variant, params, dtype)


def reverse_rules(shape: tuple[int, ...], dtype: str, /, variant: str | None = None,
                  **params: int) -> None:
    """``xgemm.reverse(x, variant, **params)``: x is 1-D, the parameters declared."""
    if len(shape) != 1:
        raise ValueError(f"x must be 1-D, got shape {shape}: reverse x.ravel(), or one axis "
                         "with cupy.flip")
    check_declared("reverse", variant, params, dtype)


def sum_rules(shape: tuple[int, ...], dtype: str, /, axis: int | None = None,
              variant: str | None = None, **params: int) -> None:
    """``xgemm.sum(x, axis, variant, **params)``: the last axis or none, a block row per
    segment, the parameters declared."""
    last = len(shape) - 1
    if axis is not None and axis not in (-1, last):
        raise ValueError(f"axis must be None or the last axis ({last} or -1), got {axis}:"
                         " move the axis last (cupy.moveaxis), or use cupy.sum")
    if not shape and axis is not None:
        raise ValueError("a 0-D array has no axis to sum over: use axis=None")
    segments = 1 if axis is None else math.prod(shape[:-1])
    if segments > 65535:
        raise ValueError(f"{segments} segments to sum: xgemm.sum takes at most 65535 (one "
                         "block row each); sum in pieces, or use cupy.sum")
    check_declared("sum", variant, params, dtype)


def check_weights(shape: tuple[int, ...], dtype: Any, x_dtype: str) -> None:
    """A stencil's weights are 3 x 3, of x's dtype."""
    if tuple(shape) != (3, 3):
        raise ValueError(f"weights has shape {tuple(shape)}; a 3 x 3 stencil needs (3, 3)")
    if dtype_name(dtype) != x_dtype:
        raise TypeError(f"weights has dtype {dtype_name(dtype)} and x {x_dtype}: convert with "
                        f"weights.astype({x_dtype!r})")


def stencil_rules(shape: tuple[int, ...], dtype: str, /, weights: Any,
                  variant: str | None = None, **params: int) -> None:
    """``xgemm.stencil3x3(x, weights, variant, **params)``: x is 2-D, weights 3 x 3 of
    x's dtype where they tell theirs, the parameters declared."""
    check_two_d(shape)
    # 9 values on the host (an array or a list) are uploaded to x's GPU
    w = meta(weights, "weights") if on_gpu(weights) else np.asarray(weights)
    if w is not None:  # None: DLPack weights, checked once converted
        check_weights(w.shape, w.dtype, dtype)
    check_declared("stencil", variant, params, dtype)
