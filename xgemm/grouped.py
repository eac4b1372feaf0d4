"""``xgemm.grouped_matmul``: G products that share N and K but not M, in one launch (a
mixture-of-experts layer: each expert's tokens by that expert's weights), with
``torch.nn.functional.grouped_mm``'s arguments.

- A 2-D (T x K) and B 3-D (G x K x N) with ``offs``, G int32 ends on the GPU: group g is
  A's rows ``offs[g - 1]:offs[g]`` (from 0 for g = 0) times ``B[g]``, into the same rows
  of the (T x N) result. Rows past ``offs[-1]`` come out as zeros. The ends are read on
  the GPU only, so nothing waits for it and a CUDA graph replays the call with other
  group sizes. Each group starts where the largest end before it lies: an end below that
  gives its group no rows, and one past T counts as T.
  Rung 29 (``kernels/gemm/29_wgmma_grouped.cu.j2``) on Hopper, 16-bit operands.
- A and B both 3-D, no ``offs``: the batched product, which ``xgemm.matmul`` runs.

A signature's plan (the kernel, its launch geometry and sizes) is made once and kept;
later calls look it up and launch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from . import gpu
from .checks import check_arch, check_device_limits, dtype_name, on_gpu
from .checks.grouped import TMA_ALIGNMENT, GroupedShapes, Operand, check_grouped
from .compile import get_kernel
from .frameworks import framework, pointer, torch_raw_stream
from .kernel_args import Arguments, geometry, packed
from .launch import empty_map, enqueue, tensor_map
from .registry import Variant, get_variant
from .specs import Spec

__all__ = ["grouped_matmul"]

#: The grouped product's rung (family "grouped").
GROUPED_VARIANT = "wgmma"


@dataclass(frozen=True)
class GroupedPlan:
    """What a grouped call's signature fixes: the kernel, its launch, its sizes packed."""

    variant: Variant
    params: dict[str, int]
    shapes: GroupedShapes
    device: int
    launch: tuple       # the function, grid, block and shared memory (kernel_args.geometry)
    sizes: tuple        # T, N, K, leading dimensions, batch strides, alpha, beta; G


def grouped_matmul(a: Any, b: Any, offs: Any = None, *, bias: Any = None,
                   out_dtype: Any = None, params: dict[str, int] | None = None) -> Any:
    """``a`` times ``b`` group by group, as ``torch.nn.functional.grouped_mm`` (module text).

    ``a``, ``b`` and ``offs`` are CuPy arrays or PyTorch tensors of one framework, on one
    GPU; the result is of that framework, in A's dtype, made on the current stream.
    ``params``: the rung's parameters (``xgemm.get_variant("wgmma", "grouped")``), for
    sweeps. ``bias`` and ``out_dtype`` are not supported yet (ValueError), nor a 2-D B
    (the weight gradient's groups along K; NotImplementedError).

    Example (a router's 8 experts, their tokens one after another):
        >>> import torch, xgemm
        >>> counts = torch.tensor([300, 0, 212, 1024, 7, 501, 0, 2052])
        >>> x = torch.randn(int(counts.sum()), 2048, device="cuda", dtype=torch.bfloat16)
        >>> w = torch.randn(8, 2048, 768, device="cuda", dtype=torch.bfloat16)
        >>> y = xgemm.grouped_matmul(x, w, offs=counts.cumsum(0).int().cuda())
        >>> y.shape
        torch.Size([4096, 768])
    """
    if bias is not None or out_dtype is not None:
        raise ValueError("grouped_matmul takes no bias or out_dtype yet: add the bias to the "
                         "result, or convert it (y.to(dtype))")
    ndims = (len(a.shape), len(b.shape))
    if offs is None:
        if ndims != (3, 3):
            raise ValueError(
                f"grouped_matmul without offs multiplies 3-D A by 3-D B (one product a group); "
                f"got {ndims[0]}-D A and {ndims[1]}-D B: pass offs, the groups' ends")
        from .api import matmul

        return matmul(a, b, params=params)
    if ndims == (2, 2):
        raise NotImplementedError(
            "grouped_matmul of 2-D A by 2-D B (groups along K: the weight gradient) is not "
            "supported yet: multiply each group with xgemm.matmul")
    for name, x in (("a", a), ("b", b), ("offs", offs)):
        if not on_gpu(x):
            raise TypeError(f"{name} is not a GPU array: xgemm multiplies CuPy arrays or CUDA "
                            "PyTorch tensors")
    kinds = {framework(type(x)) for x in (a, b, offs)}
    if len(kinds) != 1 or None in kinds:
        raise TypeError("a, b and offs must all be CuPy arrays or all PyTorch tensors")
    kind = kinds.pop()
    if kind == "torch" and any(getattr(x, "requires_grad", False) for x in (a, b)):
        raise ValueError("grouped_matmul records no gradient yet: call it under "
                         "torch.no_grad() or on detached tensors")
    ops = tuple(_operand(x, kind) for x in (a, b, offs))
    device = _device(a, b, offs, kind)
    plan = _plan(*ops, device, tuple(sorted((params or {}).items())))
    return _run(plan, a, b, offs, kind)


def _operand(x: Any, kind: str) -> Operand:
    """What the checks read of ``x``: its shape, byte strides, dtype name and address."""
    if kind == "torch":
        strides = tuple(s * x.element_size() for s in x.stride())
    else:
        strides = tuple(x.strides)
    # the address past a 16-byte boundary: all a plan depends on (TMA's alignment)
    return Operand(tuple(x.shape), strides, dtype_name(x.dtype), pointer(x) % TMA_ALIGNMENT)


def _device(a: Any, b: Any, offs: Any, kind: str) -> int:
    """The GPU all three lie on; ValueError where they differ."""
    ids = {(x.device.index if kind == "torch" else x.device.id) for x in (a, b, offs)}
    if len(ids) != 1:
        raise ValueError(f"a, b and offs lie on different GPUs ({sorted(ids)}): move them "
                         "onto one")
    return ids.pop()


@functools.lru_cache(maxsize=512)
def _plan(a: Operand, b: Operand, ends: Operand, device: int,
          params: tuple[tuple[str, int], ...]) -> GroupedPlan:
    """Check a signature and plan it, once (the operands' addresses count only by how far
    past a 16-byte boundary they lie)."""
    shapes = check_grouped(a, b, ends)
    v = get_variant(GROUPED_VARIANT, "grouped")
    p = v.resolve(dict(params), shapes.dtype)
    check_arch(v, shapes.dtype, device)
    smem = check_device_limits(v, p, shapes.dtype, device)
    spec = Spec(shapes.dtype, shapes.a.col, shapes.b.col)
    grid, block = v.launch(p, shapes.rows, shapes.n, gpu.multiprocessors(device))
    import cupy

    with cupy.cuda.Device(device):  # compiled (or found) and loaded on the call's GPU
        function = get_kernel(v.name, p, spec, device, family="grouped").kernel
    launch = geometry(function, grid, block, smem)
    sizes = packed("iiiiiiqqqffi", (
        shapes.rows, shapes.n, shapes.k, shapes.a.ld, shapes.b.ld, shapes.n, 0,
        shapes.b.batch_stride, 0, 1.0, 0.0, shapes.groups))
    return GroupedPlan(v, p, shapes, device, launch, sizes)


def _maps(plan: GroupedPlan, ptr_a: int, ptr_b: int) -> tuple:
    """A's and B's tensor maps (encoded once per address, ``xgemm.launch.tensor_map``):
    A as one T x K matrix, B as G matrices of K x N, each in boxes of the rung's tile."""
    s, item = plan.shapes, 2
    row = 128 // item  # values in a 128-byte swizzled row
    maps = []
    for ptr, layout, rows, cols, count, box, k_contiguous in (
            (ptr_a, s.a, s.rows, s.k, 1, plan.variant.tma_box("a", plan.params), not s.a.col),
            (ptr_b, s.b, s.k, s.n, s.groups, plan.variant.tma_box("b", plan.params), s.b.col)):
        inner, outer = (rows, cols) if layout.col else (cols, rows)
        stride = layout.batch_stride if count > 1 else layout.ld * outer
        maps.append(tensor_map(ptr, s.dtype, (inner, outer, count),
                               (layout.ld * item, stride * item),
                               (row, box if k_contiguous else row, 1)))
    return tuple(maps)


def _run(plan: GroupedPlan, a: Any, b: Any, offs: Any, kind: str) -> Any:
    """Make the result and queue the launch on the current stream of ``kind``, on the
    plan's GPU."""
    import cupy

    if cupy.cuda.runtime.getDevice() != plan.device:
        with cupy.cuda.Device(plan.device):
            return _run(plan, a, b, offs, kind)
    s = plan.shapes
    empty = 0 in (s.rows, s.n, s.k, s.groups)  # nothing to multiply: zeros, if any rows
    if kind == "torch":
        import torch

        result = (torch.zeros if empty else torch.empty)((s.rows, s.n), dtype=a.dtype,
                                                         device=a.device)
        stream = torch_raw_stream()(plan.device)
    else:
        result = (cupy.zeros if empty else cupy.empty)((s.rows, s.n), a.dtype)
        stream = cupy.cuda.get_current_stream().ptr
    if empty:
        return result
    ptr_a, ptr_b = pointer(a), pointer(b)
    map_a, map_b = _maps(plan, ptr_a, ptr_b)
    args = Arguments([ptr_a, ptr_b, pointer(result), *plan.sizes[:9], 0, *plan.sizes[9:11],
                      map_a, map_b, empty_map(), pointer(offs), plan.sizes[11]])
    enqueue(plan.launch, args, stream)
    return result

