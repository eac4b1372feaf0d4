"""Launching a planned product: the per-call work, and nothing else.

A call with a plan (``xgemm.plan``) takes its arrays' pointers, makes what this call
needs of its own (copies of operands the plan says to copy, the output, a staging array,
split-K's partial sums; its counters once per stream), encodes (or finds) the TMA tensor
maps, packs the kernel's arguments and launches, on the stream of the caller's framework:
CuPy's current stream for CuPy arrays, PyTorch's for PyTorch tensors. Nothing here
synchronises with the GPU or copies between host and device.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .checks import Layout, layout_of

if TYPE_CHECKING:
    import cupy

#: What TMA needs of a global array: base address and every stride in multiples of this.
TMA_ALIGNMENT = 16
#: What a plan assumes of the address of an array each call allocates (its output, a
#: transposed copy): CuPy's and PyTorch's pools align their blocks to 512 bytes.
FRESH_ALIGNMENT = 64
#: Tensor maps kept, by address and geometry (a map is 128 bytes).
TENSOR_MAP_CACHE_SIZE = 4096


# -- arrays of either framework ----------------------------------------------------------
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
def _torch_raw_stream() -> Any:
    """How to ask PyTorch for its current stream's handle on a GPU: the raw query its own
    launchers use (Triton's too), else the public one, which builds a Stream object."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw or (lambda device: torch.cuda.current_stream(device).cuda_stream)


def torch_stream(device: int):
    """PyTorch's current stream on GPU ``device``, as a CuPy stream."""
    return external_stream(_torch_raw_stream()(device), device)


# -- operands made ready for a kernel ---------------------------------------------------
def ready_operand(x: cupy.ndarray, full_shape: tuple[int, ...], layouts: tuple[str, ...],
                  name: str, variant: str, relayout: bool = False
                  ) -> tuple[cupy.ndarray, Layout, bool]:
    """``x`` (at least 2-D) broadcast to ``full_shape`` (*batch, rows, cols), the layout
    the kernel reads it in, and whether it had to be copied. When its strides leave no
    unit stride in the last two dimensions it is copied, once; when no single stride
    walks its batch, the broadcast batch is. Where it has a layout the variant does not
    read: copied into one it does with ``relayout`` (8-bit operands), else ValueError."""
    import cupy

    full = x if x.shape == full_shape else cupy.broadcast_to(x, full_shape)
    found = layout_of(full.shape, full.strides, full.itemsize, layouts)
    if found is not None:
        return full, found, False
    readable = layout_of(full.shape, full.strides, full.itemsize)
    if readable is not None and not relayout:
        have = "column" if readable.col else "row"
        raise ValueError(
            f"variant {variant!r} reads {name} {' or '.join(layouts)}-major only, and {name} is "
            f"{have}-major; name a variant that reads both (e.g. 'tiled'), or pass {name} "
            "in the layout this one reads"
        )

    def contiguous(y):  # in the variant's first layout, each matrix of the batch whole
        if layouts[0] == "row":
            return cupy.ascontiguousarray(y)
        return cupy.swapaxes(cupy.ascontiguousarray(cupy.swapaxes(y, -1, -2)), -1, -2)

    full = cupy.broadcast_to(contiguous(x), full_shape)
    found = layout_of(full.shape, full.strides, full.itemsize, layouts)
    if found is None:  # e.g. (2, 1, M, K) against (1, 3, K, N): materialise the batch
        full = contiguous(full)
        found = layout_of(full.shape, full.strides, full.itemsize, layouts)
    return full, found, True


def tma_ready(ptr: int, layout: Layout | None, itemsize: int) -> bool:
    """Whether TMA can read an array at ``ptr`` in ``layout`` in place: its start, its
    leading dimension and its batch stride are whole multiples of 16 bytes."""
    return layout is not None and ptr % TMA_ALIGNMENT == 0 and all(
        n * itemsize % TMA_ALIGNMENT == 0 for n in (layout.ld, layout.batch_stride))


def tma_padded(x: cupy.ndarray, layout: Layout) -> tuple[cupy.ndarray, Layout]:
    """``x`` (*batch, rows, cols) copied with its rows (columns, column-major) padded to
    16 bytes, for TMA. A broadcast batch (stride 0) stays one padded matrix, broadcast."""
    import cupy

    group = TMA_ALIGNMENT // x.itemsize
    broadcast = layout.batch_stride == 0 and x.ndim > 2
    source = x[(0,) * (x.ndim - 2)] if broadcast else x
    lines = cupy.swapaxes(source, -1, -2) if layout.col else source  # contiguous dim last
    *batch, outer, inner = lines.shape
    padded = cupy.empty((*batch, outer, -(-inner // group) * group), dtype=x.dtype)
    view = padded[..., :inner]
    view[...] = lines
    if layout.col:
        view = cupy.swapaxes(view, -1, -2)
    if broadcast:
        return cupy.broadcast_to(view, x.shape), Layout(layout.col, padded.shape[-1], 0)
    found = layout_of(view.shape, view.strides, view.itemsize, ("col" if layout.col else "row",))
    return view, Layout(layout.col, padded.shape[-1], found.batch_stride)  # ld even of 1 row


# -- kernel arguments, as CuPy's launch takes them -----------------------------------------
def by_value(owner: Any, address: int) -> Any:
    """A kernel argument passed by value: the bytes at ``address``, which lie inside
    ``owner`` (kept alive with the argument). CuPy's launch takes any ``CPointer`` as it
    is, so an argument made once (a plan's sizes, a tensor map) costs nothing per call,
    where a NumPy scalar is converted again on every launch."""
    held = _held_type()(address)
    held.owner = owner
    return held


@functools.cache
def _held_type() -> type:
    from cupy.cuda.function import CPointer

    class Held(CPointer):
        """CuPy's pointer to an argument's bytes, and (``owner``) what holds those bytes."""

        __slots__ = ("owner",)

    return Held


@functools.cache
def _address_type() -> type:
    """CuPy's by-value 64-bit integer argument (a device address)."""
    from cupy.cuda.function import CIntptr

    return CIntptr


def packed(codes: str, values: tuple) -> tuple:
    """``values`` as by-value kernel arguments of the C types ``codes`` names in
    ``struct``'s letters (``i`` int, ``q`` long long, ``f`` float, ``d`` double), packed
    once into one host buffer, each at its natural alignment (as C lays out parameters).

    >>> args = packed("id", (7, 0.5))  # doctest: +SKIP
    """
    size, offsets = _packing(codes)
    buffer = ctypes.create_string_buffer(size)
    struct.pack_into(codes, buffer, 0, *values)
    base = ctypes.addressof(buffer)
    return tuple(by_value(buffer, base + offset) for offset in offsets)


@functools.cache
def _packing(chars: str) -> tuple[int, tuple[int, ...]]:
    """Bytes and offsets of values of the ``struct`` codes ``chars`` in native layout."""
    ends = [struct.calcsize(chars[:i + 1]) for i in range(len(chars))]
    starts = (end - struct.calcsize(c) for end, c in zip(ends, chars, strict=True))
    return max(ends[-1], 8), tuple(starts)


# -- TMA tensor maps, by address and geometry ---------------------------------------------
_maps: OrderedDict[tuple, Any] = OrderedDict()
_maps_lock = threading.Lock()


def tensor_map(address: int, dtype: str, dims: tuple[int, ...], strides: tuple[int, ...],
               box: tuple[int, ...]) -> Any:
    """``xgemm.tma.tensor_map`` as a kernel argument, encoded once per address and
    geometry: a call on the same arrays (a weight, an output the memory pool hands back)
    reuses the map, a map is 128 bytes of host memory, and the driver's encoding is the
    costly part."""
    key = (address, dtype, dims, strides, box)
    with _maps_lock:
        found = _maps.get(key)
        if found is not None:
            _maps.move_to_end(key)
            return found
    from .tma import NoContextError
    from .tma import tensor_map as encode

    try:
        made = encode(address, dtype, dims, strides, box)
    except NoContextError:
        # A thread that has made no CUDA runtime call yet (a pool's worker): a runtime
        # call makes the device's primary context current, as CuPy does before a launch.
        import cupy

        cupy.cuda.runtime.memGetInfo()
        made = encode(address, dtype, dims, strides, box)
    made = by_value(made, made.ctypes.data)
    with _maps_lock:
        _maps[key] = made
        if len(_maps) > TENSOR_MAP_CACHE_SIZE:
            _maps.popitem(last=False)
    return made


@functools.cache
def empty_map() -> Any:
    """The map of an operand a kernel does not read (K = 0; C without TMA_STORE)."""
    zeros = np.zeros(1, dtype=np.dtype((np.void, 128)))
    return by_value(zeros, zeros.ctypes.data)


# -- one call ------------------------------------------------------------------------------
_current_device: Callable[[], int] | None = None


def run(plan: Any, a: Any, b: Any, target: Any, bias: Any, alpha: float, beta: float,
        scale_a: Any = None, scale_b: Any = None) -> Any:
    """Launch ``plan`` on this call's arrays (CuPy arrays or PyTorch tensors of the plan's
    signature) with ``alpha`` and ``beta`` (and an 8-bit product's GPU scales); returns the
    result (``target`` when given). Runs on the plan's GPU, whichever is current, and on
    the current stream of the framework the plan was made for."""
    global _current_device
    if _current_device is None:
        import cupy

        _current_device = cupy.cuda.runtime.getDevice
    scales = (scale_a, scale_b)
    if _current_device() == plan.device:
        return _run(plan, a, b, target, bias, alpha, beta, scales)
    import cupy

    with cupy.cuda.Device(plan.device):
        return _run(plan, a, b, target, bias, alpha, beta, scales)


def _run(plan: Any, a: Any, b: Any, target: Any, bias: Any, alpha: float, beta: float,
         scales: tuple) -> Any:
    if plan.framework != "torch":
        return _launch(plan, a, b, target, bias, alpha, beta, None, scales)
    stream = torch_stream(plan.device)
    if plan.per_call_cupy:
        with stream:  # CuPy's copies and workspaces on PyTorch's stream
            return _launch(plan, a, b, target, bias, alpha, beta, stream, scales)
    return _launch(plan, a, b, target, bias, alpha, beta, stream, scales)


def _counters(plan: Any) -> Any:
    """Split-K's arrival counters for this thread's current stream: zeroed when first asked
    for, and left at zero by every launch (the last block or warp of a tile resets its
    counter), so calls queued on one stream share them with no memset each. Kept per
    stream and thread: launches on two streams may overlap, and CuPy's per-thread default
    stream is one handle for as many streams as threads. While a CUDA graph is being
    captured, zeroed per call, as the zeroing must be part of the graph."""
    import cupy

    stream = cupy.cuda.get_current_stream()
    if stream.is_capturing():
        return cupy.zeros(plan.arrivals, dtype=np.uint32)
    key = (stream.ptr, threading.get_ident())
    counters = plan.counters.get(key)
    if counters is None:
        counters = plan.counters[key] = cupy.zeros(plan.arrivals, dtype=np.uint32)
    return counters


def _launch(plan: Any, a: Any, b: Any, target: Any, bias: Any, alpha: float, beta: float,
            stream: Any, scales: tuple) -> Any:
    import cupy

    keep = []  # this call's own arrays, alive until their kernels are queued
    ptr_a = _copy_pointer(plan.a, a, keep, stream) if plan.a.copied else pointer(a)
    ptr_b = _copy_pointer(plan.b, b, keep, stream) if plan.b.copied else pointer(b)
    staging = view = None
    if plan.output == "new":
        if plan.framework == "torch":
            import torch

            full = torch.empty(plan.shapes.full, dtype=plan.torch_c_dtype,
                               device=plan.torch_device)
            ptr_c = full.data_ptr()
        else:
            full = cupy.ndarray(plan.shapes.full, plan.c_dtype_np)
            ptr_c = full.data.ptr
        result = full.reshape(plan.shapes.out) if plan.reshape else full
        if ptr_c % FRESH_ALIGNMENT:
            _misaligned(ptr_c)
    else:
        result = target
        if plan.output == "in_place":
            ptr_c = pointer(target)
        else:  # through a staging array, copied back after the kernel
            view = to_cupy(target)
            if plan.shapes.b_vector:
                view = view[..., None]
            if plan.shapes.a_vector:
                view = view[..., None, :]
            staging = (cupy.ascontiguousarray(view) if plan.read_c
                       else cupy.empty(plan.shapes.full, view.dtype))
            ptr_c = staging.data.ptr
    if not plan.chunks:
        return result
    if bias is None:
        ptr_bias = 0
    elif plan.copy_bias:
        bias = cupy.ascontiguousarray(to_cupy(bias))  # a strided bias (rare, and small)
        keep.append(bias)
        ptr_bias = bias.data.ptr
    else:
        ptr_bias = pointer(bias)
    ptrs = (ptr_a, ptr_b, ptr_c)
    if plan.splits > 1:  # split-K: partial products, and its counters
        partials = cupy.empty(plan.partials, dtype=plan.acc)
        arrivals = _counters(plan)
        keep += (partials, arrivals)
        ptrs += (partials.data.ptr, arrivals.data.ptr)
    if plan.scaled:  # an 8-bit product's scales (null: none), after split-K's two places
        ptrs += (0, 0)[:5 - len(ptrs)] + tuple(0 if x is None else pointer(x) for x in scales)
    # The arguments of the last call that had these addresses and scalars are these too:
    # a loop over the same arrays (and the outputs the memory pool hands back) builds
    # them once.
    memo_key = (ptrs, ptr_bias, alpha, beta)
    memo = plan.last_args
    if memo is not None and memo[0] == memo_key:
        arguments = memo[1]
    else:
        arguments = _arguments(plan, ptrs, ptr_bias, alpha, beta)
        plan.last_args = (memo_key, arguments)
    function = plan.function()
    for chunk, args in zip(plan.chunks, arguments, strict=True):
        function(chunk.grid, plan.block, args, plan.shared_mem, stream)
    if staging is not None:
        view[...] = staging
    return result


def _arguments(plan: Any, ptrs: tuple[int, ...], ptr_bias: int, alpha: float, beta: float
               ) -> tuple[tuple, ...]:
    """Each launch's kernel arguments: A, B, C, the plan's sizes, bias, alpha, beta, and
    the variant's extras (``Variant.extra_args``), as CuPy's launch takes them."""
    address = _address_type()
    if alpha == 1.0 and beta == 0.0:
        scalars = plan.unit
    else:
        scalars = packed(plan.acc_code * 2, (alpha, beta))
    bias_arg = (address(ptr_bias),)
    arguments = []
    for chunk in plan.chunks:
        args = (address(ptrs[0] + chunk.offsets[0]), address(ptrs[1] + chunk.offsets[1]),
                address(ptrs[2] + chunk.offsets[2]), *plan.sizes, *bias_arg, *scalars)
        if chunk.extra:
            args += tuple(_extra(ptrs, *arg) for arg in chunk.extra)
        arguments.append(args)
    return tuple(arguments)


def _extra(ptrs: tuple[int, ...], source: int, offset: int, geometry: tuple | None) -> Any:
    """One of a variant's extra arguments (``Variant.extra_args``): a workspace pointer,
    or a tensor map of A, B or C (empty where the kernel reads none: source -1)."""
    if source < 0:
        return empty_map()
    if geometry is None:
        return _address_type()(ptrs[source] + offset)
    return tensor_map(ptrs[source] + offset, *geometry)


def _copy_pointer(prep: Any, x: Any, keep: list, stream: Any) -> int:
    """The address of this call's copy of operand ``x``, for a plan that says it must be
    copied, padded or transposed into its fast layout (kept alive in ``keep``)."""
    if prep.transpose is not None:
        import cupy

        t = prep.transpose
        copy = cupy.ndarray(t.shape, t.dtype)
        keep.append(copy)
        if copy.data.ptr % FRESH_ALIGNMENT:
            _misaligned(copy.data.ptr)
        address = _address_type()
        t.function(t.grid, t.block, (address(pointer(x)), address(copy.data.ptr), *t.sizes),
                   0, stream)
        return copy.data.ptr
    full, layout, _ = ready_operand(prep.matrices(to_cupy(x)), prep.full_shape, prep.layouts,
                                    prep.name, prep.variant, prep.relayout)
    if prep.padded:
        full, layout = tma_padded(full, layout)
    keep.append(full)
    return full.data.ptr


def _misaligned(ptr: int) -> None:
    raise RuntimeError(
        f"the memory pool returned an array at {ptr:#x}, not a multiple of {FRESH_ALIGNMENT} "
        "bytes, and xgemm plans its outputs and copies for that alignment: use CuPy's (or "
        "PyTorch's) default allocator, or one that aligns its blocks to 256 bytes as "
        "cudaMalloc does")
