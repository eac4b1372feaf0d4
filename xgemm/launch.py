"""Launching a planned product: the per-call work, and nothing else.

A call with a plan (``xgemm.plan``) takes its arrays' pointers, makes what this call
needs of its own (copies of operands the plan says to copy, the output, a staging array;
padded and transposed copies, and split-K's partial sums and counters, in buffers made
once per stream), encodes (or finds) the TMA tensor
maps, packs the kernel's arguments (once per set of addresses) and launches through the
driver's ``cuLaunchKernel`` (CuPy's binding of it), on the stream of the caller's framework:
CuPy's current stream for CuPy arrays, PyTorch's for PyTorch tensors. Nothing here
synchronises with the GPU or copies between host and device.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from .frameworks import external_stream, pointer, to_cupy, torch_raw_stream
from .kernel_args import (
    Addresses,
    Arguments,
    ByValue,
    ExtraArg,
    Source,
    geometry,
    packed,
    remembered,
)
from .operands import ready_operand, tma_padded
from .render import SUM_THREADS
from .tma import INVALID_CONTEXT
from .workspaces import (
    FRESH_ALIGNMENT,
    copy_buffer,
    cuda_runtime,
    is_capturing,
    misaligned,
    split_k,
)

#: Tensor maps kept, by address and geometry (a map is 128 bytes).
TENSOR_MAP_CACHE_SIZE = 4096


# -- kernel arguments and launches, through the CUDA driver ------------------------------
def _make_context_current() -> None:
    """For a thread that has made no CUDA runtime call yet (a pool's worker), where the
    driver finds no context: a runtime call makes the device's primary context current,
    as CuPy does before a launch."""
    import cupy

    cupy.cuda.runtime.memGetInfo()


@functools.cache
def _launcher() -> tuple[Callable[..., None], type]:
    """``cuLaunchKernel`` as CuPy's driver binding exposes it, and the error it raises.
    Every call launches through it: it takes the handles as ints and returns nothing,
    where cuda-bindings' wraps them in objects and answers with an enum (about a
    microsecond more per launch, docs/notes.md)."""
    import cupy

    return cupy.cuda.driver.launchKernel, cupy.cuda.driver.CUDADriverError


def enqueue(launch: tuple, args: Arguments, stream_ptr: int) -> None:
    """Queue one launch (:func:`geometry`) with ``args`` on the CUDA stream at
    ``stream_ptr``; RuntimeError with the driver's reason if it refuses."""
    launch_kernel, refused = _launcher()
    try:
        launch_kernel(*launch, stream_ptr, args.address, 0)
    except refused as error:
        _refused(error, launch, args, stream_ptr)


def _refused(error: Exception, launch: tuple, args: Arguments, stream_ptr: int) -> None:
    """After the driver refused a launch with ``error``: launched again where this thread
    had no current context (a pool's worker), else RuntimeError with the driver's
    reason."""
    launch_kernel, refused = _launcher()
    if error.status != INVALID_CONTEXT:
        raise RuntimeError(f"cuLaunchKernel refused the launch: {error}") from None
    _make_context_current()
    try:
        launch_kernel(*launch, stream_ptr, args.address, 0)
    except refused as again:
        raise RuntimeError(f"cuLaunchKernel refused the launch: {again}") from None


def pad_rows(pads: Any, sources: tuple[int, ...], targets: tuple[int, ...],
             stream_ptr: int) -> None:
    """Queue ``pads`` (``xgemm.operands.PadLaunch``), the copies of one or two operands at
    device addresses ``sources`` into lines padded for TMA at ``targets``, on the stream
    at ``stream_ptr``: one launch of the pad kernel (``kernels/copy/pad_rows.cu.j2``). Its
    arguments are built once per set of addresses (a loop's copies reuse the same
    buffers)."""
    args = remembered(pads.recent_args, (sources, targets),
                       lambda: Arguments([sources[0], targets[0], sources[-1], targets[-1],
                                          *pads.sizes]))
    enqueue(pads.launch, args, stream_ptr)


# -- TMA tensor maps, by address and geometry ---------------------------------------------
_maps: OrderedDict[tuple, Any] = OrderedDict()
_maps_lock = threading.Lock()


def _remembered_map(key: tuple, make: Callable[[], Any]) -> Any:
    """``_maps[key]``, made by ``make`` (encoding: the costly part) and kept there if
    missing; the ``TENSOR_MAP_CACHE_SIZE`` latest stay."""
    with _maps_lock:
        found = _maps.get(key)
        if found is not None:
            _maps.move_to_end(key)
            return found
    made = make()
    with _maps_lock:
        _maps[key] = made
        if len(_maps) > TENSOR_MAP_CACHE_SIZE:
            _maps.popitem(last=False)
    return made


def tensor_map(address: int, dtype: str, dims: tuple[int, ...], strides: tuple[int, ...],
               box: tuple[int, ...], swizzled: bool = True, promote: int = 128) -> Any:
    """``xgemm.tma.tensor_map`` as a kernel argument, encoded once per address and
    geometry: a call on the same arrays (a weight, an output the memory pool hands back)
    reuses the map, a map is 128 bytes of host memory, and the driver's encoding is the
    costly part."""
    def make() -> Any:
        from .tma import NoContextError
        from .tma import tensor_map as encode

        try:
            made = encode(address, dtype, dims, strides, box, swizzled, promote)
        except NoContextError:
            _make_context_current()
            made = encode(address, dtype, dims, strides, box, swizzled, promote)
        return ByValue(made, made.ctypes.data)

    return _remembered_map((address, dtype, dims, strides, box, swizzled, promote), make)


def tensor_maps(address: int, geometries: tuple[tuple | None, ...]) -> Any:
    """Eight maps of one operand at ``address`` (rung 34's, ``xgemm.tma.eighth_maps``,
    placed by ``eighths_at``) as one argument: their 128 bytes each, one after another,
    as the kernel's struct of eight lays them (an empty map for a residue with no line).
    Encoded once per address and geometries."""
    def make() -> Any:
        from .tma import eighths_at

        base, placed = eighths_at(address, geometries)
        joined = np.zeros(8, dtype=np.dtype((np.void, 128)))
        for r, residue in enumerate(placed):
            if residue is not None:
                joined[r] = tensor_map(base, *residue).owner[0]
        return ByValue(joined, joined.ctypes.data)

    return _remembered_map((address, geometries), make)


@functools.cache
def empty_map() -> Any:
    """The map of an operand a kernel does not read (K = 0; C without TMA_STORE)."""
    zeros = np.zeros(1, dtype=np.dtype((np.void, 128)))
    return ByValue(zeros, zeros.ctypes.data)


# -- one call ------------------------------------------------------------------------------
def run(plan: Any, a: Any, b: Any, target: Any, bias: Any, alpha: float, beta: float,
        scale_a: Any = None, scale_b: Any = None) -> Any:
    """Launch ``plan`` on this call's arrays (CuPy arrays or PyTorch tensors of the plan's
    signature) with ``alpha`` and ``beta`` (and an 8-bit product's GPU scales); returns the
    result (``target`` when given). Runs on the plan's GPU, whichever is current, and on
    the current stream of the framework the plan was made for."""
    if cuda_runtime().getDevice() == plan.device:
        if plan.plain:
            return _plain(plan, a, b, target, bias, alpha, beta, scale_a, scale_b)
        return _launch(plan, a, b, target, bias, alpha, beta, scale_a, scale_b)
    import cupy

    with cupy.cuda.Device(plan.device):
        return _launch(plan, a, b, target, bias, alpha, beta, scale_a, scale_b)


def stream_pointer(plan: Any) -> int:
    """The handle of the stream a call of ``plan`` runs on, on the current device: the
    current stream of the plan's framework (PyTorch's for PyTorch tensors, else CuPy's)."""
    if plan.framework == "torch":
        return torch_raw_stream()(plan.device)
    import cupy

    return cupy.cuda.get_current_stream().ptr


def _launch(plan: Any, a: Any, b: Any, target: Any, bias: Any, alpha: float, beta: float,
            scale_a: Any, scale_b: Any) -> Any:
    stream_ptr = stream_pointer(plan)
    if plan.framework == "torch" and plan.per_call_cupy:
        with external_stream(stream_ptr, plan.device):  # CuPy's copies on PyTorch's stream
            return _enqueued(plan, a, b, target, bias, alpha, beta, scale_a, scale_b,
                             stream_ptr)
    return _enqueued(plan, a, b, target, bias, alpha, beta, scale_a, scale_b, stream_ptr)


def _enqueued(plan: Any, a: Any, b: Any, target: Any, bias: Any, alpha: float, beta: float,
              scale_a: Any, scale_b: Any, stream_ptr: int) -> Any:
    """Make this call's arrays, queue its launches on ``stream_ptr``; the result."""
    keep = []  # this call's own arrays, alive until their kernels are queued
    torch_arrays = plan.framework == "torch"
    ptr_a = a.data_ptr() if torch_arrays else a.data.ptr
    ptr_b = b.data_ptr() if torch_arrays else b.data.ptr
    # whether the stream is capturing a CUDA graph (the buffers of the copies xgemm's
    # kernels make are then the call's own): asked once, by a call that makes some
    capturing = (plan.pad_launch is not None or plan.parts is not None
                 or any(x.copied and x.transpose is not None for x in (plan.a, plan.b))
                 ) and is_capturing(stream_ptr)
    if plan.pad_launch is not None:
        ptr_a, ptr_b = _padded(plan, ptr_a, ptr_b, a.itemsize, keep, stream_ptr, capturing)
    if plan.a.copied and plan.a.pad is None:
        ptr_a = _copy_pointer(plan, plan.a, a, keep, stream_ptr, capturing)
    if plan.b.copied and plan.b.pad is None:
        ptr_b = _copy_pointer(plan, plan.b, b, keep, stream_ptr, capturing)
    if plan.parts is not None:  # rung 33 reads A's and B's TF32 parts, split first
        ptr_a = _split(plan, "a", plan.parts[0], ptr_a, keep, stream_ptr, capturing)
        ptr_b = _split(plan, "b", plan.parts[1], ptr_b, keep, stream_ptr, capturing)
    result, ptr_c, staging, view = _output(plan, target, torch_arrays)
    if not plan.chunks:
        return result
    ptr_bias = 0 if bias is None else _bias_pointer(plan, bias, keep)
    # The call's addresses in kernel_args.Addresses' order (A, B, C, split-K's workspace,
    # the scales), named where its launches are built: a plain tuple per call is cheaper
    ptrs = (ptr_a, ptr_b, ptr_c)
    if plan.partials_bytes or plan.scaled:
        ptrs += _workspace_and_scales(plan, stream_ptr, keep, scale_a, scale_b)
    # The arguments of a recent call that had these addresses and scalars are these too:
    # a loop over the same arrays builds them once, and so does one whose output and
    # copies trade the memory pool's blocks from call to call.
    launches = remembered(plan.recent_args, (ptrs, ptr_bias, alpha, beta),
                           lambda: _launches(plan, Addresses(*ptrs), ptr_bias, alpha, beta))
    for launch, args in launches:
        enqueue(launch, args, stream_ptr)
    if staging is not None:
        view[...] = staging.reshape(view.shape)  # the shape the plan gave it (folded rows)
    return result


def _plain(plan: Any, a: Any, b: Any, target: Any, bias: Any, alpha: float, beta: float,
           scale_a: Any, scale_b: Any) -> Any:
    """:func:`_enqueued` for a plain plan (``Plan.plain``: the product's launches on the
    arrays as they lie, or on their copies padded for TMA, with split-K's workspace and
    8-bit scales at most), on the current stream of its framework: most calls, so in one
    frame, each step written out."""
    keep = []  # a split-K workspace or padded copy larger than those kept, alive until queued
    if plan.framework == "torch":
        stream_ptr = torch_raw_stream()(plan.device)
        ptr_a, ptr_b = a.data_ptr(), b.data_ptr()
        result = plan.new_torch_result() if target is None else target
        ptr_c = result.data_ptr() if target is None else pointer(target)
    else:
        import cupy

        stream_ptr = cupy.cuda.get_current_stream().ptr
        ptr_a, ptr_b = a.data.ptr, b.data.ptr
        result = cupy.ndarray(plan.shapes.out, plan.c_dtype_np) if target is None else target
        ptr_c = result.data.ptr if target is None else pointer(target)
    if plan.pad_launch is not None:  # the pad kernel first, into buffers kept per stream
        ptr_a, ptr_b = _padded(plan, ptr_a, ptr_b, a.itemsize, keep, stream_ptr,
                               is_capturing(stream_ptr))
    if target is None and ptr_c % FRESH_ALIGNMENT:
        misaligned(ptr_c)
    ptrs = (ptr_a, ptr_b, ptr_c)
    if plan.partials_bytes or plan.scaled:
        ptrs += _workspace_and_scales(plan, stream_ptr, keep, scale_a, scale_b)
    ptr_bias = 0 if bias is None else pointer(bias)
    key = (ptrs, ptr_bias, alpha, beta)
    launches = plan.recent_args.get(key)
    if launches is None:
        launches = remembered(plan.recent_args, key,
                              lambda: _launches(plan, Addresses(*ptrs), ptr_bias, alpha, beta))
    launch_kernel, refused = _launcher()
    for launch, args in launches:
        try:
            launch_kernel(*launch, stream_ptr, args.address, 0)
        except refused as error:
            _refused(error, launch, args, stream_ptr)
    return result


def _workspace_and_scales(plan: Any, stream_ptr: int, keep: list, scale_a: Any, scale_b: Any
                          ) -> tuple[int, ...]:
    """The addresses after A's, B's and C's in ``kernel_args.Addresses``' order, for a plan
    with split-K's workspace or 8-bit scales: the workspace and its counters (zeros
    without), then the scales (zero where the call gives none)."""
    found = split_k(plan, stream_ptr, keep) if plan.partials_bytes else (0, 0)
    if plan.scaled:
        found += (0 if scale_a is None else pointer(scale_a),
                  0 if scale_b is None else pointer(scale_b))
    return found


def _output(plan: Any, target: Any, torch_arrays: bool) -> tuple[Any, int, Any, Any]:
    """This call's result, the address the kernel writes, and where it writes through a
    staging array (``plan.output == "staging"``), the staging array and the view of the
    target it is copied back into (else None, None)."""
    staging = view = None
    if plan.output == "new":
        # Made in the result's shape: a fresh C-ordered array is the same bytes as the
        # (*batch, M, N) the kernel writes, whichever dimension numpy.matmul drops (a 1-D
        # operand's) or the plan merged (a folded batch), so no view is made per call
        if torch_arrays:
            result = plan.new_torch_result()
            ptr_c = result.data_ptr()
        else:
            import cupy

            result = cupy.ndarray(plan.shapes.out, plan.c_dtype_np)
            ptr_c = result.data.ptr
        if ptr_c % FRESH_ALIGNMENT:
            misaligned(ptr_c)
    else:
        result = target
        if plan.output == "in_place":
            ptr_c = pointer(target)
        else:  # through a staging array, copied back after the kernel
            import cupy

            view = to_cupy(target)
            if plan.shapes.b_vector:
                view = view[..., None]
            if plan.shapes.a_vector:
                view = view[..., None, :]
            staging = (cupy.ascontiguousarray(view) if plan.read_c
                       else cupy.empty(plan.shapes.full, view.dtype))
            ptr_c = staging.data.ptr
    return result, ptr_c, staging, view


def _bias_pointer(plan: Any, bias: Any, keep: list) -> int:
    """The bias's address; a strided one (rare, and small) copied first, kept in ``keep``."""
    if plan.copy_bias:
        import cupy

        bias = cupy.ascontiguousarray(to_cupy(bias))
        keep.append(bias)
        return bias.data.ptr
    return pointer(bias)


def _launches(plan: Any, ptrs: Addresses, ptr_bias: int, alpha: float, beta: float
              ) -> tuple[tuple[tuple, Arguments], ...]:
    """Each launch's geometry (:func:`geometry`) and kernel arguments: A, B, C, the plan's
    sizes, bias, alpha, beta, and the variant's extras (``Variant.extra_args``)."""
    if alpha == 1.0 and beta == 0.0:
        scalars = plan.unit
    else:
        scalars = packed(plan.acc_code * 2, (alpha, beta))
    function = plan.function()
    launches = []
    for chunk in plan.chunks:
        args = [ptrs.a + chunk.offsets[0], ptrs.b + chunk.offsets[1],
                ptrs.c + chunk.offsets[2], *plan.sizes, ptr_bias, *scalars]
        args += [_extra(ptrs, arg) for arg in chunk.extra]
        launches.append((geometry(function, chunk.grid, plan.block, plan.shared_mem),
                         Arguments(args)))
        if plan.variant.sum_pass:  # the partials summed into C, right after on the stream
            partials = next(_extra(ptrs, arg) for arg in chunk.extra
                            if arg.source is Source.PARTIALS)
            grid = (plan.sum_blocks, 1, chunk.grid[2] // plan.splits)
            launches.append((geometry(plan.function("_sum"), grid, (SUM_THREADS,), 0),
                             Arguments([partials, ptrs.c + chunk.offsets[2], *plan.sum_sizes,
                                        ptr_bias, *scalars])))
    return tuple(launches)


def _extra(ptrs: Addresses, arg: ExtraArg) -> int | ByValue:
    """One of a variant's extra arguments (``Variant.extra_args``), as its plan says: a
    pointer (a workspace, a scale vector), or a tensor map of A, B or C (an empty one
    where the kernel reads none). The one place an extra becomes an address."""
    if arg.source is Source.NONE:
        return empty_map()
    address = arg.source.address(ptrs) + arg.offset
    if arg.geometry is None:
        return address
    if isinstance(arg.geometry[0], str):
        return tensor_map(address, *arg.geometry)
    return tensor_maps(address, arg.geometry)


def _padded(plan: Any, ptr_a: int, ptr_b: int, itemsize: int, keep: list, stream_ptr: int,
            capturing: bool) -> tuple[int, int]:
    """The addresses the kernel reads A and B at, for a plan that pads one or both for
    TMA by the pad kernel: their padded copies', queued in one launch."""
    sources, targets, ptrs = [], [], [ptr_a, ptr_b]
    for i, prep in enumerate((plan.a, plan.b)):
        if prep.pad is not None:
            sources.append(ptrs[i])
            ptrs[i] = copy_buffer(plan, prep.name, prep.pad.elements * itemsize, stream_ptr,
                                   keep, capturing)
            targets.append(ptrs[i])
    pad_rows(plan.pad_launch, tuple(sources), tuple(targets), stream_ptr)
    return ptrs[0], ptrs[1]


def _split(plan: Any, name: str, parts: Any, ptr: int, keep: list, stream_ptr: int,
           capturing: bool) -> int:
    """The address of this call's TF32 parts of operand ``name`` (at ``ptr``), for rung
    33: the split pre-pass queued into a buffer of both parts (``xgemm.parts.Parts``),
    kept as a copy's is (``workspaces.copy_buffer``)."""
    buffer = copy_buffer(plan, f"{name} parts", 2 * parts.span * 4, stream_ptr, keep,
                         capturing)
    args = remembered(parts.recent_args, (ptr, buffer),
                      lambda: Arguments([ptr, buffer, *parts.sizes]))
    enqueue(parts.launch, args, stream_ptr)
    return buffer


def _copy_pointer(plan: Any, prep: Any, x: Any, keep: list, stream_ptr: int,
                  capturing: bool) -> int:
    """The address of this call's copy of operand ``x``, for a plan that says it must be
    copied or transposed into its fast layout, or padded where the pad kernel cannot
    (kept alive in ``keep``)."""
    if prep.transpose is not None:
        t = prep.transpose
        address = copy_buffer(plan, prep.name, math.prod(t.shape) * t.dtype.itemsize,
                              stream_ptr, keep, capturing)
        args = remembered(t.recent_args, (pointer(x), address),
                           lambda: Arguments([pointer(x), address, *t.sizes]))
        enqueue(t.launch, args, stream_ptr)
        return address
    full, layout, _ = ready_operand(prep.matrices(to_cupy(x)), prep.full_shape, prep.layouts,
                                    prep.name, prep.variant, prep.relayout)
    if prep.padded:
        full, layout = tma_padded(full, layout)
    keep.append(full)
    return full.data.ptr
