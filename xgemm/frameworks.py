"""The two frameworks a call's arrays may come from, CuPy and PyTorch: which one an array
is from, its CuPy view and its address, and a CuPy handle on PyTorch's stream. No copies.
"""

from __future__ import annotations

import functools
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import cupy


@functools.cache
def framework(kind: type) -> str | None:
    """"cupy" for CuPy arrays, "torch" for PyTorch tensors, None for anything else (which
    is converted to CuPy first, or refused)."""
    if kind.__module__.startswith("cupy") and kind.__name__ == "ndarray":
        return "cupy"
    if kind.__module__.startswith("torch") and hasattr(kind, "data_ptr"):
        return "torch"
    return None


def to_cupy(x: Any) -> cupy.ndarray:
    """``x`` as a CuPy array, without a copy: a CuPy array itself, a view of a PyTorch
    tensor or other DLPack or CUDA-array-interface object."""
    import cupy

    if isinstance(x, cupy.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        if getattr(x, "requires_grad", False):
            x = x.detach()  # xgemm does not record gradients: the values are the same
        if framework(type(x)) == "torch" and x.is_floating_point() and x.element_size() == 1:
            import torch  # float8: CuPy has no such dtype, so its bytes (the plan knows
            #               the format from the tensor's dtype)
            x = x.view(torch.uint8)
        return cupy.from_dlpack(x)
    return cupy.asarray(x)  # __cuda_array_interface__: a view, no copy


def pointer(x: Any) -> int:
    """The device address of a CuPy array's or a PyTorch tensor's first element."""
    return x.data.ptr if framework(type(x)) == "cupy" else x.data_ptr()


class _StreamHandle:
    """A raw CUDA stream, as the CUDA stream protocol (``__cuda_stream__``) hands it over."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.ptr


@functools.cache
def external_stream(ptr: int, device: int):
    """A CuPy handle on another framework's CUDA stream (PyTorch's), made once per stream."""
    import cupy

    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        try:
            return from_external(_StreamHandle(ptr))
        except (TypeError, ValueError, AttributeError):
            pass  # a CuPy whose from_external takes something else: the older handle
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return cupy.cuda.ExternalStream(ptr, device)


@functools.cache
def torch_raw_stream() -> Any:
    """How to ask PyTorch for its current stream's handle on a GPU: the raw query its own
    launchers use (Triton's too), else the public one, which builds a Stream object."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw or (lambda device: torch.cuda.current_stream(device).cuda_stream)
