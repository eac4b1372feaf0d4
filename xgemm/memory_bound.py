"""The lectures' other shared-memory kernels: transpose, reverse, sum and a 3 x 3 stencil.

They are memory-bound: what counts is how close they come to the device's copy
bandwidth (``xgemm bench --family ...``). Each family's variants are declared beside the
GEMM ladder (``xgemm/declarations/memory_bound.py``) and rendered from
``kernels/<family>/``; the checks are the GEMMs' (dtype, GPU arrays, parameters against
the declared rules and the device's limits), all before anything is compiled or
launched; those that need no GPU (GPU arrays, dtype, shapes, parameters) before CuPy is
even imported.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .checks import check_device_limits, dtype_name, layout_of, meta, on_gpu, one_device
from .compile import get_kernel
from .declarations.memory_bound import FAMILY_DEFAULTS
from .frameworks import to_cupy
from .gpu import multiprocessors
from .operands import transpose_launch
from .registry import Variant, get_variant
from .specs import FLOAT_DTYPES, Spec

if TYPE_CHECKING:
    import cupy

#: Each family's variant when none is named (``xgemm.declarations.memory_bound.FAMILY_DEFAULTS``).
DEFAULTS = FAMILY_DEFAULTS


@dataclass
class Step:
    """One kernel launch of a call."""

    variant: Variant
    params: dict[str, int]
    spec: Spec
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: tuple
    shared_mem: int = 0


@dataclass
class Run:
    """A call of a memory-bound family, checked and laid out: calling it zeroes what must
    start at zero, launches its steps in order and returns the result (the same buffer
    each call: a second call overwrites the first's result). ``bytes`` is what
    the operation must move through device memory (each input element read once, each
    output element written once): the numerator of its effective bandwidth."""

    steps: list[Step]
    device: int
    result: Any
    bytes: int
    zero: tuple = ()                      # arrays filled with 0 before the launches
    finish: Callable[[], Any] | None = None  # makes the result after them (a cast)
    copies: tuple[str, ...] = ()          # inputs that had to be copied, by name
    keep: tuple = field(default=(), repr=False)  # arrays the raw pointers point into

    @property
    def variant(self) -> Variant | None:
        return self.steps[0].variant if self.steps else None

    def __call__(self):
        import cupy

        with cupy.cuda.Device(self.device):  # on that GPU's current stream
            for array in self.zero:
                array.fill(0)
            for s in self.steps:
                kernel = get_kernel(s.variant.name, s.params, s.spec, self.device,
                                    s.variant.family)
                kernel(s.grid, s.block, s.args, shared_mem=s.shared_mem)
            return self.finish() if self.finish is not None else self.result


# -- checks --------------------------------------------------------------------------------
def _planner(family: str, rules: Callable[..., None]):
    """A family's planner takes ``x`` checked and as a CuPy array, and runs on x's GPU:
    whatever it allocates (the result, copies, partial sums) lies beside x.

    What needs no GPU is checked first, before CuPy is imported: that x is a GPU array
    (host arrays and non-arrays: TypeError naming the fix) of a dtype the family takes,
    then the family's ``rules(shape, dtype, *args, **kwargs)``, given the planner's own
    arguments: x's shape, the variant and its parameters against the declaration."""

    def check(shape: tuple[int, ...], dtype: Any, args: tuple, kwargs: dict) -> None:
        name = dtype_name(dtype)
        if name not in FLOAT_DTYPES:
            raise TypeError(f"x has dtype {name}; xgemm.{family} takes {', '.join(FLOAT_DTYPES)}")
        rules(tuple(shape), name, *args, **kwargs)

    def wrap(plan: Callable[..., Run]) -> Callable[..., Run]:
        @functools.wraps(plan)
        def on_x_device(x: Any, *args: Any, **kwargs: Any) -> Run:
            found = meta(x, "x")
            if found is not None:
                check(found.shape, found.dtype, args, kwargs)
            import cupy

            x = to_cupy(x)
            if found is None:  # a DLPack object tells its shape and dtype once converted
                check(x.shape, x.dtype, args, kwargs)
            with cupy.cuda.Device(x.device.id):
                return plan(x, *args, **kwargs)

        return on_x_device

    return wrap


def _declared(family: str, variant: str | None, params: dict, dtype: str) -> None:
    """The variant exists and ``params`` keep its declared rules for ``dtype``."""
    get_variant(variant or DEFAULTS[family], family).resolve(params, dtype)


def _two_d(shape: tuple[int, ...]) -> None:
    if len(shape) != 2:
        raise ValueError(f"x must be 2-D, got shape {shape}")


def _resolve(family: str, variant: str | None, params: dict, dtype: str, device: int
             ) -> tuple[Variant, dict[str, int]]:
    v = get_variant(variant or DEFAULTS[family], family)
    p = v.resolve(params, dtype)
    check_device_limits(v, p, dtype, device)
    return v, p


def _rows(x: cupy.ndarray, name: str, copies: list[str]) -> tuple[cupy.ndarray, int]:
    """A 2-D ``x`` read row-major in place (``xgemm.checks.layout_of``), and its leading
    dimension; one with no unit column stride is copied first, and named in ``copies``."""
    import cupy

    layout = layout_of(x.shape, x.strides, x.itemsize, ("row",))
    if layout is None:
        x = cupy.ascontiguousarray(x)
        copies.append(name)
        layout = layout_of(x.shape, x.strides, x.itemsize, ("row",))
    if max(x.shape + (layout.ld,)) >= 2**31:
        raise ValueError(f"{name} has shape {x.shape}: the kernels index with 32-bit ints")
    return x, layout.ld


def _grid(v: Variant, p: dict[str, int], m: int, n: int, device: int):
    return v.launch(p, m, n, multiprocessors(device))


# -- transpose -------------------------------------------------------------------------------
def _transpose_rules(shape: tuple[int, ...], dtype: str, /, variant: str | None = None,
                     **params: int) -> None:
    _two_d(shape)
    _declared("transpose", variant, params, dtype)


@_planner("transpose", _transpose_rules)
def plan_transpose(x: Any, variant: str | None = None, **params: int) -> Run:
    """Check and lay out ``transpose(x)`` without running it (see :func:`transpose`)."""
    import cupy

    copies: list[str] = []
    x, ld = _rows(x, "x", copies)
    device, dtype = x.device.id, x.dtype.name
    v, p = _resolve("transpose", variant, params, dtype, device)
    rows, cols = x.shape
    out = cupy.empty((cols, rows), dtype=x.dtype)
    steps = []
    if x.size:
        spec, grid, block = transpose_launch(v, p, x.data.ptr, rows, cols, ld, dtype, device)
        steps.append(Step(v, p, spec, grid, block,
                          (x, out, np.int32(rows), np.int32(cols), np.int32(ld))))
    return Run(steps, device, out, 2 * x.size * x.itemsize, copies=tuple(copies), keep=(x,))


def transpose(x: Any, variant: str | None = None, **params: int) -> cupy.ndarray:
    """``x.T`` as a new C-ordered array, by one of the transpose variants: "naive",
    "tiled", "tiled_padded" or "vectorized" (the default).

    ``x`` is any 2-D GPU array of float32, float64, float16 or bfloat16 with a unit
    column stride (slices of wider arrays too); any other is copied first, and
    ``plan_transpose(x).copies`` says so.

    >>> import cupy as cp, xgemm
    >>> x = cp.arange(6, dtype=cp.float32).reshape(2, 3)
    >>> bool((xgemm.transpose(x) == x.T).all())
    True
    """
    return plan_transpose(x, variant, **params)()


# -- reverse -----------------------------------------------------------------------------------
def _reverse_rules(shape: tuple[int, ...], dtype: str, /, variant: str | None = None,
                   **params: int) -> None:
    if len(shape) != 1:
        raise ValueError(f"x must be 1-D, got shape {shape}: reverse x.ravel(), or one axis "
                         "with cupy.flip")
    _declared("reverse", variant, params, dtype)


@_planner("reverse", _reverse_rules)
def plan_reverse(x: Any, variant: str | None = None, **params: int) -> Run:
    """Check and lay out ``reverse(x)`` without running it (see :func:`reverse`)."""
    import cupy

    copies = []
    if x.size > 1 and x.strides[0] != x.itemsize:
        x = cupy.ascontiguousarray(x)
        copies.append("x")
    device, dtype = x.device.id, x.dtype.name
    v, p = _resolve("reverse", variant, params, dtype, device)
    out = cupy.empty_like(x)
    steps = []
    if x.size:
        grid, block = _grid(v, p, 1, x.size, device)
        smem = v.shared_memory(p, dtype) if v.dynamic_smem else 0
        steps.append(Step(v, p, Spec(dtype), grid, block, (x, out, np.int64(x.size)), smem))
    return Run(steps, device, out, 2 * x.size * x.itemsize, copies=tuple(copies), keep=(x,))


def reverse(x: Any, variant: str | None = None, **params: int) -> cupy.ndarray:
    """``x[::-1]`` as a new array, by "static_smem" (the default) or "dynamic_smem":
    each block reverses a chunk of BLOCK x ITEMS elements through shared memory, any
    length.

    >>> import cupy as cp, xgemm
    >>> xgemm.reverse(cp.arange(5, dtype=cp.float32)).tolist()
    [4.0, 3.0, 2.0, 1.0, 0.0]
    """
    return plan_reverse(x, variant, **params)()


# -- sum ---------------------------------------------------------------------------------------
def sum_error_bound(n: int, variant: str = "two_pass", dtype: str = "float32",
                    sms: int = 132, **params: int) -> float:
    """A bound on ``|xgemm.sum(x) - sum(x)| / sum(|x|)`` for ``n`` elements: each element
    goes through at most ``depth`` additions in the accumulation type (ITEMS a round in
    a thread, its rounds, log2(BLOCK) in the block, then the passes over the blocks'
    sums), each off by at most u = 2^-24 (float32 accumulators: the 16-bit types too) or
    2^-53 (float64), so the error is at most depth * u / (1 - depth * u) times sum(|x|)
    (the bound for recursive summation: Higham, Accuracy and Stability of Numerical
    Algorithms, chapter 4), plus the final
    rounding to a 16-bit type (2^-11 or 2^-8 of the result) where the input was one.
    ``sms``: the GPU's multiprocessors (two_pass and atomic size their grid by them).
    A worst case: random rounding errors mostly cancel, and typical errors are far smaller.

    >>> sum_error_bound(2**28) < 2e-4  # two_pass on an H100: at most 2017 additions deep
    True
    """
    v = get_variant(variant, "sum")
    p = v.resolve(params, dtype)
    u = 2.0**-53 if dtype == "float64" else 2.0**-24
    per_round = p["BLOCK"] * p["ITEMS"]
    blocks = max(1, -(-n // per_round))
    if "PER_SM" in p:
        blocks = min(blocks, p["PER_SM"] * sms)
    rounds = -(-n // (per_round * blocks))
    depth = p["ITEMS"] * rounds + math.ceil(math.log2(p["BLOCK"])) + 1
    if p.get("ATOMIC"):  # the blocks' atomicAdds are one chain: up to `blocks` deep
        depth += blocks
    else:                    # the passes over the blocks' sums, each a short loop + a tree
        depth += max(1, math.ceil(math.log2(blocks))) * 2
    bound = depth * u / (1 - depth * u)
    return bound + {"float16": 2.0**-11, "bfloat16": 2.0**-8}.get(dtype, 0.0)


def _sum_rules(shape: tuple[int, ...], dtype: str, /, axis: int | None = None,
               variant: str | None = None, **params: int) -> None:
    last = len(shape) - 1
    if axis is not None and axis not in (-1, last):
        raise ValueError(f"axis must be None or the last axis ({last} or -1), got {axis}:"
                         " move the axis last (cupy.moveaxis), or use cupy.sum")
    if not shape and axis is not None:
        raise ValueError("a 0-D array has no axis to sum over: use axis=None")
    segments = 1 if axis is None else math.prod(shape[:-1])
    if segments > 65535:
        raise ValueError(f"{segments} segments to sum: xgemm.sum takes at most 65535 (one "
                         "block row each); sum in pieces, or use cupy.sum")
    _declared("sum", variant, params, dtype)


@_planner("sum", _sum_rules)
def plan_sum(x: Any, axis: int | None = None, variant: str | None = None,
             **params: int) -> Run:
    """Check and lay out ``sum(x, axis)`` without running it (see :func:`sum`)."""
    import cupy

    copies = []
    if not x.flags.c_contiguous:
        x = cupy.ascontiguousarray(x)
        copies.append("x")
    device, dtype = x.device.id, x.dtype.name
    v, p = _resolve("sum", variant, params, dtype, device)
    acc = "float64" if dtype == "float64" else "float32"
    segments, n = (1, x.size) if axis is None else (math.prod(x.shape[:-1]), x.shape[-1])
    shape = () if axis is None else x.shape[:-1]
    sums = cupy.zeros(segments, dtype=acc)
    run = Run([], device, sums, x.size * x.itemsize, copies=tuple(copies), keep=(x,))
    if n == 0 or segments == 0:
        run.finish = lambda: sums.reshape(shape).astype(x.dtype)
        return run
    src, length, spec = x, n, Spec(dtype)
    while True:  # the first pass over x, then passes over the blocks' sums until one is left
        grid, block = _grid(v, p, segments, length, device)
        if run.steps and "PER_SM" in p:
            grid = (1, segments)  # a capped first pass: the second is one looping block
        if p.get("ATOMIC"):
            run.steps.append(Step(v, p, spec, grid, block, (src, sums, np.int64(length),
                                                             np.int64(length))))
            run.zero = (sums,)
            break
        target = sums if grid[0] == 1 else cupy.empty(segments * grid[0], dtype=acc)
        run.steps.append(Step(v, p, spec, grid, block,
                              (src, target, np.int64(length), np.int64(length))))
        run.keep += (target,)
        if grid[0] == 1:
            break
        src, length, spec = target, grid[0], Spec(acc)
    run.finish = lambda: sums.reshape(shape).astype(x.dtype, copy=False)
    return run


def sum(x: Any, axis: int | None = None, variant: str | None = None,  # noqa: A001
        **params: int) -> cupy.ndarray:
    """The sum of ``x``'s elements (``axis=None``), or of each row along its last axis,
    by "interleaved", "sequential", "warp_shuffle", "two_pass" (the default) or
    "atomic"; float32 and the 16-bit types accumulate in float32, float64 in float64.
    :func:`sum_error_bound` bounds the error; "atomic" adds the blocks' sums in an
    order that can vary between runs, the others always in the same one.

    >>> import cupy as cp, xgemm
    >>> float(xgemm.sum(cp.arange(1000, dtype=cp.float32)))
    499500.0
    """
    return plan_sum(x, axis, variant, **params)()


# -- stencil -----------------------------------------------------------------------------------
def _check_weights(shape: tuple[int, ...], dtype: Any, x_dtype: str) -> None:
    if tuple(shape) != (3, 3):
        raise ValueError(f"weights has shape {tuple(shape)}; a 3 x 3 stencil needs (3, 3)")
    if dtype_name(dtype) != x_dtype:
        raise TypeError(f"weights has dtype {dtype_name(dtype)} and x {x_dtype}: convert with "
                        f"weights.astype({x_dtype!r})")


def _stencil_rules(shape: tuple[int, ...], dtype: str, /, weights: Any,
                   variant: str | None = None, **params: int) -> None:
    _two_d(shape)
    # 9 values on the host (an array or a list) are uploaded to x's GPU
    w = meta(weights, "weights") if on_gpu(weights) else np.asarray(weights)
    if w is not None:  # None: DLPack weights, checked once converted
        _check_weights(w.shape, w.dtype, dtype)
    _declared("stencil", variant, params, dtype)


@_planner("stencil", _stencil_rules)
def plan_stencil3x3(x: Any, weights: Any, variant: str | None = None, **params: int) -> Run:
    """Check and lay out ``stencil3x3(x, weights)`` without running it."""
    import cupy

    if on_gpu(weights):
        w = to_cupy(weights)
        one_device(x=x, weights=w)
        _check_weights(w.shape, w.dtype, x.dtype.name)  # DLPack weights tell theirs only now
    else:  # checked by _stencil_rules as NumPy sees them, and uploaded alike
        w = cupy.asarray(weights)
    copies: list[str] = []
    x, ld = _rows(x, "x", copies)
    w = cupy.ascontiguousarray(w)
    device, dtype = x.device.id, x.dtype.name
    v, p = _resolve("stencil", variant, params, dtype, device)
    rows, cols = x.shape
    out = cupy.empty((rows, cols), dtype=x.dtype)
    steps = []
    if x.size:
        grid, block = _grid(v, p, rows, cols, device)
        steps.append(Step(v, p, Spec(dtype), grid, block,
                          (x, out, w, np.int32(rows), np.int32(cols), np.int32(ld))))
    return Run(steps, device, out, 2 * x.size * x.itemsize, copies=tuple(copies), keep=(x, w))


def stencil3x3(x: Any, weights: Any, variant: str | None = None, **params: int
               ) -> cupy.ndarray:
    """The 3 x 3 correlation ``out[r, c] = sum(weights[i, j] * x[r + i - 1, c + j - 1])``
    with zeros outside ``x`` (cupyx.scipy.ndimage.correlate with mode="constant"), same
    shape as ``x``, by "naive" (the default) or "smem_halo". ``weights``: a (3, 3) array
    of x's dtype (a NumPy one is uploaded).

    >>> import cupy as cp, xgemm
    >>> x = cp.ones((4, 5), dtype=cp.float32)
    >>> xgemm.stencil3x3(x, cp.ones((3, 3), dtype=cp.float32))[0].tolist()
    [4.0, 6.0, 6.0, 6.0, 4.0]
    """
    return plan_stencil3x3(x, weights, variant, **params)()


#: Each family's planner, by name: what the benchmark and the tests walk.
PLANNERS = {"transpose": plan_transpose, "reverse": plan_reverse, "sum": plan_sum,
         "stencil": plan_stencil3x3}

__all__ = ["DEFAULTS", "PLANNERS", "Run", "Step", "plan_reverse", "plan_stencil3x3", "plan_sum",
           "plan_transpose", "reverse", "stencil3x3", "sum", "sum_error_bound", "transpose"]
