"""An 8-bit product's quantisation scales: numbers folded into alpha, GPU scalars or
vectors, their dtype and shape, and the factor they and alpha make for an int32 C.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ..frameworks import to_cupy
from ..specs import EIGHT_BIT
from .arguments import Meta, Shapes, dtype_name, meta
from .arrays import native


class Scales(NamedTuple):
    """An 8-bit product's quantisation scales as a call gives them: a number (folded into
    alpha), a GPU scalar (one scale for the operand) or a GPU vector (one per row of A,
    per column of B)."""

    factor: float          # the numbers' product: alpha is multiplied by it
    a: Any                 # GPU arrays, or None
    b: Any
    given: bool = True     # whether the call gave a scale at all (a number of 1 too)


def split_scales(scale_a: Any, scale_b: Any) -> Scales:
    """``scale_a`` and ``scale_b`` sorted into numbers and arrays. Arrays are checked by the
    plan, once per signature (a host array's TypeError included): a call that finds its
    plan spends nothing more on them.

    >>> split_scales(0.5, None).factor
    0.5
    """
    given = scale_a is not None or scale_b is not None
    factor = 1.0
    if _number(scale_a):
        factor, scale_a = float(scale_a), None
    if _number(scale_b):
        factor, scale_b = factor * float(scale_b), None
    return Scales(factor, scale_a, scale_b, given)


def _number(x: Any) -> bool:
    """Whether ``x`` is a scale given as a host number (a bool is none)."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def scaling(name: str, found: Meta, rows: int) -> str:
    """How a GPU scale of shape ``found.shape`` applies: "tensor" (one value) or "vector"
    (``rows`` values: A's rows for scale_a, B's columns for scale_b); float32 only.

    >>> f32 = np.dtype("float32")
    >>> scaling("scale_a", Meta((), f32), 7), scaling("scale_b", Meta((1, 7), f32), 7)
    ('tensor', 'vector')
    """
    if dtype_name(found.dtype) != "float32":
        raise TypeError(f"{name} has dtype {dtype_name(found.dtype)}; scales are float32: "
                        f"convert with {name}.astype('float32')")
    size = math.prod(found.shape)
    if size == 1 and len(found.shape) <= 2:
        return "tensor"
    vector = (rows, 1) if name == "scale_a" else (1, rows)
    if found.shape in ((rows,), vector):
        return "vector"
    what = "row of A" if name == "scale_a" else "column of B"
    raise ValueError(f"{name} has shape {found.shape}: it must hold one scale, or one per "
                     f"{what}: shape ({rows},) or {vector}")


def check_factor(dtype: str, c_dtype: str, alpha: float, scales: Scales | None) -> None:
    """What a plan's signature does not say of a call, checked on every call that gives
    it: scales only for 8-bit inputs; no alpha and no scale numbers other than 1 for an
    int32 C (its kernel stores the exact sums and reads neither)."""
    if dtype in EIGHT_BIT:
        factor = alpha * (scales.factor if scales is not None else 1.0)
        if c_dtype == "int32" and factor != 1.0:
            raise ValueError("an int8 product stored as int32 is the exact sums: scales and "
                             "alpha other than 1 need a float output (out_dtype='float32', "
                             "'bfloat16' or 'float16')")
    elif scales is not None and scales.given:
        raise TypeError(f"scale_a and scale_b are an 8-bit product's quantisation scales; a and "
                        f"b are {dtype}: for a scaled product of them use xgemm.gemm's alpha")


def check_scales(scales: Scales, shapes: Shapes) -> tuple[Any, Any, tuple[str, str]]:
    """An 8-bit product's GPU scales, as the call's arrays, and how each applies."""
    arrays, scalings = [], []
    for name, x, rows in (("scale_a", scales.a, shapes.m), ("scale_b", scales.b, shapes.n)):
        if x is None:
            arrays.append(None)
            scalings.append("none")
            continue
        meta(x, name)  # a host array, or no array at all: TypeError
        x = native(x)
        view = to_cupy(x)
        kind = scaling(name, Meta(view.shape, view.dtype), rows)
        if kind == "vector" and any(stride != view.itemsize for size, stride
                                    in zip(view.shape, view.strides, strict=True) if size > 1):
            raise ValueError(f"{name} is strided (strides {view.strides}); its scales must lie "
                             f"next to each other: pass a contiguous copy")
        arrays.append(x)
        scalings.append(kind)
    return arrays[0], arrays[1], (scalings[0], scalings[1])
