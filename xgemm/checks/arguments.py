"""What can be checked without a GPU: operands' shapes, dtypes and layouts, the output's
dtype, the epilogue's arguments, and which GPU a call's arrays share.

Nothing here imports CuPy: these rules run (and are tested) on any machine, and every
one of them runs before anything is compiled or launched.
"""

from __future__ import annotations

import difflib
import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..specs import (
    ACTIVATIONS,
    EIGHT_BIT,
    EIGHT_BIT_OUTPUTS,
    FLOAT_DTYPES,
    SIXTEEN_BIT,
    UNROUNDED_OUTPUT,
    default_output,
)

#: What ``variant=`` takes to let xgemm choose: tuned where ``xgemm tune`` ran, else a rule.
AUTO = "auto"
#: ... and to let it choose by timing: auto's contenders timed on the first call's own
#: operands, the fastest remembered in the tuning file (``xgemm.autotune``).
TUNE = "tune"
#: What ``precision=`` takes: None, exact arithmetic in the inputs' dtype (the default);
#: "tf32", which lets float32 inputs run on the tensor cores as TF32 (10-bit mantissas);
#: or "tf32x3", float32's accuracy from three TF32 products (rung 31) where it runs.
PRECISIONS = (None, "tf32", "tf32x3")
INT_MAX = 2**31 - 1  # the kernels take int sizes and leading dimensions


@dataclass(frozen=True)
class Meta:
    """What can be learnt about an operand without touching the GPU."""

    shape: tuple[int, ...]
    dtype: np.dtype


def on_gpu(x: Any) -> bool:
    """Whether ``x`` is an array in GPU memory (CUDA array interface, or DLPack on CUDA).

    >>> on_gpu([1.0])
    False
    """
    if hasattr(x, "__dlpack_device__"):
        return int(x.__dlpack_device__()[0]) in (2, 13)  # kDLCUDA, kDLCUDAManaged
    return hasattr(x, "__cuda_array_interface__")


def meta(x: Any, name: str) -> Meta | None:
    """Shape and dtype of ``x``, or None when only a conversion can tell (DLPack objects).

    Raises TypeError for host arrays and for objects that are no GPU array at all.

    >>> meta(np.ones(3), "a")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: a is a host (CPU) array of shape (3,); xgemm multiplies GPU arrays: ...
    """
    kind = type(x)
    if kind.__name__ == "ndarray" and kind.__module__.startswith("cupy"):  # the common case
        return Meta(x.shape, x.dtype)
    if isinstance(x, np.ndarray) or not on_gpu(x) and (
        hasattr(x, "__array_interface__") or hasattr(x, "__dlpack_device__")
    ):
        raise TypeError(
            f"{name} is a host (CPU) array of shape {getattr(x, 'shape', '?')}; xgemm multiplies "
            f"GPU arrays: move it first with cupy.asarray({name}) (or {name}.cuda() for a "
            "PyTorch tensor)"
        )
    module = type(x).__module__.split(".")[0]
    if module == "cupy":
        return Meta(tuple(x.shape), np.dtype(x.dtype))
    if not hasattr(x, "__dlpack__") and hasattr(x, "__cuda_array_interface__"):
        # (PyTorch's float8 tensors raise on asking for the CUDA array interface)
        cai = x.__cuda_array_interface__
        return Meta(tuple(cai["shape"]), np.dtype(cai["typestr"]))
    if hasattr(x, "__dlpack__"):
        return None
    raise TypeError(
        f"{name} must be a GPU array (a CuPy array, or an object with __cuda_array_interface__ "
        f"or __dlpack__ such as a PyTorch CUDA tensor), got {type(x).__name__}"
    )


def one_device(**arrays: Any) -> int:
    """The GPU that every one of ``arrays`` lies on (CuPy arrays, by name; None for one not
    given); ValueError naming each one's GPU when they differ, before anything runs.

    >>> from types import SimpleNamespace as On
    >>> one_device(a=On(device=On(id=1)), b=On(device=On(id=1)), bias=None)
    1
    """
    devices = {name: x.device.id for name, x in arrays.items() if x is not None}
    if len(set(devices.values())) > 1:
        where = ", ".join(f"{name} on GPU {device}" for name, device in devices.items())
        raise ValueError(
            f"the arrays are on different GPUs ({where}); xgemm runs on the GPU its arrays "
            "are on, so they must share one: copy one over (`with cupy.cuda.Device(n): "
            "x = x.copy()`, or x.to('cuda:n') for a PyTorch tensor)"
        )
    return next(iter(devices.values()))


#: NumPy dtypes' names, as met (``dtype.name`` is computed in Python on every access).
_names: dict[np.dtype, str] = {}


def check_dtypes(a: np.dtype, b: np.dtype) -> str:
    """The dtype name of ``a @ b``: both operands must have the same floating dtype.

    >>> check_dtypes(np.dtype("float16"), np.dtype("float16"))
    'float16'
    """
    found = _names.get(a) or _names.setdefault(a, a.name)
    if a == b and found in FLOAT_DTYPES:
        return found
    for name, dt in (("a", a), ("b", b)):
        if dt.name not in FLOAT_DTYPES:
            kind = {"i": "integer", "u": "integer", "b": "boolean", "c": "complex"}.get(dt.kind)
            raise TypeError(
                f"{name} has dtype {dt.name}; xgemm multiplies {', '.join(FLOAT_DTYPES)}, "
                "and 8-bit operands (int8, or FP8: PyTorch's float8 tensors, or uint8 arrays "
                "with formats= naming the format)"
                + (f"; for other {kind} products use cupy.matmul" if kind else "")
                + f"; or convert with {name}.astype('float32')"
            )
    if a != b:
        raise TypeError(
            f"a has dtype {a.name} and b has dtype {b.name}; xgemm does not mix dtypes (a mixed "
            "product would need a hidden conversion): convert one, e.g. "
            f"b.astype({a.name!r})"
        )
    return a.name


@dataclass(frozen=True)
class Shapes:
    """The shape logic of ``numpy.matmul`` for one pair of operand shapes."""

    batch: tuple[int, ...]  # the broadcast batch dimensions
    m: int
    n: int
    k: int
    out: tuple[int, ...]    # the result's shape, 1-D operands' dimensions removed
    a_vector: bool          # a was 1-D: a (1, K) row
    b_vector: bool          # b was 1-D: a (K, 1) column

    @property
    def full(self) -> tuple[int, ...]:
        """The result's shape with the 1-D operands' dimensions kept: (*batch, M, N)."""
        return (*self.batch, self.m, self.n)

    @property
    def count(self) -> int:
        """How many products: the batch dimensions' product."""
        return math.prod(self.batch)


def _broadcast(x: tuple[int, ...], y: tuple[int, ...]) -> tuple[int, ...] | None:
    """The batch two batches broadcast to (NumPy's rule), or None where they do not. In
    plain Python, so that PyTorch's symbolic sizes pass through it when traced."""
    if x == y:  # unbatched, or the same batch
        return tuple(x)
    width = max(len(x), len(y))
    x, y = (1,) * (width - len(x)) + tuple(x), (1,) * (width - len(y)) + tuple(y)
    out = []
    for p, q in zip(x, y, strict=True):
        if p != q and 1 not in (p, q):
            return None
        out.append(q if p == 1 else p)
    return tuple(out)


def matmul_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> Shapes:
    """numpy.matmul's shape rules; ValueError with both shapes where numpy raises one.

    >>> matmul_shapes((8, 128, 64), (64, 32)).out
    (8, 128, 32)
    >>> matmul_shapes((5,), (3, 5, 2)).out
    (3, 2)
    """
    for name, shape in (("a", a), ("b", b)):
        if len(shape) == 0:
            raise ValueError(
                f"{name} is a 0-D (scalar) array; matmul needs at least 1-D operands "
                "(multiply a scalar with *)"
            )
    a_vector, b_vector = len(a) == 1, len(b) == 1
    a2 = (1, a[0]) if a_vector else a
    b2 = (b[0], 1) if b_vector else b
    if a2[-1] != b2[-2]:
        raise ValueError(
            f"a is {a} and b is {b}: a @ b needs a's last dimension to equal b's "
            f"{'only' if b_vector else 'second-to-last'} dimension ({a2[-1]} != {b2[-2]})"
        )
    batch = _broadcast(a2[:-2], b2[:-2])
    if batch is None:
        raise ValueError(
            f"a is {a} and b is {b}: their batch dimensions {a2[:-2]} and {b2[:-2]} do not "
            "broadcast together (each pair must be equal, or one of them 1)"
        )
    m, k, n = a2[-2], a2[-1], b2[-1]
    out = batch + (() if a_vector else (m,)) + (() if b_vector else (n,))
    for size in (m, n, k):
        # a symbolic size (PyTorch tracing a dynamic dimension) is checked when the call
        # runs: a test of it here would bound the dimension, and torch.export refuses a
        # dimension bounded below what its user declared
        if isinstance(size, numbers.Integral) and size > INT_MAX:
            raise ValueError(f"a is {a} and b is {b}: xgemm's kernels index with 32-bit ints")
    return Shapes(batch, m, n, k, out, a_vector, b_vector)


#: The FP8 formats ``formats=`` may name (PyTorch's and ml_dtypes' names).
FP8_FORMATS = tuple(f for f in EIGHT_BIT if f != "int8")


def input_dtypes(a: np.dtype, b: np.dtype, formats: Any = None) -> tuple[str, str | None]:
    """A's dtype and B's where it differs (FP8 may mix e4m3 and e5m2), as xgemm names them.

    8-bit operands come as int8 arrays, or as bytes holding FP8 values: uint8 arrays whose
    format ``formats`` names, one name for both or a pair (a's, b's). PyTorch's float8
    tensors arrive here as uint8 views with ``formats`` taken from their dtype.

    >>> input_dtypes(np.dtype("uint8"), np.dtype("uint8"), ("float8_e4m3fn", "float8_e5m2"))
    ('float8_e4m3fn', 'float8_e5m2')
    >>> input_dtypes(np.dtype("float16"), np.dtype("float16"))
    ('float16', None)
    """
    if formats is None and a.kind == "f" and b.kind == "f":  # the common case
        return check_dtypes(a, b), None
    if isinstance(formats, str) or formats is None:
        formats = (formats, formats)
    elif not (isinstance(formats, (tuple, list)) and len(formats) == 2):
        raise TypeError(f"formats must be a format's name or a pair of them (a's, b's), got "
                        f"{formats!r}")
    found = []
    for name, dt, fmt in (("a", a, formats[0]), ("b", b, formats[1])):
        if fmt is not None and fmt not in EIGHT_BIT:
            raise ValueError(f"unknown format {fmt!r} for {name}: one of "
                             f"{', '.join(EIGHT_BIT)}")
        if dt.name == "uint8":
            if fmt not in FP8_FORMATS:
                raise TypeError(
                    f"{name} is a uint8 array: name the FP8 format its bytes hold, "
                    f"formats='float8_e4m3fn' or 'float8_e5m2' (or a pair, a's and b's); "
                    "int8 values come as an int8 array")
            found.append(fmt)
        elif dt.name == "int8":
            if fmt not in (None, "int8"):
                raise TypeError(f"{name} is an int8 array, not {fmt}: FP8 values come as "
                                "uint8 arrays (or PyTorch float8 tensors)")
            found.append("int8")
        elif fmt is not None:
            raise TypeError(f"formats= names the format of 8-bit operands; {name} has dtype "
                            f"{dt.name}")
        else:
            found.append(None)
    if None in found:
        if found == [None, None]:
            return check_dtypes(a, b), None
        wide = "a" if found[0] is None else "b"
        raise TypeError(
            f"a is {found[0] or a.name} and b is {found[1] or b.name}: xgemm does not mix 8-bit "
            f"and wider operands (that would need a hidden conversion): quantise {wide} too, "
            "or convert the other one")
    if ("int8" in found) != (found == ["int8", "int8"]):
        raise TypeError(f"a is {found[0]} and b is {found[1]}: FP8 formats mix with each "
                        "other only, int8 with int8")
    return found[0], found[1] if found[1] != found[0] else None


def check_operands(a: Meta, b: Meta, v: Any, params: dict, formats: Any = None
                   ) -> tuple[str, str | None, Shapes]:
    """The product's dtype (A's; and B's where it differs) and shapes; with a variant ``v``
    (None for auto), also its dtype and ``params`` against its declaration."""
    dtype, b_dtype = input_dtypes(a.dtype, b.dtype, formats)
    if v is not None:
        v.check_dtype(dtype)
        v.resolve(params, dtype)
    return dtype, b_dtype, matmul_shapes(a.shape, b.shape)


def _collapse(shape: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """One stride that walks all of ``shape`` in C order, or None if none does."""
    dims = [(n, s) for n, s in zip(shape, strides, strict=True) if n != 1]
    if not dims:
        return 0
    for (_, outer), (n_inner, inner) in zip(dims, dims[1:], strict=False):
        if outer != inner * n_inner:
            return None
    return dims[-1][1]


@dataclass(frozen=True)
class Layout:
    """How a kernel addresses one operand of shape (*batch, rows, cols) in place."""

    col: bool         # column-major: element (r, c) at c * ld + r
    ld: int           # leading dimension, in elements
    batch_stride: int  # elements from one matrix of the batch to the next (0: broadcast)


def layout_of(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int,
              layouts: tuple[str, ...] = ("row", "col"), write: bool = False) -> Layout | None:
    """The first of ``layouts`` in which an array of ``shape`` and byte ``strides`` can be
    read (or, with ``write``, written) in place, or None if it needs a copy.

    >>> layout_of((3, 4), (16, 4), 4)  # C-ordered
    Layout(col=False, ld=4, batch_stride=0)
    >>> layout_of((3, 4), (4, 12), 4)  # F-ordered: a transposed view
    Layout(col=True, ld=3, batch_stride=0)

    A single column (or row) lies in both layouts; it is read along its length, as one
    line, not as lines of one element each (which TMA and vector loads cannot take):

    >>> layout_of((1024, 1), (2, 2048), 2)  # dY.T of one token's (1, 1024) gradient
    Layout(col=True, ld=1024, batch_stride=0)
    """
    if 0 in shape:  # nothing is read or written: any layout will do
        inner = shape[-1] if layouts[0] == "row" else shape[-2]
        return Layout(layouts[0] == "col", max(inner, 1), 0)
    if len(shape) == 2:  # one matrix (most calls): no batch to walk
        (rows, cols), (row_bytes, col_bytes) = shape, strides
        if row_bytes % itemsize or col_bytes % itemsize:
            return None
        row_stride, col_stride, batch_stride = row_bytes // itemsize, col_bytes // itemsize, 0
    else:
        if any(s % itemsize for s in strides):
            return None
        *batch, rows, cols = shape
        *batch_strides, row_stride, col_stride = (s // itemsize for s in strides)
        batch_stride = _collapse(tuple(batch), tuple(batch_strides))
        if batch_stride is None or batch_stride < 0:
            return None
        if write and math.prod(batch) > 1 and batch_stride == 0:
            return None  # a broadcast output: two products would write one place
    if rows == 1 or cols == 1:  # a line: the layout along it first (stable otherwise)
        layouts = tuple(sorted(layouts, key=lambda x: (cols if x == "row" else rows) == 1))
    for layout in layouts:
        inner, inner_stride, outer, outer_stride = (
            (cols, col_stride, rows, row_stride) if layout == "row"
            else (rows, row_stride, cols, col_stride))
        if inner > 1 and inner_stride != 1:
            continue
        ld = outer_stride if outer > 1 else max(inner, 1)
        if ld < 0 or ld > INT_MAX or (write and ld < inner):
            continue
        return Layout(layout == "col", ld, batch_stride)
    return None


def extent(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int
           ) -> tuple[int, int]:
    """The bytes [start, end) an array's elements span (empty for an empty array).

    >>> extent(1000, (3, 4), (16, 4), 4)
    (1000, 1048)
    """
    if 0 in shape:
        return ptr, ptr
    low = high = ptr
    for size, stride in zip(shape, strides, strict=True):
        if stride < 0:
            low += (size - 1) * stride
        else:
            high += (size - 1) * stride
    return low, high + itemsize


def overlaps(one: tuple[int, int], other: tuple[int, int]) -> bool:
    """Whether two byte ranges (``extent``) share a byte.

    >>> overlaps((0, 16), (16, 32)), overlaps((0, 17), (16, 32))
    (False, True)
    """
    return one[0] < other[1] and other[0] < one[1]


def output_dtype(dtype: str, out_dtype: str | None, target: Any, name: str) -> str:
    """The dtype the product is stored in: the inputs', or (16-bit inputs) float32 when
    ``out_dtype`` or the dtype of ``target`` (out / c) says so.

    >>> output_dtype("float16", "float32", None, "out")
    'float32'
    """
    sixteen_bit = dtype in SIXTEEN_BIT
    have = dtype_name(getattr(target, "dtype", None))
    if dtype in EIGHT_BIT:
        allowed = EIGHT_BIT_OUTPUTS[dtype]
        wanted = out_dtype or have or default_output(dtype)
        if wanted not in allowed:
            given = f"out_dtype={out_dtype!r}" if out_dtype else f"{name} has dtype {wanted}"
            raise ValueError(f"{given}: a {dtype} product is stored as {' or '.join(allowed)}")
        if have is not None and have != wanted:
            raise TypeError(f"{name} has dtype {have} but out_dtype is {out_dtype!r}")
        return wanted
    if out_dtype is not None:
        if out_dtype not in (dtype, UNROUNDED_OUTPUT if sixteen_bit else dtype):
            raise ValueError(
                f"out_dtype={out_dtype!r}: a {dtype} product is stored as {dtype}"
                + (f" or {UNROUNDED_OUTPUT} (its float32 sums, unrounded)" if sixteen_bit else ""))
        if have is not None and have != out_dtype:
            raise TypeError(f"{name} has dtype {have} but out_dtype is {out_dtype!r}")
        return out_dtype
    return UNROUNDED_OUTPUT if sixteen_bit and have == UNROUNDED_OUTPUT else dtype


def dtype_name(dtype: Any) -> str | None:
    """A NumPy or PyTorch dtype's NumPy name ("float16" for torch.float16), or None.

    >>> dtype_name(np.dtype("float32")), dtype_name(None)
    ('float32', None)
    """
    if dtype is None:
        return None
    name = getattr(dtype, "name", None)
    return name if isinstance(name, str) else str(dtype).removeprefix("torch.")


def parse_activation(activation: str | None) -> str:
    """The template's name of an activation: "none" for None; ValueError for an unknown
    one, with the closest name.

    >>> parse_activation(None), parse_activation("gelu")
    ('none', 'gelu')
    """
    name = "none" if activation is None else activation
    if name not in ACTIVATIONS:
        close = difflib.get_close_matches(str(name), ACTIVATIONS, n=1)
        raise ValueError(
            f"unknown activation {activation!r}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f": choose one of {', '.join(repr(a) for a in ACTIVATIONS[1:])} or None"
        )
    return name


def check_scalar(name: str, value: Any) -> float:
    """``value`` as a float; TypeError unless it is a real number (bool is not).

    >>> check_scalar("alpha", 2)
    2.0
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def check_precision_for(precision: str | None, dtype: str) -> None:
    """ValueError where a TF32 ``precision`` is asked of operands that are not float32.

    >>> check_precision_for("tf32x3", "float16")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: precision='tf32x3' lets float32 inputs run on the TF32 tensor cores; ...
    """
    if precision in ("tf32", "tf32x3") and dtype != "float32":
        raise ValueError(f"precision={precision!r} lets float32 inputs run on the TF32 tensor "
                         f"cores; a and b are {dtype}: leave precision out")


def check_precision(precision: str | None) -> None:
    """ValueError for a ``precision=`` xgemm does not know."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: None (exact arithmetic), 'tf32' "
                         "(float32 inputs may run on the tensor cores as TF32) or 'tf32x3' "
                         "(float32's accuracy from three TF32 products a step)")
