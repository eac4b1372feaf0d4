"""``xgemm.matmul``, ``xgemm.gemm`` and ``xgemm.source``: check everything, then compile
and launch.

The semantics are numpy.matmul's (1-D operands, broadcast batch dimensions, ``out=``)
plus BLAS's ``C = alpha * A @ B + beta * C`` and a fused epilogue (bias, activation).
All checks that need only shapes and dtypes run before anything touches the GPU.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .compile import get_kernel
from .registry import (
    ACTIVATIONS,
    DTYPES,
    MAX_GRID,
    NARROW,
    WIDE_OUTPUT,
    Spec,
    Variant,
    get_variant,
    numpy_dtype,
)

if TYPE_CHECKING:
    import cupy

#: Picks the variant and parameters per call: tuned ones where ``xgemm.tune`` ran, else a heuristic.
AUTO = "auto"
#: The variant ``matmul`` uses when none is named.
DEFAULT_VARIANT = AUTO

_INT_MAX = 2**31 - 1  # the kernels take int sizes and leading dimensions
#: What ``precision=`` takes: None, exact arithmetic in the inputs' dtype (the default),
#: or "tf32", which lets float32 inputs run on the tensor cores as TF32 (10-bit mantissas).
PRECISIONS = (None, "tf32")
#: Most bytes of workspace a split-K launch may take for its partial products.
MAX_WORKSPACE_BYTES = 2**30


# -- what can be checked without the GPU ------------------------------------------------
@dataclass(frozen=True)
class _Meta:
    """What can be learnt about an operand without touching the GPU."""

    shape: tuple[int, ...]
    dtype: np.dtype


def _meta(x: Any, name: str) -> _Meta | None:
    """Shape and dtype of ``x``, or None when only a conversion can tell (DLPack objects).

    Raises TypeError for host arrays and for objects that are no GPU array at all.
    """
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
        return _Meta(tuple(x.shape), np.dtype(x.dtype))
    if hasattr(x, "__cuda_array_interface__") and not hasattr(x, "__dlpack__"):
        cai = x.__cuda_array_interface__
        return _Meta(tuple(cai["shape"]), np.dtype(cai["typestr"]))
    if hasattr(x, "__dlpack__"):
        return None
    raise TypeError(
        f"{name} must be a GPU array (a CuPy array, or an object with __cuda_array_interface__ "
        f"or __dlpack__ such as a PyTorch CUDA tensor), got {type(x).__name__}"
    )


def on_gpu(x: Any) -> bool:
    """Whether ``x`` is an array in GPU memory (CUDA array interface, or DLPack on CUDA).

    >>> on_gpu([1.0])
    False
    """
    if hasattr(x, "__dlpack_device__"):
        return int(x.__dlpack_device__()[0]) in (2, 13)  # kDLCUDA, kDLCUDAManaged
    return hasattr(x, "__cuda_array_interface__")


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


def check_dtypes(a: np.dtype, b: np.dtype) -> str:
    """The dtype name of ``a @ b``: both operands must have the same floating dtype.

    >>> check_dtypes(np.dtype("float16"), np.dtype("float16"))
    'float16'
    """
    for name, dt in (("a", a), ("b", b)):
        if dt.name not in DTYPES:
            kind = {"i": "integer", "u": "integer", "b": "boolean", "c": "complex"}.get(dt.kind)
            raise TypeError(
                f"{name} has dtype {dt.name}; xgemm multiplies {', '.join(DTYPES)}"
                + (f": for {kind} products use cupy.matmul" if kind else "")
                + f", or convert with {name}.astype('float32')"
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
    try:
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    except ValueError:
        raise ValueError(
            f"a is {a} and b is {b}: their batch dimensions {a2[:-2]} and {b2[:-2]} do not "
            "broadcast together (each pair must be equal, or one of them 1)"
        ) from None
    m, k, n = a2[-2], a2[-1], b2[-1]
    out = batch + (() if a_vector else (m,)) + (() if b_vector else (n,))
    for size in (m, n, k):
        if size > _INT_MAX:
            raise ValueError(f"a is {a} and b is {b}: xgemm's kernels index with 32-bit ints")
    return Shapes(batch, m, n, k, out, a_vector, b_vector)


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
    """
    if 0 in shape:  # nothing is read or written: any layout will do
        inner = shape[-1] if layouts[0] == "row" else shape[-2]
        return Layout(layouts[0] == "col", max(inner, 1), 0)
    if any(s % itemsize for s in strides):
        return None
    elems = tuple(s // itemsize for s in strides)
    *batch, rows, cols = shape
    *batch_strides, row_stride, col_stride = elems
    batch_stride = _collapse(tuple(batch), tuple(batch_strides))
    if batch_stride is None or batch_stride < 0:
        return None
    if write and math.prod(batch) > 1 and batch_stride == 0:
        return None  # a broadcast output: two products would write one place
    for layout in layouts:
        inner, inner_stride, outer, outer_stride = (
            (cols, col_stride, rows, row_stride) if layout == "row"
            else (rows, row_stride, cols, col_stride))
        if inner > 1 and inner_stride != 1:
            continue
        ld = outer_stride if outer > 1 else max(inner, 1)
        if ld < 0 or ld > _INT_MAX or (write and ld < inner):
            continue
        return Layout(layout == "col", ld, batch_stride)
    return None


# -- from arrays to a launch -------------------------------------------------------------
def _to_cupy(x: Any) -> cupy.ndarray:
    import cupy

    if isinstance(x, cupy.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        return cupy.from_dlpack(x)
    return cupy.asarray(x)  # __cuda_array_interface__: a view, no copy


@functools.cache
def _device_limits(device: int) -> tuple[int, int, int]:
    """Threads per block, static and opt-in dynamic shared memory per block."""
    import cupy

    attrs = cupy.cuda.Device(device).attributes
    return (attrs["MaxThreadsPerBlock"], attrs["MaxSharedMemoryPerBlock"],
            attrs["MaxSharedMemoryPerBlockOptin"])


@functools.cache
def _multiprocessors(device: int) -> int:
    """The GPU's SM count: the size of a persistent grid."""
    import cupy

    return cupy.cuda.Device(device).attributes["MultiProcessorCount"]


def check_device_limits(v: Variant, p: dict[str, int], dtype: str, device: int) -> int:
    """ValueError, before anything is compiled, if ``v`` at ``p`` needs more threads or
    shared memory per block than GPU ``device`` gives; else its shared memory in bytes."""
    max_threads, max_static, max_dynamic = _device_limits(device)
    max_smem = max_dynamic if v.dynamic_smem else max_static
    threads, smem = v.threads_per_block(p), v.shared_memory(p, dtype)
    if threads > max_threads or smem > max_smem:
        what = "variant" if v.family == "gemm" else f"{v.family} variant"
        raise ValueError(
            f"{what} {v.name!r} with {p} needs {threads} threads and {smem} bytes of shared "
            f"memory per block; GPU {device} allows {max_threads} and {max_smem}: choose "
            "smaller tiles or blocks (or fewer STAGES)"
        )
    return smem


@functools.cache
def _compute_capability(device: int) -> int:
    """The GPU's compute capability x 10 (90 for an H100)."""
    import cupy

    return int(cupy.cuda.Device(device).compute_capability)


def _check_arch(v: Variant, dtype: str, device: int) -> None:
    """ValueError, before anything is compiled, if ``v`` needs a newer GPU than ``device``."""
    from .registry import variants

    cc = _compute_capability(device)
    if not v.runs_on(cc):
        able = [name for name in variants() if dtype in get_variant(name).dtypes
                and get_variant(name).runs_on(cc)]
        needs = (f"compute capability {v.min_cc / 10:.1f}" + (
            f" exactly (it is built for {v.target})" if v.target and v.target.endswith("a")
            else " or newer"))
        raise ValueError(
            f"variant {v.name!r} needs {needs}; GPU {device} has {cc / 10:.1f}: use one of "
            f"{', '.join(able)} (or 'auto')"
        )


def _as_matrices(x: cupy.ndarray, vector: str | None) -> cupy.ndarray:
    """A 1-D operand with its dimension back: "row", a (1, K) row; "col", a (K, 1) column."""
    return x[None, :] if vector == "row" else x[:, None] if vector == "col" else x


def _tma_ready(x: cupy.ndarray, layout: Layout | None) -> bool:
    """Whether TMA can read ``x`` in ``layout`` in place: its start, its leading dimension
    and its batch stride are whole multiples of 16 bytes."""
    from .tma import ALIGNMENT

    return layout is not None and x.data.ptr % ALIGNMENT == 0 and all(
        n * x.itemsize % ALIGNMENT == 0 for n in (layout.ld, layout.batch_stride))


def _tma_copy(x: cupy.ndarray, layout: Layout, name: str, copies: list[str]
              ) -> tuple[cupy.ndarray, Layout]:
    """``x`` (*batch, rows, cols) copied with its rows (columns, column-major) padded to
    16 bytes, for TMA. A broadcast batch (stride 0) stays one padded matrix, broadcast."""
    import cupy

    from .tma import ALIGNMENT

    group = ALIGNMENT // x.itemsize
    broadcast = layout.batch_stride == 0 and x.ndim > 2
    source = x[(0,) * (x.ndim - 2)] if broadcast else x
    lines = cupy.swapaxes(source, -1, -2) if layout.col else source  # contiguous dim last
    *batch, outer, inner = lines.shape
    padded = cupy.empty((*batch, outer, -(-inner // group) * group), dtype=x.dtype)
    view = padded[..., :inner]
    view[...] = lines
    if layout.col:
        view = cupy.swapaxes(view, -1, -2)
    if name not in copies:  # (one with no unit stride was copied once already)
        copies.append(name)
    if broadcast:
        return cupy.broadcast_to(view, x.shape), Layout(layout.col, padded.shape[-1], 0)
    found = layout_of(view.shape, view.strides, view.itemsize, ("col" if layout.col else "row",))
    return view, Layout(layout.col, padded.shape[-1], found.batch_stride)  # ld even of 1 row


def _tensor_maps(p: dict[str, int], a: cupy.ndarray, b: cupy.ndarray, c: cupy.ndarray,
                 layout_a: Layout, layout_b: Layout, layout_c: Layout, shapes: Shapes,
                 first: int, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The TMA tensor maps of A, B and C for products first .. first + count of the
    batch: (inner, outer, batch) dimensions, the box one copy of the kernel moves (one
    128-byte row along the contiguous dimension: 64 16-bit values or 32 float32; of
    k-contiguous operands a whole BM rows at once, or a block's share of BN: BN / CLUSTER;
    of C, one consumer warpgroup's rows). A map the kernel does not use is left empty:
    A's and B's with K = 0 (nothing to copy), C's unless TMA_STORE."""
    from .tma import tensor_map

    def one(x, layout, rows, cols, k_contiguous, block):
        item, row = x.itemsize, 128 // x.itemsize  # row: values in a 128-byte swizzled row
        inner, outer = (rows, cols) if layout.col else (cols, rows)
        batched = layout.batch_stride != 0
        stride = layout.batch_stride if batched else layout.ld * outer
        return tensor_map(
            x.data.ptr + first * layout.batch_stride * item, x.dtype.name,
            (inner, outer, count if batched else 1), (layout.ld * item, stride * item),
            (row, block if k_contiguous else row, 1))

    empty = np.zeros(1, dtype=np.dtype((np.void, 128)))
    maps = [empty, empty, empty]
    if shapes.k > 0:
        maps[:2] = (one(a, layout_a, shapes.m, shapes.k, not layout_a.col, p["BM"]),
                    one(b, layout_b, shapes.k, shapes.n, layout_b.col, p["BN"] // p["CLUSTER"]))
    if p.get("TMA_STORE"):
        rows = p["BM"] if p["PINGPONG"] else p["BM"] // p["CONSUMERS"]
        maps[2] = one(c, layout_c, shapes.m, shapes.n, True, rows)
    return tuple(maps)


def _operand(x: cupy.ndarray, shapes: Shapes, rows: int, cols: int,
             layouts: tuple[str, ...], name: str, variant: str, copies: list[str]
             ) -> tuple[cupy.ndarray, Layout]:
    """``x`` (at least 2-D) broadcast to (*batch, rows, cols), and the layout the kernel
    reads it in. When its strides leave no unit stride in the last two dimensions it is
    copied, once; when no single stride walks its batch, the broadcast batch is."""
    import cupy

    full_shape = (*shapes.batch, rows, cols)
    full = cupy.broadcast_to(x, full_shape)
    found = layout_of(full.shape, full.strides, full.itemsize, layouts)
    if found is not None:
        return full, found
    readable = layout_of(full.shape, full.strides, full.itemsize)
    if readable is not None:
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

    copies.append(name)
    full = cupy.broadcast_to(contiguous(x), full_shape)
    found = layout_of(full.shape, full.strides, full.itemsize, layouts)
    if found is None:  # e.g. (2, 1, M, K) against (1, 3, K, N): materialise the batch
        full = contiguous(full)
        found = layout_of(full.shape, full.strides, full.itemsize, layouts)
    return full, found


def _parse_activation(activation: str | None) -> str:
    name = "none" if activation is None else activation
    if name not in ACTIVATIONS:
        import difflib

        close = difflib.get_close_matches(str(name), ACTIVATIONS, n=1)
        raise ValueError(
            f"unknown activation {activation!r}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f": choose one of {', '.join(repr(a) for a in ACTIVATIONS[1:])} or None"
        )
    return name


def _check_scalar(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


@dataclass
class Launch:
    """One product, checked and laid out, ready to compile and run: what ``matmul`` does
    after its checks. ``prepare`` makes one; calling it launches the kernel (once, or once
    per 65535 products of a larger batch)."""

    variant: Variant
    params: dict[str, int]
    spec: Spec
    device: int
    grid: tuple[int, ...]          # of the first launch; () when nothing runs
    block: tuple[int, ...]
    args: list[tuple] = field(default_factory=list)  # one argument tuple per launch
    grids: list[tuple[int, ...]] = field(default_factory=list)
    result: Any = None             # the array returned
    staging: Any = None            # where the kernel writes when the target can't be written
    target: Any = None             # ... and where staging is copied afterwards
    copies: tuple[str, ...] = ()   # the operands that had to be copied, by name ("a" before "b")
    shared_mem: int = 0            # bytes of dynamic shared memory per block
    keep: tuple = ()               # arrays the kernel's raw pointers point into

    @property
    def dtype(self) -> str:
        return self.spec.dtype

    def kernel(self):
        """The compiled kernel (compiled now unless the in-process cache has it)."""
        import cupy

        with cupy.cuda.Device(self.device):
            return get_kernel(self.variant.name, self.params, self.spec, self.device)

    def __call__(self):
        import cupy

        with cupy.cuda.Device(self.device):  # on that GPU's current stream
            if self.args:  # an empty output launches (and compiles) nothing
                kernel = self.kernel()
                for grid, args in zip(self.grids, self.args, strict=True):
                    kernel(grid, self.block, args, shared_mem=self.shared_mem)
            if self.staging is not None:
                self.target[...] = self.staging
        return self.result


def prepare(a: Any, b: Any, variant: str = DEFAULT_VARIANT, out: cupy.ndarray | None = None,
            *, c: cupy.ndarray | None = None, alpha: float = 1.0, beta: float = 0.0,
            bias: Any = None, activation: str | None = None, precision: str | None = None,
            out_dtype: str | None = None, **params: int) -> Launch:
    """Check the operands and parameters and lay the launch out, without running it.

    ``matmul(a, b, ...)`` is ``prepare(a, b, ...)()`` and ``gemm(a, b, c, ...)`` is
    ``prepare(a, b, ..., c=c, alpha=..., beta=...)()``. Useful to time or inspect a call:

    >>> import cupy as cp, xgemm  # doctest: +SKIP
    >>> launch = xgemm.prepare(cp.ones((64, 32), "f"), cp.ones((32, 16), "f"))  # doctest: +SKIP
    >>> launch.variant.name, launch.grid, launch.copies  # doctest: +SKIP
    """
    auto = variant == AUTO
    if auto:
        if params:
            raise ValueError(
                f"variant='auto' picks its own parameters, so {sorted(params)} cannot be given; "
                "name a variant to set them (xgemm.variants() lists the names)"
            )
        v = None
    else:
        v = get_variant(variant)
    act = _parse_activation(activation)
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: None (exact arithmetic) or 'tf32' "
                         "(float32 inputs may run on the tensor cores as TF32)")
    alpha, beta = _check_scalar("alpha", alpha), _check_scalar("beta", beta)
    if out is not None and c is not None:
        raise ValueError("give out= (matmul) or c= (gemm), not both")

    metas = (_meta(a, "a"), _meta(b, "b"))
    if None not in metas:  # everything below needs no GPU
        _check_operands(*metas, v, params)
    a, b = _to_cupy(a), _to_cupy(b)
    dtype, shapes = _check_operands(_Meta(a.shape, a.dtype), _Meta(b.shape, b.dtype), v, params)
    if precision == "tf32" and dtype != "float32":
        raise ValueError(f"precision='tf32' lets float32 inputs run as TF32; a and b are {dtype}:"
                         " leave precision out")
    target_name = "out" if c is None else "c"
    target = out if out is not None else c
    c_dtype = _output_dtype(dtype, out_dtype, target, target_name)
    if target is not None:
        _check_target(target_name, target, shapes.out, c_dtype)
    if bias is not None:
        bias = _check_bias(bias, shapes.n, c_dtype)
    device = one_device(a=a, b=b, **{target_name: target}, bias=bias)

    import cupy

    # Everything from here on (copies, the result, workspaces) is made on the operands' GPU,
    # whichever is current: a launch on one GPU with pointers into another's memory is an
    # illegal address that breaks the process's CUDA context for good.
    with cupy.cuda.Device(device):
        return _lay_out(a, b, v, params, shapes, dtype, c_dtype, device, act, precision,
                        alpha, beta, bias, target, c is not None and beta != 0.0)


def _lay_out(a: cupy.ndarray, b: cupy.ndarray, v: Variant | None, params: dict[str, int],
             shapes: Shapes, dtype: str, c_dtype: str, device: int, act: str,
             precision: str | None, alpha: float, beta: float, bias: cupy.ndarray | None,
             target: cupy.ndarray | None, read_c: bool) -> Launch:
    """The rest of ``prepare``, on the current device (the operands'): the variant (auto's
    choice), the operands' layouts and copies, the output, the kernel's arguments."""
    import cupy

    if bias is not None:
        bias = cupy.ascontiguousarray(bias)  # a strided bias (rare, and small) is copied
    mat_a = _as_matrices(a, "row" if shapes.a_vector else None)
    mat_b = _as_matrices(b, "col" if shapes.b_vector else None)
    if v is None:  # auto
        from .tuning import choose, heuristic

        cc = _compute_capability(device)
        mats = (mat_a, mat_b)
        layouts = [layout_of(x.shape, x.strides, x.itemsize) for x in mats]

        def fits(v: Variant) -> bool:
            """Runs on this GPU, at the precision asked for, reading both operands in
            place (an operand with no unit stride is copied row-major for any variant)."""
            read = ["col" if layout is not None and layout.col else "row" for layout in layouts]
            return (v.runs_on(cc) and v.precision in (None, precision)
                    and read[0] in v.a_layouts and read[1] in v.b_layouts
                    and (not v.tma or all(map(_tma_ready, mats, layouts))))

        m, n, k = shapes.m, shapes.n, shapes.k
        for pick in (lambda: choose(m, n, k, dtype, device, precision),
                     lambda: heuristic(m, n, k, dtype, cc, precision),
                     lambda: heuristic(m, n, k, dtype, min(cc, 89), precision),  # no TMA
                     lambda: heuristic(m, n, k, dtype, min(cc, 89))):  # no TMA, no TF32: fits
            name, p = pick()
            v = get_variant(name)
            if fits(v):
                break
        p = v.resolve(p, dtype)
    else:
        p = v.resolve(params, dtype)
        _check_arch(v, dtype, device)

    copies: list[str] = []
    full_a, layout_a = _operand(mat_a, shapes, shapes.m, shapes.k, v.a_layouts, "a", v.name,
                                copies)
    full_b, layout_b = _operand(mat_b, shapes, shapes.k, shapes.n, v.b_layouts, "b", v.name,
                                copies)
    if v.tma and shapes.k > 0:  # TMA reads 16-byte aligned rows: pad the rows of one that isn't
        if not _tma_ready(full_a, layout_a):
            full_a, layout_a = _tma_copy(full_a, layout_a, "a", copies)
        if not _tma_ready(full_b, layout_b):
            full_b, layout_b = _tma_copy(full_b, layout_b, "b", copies)

    # The output, viewed as (*batch, M, N): written in place when its rows have unit
    # stride and it shares no memory with a or b, else through a staging array.
    if target is None:
        full_c = cupy.empty(shapes.full, dtype=numpy_dtype(c_dtype))
        result, staging = full_c.reshape(shapes.out), None
    else:
        view = target
        if shapes.b_vector:
            view = view[..., None]
        if shapes.a_vector:
            view = view[..., None, :]
        result, full_c, staging = target, view, None
        writable = layout_of(view.shape, view.strides, view.itemsize, ("row",), write=True)
        if writable is None or any(cupy.may_share_memory(target, x)
                                   for x in (a, b, bias) if x is not None):
            staging = cupy.ascontiguousarray(view) if read_c else cupy.empty(shapes.full,
                                                                              view.dtype)
            full_c = staging
    layout_c = layout_of(full_c.shape, full_c.strides, full_c.itemsize, ("row",), write=True)
    if p.get("TMA_STORE") and (read_c or c_dtype != dtype or not _tma_ready(full_c, layout_c)):
        p = {**p, "TMA_STORE": 0}  # TMA does not read C, widen it, or write unaligned rows

    spec = Spec(dtype, layout_a.col, layout_b.col, bias is not None, act, read_c,
                _flags(v, full_a, full_b, full_c, layout_a, layout_b, layout_c, shapes),
                out_dtype=None if c_dtype == dtype else c_dtype)
    launch = Launch(v, p, spec, device, (), (), result=result, copies=tuple(sorted(copies)),
                    keep=(full_a, full_b, full_c, bias, a, b))
    if staging is not None:
        launch.staging, launch.target = staging, view
    if shapes.m == 0 or shapes.n == 0 or shapes.count == 0:
        launch.staging = None  # nothing to compute, nothing to copy back
        return launch

    smem = check_device_limits(v, p, dtype, device)
    launch.shared_mem = smem if v.dynamic_smem else 0
    grid, block = v.launch(p, shapes.m, shapes.n, _multiprocessors(device))
    acc = np.float64 if DTYPES[dtype].acc == "double" else np.float32
    item = a.itemsize
    splits = v.splits_of(p)
    workspace = splits * shapes.count * shapes.m * shapes.n * np.dtype(acc).itemsize
    if splits > 1 and workspace > MAX_WORKSPACE_BYTES:
        raise ValueError(
            f"variant {v.name!r} with {splits} splits needs {workspace / 2**30:.1f} GiB of "
            f"workspace for {shapes.count} output(s) of {shapes.m} x {shapes.n} (the limit is "
            f"{MAX_WORKSPACE_BYTES / 2**30:.0f} GiB): split-K is for small outputs; use "
            "fewer SPLITS, or 'pipelined'"
        )
    per_launch = MAX_GRID[2] // splits  # products per launch: z is product x split
    extra: tuple = ()
    if splits > 1:  # split-K: partial products, and a counter per tile of C (zeroed once)
        tiles = grid[0] * grid[1]
        partials = cupy.empty(shapes.count * splits * shapes.m * shapes.n, dtype=acc)
        arrivals = cupy.zeros(shapes.count * tiles, dtype=np.uint32)
        launch.keep += (partials, arrivals)
    for first in range(0, shapes.count, per_launch):
        count = min(per_launch, shapes.count - first)
        if splits > 1:
            extra = (np.uint64(partials.data.ptr + first * splits * shapes.m * shapes.n
                               * partials.itemsize),
                     np.uint64(arrivals.data.ptr + first * tiles * arrivals.itemsize))
        if v.tma:
            extra = _tensor_maps(p, full_a, full_b, full_c, layout_a, layout_b, layout_c,
                                 shapes, first, count)
        launch.grids.append((*grid, count * splits))
        launch.args.append((
            np.uint64(full_a.data.ptr + first * layout_a.batch_stride * item),
            np.uint64(full_b.data.ptr + first * layout_b.batch_stride * item),
            np.uint64(full_c.data.ptr + first * layout_c.batch_stride * full_c.itemsize),
            np.int32(shapes.m), np.int32(shapes.n), np.int32(shapes.k),
            np.int32(layout_a.ld), np.int32(layout_b.ld), np.int32(layout_c.ld),
            np.int64(layout_a.batch_stride), np.int64(layout_b.batch_stride),
            np.int64(layout_c.batch_stride),
            np.uint64(bias.data.ptr if bias is not None else 0), acc(alpha), acc(beta),
            *extra,
        ))
    launch.grid, launch.block = launch.grids[0], block
    return launch


def _flags(v: Variant, full_a, full_b, full_c, layout_a: Layout, layout_b: Layout,
           layout_c: Layout, shapes: Shapes) -> tuple[tuple[str, bool], ...]:
    """The variant's boolean specialisations for these operands: ``aligned``, in each of
    A, B and C every group of four elements along a contiguous dimension starts at a
    4-element boundary and lies wholly inside the matrix; ``aligned16``, the same for
    groups of 16 bytes (C may be wider than A and B: each counts in its own elements)."""
    operands = ((full_a, layout_a, shapes.m if layout_a.col else shapes.k),
                (full_b, layout_b, shapes.k if layout_b.col else shapes.n),
                (full_c, layout_c, shapes.n))  # each with its extent along its rows
    flags = {}
    for flag in v.flags:
        if flag not in ("aligned", "aligned16"):
            raise ValueError(f"variant {v.name!r} declares the unknown flag {flag!r}")

        def aligned(x, layout: Layout, extent: int, flag: str = flag) -> bool:
            group = 4 if flag == "aligned" else max(1, 16 // x.itemsize)  # elements of x
            return (x.data.ptr % (group * x.itemsize) == 0 and extent % group == 0
                    and layout.ld % group == 0 and layout.batch_stride % group == 0)

        flags[flag] = all(aligned(*operand) for operand in operands)
    return tuple(sorted(flags.items()))


def _check_operands(a: _Meta, b: _Meta, v: Variant | None, params: dict) -> tuple[str, Shapes]:
    dtype = check_dtypes(a.dtype, b.dtype)
    if v is not None:
        v.check_dtype(dtype)
        v.resolve(params, dtype)
    return dtype, matmul_shapes(a.shape, b.shape)


def _output_dtype(dtype: str, out_dtype: str | None, target: Any, name: str) -> str:
    """The dtype the product is stored in: the inputs', or (16-bit inputs) float32 when
    ``out_dtype`` or the dtype of ``target`` (out / c) says so."""
    wide = dtype in NARROW
    have = getattr(getattr(target, "dtype", None), "name", None)
    if out_dtype is not None:
        if out_dtype not in (dtype, WIDE_OUTPUT if wide else dtype):
            raise ValueError(
                f"out_dtype={out_dtype!r}: a {dtype} product is stored as {dtype}"
                + (f" or {WIDE_OUTPUT} (its float32 sums, unrounded)" if wide else ""))
        if have is not None and have != out_dtype:
            raise TypeError(f"{name} has dtype {have} but out_dtype is {out_dtype!r}")
        return out_dtype
    return WIDE_OUTPUT if wide and have == WIDE_OUTPUT else dtype


def _check_target(name: str, target: Any, shape: tuple[int, ...], dtype: str) -> None:
    import cupy

    if not isinstance(target, cupy.ndarray):
        raise TypeError(f"{name} must be a CuPy array, got {type(target).__name__}")
    if target.shape != shape:
        raise ValueError(f"{name} has shape {target.shape}; a @ b has shape {shape}")
    if target.dtype.name != dtype:
        raise TypeError(f"{name} has dtype {target.dtype.name}; a @ b has dtype {dtype}"
                        + (f" (or {WIDE_OUTPUT}: out_dtype)" if dtype in NARROW else ""))


def _check_bias(bias: Any, n: int, dtype: str) -> cupy.ndarray:
    """``bias`` as a CuPy array (a view, on whichever GPU it is), checked: shape (n,), and
    the dtype of the product's output."""

    meta = _meta(bias, "bias")
    bias = _to_cupy(bias)
    meta = _Meta(bias.shape, bias.dtype) if meta is None else meta
    if meta.shape != (n,):
        raise ValueError(
            f"bias has shape {meta.shape}; it is added per column of the result, so it must "
            f"have shape ({n},)"
        )
    if meta.dtype.name != dtype:
        raise TypeError(f"bias has dtype {meta.dtype.name}; the product's dtype is {dtype}: "
                        f"convert with bias.astype({dtype!r})")
    return bias


# -- the public calls ------------------------------------------------------------------
def matmul(a: Any, b: Any, variant: str = DEFAULT_VARIANT, out: cupy.ndarray | None = None,
           *, bias: Any = None, activation: str | None = None, precision: str | None = None,
           out_dtype: str | None = None, **params: int) -> cupy.ndarray:
    """``a @ b`` with numpy.matmul's semantics, computed by one of xgemm's kernels, with an
    optional fused epilogue: ``activation(a @ b + bias)``.

    Args:
        a, b: CuPy arrays, or any GPU arrays with ``__cuda_array_interface__`` or
            ``__dlpack__`` (PyTorch CUDA tensors), of one dtype: float32, float64,
            float16 or bfloat16 (the 16-bit types accumulate in float32). 1-D operands
            and broadcast batch dimensions follow numpy.matmul; a batch runs in one launch.
        variant: a name from :func:`xgemm.variants`, or "auto" (the default): the variant
            and parameters that ``xgemm.tune`` found fastest for this GPU, dtype and a
            shape like this one, else the heuristic of :func:`xgemm.tuning.heuristic`.
        out: optional CuPy array of the result's shape and dtype, written in place (an
            ``out`` that overlaps ``a`` or ``b`` is written through a temporary). For
            16-bit inputs a float32 ``out`` takes the float32 sums unrounded.
        bias: optional 1-D array of length N, added to every row of the product.
        activation: None, "relu", "gelu" (the tanh form) or "silu", applied last.
        precision: None (exact arithmetic, the default) or "tf32": float32 inputs may
            then run on the tensor cores as TF32 (mantissas truncated to 10 bits, float32
            sums; for a row-major a and a column-major b ``auto`` takes ``wgmma_tf32``
            on sm_90 and ``mma_tf32`` on other GPUs from sm_80, and the exact rungs
            elsewhere). Naming a TF32 variant asks for it too.
        out_dtype: None (the inputs' dtype) or, for float16 and bfloat16 inputs,
            "float32": the result (and ``bias``) in float32, the sums unrounded.
        **params: the variant's tile parameters (``tile=16``, ``BM=64``...); those left
            out take the variant's defaults.

    Returns:
        The product as a CuPy array (``out`` itself when given).

    Layouts: every operand with a unit stride in one of its last two dimensions (C- or
    F-ordered, transposed views ``w.T``, slices of larger arrays) is read in place, by
    a kernel specialised for its layout. Only operands with no unit stride there (a step
    slice, negative strides), or whose batch dimensions no single stride can walk, are
    copied once; ``prepare(...).copies`` names them.

    Devices: the product runs on the GPU the arrays are on, whichever is current, on
    that GPU's current CuPy stream; the result (and any copy) is made there. Arrays on
    two GPUs are refused with a ValueError naming each one's GPU.

    Every check happens before anything is compiled or launched: unknown variants and
    parameters and broken constraints raise ValueError, host arrays, wrong or mixed
    dtypes TypeError, shapes numpy.matmul refuses ValueError.

    Example:
        >>> import cupy as cp, xgemm
        >>> a = cp.random.standard_normal((8, 100, 70), dtype=cp.float32)
        >>> w = cp.random.standard_normal((30, 70), dtype=cp.float32)
        >>> bias = cp.random.standard_normal(30, dtype=cp.float32)
        >>> y = xgemm.matmul(a, w.T, bias=bias, activation="relu")  # (8, 100, 30)
        >>> bool(cp.allclose(y, cp.maximum(a @ w.T + bias, 0), rtol=1e-4, atol=1e-4))
        True
    """
    return prepare(a, b, variant, out, bias=bias, activation=activation, precision=precision,
                   out_dtype=out_dtype, **params)()


def gemm(a: Any, b: Any, c: cupy.ndarray, alpha: float = 1.0, beta: float = 0.0, *,
         variant: str = DEFAULT_VARIANT, bias: Any = None, activation: str | None = None,
         precision: str | None = None, **params: int) -> cupy.ndarray:
    """BLAS GEMM in place: ``c = activation(alpha * a @ b + beta * c + bias)``; the other
    arguments as for :func:`matmul`.

    ``c`` must have the shape and dtype of ``a @ b`` (numpy.matmul's rules, batches
    included; for 16-bit inputs float32 works too: the sums go in unrounded). With
    ``beta == 0`` (the default) ``c`` is never read, so NaN or garbage in it does not
    reach the result. Returns ``c``.

    Example:
        >>> import cupy as cp, xgemm
        >>> a = cp.random.standard_normal((64, 32), dtype=cp.float32)
        >>> b = cp.random.standard_normal((32, 16), dtype=cp.float32)
        >>> c = cp.random.standard_normal((64, 16), dtype=cp.float32)
        >>> expected = 2 * a @ b + 0.5 * c
        >>> _ = xgemm.gemm(a, b, c, alpha=2.0, beta=0.5)
        >>> bool(cp.allclose(c, expected, rtol=1e-4, atol=1e-4))
        True
    """
    if c is None:
        raise TypeError("gemm needs c, the array it updates in place; for a new array use "
                        "xgemm.matmul")
    return prepare(a, b, variant, c=c, alpha=alpha, beta=beta, bias=bias,
                   activation=activation, precision=precision, **params)()


def source(variant: str, dtype: str = "float32", *, a_col: bool = False, b_col: bool | None = None,
           bias: bool = False, activation: str = "none", read_c: bool = False,
           out_dtype: str | None = None, **params: int | bool) -> str:
    """The CUDA C that ``variant`` compiles for ``params`` (defaults for the rest) and a
    specialisation: dtype, operand layouts, epilogue, output dtype.

    Boolean flags such as ``aligned`` of ``vectorized`` default to True; ``b_col``
    defaults to the first layout the variant reads.

    Example:
        >>> import xgemm
        >>> src = xgemm.source("coarse2d", BM=128, BN=128, BK=16, TM=8, TN=8)
        >>> "constexpr int BM = 128, BN = 128, BK = 16, TM = 8, TN = 8;" in src
        True
        >>> "Activation::relu" in xgemm.source("tiled", "float16", activation="relu")
        True
    """
    v = get_variant(variant)
    flags = tuple(sorted((f, bool(params.pop(f, True))) for f in v.flags))
    if b_col is None:
        b_col = v.b_layouts[0] == "col"
    spec = Spec(dtype, a_col, b_col, bias, _parse_activation(activation), read_c, flags,
                out_dtype)
    return v.source(v.resolve(params, dtype), spec)
