"""Checks of a call's arrays besides its operands, which read them through their
framework (``xgemm.frameworks``): the output or C given, the bias, PyTorch float8
operands' formats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..frameworks import framework, to_cupy
from ..specs import SIXTEEN_BIT, UNROUNDED_OUTPUT
from .arguments import Meta, dtype_name, meta

if TYPE_CHECKING:
    import cupy


def torch_formats(a: Any, b: Any, formats: Any) -> Any:
    """``formats`` with the FP8 formats of PyTorch float8 operands filled in (their dtype's
    name, ``float8_e4m3fn`` or ``float8_e5m2``); TypeError where they disagree."""
    given = formats if isinstance(formats, (tuple, list)) else (formats, formats)
    found = []
    for name, x, fmt in (("a", a, given[0]), ("b", b, given[1])):
        kind = dtype_name(x.dtype) if framework(type(x)) == "torch" else None
        if kind is None or not kind.startswith("float8"):
            found.append(fmt)
            continue
        if fmt is not None and fmt != kind:
            raise TypeError(f"{name} is a {kind} tensor but formats names {fmt}")
        found.append(kind)
    return None if found == [None, None] else tuple(found)


def native(x: Any) -> Any:
    """``x`` itself if it is a CuPy array or a PyTorch tensor, else as a CuPy array."""
    return x if framework(type(x)) else to_cupy(x)


def check_target(name: str, target: Any, shape: tuple[int, ...], dtype: str) -> cupy.ndarray:
    if framework(type(target)) is None:
        raise TypeError(f"{name} must be a CuPy array or a PyTorch CUDA tensor, got "
                        f"{type(target).__name__}")
    meta(target, name)  # a PyTorch CPU tensor: TypeError, a host array
    view = to_cupy(target)
    if view.shape != shape:
        raise ValueError(f"{name} has shape {view.shape}; a @ b has shape {shape}")
    if view.dtype.name != dtype:
        raise TypeError(f"{name} has dtype {view.dtype.name}; a @ b has dtype {dtype}"
                        + (f" (or {UNROUNDED_OUTPUT}: out_dtype)" if dtype in SIXTEEN_BIT else ""))
    return view


def check_bias(bias: Any, n: int, dtype: str) -> cupy.ndarray:
    """``bias`` as a CuPy array (a view, on whichever GPU it is), checked: shape (n,), and
    the dtype of the product's output."""
    found = meta(bias, "bias")
    view = to_cupy(bias)
    found = Meta(view.shape, view.dtype) if found is None else found
    if found.shape != (n,):
        raise ValueError(
            f"bias has shape {found.shape}; it is added per column of the result, so it must "
            f"have shape ({n},)"
        )
    if dtype_name(found.dtype) != dtype:
        raise TypeError(f"bias has dtype {dtype_name(found.dtype)}; the product's dtype is "
                        f"{dtype}: convert with bias.astype({dtype!r})")
    return view
