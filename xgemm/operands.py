"""Operands and output made ready for a kernel, at plan time (once a signature): each
operand broadcast to the product's batch and read in place where the variant reads its
layout, else from a copy each call makes (a transposed copy into the layout the variant
reads fastest, a copy into one it reads at all, rows padded for TMA by the pad kernel);
a batch of rows sharing one B read as one matrix; the output written in place, afresh or
through a staging array. Each copy is made here once, to learn its layout.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from . import gpu
from .checks import (
    INT_MAX,
    Layout,
    Shapes,
    check_device_limits,
    check_layout_read,
    dtype_name,
    extent,
    layout_of,
    overlaps,
)
from .compile import PAD_THREADS, PAD_UNROLL, get_kernel, pad_kernel
from .expressions import cdiv
from .frameworks import pointer
from .kernel_args import geometry, packed
from .registry import Variant, get_variant
from .specs import DTYPES, Spec, numpy_dtype
from .tma import ALIGNMENT as TMA_ALIGNMENT
from .tma import padded_line

if TYPE_CHECKING:
    import cupy


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
        check_layout_read(variant, name, layouts, readable.col)

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


def reads_in_eighths(v: Variant, name: str) -> bool:
    """Whether ``v`` reads operand ``name`` through eight tensor maps, one per residue of
    its lines mod 8, at any leading dimension and start (rung 34)."""
    return f"tensor_maps_{name}" in v.extra_args


def tma_reads(v: Variant, name: str, ptr: int, layout: Layout | None, itemsize: int) -> bool:
    """Whether TMA reads operand ``name`` of ``v`` in place (else the plan pads a copy):
    :func:`tma_ready`, or where ``v`` reads it in eighths (:func:`reads_in_eighths`), a
    batch stride of whole 16 bytes (any leading dimension, any start)."""
    if layout is not None and reads_in_eighths(v, name):
        return layout.batch_stride * itemsize % TMA_ALIGNMENT == 0
    return tma_ready(ptr, layout, itemsize)


def tma_padded(x: cupy.ndarray, layout: Layout) -> tuple[cupy.ndarray, Layout]:
    """``x`` (*batch, rows, cols) copied with its rows (columns, column-major) padded for
    TMA (``tma.padded_line``). A broadcast batch (stride 0) stays one padded matrix,
    broadcast."""
    import cupy

    broadcast = layout.batch_stride == 0 and x.ndim > 2
    source = x[(0,) * (x.ndim - 2)] if broadcast else x
    lines = cupy.swapaxes(source, -1, -2) if layout.col else source  # contiguous dim last
    *batch, outer, inner = lines.shape
    padded = cupy.empty((*batch, outer, padded_line(inner, x.itemsize)), dtype=x.dtype)
    view = padded[..., :inner]
    view[...] = lines
    if layout.col:
        view = cupy.swapaxes(view, -1, -2)
    if broadcast:
        return cupy.broadcast_to(view, x.shape), Layout(layout.col, padded.shape[-1], 0)
    found = layout_of(view.shape, view.strides, view.itemsize, ("col" if layout.col else "row",))
    return view, Layout(layout.col, padded.shape[-1], found.batch_stride)  # ld even of 1 row


def transpose_launch(v: Variant, p: dict[str, int], ptr: int, rows: int, cols: int, ld: int,
                     dtype: str, device: int) -> tuple[Spec, tuple[int, ...], tuple[int, ...]]:
    """The specialisation, grid and block of transpose variant ``v`` at ``p`` for a
    ``rows`` x ``cols`` row-major input at ``ptr`` with leading dimension ``ld``: it is
    ``aligned`` where every group of four lies whole at a 4-element boundary."""
    flags = {}
    if "aligned" in v.flags:
        flags["aligned"] = (ptr % (4 * DTYPES[dtype].itemsize) == 0
                            and ld % 4 == 0 and rows % 4 == 0 and cols % 4 == 0)
    grid, block = v.launch(p, rows, cols, gpu.multiprocessors(device))
    return Spec(dtype, flags=tuple(sorted(flags.items()))), grid, block


@dataclass(frozen=True)
class NewArray:
    """An array a call writes afresh (its output, a transposed copy) as planning sees it:
    C-ordered, at an address aligned to ``FRESH_ALIGNMENT`` (which ``xgemm.launch``
    checks per call). Nothing is allocated to plan it."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        strides, step = [], self.itemsize
        for size in reversed(self.shape):
            strides.append(step)
            step *= max(size, 1)
        return tuple(reversed(strides))

    def data_ptr(self) -> int:
        return 0  # aligned to every boundary a kernel asks for


@dataclass(frozen=True)
class Transpose:
    """The transpose kernel that copies an operand into the layout its GEMM kernel reads
    fastest (``Variant.transpose_first``), launched by each call before the product: it
    reads the operand's rows (a row-major A, or the rows of a column-major B's transpose)
    and writes a C-ordered ``shape`` array."""

    launch: tuple                   # its function, grid, block (``xgemm.launch.geometry``)
    shape: tuple[int, int]          # (cols, rows) of what it reads
    dtype: Any                      # NumPy's
    sizes: tuple                    # rows, cols, leading dimension: packed once
    recent_args: dict = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Pad:
    """How a call copies an operand whose rows TMA cannot read into rows padded for TMA
    (``tma.padded_line``): ``height`` lines of ``width`` bytes, ``src_pitch`` apart in the operand,
    ``dst_pitch`` apart in a fresh array of ``elements`` values (a batch whose matrices
    follow one another is one run of lines; a broadcast one is padded once), in
    ``chunks`` 16-byte chunks. The plan's :class:`PadLaunch` copies it."""

    height: int
    width: int
    src_pitch: int
    dst_pitch: int
    elements: int
    chunks: int


def padding(height: int, width: int, src_pitch: int, dst_pitch: int, elements: int
            ) -> Pad | None:
    """The pad kernel's copy of ``height`` lines of ``width`` bytes, ``src_pitch`` apart,
    into lines ``dst_pitch`` apart (a multiple of 16); None where its 16-byte chunks are
    too many for the kernel's 32-bit count (2^31: 32 GiB).

    >>> padding(3, 10, 10, 16, 24).chunks
    3
    """
    chunks = cdiv(width, 16) * height
    if chunks >= 2**31 or dst_pitch % 16:
        return None
    return Pad(height, width, src_pitch, dst_pitch, elements, chunks)


@dataclass(frozen=True)
class PadLaunch:
    """One launch of the pad kernel (``kernels/copy/pad_rows.cu.j2``) that copies one
    operand's or both operands' ``pads`` (``xgemm.launch.pad_rows``)."""

    pads: tuple[Pad, ...]
    launch: tuple                   # the kernel, grid, block (``xgemm.launch.geometry``)
    sizes: tuple                    # pitches, widths, chunks, the first's blocks: packed once
    recent_args: dict = field(default_factory=dict, compare=False, repr=False)


def plan_pad_launch(pads: tuple[Pad, ...], device: int) -> PadLaunch:
    """The launch that copies ``pads`` (one or two) on GPU ``device``: each gets blocks
    for its chunks, at most four an SM.

    >>> one = padding(3, 10, 10, 16, 24)
    >>> plan_pad_launch((one, one), device=0).launch[1]  # doctest: +SKIP
    2
    """
    if not 1 <= len(pads) <= 2:
        raise ValueError(f"the pad kernel copies one or two operands, not {len(pads)}")
    blocks = [max(1, min(cdiv(p.chunks, PAD_THREADS * PAD_UNROLL),
                         4 * gpu.multiprocessors(device))) for p in pads]
    first, second = pads[0], pads[-1]  # one operand: the second's arguments go unread
    return PadLaunch(pads, geometry(pad_kernel(device).kernel, (sum(blocks),),
                                    (PAD_THREADS,), 0),
                     packed("qqqqiiIII", (first.src_pitch, first.dst_pitch,
                                          second.src_pitch, second.dst_pitch, first.width,
                                          second.width, first.chunks, second.chunks,
                                          blocks[0])))


@dataclass(frozen=True)
class OperandPlan:
    """How the kernel reads operand A or B: in place (its own address, in ``layout``), or
    from a copy this call makes (``copied``; ``padded`` rows for TMA)."""

    name: str
    variant: str
    vector: str | None              # "row" (1-D a) or "col" (1-D b): the dimension added
    full_shape: tuple[int, ...]     # (*batch, rows, cols)
    layouts: tuple[str, ...]        # what the variant reads
    layout: Layout                  # what the kernel is told
    copied: bool
    padded: bool
    transpose: Transpose | None = None  # how a call copies it into its fast layout (auto)
    pad: Pad | None = None          # how a call pads it for TMA, where the kernel can
    relayout: bool = False          # a layout the variant does not read is copied, not refused
    folded: tuple[int, int] | None = None  # a batch read as one matrix: its strides, elements

    def matrices(self, x: cupy.ndarray) -> cupy.ndarray:
        """A 1-D operand with its dimension back: a (1, K) row, or a (K, 1) column; a
        batch the plan read as one matrix (:func:`folded_rows`) as that matrix: A's rows of every
        product, or the one B they all share."""
        if self.vector is not None:
            return x[None, :] if self.vector == "row" else x[:, None]
        if self.folded is None or x.ndim == 2:
            return x
        from cupy.lib.stride_tricks import as_strided

        first = x[(0,) * (x.ndim - 2)]  # its address, where the folded matrix starts
        return as_strided(first, self.full_shape, tuple(s * x.itemsize for s in self.folded))


@functools.lru_cache(maxsize=64)
def transpose_variant(dtype: str, device: int) -> tuple[Variant, dict[str, int]]:
    """The transpose that copies operands (``FAMILY_DEFAULTS``), resolved for ``dtype``
    and checked against GPU ``device``'s limits (once: planning is per shape)."""
    # imported here: the memory-bound package's planning imports this module
    from .memory_bound.declarations import FAMILY_DEFAULTS

    v = get_variant(FAMILY_DEFAULTS["transpose"], "transpose")
    p = v.resolve({}, dtype)
    check_device_limits(v, p, dtype, device)
    return v, p


@functools.lru_cache(maxsize=64)
def transpose_function(spec: Spec, device: int) -> Any:
    """The function of that transpose at ``spec`` on GPU ``device``."""
    v, p = transpose_variant(spec.dtype, device)
    return get_kernel(v.name, p, spec, device, v.family).kernel


def folded_rows(a: cupy.ndarray, b: cupy.ndarray, target: cupy.ndarray | None, shapes: Shapes
            ) -> tuple[cupy.ndarray, cupy.ndarray, cupy.ndarray | None, Shapes] | None:
    """A batch of products that all share B, whose rows of A (and of C) follow one
    another at one stride, as one product of all their rows: (count x M) x K times
    K x N, as ``torch.matmul`` folds ``x @ w.T`` for a 3-D ``x``. B is read once, not once
    a product, and a decode step's (batch, 1, hidden) activations make one product of
    ``batch`` rows rather than ``batch`` products of one row. None where it does not
    apply (one product, 1-D operands, a batched B, rows at uneven strides); A, B and C as
    2-D views and the folded shapes otherwise.

    >>> import cupy as cp  # doctest: +SKIP
    >>> x, w = cp.ones((8, 1, 64)), cp.ones((32, 64))  # doctest: +SKIP
    >>> from xgemm.checks import matmul_shapes  # doctest: +SKIP
    >>> folded_rows(x, w.T, None, matmul_shapes(x.shape, w.T.shape))[3].m  # doctest: +SKIP
    8
    """
    from cupy.lib.stride_tricks import as_strided

    count, m, n, k = shapes.count, shapes.m, shapes.n, shapes.k
    if (count < 2 or shapes.a_vector or shapes.b_vector or math.prod(a.shape[:-2]) != count
            or any(size > 1 and stride for size, stride in zip(b.shape[:-2], b.strides[:-2],
                                                               strict=True))
            or count * m > INT_MAX):
        return None

    def rows(x: cupy.ndarray, width: int, write: bool) -> int | None:
        """The stride, in elements, between consecutive rows of all x's matrices."""
        layout = layout_of(x.shape, x.strides, x.itemsize, ("row",), write=write)
        if layout is None:
            return None
        stride = layout.ld if m > 1 else layout.batch_stride
        return stride if stride >= width and (m == 1 or layout.batch_stride == m * stride) \
            else None

    lda = rows(a, k, False)
    ldc = None if target is None else rows(target, n, True)
    if lda is None or (target is not None and ldc is None):
        return None
    a2 = as_strided(a, (count * m, k), (lda * a.itemsize, a.itemsize))
    c2 = None if target is None else as_strided(target, (count * m, n),
                                                (ldc * target.itemsize, target.itemsize))
    return a2, b[(0,) * (b.ndim - 2)], c2, Shapes((), count * m, n, k, shapes.out, False, False)


def transposed(x: cupy.ndarray, layout: Layout, device: int
                ) -> tuple[NewArray, Layout, Transpose]:
    """A 2-D operand copied into its other layout by the transpose kernel: the copy as
    planning sees it (each call makes its own), its layout, and the transpose."""
    rows, cols = x.shape[::-1] if layout.col else x.shape  # what is read: unit stride along
    dtype = dtype_name(x.dtype)
    v, p = transpose_variant(dtype, device)
    spec, grid, block = transpose_launch(v, p, x.data.ptr, rows, cols, layout.ld, dtype, device)
    function = transpose_function(spec, device)
    return NewArray((cols, rows), x.dtype), Layout(not layout.col, rows, 0), Transpose(
        geometry(function, grid, block, 0), (cols, rows), x.dtype,
        packed("iii", (rows, cols, layout.ld)))


def pad_of(full_shape: tuple[int, ...], source: Layout, padded: Layout, itemsize: int
            ) -> Pad | None:
    """The pad kernel's copy of an operand of ``full_shape`` read in place in ``source``
    into ``padded`` (``tma_padded``'s layout), or None where its batch is neither
    broadcast nor one run of evenly spaced lines (each call then pads through CuPy)."""
    *batch, rows, cols = full_shape
    inner, outer = (rows, cols) if source.col else (cols, rows)
    count = int(np.prod(batch)) if batch and source.batch_stride else 1
    if source.ld < inner or count > 1 and source.batch_stride != source.ld * outer:
        return None
    return padding(count * outer, inner * itemsize, source.ld * itemsize,
                   padded.ld * itemsize, count * outer * padded.ld)

def transposable(shapes: Shapes, vector: bool) -> bool:
    """Whether ``auto`` may copy an operand into its other layout first
    (``Variant.transpose_first``): a matrix (not a 1-D operand) of an unbatched, non-empty
    product; the transpose kernel also needs a unit stride in it."""
    return not shapes.batch and not vector and 0 not in (shapes.m, shapes.n, shapes.k)


def plan_operand(name: str, x: cupy.ndarray, vector: str | None, rows: int, cols: int,
                 layouts: tuple[str, ...], v: Variant, p: dict[str, int], shapes: Shapes,
                 device: int, auto: bool, relayout: bool, was_folded: bool
                 ) -> tuple[OperandPlan, Any]:
    """How ``v`` at ``p`` reads operand ``name`` (``x``, as a matrix), and the array it
    reads as planning sees it: in place, or from a copy each call makes: ``auto``'s
    transposed copy into the layout the variant reads fastest (``transpose_first``), a
    copy into a layout it reads at all, rows padded for TMA. The copy is made here once,
    to learn its layout. ``relayout``: copy a layout the variant does not read (8-bit
    operands) instead of refusing it; ``was_folded``: a batch read as one matrix."""
    full_shape = (*shapes.batch, rows, cols)
    into = None  # the layout auto copies this operand into first (transpose_first)
    if auto and transposable(shapes, vector is not None):
        into = v.transposed_into(name, p, shapes.m, shapes.n, shapes.k,
                                 gpu.multiprocessors(device))
    found = layout_of(x.shape, x.strides, x.itemsize) if into is not None else None
    transpose, copied, padded, pad = None, False, False, None
    if found is not None and found.col != (into == "col"):
        full, layout, transpose = transposed(x, found, device)
    else:
        full, layout, copied = ready_operand(x, full_shape, layouts, name, v.name, relayout)
        padded = bool(v.tma and shapes.k > 0
                      and not tma_reads(v, name, full.data.ptr, layout, full.itemsize))
        if padded:  # TMA reads 16-byte aligned rows: pad the rows of one that has none
            source = layout
            full, layout = tma_padded(full, layout)
            pad = None if copied else pad_of(full_shape, source, layout, full.itemsize)
    return OperandPlan(name, v.name, vector, full_shape, layouts, layout,
                       copied or padded or transpose is not None, padded, transpose, pad,
                       relayout, tuple(s // x.itemsize for s in x.strides) if was_folded
                       else None), full


def plan_output(target: cupy.ndarray | None, shapes: Shapes, c_dtype: str,
                inputs: tuple[Any, ...]) -> tuple[Any, str, Layout]:
    """The output as planning sees it, viewed as (*batch, M, N), how it is written
    ("new"; "in_place" where its rows have unit stride and it shares no memory with any
    of ``inputs``; else "staging", through a staging array), and its layout."""
    import cupy

    if target is None:
        full_c, output = NewArray(shapes.full, np.dtype(numpy_dtype(c_dtype))), "new"
    else:
        view = target
        if shapes.b_vector:
            view = view[..., None]
        if shapes.a_vector:
            view = view[..., None, :]
        full_c, output = view, "in_place"
        writable = layout_of(view.shape, view.strides, view.itemsize, ("row",), write=True)
        span = extent(target.data.ptr, target.shape, target.strides, target.itemsize)
        if writable is None or any(overlaps(span, extent(x.data.ptr, x.shape, x.strides,
                                                         x.itemsize))
                                   for x in inputs if x is not None):
            full_c, output = cupy.empty(shapes.full, view.dtype), "staging"
    layout_c = layout_of(full_c.shape, full_c.strides, full_c.itemsize, ("row",), write=True)
    return full_c, output, layout_c


def alignment_flags(v: Variant, arrays: tuple, layouts: tuple, shapes: Shapes
           ) -> tuple[tuple[str, bool], ...]:
    """The variant's boolean specialisations for these operands: ``aligned``, in each of
    A, B and C every group of four elements along a contiguous dimension starts at a
    4-element boundary and lies wholly inside the matrix; ``aligned16``, the same for
    groups of 16 bytes (C may be wider than A and B: each counts in its own elements)."""
    extents = (shapes.m if layouts[0].col else shapes.k,
               shapes.k if layouts[1].col else shapes.n, shapes.n)  # along each one's rows
    # Per array, its address and sizes in bytes, ORed: a power of two divides them all
    # where it divides this (itemsizes and groups are powers of two)
    bits = [(pointer(x) | (size | layout.ld | layout.batch_stride) * x.itemsize, x.itemsize)
            for x, layout, size in zip(arrays, layouts, extents, strict=True)]
    flags = {}
    for flag in v.flags:
        if flag not in ("aligned", "aligned16"):
            raise ValueError(f"variant {v.name!r} declares the unknown flag {flag!r}")
        flags[flag] = all(
            together % (item * (4 if flag == "aligned" else max(1, 16 // item))) == 0
            for together, item in bits)
    return tuple(sorted(flags.items()))
