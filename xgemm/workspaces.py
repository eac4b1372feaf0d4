"""The buffers a call writes besides its output, kept between calls: split-K's partial
sums and arrival counters, and the operands' padded, transposed and split copies, one
buffer per GPU, stream and thread that every plan shares (calls on one stream run in
turn). A call on a stream it ran on before allocates nothing. While a CUDA graph is being
captured, a call's buffers are its own, kept with its plan, as every replay writes them.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from .frameworks import external_stream

#: What a plan assumes of the address of an array each call allocates (its output, a
#: transposed copy): CuPy's and PyTorch's pools align their blocks to 512 bytes.
FRESH_ALIGNMENT = 64
#: Most bytes of split-K partial sums kept between calls, per stream and thread (shared
#: by every split-K plan: calls on one stream run in turn); a larger need is per call.
KEPT_WORKSPACE_BYTES = 64 * 2**20


class _Workspace:
    """Split-K's partial sums kept for one stream and thread: grown in place (a larger
    array replaces the smaller, which CuPy's pool frees in stream order, handing it out
    again only to work queued behind it), so a plan that holds it sees the new one."""

    __slots__ = ("array", "nbytes", "ptr")

    def __init__(self) -> None:
        self.array, self.nbytes, self.ptr = None, 0, 0

    def grow(self, nbytes: int) -> None:
        import cupy

        self.array = cupy.empty(min(max(nbytes, 2 * self.nbytes), KEPT_WORKSPACE_BYTES),
                                dtype=np.uint8)
        self.nbytes, self.ptr = self.array.nbytes, self.array.data.ptr


# split-K's partials by (GPU, stream, thread); copies of operands by (..., "a" or "b")
_workspaces: dict[tuple, _Workspace] = {}


def is_capturing(stream_ptr: int) -> bool:
    """Whether the stream at ``stream_ptr`` is being captured into a CUDA graph (or cannot
    say: the legacy stream while another stream captures). Asked through CuPy's runtime
    binding, which answers with an int: every split-K call asks, and every call that
    copies an operand by xgemm's kernels, where cuda-bindings' answer builds an enum."""
    runtime = cuda_runtime()
    try:
        return runtime.streamIsCapturing(stream_ptr) != 0
    except runtime.CUDARuntimeError:
        return True


@functools.cache
def cuda_runtime() -> Any:
    """CuPy's CUDA runtime binding, which every call asks for its device (and split-K's
    whether its stream is capturing): an import statement costs part of a microsecond."""
    import cupy

    return cupy.cuda.runtime


@contextlib.contextmanager
def allocating_while_capturing() -> Iterator[None]:
    """A context in which this thread may allocate while a stream captures a CUDA graph.
    PyTorch captures in global or thread-local mode, where cudaMalloc (which CuPy's pool
    calls when it has no free block) is refused and invalidates the capture; relaxed
    mode allows it, as PyTorch's own allocator does for its graphs' pools. The mode is
    the driver's, per thread, whichever runtime began the capture; it is put back after."""
    from cuda.bindings import driver

    relaxed = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    error, previous = driver.cuThreadExchangeStreamCaptureMode(relaxed)
    if error != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuThreadExchangeStreamCaptureMode failed: {error.name}")
    try:
        yield
    finally:
        driver.cuThreadExchangeStreamCaptureMode(previous)


def on_stream(plan: Any, stream_ptr: int) -> Any:
    """A context in which CuPy's work goes on ``stream_ptr`` (PyTorch's for its tensors;
    for CuPy arrays it is CuPy's current stream already)."""
    if plan.framework == "torch":
        return external_stream(stream_ptr, plan.device)
    return contextlib.nullcontext()


def split_k(plan: Any, stream_ptr: int, keep: list) -> tuple[int, int]:
    """The addresses of split-K's partial sums and arrival counters for a call on the
    stream at ``stream_ptr``. The counters, per plan, stream and thread, are zeroed when
    first asked for and left at zero by every launch (the last block or warp of a tile
    resets its counter); the partials, up to ``KEPT_WORKSPACE_BYTES``, are one buffer per
    stream and thread that every plan shares. Kept per stream and thread: launches on
    two streams may overlap, and CuPy's per-thread default stream is one handle for as
    many streams as threads. So a call on a stream it ran on before allocates nothing,
    and finds both in one lookup. While a CUDA graph is being captured, both are made for
    the call (the zeroing is then part of the graph) and kept with the plan, as every
    replay writes them."""
    key = (stream_ptr, threading.get_ident())
    found = plan.counters.get(key)  # (the counters, their address, the partials)
    nbytes = plan.partials_bytes
    if found is not None and found[2].nbytes >= nbytes and not is_capturing(stream_ptr):
        return found[2].ptr, found[1]
    import cupy

    with on_stream(plan, stream_ptr):
        if is_capturing(stream_ptr):
            with allocating_while_capturing():
                partials = cupy.empty(nbytes, dtype=np.uint8)
                counters = cupy.zeros(plan.arrivals, dtype=np.uint32)
            plan.captured.append((partials, counters))
            return partials.data.ptr, counters.data.ptr
        if found is None:
            counters = cupy.zeros(plan.arrivals, dtype=np.uint32)
            workspace = _workspaces.setdefault((plan.device, *key), _Workspace())
            found = plan.counters[key] = (counters, counters.data.ptr, workspace)
        if nbytes > KEPT_WORKSPACE_BYTES:
            partials = cupy.empty(nbytes, dtype=np.uint8)
            keep.append(partials)
            return partials.data.ptr, found[1]
        if found[2].nbytes < nbytes:
            found[2].grow(nbytes)
        return found[2].ptr, found[1]


def copy_buffer(plan: Any, name: str, nbytes: int, stream_ptr: int, keep: list,
                capturing: bool) -> int:
    """Where a call's transposed or padded copy of operand ``name`` goes: up to
    ``KEPT_WORKSPACE_BYTES``, one buffer per GPU, stream, thread and operand that every
    plan shares, as split-K's partials are (calls on one stream run in turn, so the next
    call's copy is written after this call's product has read it), and the call
    allocates nothing; a larger copy is the call's own (in ``keep``). While a CUDA graph
    is being captured, the copy is made for the call and kept with the plan, as every
    replay writes it. ``capturing``: whether the stream is being captured (``is_capturing``,
    asked once for a call's copies)."""
    if nbytes <= KEPT_WORKSPACE_BYTES and not capturing:
        key = (plan.device, stream_ptr, threading.get_ident(), name)
        buffer = _workspaces.get(key) or _workspaces.setdefault(key, _Workspace())
        if buffer.nbytes < nbytes:
            with on_stream(plan, stream_ptr):
                buffer.grow(nbytes)
            if buffer.ptr % FRESH_ALIGNMENT:
                misaligned(buffer.ptr)
        return buffer.ptr
    import cupy

    with on_stream(plan, stream_ptr), (allocating_while_capturing() if capturing
                                       else contextlib.nullcontext()):
        copy = cupy.empty(nbytes, dtype=np.uint8)
    (plan.captured if capturing else keep).append(copy)
    if copy.data.ptr % FRESH_ALIGNMENT:
        misaligned(copy.data.ptr)
    return copy.data.ptr


def misaligned(ptr: int) -> None:
    """RuntimeError for an array the memory pool handed out at ``ptr``, short of the
    alignment plans assume (``FRESH_ALIGNMENT``), naming the fix."""
    raise RuntimeError(
        f"the memory pool returned an array at {ptr:#x}, not a multiple of {FRESH_ALIGNMENT} "
        "bytes, and xgemm plans its outputs and copies for that alignment: use CuPy's (or "
        "PyTorch's) default allocator, or one that aligns its blocks to 256 bytes as "
        "cudaMalloc does")
