"""The grouped products' checks (``xgemm.grouped_matmul``), on what can be known without
the GPU: the operands' shapes, dtypes, layouts and addresses, FP8's scales, and the
groups' ends' array. The ends' values lie on the GPU and are not read here (that would
wait for the GPU); the kernels take whatever they hold without reading or writing
outside the arrays (docs/semantics.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..frameworks import framework
from ..specs import DTYPES, EIGHT_BIT_OUTPUTS, SIXTEEN_BIT, UNROUNDED_OUTPUT
from ..tma import ALIGNMENT as TMA_ALIGNMENT  # rows and matrices start on 16 bytes
from .arguments import FP8_FORMATS, INT_MAX, Layout, layout_of, on_gpu

#: The FP8 dtypes of groups of rows (the 16-bit ones: specs.SIXTEEN_BIT).
FP8 = FP8_FORMATS
#: What an FP8 grouped product may be stored as, its default first (an FP8 product's).
FP8_OUTPUTS = EIGHT_BIT_OUTPUTS["float8_e4m3fn"]


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
    """A checked grouped product of M x K by K x N matrices, G groups of them, and how A
    and B lie. Groups of A's rows (``along_k`` False): A is the groups' M rows one after
    another, B G matrices (its ``batch_stride``: elements from one to the next), C M x N.
    Groups along K: A (M x K) and B (K x N) hold the groups' K one after another, C is G
    matrices of M x N."""

    m: int
    n: int
    k: int
    groups: int
    dtype: str
    a: Layout
    b: Layout
    along_k: bool = False
    out_dtype: str | None = None  # C's, where not the inputs' (an FP8 product's: bfloat16)
    scale_a: str = "none"         # FP8's scalings ("none", "tensor", "vector"; B's tensor:
    scale_b: str = "none"         # one a group, its vector: one a column of each group)

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize


def check_grouped_arrays(a: Any, b: Any, offs: Any, scale_a: Any = None,
                         scale_b: Any = None) -> str:
    """The framework all the arrays (the scales where given) belong to ("cupy" or
    "torch"); TypeError where one is not a GPU array or they mix frameworks.

    >>> check_grouped_arrays([1.0], [2.0], [3])
    Traceback (most recent call last):
    ...
    TypeError: a is not a GPU array: xgemm multiplies CuPy arrays or CUDA PyTorch tensors
    """
    arrays = _given(a, b, offs, scale_a, scale_b)
    for name, x in arrays:
        if not on_gpu(x):
            raise TypeError(f"{name} is not a GPU array: xgemm multiplies CuPy arrays or CUDA "
                            "PyTorch tensors")
    kinds = {framework(type(x)) for _, x in arrays}
    if len(kinds) != 1 or None in kinds:
        raise TypeError(f"{', '.join(name for name, _ in arrays)} must all be CuPy arrays or "
                        "all PyTorch tensors")
    return kinds.pop()


def grouped_device(a: Any, b: Any, offs: Any, kind: str, scale_a: Any = None,
                   scale_b: Any = None) -> int:
    """The GPU all the arrays of framework ``kind`` (the scales where given) lie on;
    ValueError where they differ."""
    arrays = _given(a, b, offs, scale_a, scale_b)
    ids = {(x.device.index if kind == "torch" else x.device.id) for _, x in arrays}
    if len(ids) != 1:
        raise ValueError(f"{', '.join(name for name, _ in arrays)} lie on different GPUs "
                         f"({sorted(ids)}): move them onto one")
    return ids.pop()


def _given(a: Any, b: Any, offs: Any, scale_a: Any, scale_b: Any) -> tuple:
    """(name, array) of the call's arrays, the scales only where given."""
    return (("a", a), ("b", b), ("offs", offs),
            *((name, x) for name, x in (("scale_a", scale_a), ("scale_b", scale_b))
              if x is not None))


def _check_kinds(a: Operand, b: Operand, ends: Operand, dtypes: tuple[str, ...]) -> None:
    if a.dtype != b.dtype or a.dtype not in dtypes:
        fp8 = " or FP8 (PyTorch float8 tensors)" if FP8[0] in dtypes else ""
        raise TypeError(
            f"grouped_matmul multiplies float16 or bfloat16{fp8} operands of one dtype "
            f"here; got A {a.dtype} and B {b.dtype}: convert them first (x.astype / x.to)")
    if ends.dtype != "int32" or len(ends.shape) != 1:
        raise TypeError(
            f"the group ends (offs) must be a 1-D int32 array, as F.grouped_mm takes them; got "
            f"{ends.dtype} of shape {ends.shape}: pass offs.int() (or offs.astype('int32'))")
    if ends.strides and ends.strides[0] != 4 and ends.shape[0] > 1:
        raise ValueError("the group ends (offs) must be contiguous: pass offs.contiguous()")


def _layouts(a: Operand, b: Operand) -> tuple[Layout, Layout]:
    """How A and B lie (row- or column-major in their last two dimensions)."""
    found = []
    for name, x in (("A", a), ("B", b)):
        layout = layout_of(x.shape, x.strides, DTYPES[x.dtype].itemsize)
        if layout is None:
            raise ValueError(
                f"{name} (shape {x.shape}, byte strides {x.strides}) is neither row- nor "
                f"column-major in its last two dimensions: pass a contiguous copy")
        found.append(layout)
    return found[0], found[1]


def _check_alignment(a: Operand, b: Operand, layouts: tuple[Layout, Layout]) -> None:
    """TMA reads lines (and matrices) that start on 16-byte boundaries."""
    item = DTYPES[a.dtype].itemsize
    for name, layout, x in (("A", layouts[0], a), ("B", layouts[1], b)):
        line = "column" if layout.col else "row"
        if x.ptr % TMA_ALIGNMENT or (layout.ld * item) % TMA_ALIGNMENT or (
                layout.batch_stride * item) % TMA_ALIGNMENT:
            raise ValueError(
                f"grouped_matmul reads A and B by TMA, whose lines must start on 16-byte "
                f"boundaries: {name}'s {line}s are {layout.ld} {a.dtype} values apart "
                f"({layout.ld * item} bytes)"
                + (f", its matrices {layout.batch_stride}" if layout.batch_stride else "")
                + f", and it starts {x.ptr % TMA_ALIGNMENT} bytes past a boundary; pad its "
                f"rows to a multiple of {TMA_ALIGNMENT // item} values (a copy into a wider "
                "array), or multiply each group with xgemm.matmul")


def check_grouped(a: Operand, b: Operand, ends: Operand) -> GroupedShapes:
    """ValueError (or TypeError) naming the problem and its fix, before anything is
    compiled or launched, unless ``a`` (T x K) can be multiplied group by group by ``b``
    (G x K x N) with the groups' ``ends`` (G int32 values).

    >>> op = lambda shape, strides, dtype="bfloat16": Operand(shape, strides, dtype, 0)
    >>> check_grouped(op((96, 64), (128, 2)), op((4, 64, 32), (4096, 64, 2)),
    ...               op((4,), (4,), "int32")).groups
    4
    """
    if len(a.shape) != 2 or len(b.shape) != 3:
        raise ValueError(
            f"grouped_matmul with group ends multiplies a 2-D A (tokens x K) by a 3-D B "
            f"(groups x K x N), or a 2-D A (M x tokens) by a 2-D B (tokens x N); got A of "
            f"shape {a.shape} and B of shape {b.shape}")
    _check_kinds(a, b, ends, SIXTEEN_BIT + FP8)
    rows, k = a.shape
    groups, k_b, n = b.shape
    if k_b != k:
        raise ValueError(f"A's rows have K = {k} values and B's matrices K = {k_b}: "
                         "they must agree")
    if ends.shape[0] != groups:
        raise ValueError(f"B holds {groups} matrices (groups) and offs {ends.shape[0]} ends: "
                         "one end a group")
    _check_extents(rows, n, k, groups)
    layouts = _layouts(a, b)
    if layouts[0].col and 0 not in (rows, k):
        # A group starts on any row: a column-major A's boxes would start their lines
        # there, and TMA faults on a line that does not start on a 16-byte boundary
        raise ValueError(
            "grouped_matmul reads a groups-of-rows A (tokens x K) row-major: a group's tiles "
            "start on any row, where a column-major A's lines need not start on the 16-byte "
            "boundaries TMA reads from; pass a.contiguous()")
    if a.dtype in FP8 and not layouts[1].col and 0 not in (rows, k):
        raise ValueError(
            "FP8 grouped products read B's matrices K-major (wgmma reads 8-bit operands "
            "so): pass B as w.transpose(-2, -1) of a (G, N, K) weight")
    if 0 not in (rows, n, k, groups):  # (nothing read: no alignment to ask for)
        _check_alignment(a, b, layouts)
        if layouts[1].batch_stride == 0 and groups > 1:
            raise ValueError("B's groups share one matrix (a broadcast): multiply A by it "
                             "with xgemm.matmul instead")
    return GroupedShapes(rows, n, k, groups, a.dtype, *layouts)


def check_grouped_k(a: Operand, b: Operand, ends: Operand) -> GroupedShapes:
    """As :func:`check_grouped`, for groups along K (the weight gradient): ``a`` M x T
    column-major (X^T, X a row-major T x M), ``b`` T x N row-major (dY), ``ends`` G ends
    along T; C is G x M x N. 16-bit operands only.

    >>> op = lambda shape, strides, dtype="bfloat16": Operand(shape, strides, dtype, 0)
    >>> check_grouped_k(op((64, 96), (2, 128)), op((96, 32), (64, 2)),
    ...                 op((4,), (4,), "int32")).along_k
    True
    """
    _check_kinds(a, b, ends, SIXTEEN_BIT)
    m, tokens = a.shape
    tokens_b, n = b.shape
    groups = ends.shape[0]
    if tokens_b != tokens:
        raise ValueError(f"A has {tokens} columns (tokens) and B {tokens_b} rows: they must "
                         "agree")
    _check_extents(m, n, tokens, groups)
    layouts = _layouts(a, b)
    if 0 not in (m, n, tokens, groups):
        if not layouts[0].col or layouts[1].col:
            raise ValueError(
                "grouped_matmul along K reads A column-major and B row-major, as the weight "
                "gradient's operands lie (A = x.t() of a row-major tokens x M x, B a "
                "row-major tokens x N dY): pass them so, or contiguous copies")
        _check_alignment(a, b, layouts)
    return GroupedShapes(m, n, tokens, groups, a.dtype, *layouts, along_k=True)


def _check_extents(*extents: int) -> None:
    if max(extents) > INT_MAX:
        raise ValueError(f"grouped_matmul takes extents up to {INT_MAX}; got {extents}")


def check_out_dtype(out_dtype: str | None, dtype: str) -> str | None:
    """The result's dtype as a Spec takes it: None for the default (the inputs' own; an
    FP8 product's bfloat16), else what was asked where it may be; ValueError otherwise.

    >>> check_out_dtype("float32", "bfloat16"), check_out_dtype("bfloat16", "bfloat16")
    ('float32', None)
    >>> check_out_dtype("float16", "float8_e4m3fn")
    'float16'
    """
    if dtype in FP8:
        if out_dtype in (None, FP8_OUTPUTS[0]):
            return None
        if out_dtype in FP8_OUTPUTS:
            return out_dtype
        allowed = " or ".join(FP8_OUTPUTS)
    else:
        if out_dtype in (None, dtype):
            return None
        if out_dtype == UNROUNDED_OUTPUT:
            return out_dtype
        allowed = f"{dtype} or float32 (its sums unrounded)"
    raise ValueError(f"grouped_matmul writes {dtype} products as {allowed}, not {out_dtype}")


def check_grouped_scales(scale_a: Operand | None, scale_b: Operand | None,
                         shapes: GroupedShapes) -> tuple[str, str]:
    """FP8's scalings: A's one (shape () or (1,)) or one a row of all the groups' ((T,)),
    B's one a group ((G,)) or one a column of each group's matrix ((G, N)); float32 and
    contiguous. Scales for 16-bit operands are a TypeError.

    >>> from xgemm.checks.arguments import Layout
    >>> s = GroupedShapes(96, 32, 64, 4, "float8_e4m3fn", Layout(False, 64, 0),
    ...                   Layout(True, 64, 2048))
    >>> check_grouped_scales(Operand((96,), (4,), "float32", 0),
    ...                      Operand((4, 32), (128, 4), "float32", 0), s)
    ('vector', 'vector')
    """
    if shapes.dtype not in FP8:
        if scale_a is not None or scale_b is not None:
            raise TypeError(f"scales are for FP8 operands; {shapes.dtype} products take none")
        return "none", "none"
    found = []
    for name, scale, one, each in (("scale_a", scale_a, ((), (1,)), (shapes.m,)),
                                   ("scale_b", scale_b, ((shapes.groups,),),
                                    (shapes.groups, shapes.n))):
        if scale is None:
            found.append("none")
            continue
        contiguous = all(s == 4 * (1 if i == len(scale.shape) - 1 else scale.shape[-1])
                         for i, s in enumerate(scale.strides))
        if scale.dtype != "float32" or not contiguous or scale.shape not in (*one, each):
            raise ValueError(
                f"{name} must be a contiguous float32 array of shape "
                f"{' or '.join(str(s) for s in (*one, each))} (one, or one a "
                f"{'row' if name == 'scale_a' else 'column of each group'}); got "
                f"{scale.dtype} of shape {scale.shape}")
        found.append("tensor" if scale.shape in one else "vector")
    return found[0], found[1]
