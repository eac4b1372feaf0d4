"""The grouped product's checks (``xgemm.grouped_matmul``), on what can be known without the
GPU: the operands' shapes, dtypes, layouts and addresses, and the groups' ends' array.
The ends' values lie on the GPU and are not read here (that would wait for the GPU): the
kernel takes an end before the one before it as an empty group, and one past A's rows as
A's last row.
"""

from __future__ import annotations

from dataclasses import dataclass

from .arguments import INT_MAX, Layout, layout_of

#: The dtypes the grouped rung multiplies (wgmma's 16-bit kinds).
GROUPED_DTYPES = ("float16", "bfloat16")
#: TMA reads rows (and matrices) that start on 16-byte boundaries.
TMA_ALIGNMENT = 16


@dataclass(frozen=True)
class Operand:
    """An array as the checks see it: shape, strides in bytes, dtype name, and its address
    (or how far past a 16-byte boundary it lies: all the checks read of it)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    ptr: int


@dataclass(frozen=True)
class GroupedShapes:
    """A checked grouped product: A's T rows of K, G matrices of K x N in B, and how A and
    B lie (B's ``batch_stride``: elements from one group's matrix to the next)."""

    rows: int
    n: int
    k: int
    groups: int
    dtype: str
    a: Layout
    b: Layout


def check_grouped(a: Operand, b: Operand, ends: Operand) -> GroupedShapes:
    """ValueError (or TypeError) naming the problem and its fix, before anything is
    compiled or launched, unless ``a`` (T x K) can be multiplied group by group by ``b``
    (G x K x N) with the groups' ``ends`` (G int32 values).

    >>> op = lambda shape, strides, dtype="bfloat16": Operand(shape, strides, dtype, 1 << 20)
    >>> check_grouped(op((96, 64), (128, 2)), op((4, 64, 32), (4096, 64, 2)),
    ...               op((4,), (4,), "int32")).groups
    4
    """
    if len(a.shape) != 2 or len(b.shape) != 3:
        raise ValueError(
            f"grouped_matmul with group ends multiplies a 2-D A (tokens x K) by a 3-D B "
            f"(groups x K x N); got A of shape {a.shape} and B of shape {b.shape}")
    if a.dtype != b.dtype or a.dtype not in GROUPED_DTYPES:
        raise TypeError(
            f"grouped_matmul multiplies float16 or bfloat16 operands of one dtype; got A "
            f"{a.dtype} and B {b.dtype}: convert them first (x.astype / x.to)")
    if ends.dtype != "int32" or len(ends.shape) != 1:
        raise TypeError(
            f"the group ends (offs) must be a 1-D int32 array, as F.grouped_mm takes them; got "
            f"{ends.dtype} of shape {ends.shape}: pass offs.int() (or offs.astype('int32'))")
    rows, k = a.shape
    groups, k_b, n = b.shape
    if k_b != k:
        raise ValueError(f"A's rows have K = {k} values and B's matrices K = {k_b}: "
                         "they must agree")
    if ends.shape[0] != groups:
        raise ValueError(f"B holds {groups} matrices (groups) and offs {ends.shape[0]} ends: "
                         "one end a group")
    if max(rows, n, k, groups) > INT_MAX:
        raise ValueError(f"grouped_matmul takes extents up to {INT_MAX}; got T = {rows}, "
                         f"N = {n}, K = {k}, G = {groups}")
    if ends.strides[0] != 4 and groups > 1:
        raise ValueError("the group ends (offs) must be contiguous: pass offs.contiguous()")
    item = 2
    a_layout = layout_of(a.shape, a.strides, item)
    b_layout = layout_of(b.shape, b.strides, item)
    for name, layout, x in (("A", a_layout, a), ("B", b_layout, b)):
        if layout is None:
            raise ValueError(
                f"{name} (shape {x.shape}, byte strides {x.strides}) is neither row- nor "
                f"column-major in its last two dimensions: pass a contiguous copy")
    if 0 in (rows, n, k, groups):  # nothing is read: no alignment to ask for
        return GroupedShapes(rows, n, k, groups, a.dtype, a_layout, b_layout)
    for name, layout, x in (("A", a_layout, a), ("B", b_layout, b)):
        line = "column" if layout.col else "row"
        if x.ptr % TMA_ALIGNMENT or (layout.ld * item) % TMA_ALIGNMENT or (
                layout.batch_stride * item) % TMA_ALIGNMENT:
            raise ValueError(
                f"grouped_matmul reads A and B by TMA, whose lines must start on 16-byte "
                f"boundaries: {name}'s {line}s are {layout.ld} {a.dtype} values apart "
                f"({layout.ld * item} bytes)"
                + (f", its matrices {layout.batch_stride}" if name == "B" else "")
                + f", and it starts {x.ptr % TMA_ALIGNMENT} bytes past a boundary; pad K and N "
                "to multiples of 8 "
                "(a copy into a wider array), or multiply each group with xgemm.matmul")
    if b_layout.batch_stride == 0 and groups > 1:
        raise ValueError("B's groups share one matrix (a broadcast): multiply A by it with "
                         "xgemm.matmul instead")
    return GroupedShapes(rows, n, k, groups, a.dtype, a_layout, b_layout)
