"""A memory-bound family's call, checked (``checks``) and laid out as a :class:`Run`: its
launches with their arguments, the result they write, the bytes they must move. Each
``plan_*`` does everything but launch; calling its run launches.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..checks import check_device_limits, layout_of, meta, on_gpu, one_device
from ..compile import get_kernel
from ..frameworks import to_cupy
from ..gpu import multiprocessors
from ..operands import transpose_launch
from ..registry import Variant, get_variant
from ..specs import Spec
from .checks import (
    check_dtype,
    check_weights,
    reverse_rules,
    stencil_rules,
    sum_rules,
    transpose_rules,
)
from .declarations import FAMILY_DEFAULTS

if TYPE_CHECKING:
    import cupy


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
    kernel: Any = field(default=None, repr=False)  # compiled (or found) at the first call


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
                if s.kernel is None:  # a call again finds it here, not by hashing the spec
                    s.kernel = get_kernel(s.variant.name, s.params, s.spec, self.device,
                                          s.variant.family)
                s.kernel(s.grid, s.block, s.args, shared_mem=s.shared_mem)
            return self.finish() if self.finish is not None else self.result


def _planner(family: str, rules: Callable[..., None]):
    """A family's planner takes ``x`` checked and as a CuPy array, and runs on x's GPU:
    whatever it allocates (the result, copies, partial sums) lies beside x.

    What needs no GPU is checked first, before CuPy is imported: that x is a GPU array
    (host arrays and non-arrays: TypeError naming the fix) of a dtype the family takes,
    then the family's ``rules(shape, dtype, *args, **kwargs)``, given the planner's own
    arguments: x's shape, the variant and its parameters against the declaration."""

    def check(shape: tuple[int, ...], dtype: Any, args: tuple, kwargs: dict) -> None:
        rules(tuple(shape), check_dtype(family, dtype), *args, **kwargs)

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


def _resolve(family: str, variant: str | None, params: dict, dtype: str, device: int
             ) -> tuple[Variant, dict[str, int]]:
    """The variant and its parameters, within ``device``'s limits."""
    v = get_variant(variant or FAMILY_DEFAULTS[family], family)
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
    """The declared grid and block of an input of ``m`` x ``n`` on ``device``."""
    return v.launch(p, m, n, multiprocessors(device))


@_planner("transpose", transpose_rules)
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


@_planner("reverse", reverse_rules)
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


@_planner("sum", sum_rules)
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


@_planner("stencil", stencil_rules)
def plan_stencil3x3(x: Any, weights: Any, variant: str | None = None, **params: int) -> Run:
    """Check and lay out ``stencil3x3(x, weights)`` without running it."""
    import cupy

    if on_gpu(weights):
        w = to_cupy(weights)
        one_device(x=x, weights=w)
        check_weights(w.shape, w.dtype, x.dtype.name)  # DLPack weights tell theirs only now
    else:  # checked by stencil_rules as NumPy sees them, and uploaded alike
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


#: Each family's planner, by name: what the benchmark and the tests walk.
PLANNERS = {"transpose": plan_transpose, "reverse": plan_reverse, "sum": plan_sum,
            "stencil": plan_stencil3x3}
