"""Rung 33's pre-pass, planned once a signature: each float32 operand split into its TF32
big and small parts (``kernels/copy/split_tf32.cu.j2``) in a buffer each call makes,
laid out as the product reads them: K-major, in lines of whole 16-byte groups.

The parts lie compact whatever the operand's leading dimension and batch stride: lines
of whole 16-byte groups, a batch's matrices one after another. An operand that lies the
other way (a single matrix) is transposed on the way. Either way the split is the
call's only pass over the operand before the product: it replaces the padded or
transposed copy that ``xgemm.operands`` plans for the other TMA rungs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import gpu
from .checks import Layout, layout_of
from .compile import SPLIT_THREADS, SPLIT_TILE, SPLIT_TILE_ROWS, split_kernel
from .expressions import MAX_GRID, cdiv
from .kernel_args import geometry, packed
from .operands import OperandPlan
from .registry import Variant
from .tma import ALIGNMENT as TMA_ALIGNMENT

if TYPE_CHECKING:
    import cupy

#: float32 values in one 16-byte group: the parts' lines hold whole groups.
GROUP = TMA_ALIGNMENT // 4


def reads_parts(v: Variant) -> bool:
    """Whether ``v`` reads A's and B's TF32 parts, split first: its extra arguments name
    the small parts' maps (rung 33). It then reads any layout and any K, in place.

    >>> import xgemm
    >>> reads_parts(xgemm.get_variant("wgmma_tf32x3_parts"))
    True
    """
    return "tensor_map_a_small" in v.extra_args


@dataclass(frozen=True)
class Parts:
    """How a call splits a float32 operand into its TF32 parts before rung 33's product:
    into a buffer of ``2 * span`` values, the big parts first (in the layout the product
    is told, ``OperandPlan.layout``), the small parts ``span`` values further on."""

    span: int                       # values from the parts' first past their last, to 16 bytes
    launch: tuple                   # the pre-pass, its grid and block (``geometry``)
    sizes: tuple                    # its arguments after the two pointers: packed once
    recent_args: dict = field(default_factory=dict, compare=False, repr=False)


def parts_extent(layout: Layout, rows: int, cols: int, count: int
                 ) -> tuple[int, int, int, int]:
    """What an operand of ``count`` matrices of rows x cols that lie as ``layout`` says
    covers: its span (values from its first past its last, rounded up to 16 bytes), a
    line's values, the lines a matrix, and the matrices (one where the batch shares it:
    a batch stride of 0).

    >>> parts_extent(Layout(False, 40, 0), 3, 33, 5)  # row-major, lines 40 apart, shared
    (116, 33, 3, 1)
    >>> parts_extent(Layout(True, 8, 24), 8, 3, 2)    # column-major, a batch of two
    (48, 8, 3, 2)
    """
    inner, outer = (rows, cols) if layout.col else (cols, rows)
    matrices = count if layout.batch_stride else 1
    span = (matrices - 1) * layout.batch_stride + (outer - 1) * layout.ld + inner
    return cdiv(span, GROUP) * GROUP, inner, outer, matrices


def widened(layout: Layout, rows: int, cols: int) -> Layout:
    """``layout`` with its lines widened to whole 16-byte groups of float32, a batch's
    matrices one after another (a shared one stays shared).

    >>> widened(Layout(True, 4095, 4095 * 64), 4095, 64)
    Layout(col=True, ld=4096, batch_stride=262144)
    """
    inner, outer = (rows, cols) if layout.col else (cols, rows)
    ld = cdiv(inner, GROUP) * GROUP
    return Layout(layout.col, ld, ld * outer if layout.batch_stride else 0)


def plan_split(op: OperandPlan, x: cupy.ndarray, rows: int, cols: int, count: int,
               device: int) -> tuple[OperandPlan, Parts]:
    """Operand ``op`` of rung 33 (``x`` as the plan reads it, rows x cols a matrix) as
    the split reads it, and the split. The split writes the parts compact, lines widened
    to 16 bytes, in the major order the product reads, and ``op`` comes back told the
    parts' layout: a view of a wider array gets parts the size of the view. Where the
    plan would transpose ``x`` first, or pad its lines for TMA, the split reads ``x`` as
    it lies instead, and ``op`` comes back uncopied; an operand with no unit stride is
    still copied first, and the split reads the copy."""
    source, transposed = op.layout, op.transpose is not None
    if transposed or op.pad is not None:  # the split replaces the copy: x as it lies
        lies = "row" if op.layout.col == transposed else "col"
        source = layout_of(x.shape, x.strides, x.itemsize, (lies,))
        op = dataclasses.replace(op, copied=False, padded=False, transpose=None, pad=None)
    # (an operand with no unit stride keeps its copy, which the split then reads)
    into = widened(op.layout, rows, cols)
    op = dataclasses.replace(op, layout=into)
    if transposed:
        return op, _transposed(source, into, rows, cols, device)
    return op, _split(source, into, rows, cols, count, device)


def _split(source: Layout, into: Layout, rows: int, cols: int, count: int, device: int
           ) -> Parts:
    """The split of an operand that lies as ``source`` into parts that lie as ``into``
    (the same major order): a block for each ``SPLIT_THREADS`` values, up to eight
    blocks an SM, which then loop."""
    span, inner, outer, matrices = parts_extent(into, rows, cols, count)
    blocks = max(1, min(cdiv(inner * outer * matrices, SPLIT_THREADS),
                        8 * gpu.multiprocessors(device)))
    return Parts(span, geometry(split_kernel(device).kernel, (blocks,), (SPLIT_THREADS,), 0),
                 packed("qiiqiqqq", (span, inner, outer, source.ld, matrices,
                                     source.batch_stride, into.ld, into.batch_stride)))


def _transposed(source: Layout, into: Layout, rows: int, cols: int, device: int) -> Parts:
    """The split of one matrix that lies as ``source`` into parts that lie the other way,
    as ``into``: a block for each ``SPLIT_TILE`` x ``SPLIT_TILE`` tile, up to the grid's
    limit along the lines (the blocks then loop)."""
    span, _, _, _ = parts_extent(into, rows, cols, 1)
    inner, lines = (rows, cols) if source.col else (cols, rows)
    grid = (cdiv(inner, SPLIT_TILE), min(cdiv(lines, SPLIT_TILE), MAX_GRID[1]))
    return Parts(span, geometry(split_kernel(device, transposed=True).kernel, grid,
                                (SPLIT_TILE, SPLIT_TILE_ROWS), 0),
                 packed("qiiqq", (span, inner, lines, source.ld, into.ld)))
