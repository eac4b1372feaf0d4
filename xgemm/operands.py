"""Operands made ready for a kernel at plan time: broadcast to the product's batch, in a
layout the variant reads (copied once where they are in none), and TMA's test of whether
an array can be read in place, with the padded copy where it cannot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .checks import Layout, layout_of
from .tma import ALIGNMENT as TMA_ALIGNMENT

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
