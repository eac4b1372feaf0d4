"""``xgemm.grouped_matmul``: G products that share N and K but not M, in one launch (a
mixture-of-experts layer: each expert's tokens by that expert's weights), with
``torch.nn.functional.grouped_mm``'s arguments.

- A 2-D (T x K) and B 3-D (G x K x N) with ``offs``, G int32 ends on the GPU: group g is
  A's rows ``offs[g - 1]:offs[g]`` (from 0 for g = 0) times ``B[g]``, into the same rows
  of the (T x N) result. Rows past ``offs[-1]`` come out as zeros. The ends are read on
  the GPU only, so nothing waits for it and a CUDA graph replays the call with other
  group sizes. Each group starts where the largest end before it lies: an end below that
  gives its group no rows, and one past T counts as T.
  Rung 29 (``kernels/gemm/29_wgmma_grouped.cu.j2``), A row-major, B's matrices either way.
- A 2-D (M x T) and B 2-D (T x N) with ``offs`` along T (the weight gradient: A = X^T,
  B = dY): group g sums over tokens ``offs[g - 1]:offs[g]`` into matrix g of the
  (G x M x N) result; a group with no tokens gives zeros. Its groups start as above. Rung 30
  (``kernels/gemm/30_wgmma_grouped_k.cu.j2``), A column-major and B row-major.
- A and B both 3-D, no ``offs``: the batched product, which ``xgemm.matmul`` runs.

Both rungs run on Hopper, on float16 or bfloat16 operands; C is in their dtype.

A signature's plan (the kernel, its launch geometry and sizes) is made once and kept;
later calls look it up and launch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from . import gpu
from .api import through_autograd
from .checks import check_arch, check_device_limits, dtype_name
from .checks.grouped import (
    FP8,
    TMA_ALIGNMENT,
    GroupedShapes,
    Operand,
    check_grouped,
    check_grouped_arrays,
    check_grouped_k,
    check_grouped_scales,
    check_out_dtype,
    grouped_device,
)
from .compile import get_kernel
from .frameworks import pointer, torch_raw_stream
from .kernel_args import Arguments, geometry, packed, remembered
from .launch import empty_map, enqueue, tensor_map
from .plan import PlanCache
from .registry import Variant, get_variant
from .signature import array_key
from .specs import Spec

__all__ = ["grouped_matmul", "grouped_product"]

#: The grouped products' rungs (family "grouped"): groups of A's rows (16-bit, FP8),
#: groups along K.
ROWS, ROWS_FP8, ALONG_K = "wgmma", "wgmma_8bit", "wgmma_k"


@dataclass(frozen=True)
class GroupedPlan:
    """What a grouped call's signature fixes: the kernel, its launch, its sizes packed;
    and the kernel arguments of its recent calls, by their addresses."""

    variant: Variant
    params: dict[str, int]
    shapes: GroupedShapes
    device: int
    launch: tuple       # the function, grid, block and shared memory (kernel_args.geometry)
    sizes: tuple        # M, N, K, leading dimensions, batch strides, alpha, beta; G
    recent_args: dict = field(default_factory=dict, compare=False, repr=False)


def grouped_matmul(a: Any, b: Any, offs: Any = None, *, scale_a: Any = None,
                   scale_b: Any = None, bias: Any = None, out_dtype: Any = None,
                   params: dict[str, int] | None = None) -> Any:
    """``a`` times ``b`` group by group, as ``torch.nn.functional.grouped_mm`` (module text).

    ``a``, ``b`` and ``offs`` are CuPy arrays or PyTorch tensors of one framework, on one
    GPU; the result is of that framework, in A's dtype, made on the current stream.
    PyTorch tensors that require grad (grad mode on), or a call that ``torch.compile``
    traces, go through ``xgemm.torch.grouped_mm``: differentiable in ``a`` and ``b``.
    ``params``: the rung's parameters (``xgemm.get_variant("wgmma", "grouped")``, or
    ``"wgmma_k"`` along K, ``"wgmma_8bit"`` for FP8), for sweeps. ``out_dtype``: None
    (the inputs' dtype) or float32 (the sums unrounded). FP8 groups of rows (PyTorch
    float8 tensors, A row-major, B's matrices K-major) take ``scale_a`` (one, or one a row:
    (T,)) and ``scale_b`` (one a group: (G,), or one a column of each: (G, N)), float32,
    and are stored as bfloat16 (the default), float16 or float32. ``bias`` is not
    supported yet (ValueError).

    Example (a router's 8 experts, their tokens one after another):
        >>> import torch, xgemm
        >>> counts = torch.tensor([300, 0, 212, 1024, 7, 501, 0, 2052])
        >>> x = torch.randn(int(counts.sum()), 2048, device="cuda", dtype=torch.bfloat16)
        >>> w = torch.randn(8, 2048, 768, device="cuda", dtype=torch.bfloat16)
        >>> y = xgemm.grouped_matmul(x, w, offs=counts.cumsum(0).int().cuda())
        >>> y.shape
        torch.Size([4096, 768])
    """
    if bias is not None:
        raise ValueError("grouped_matmul takes no bias yet: add it to the result")
    ndims = (len(a.shape), len(b.shape))
    if offs is None:
        if ndims != (3, 3):
            raise ValueError(
                f"grouped_matmul without offs multiplies 3-D A by 3-D B (one product a group); "
                f"got {ndims[0]}-D A and {ndims[1]}-D B: pass offs, the groups' ends")
        if params:
            raise ValueError("params are the grouped rungs'; without offs the product is "
                             "xgemm.matmul's batched one: call it with its own parameters")
        if scale_a is not None or scale_b is not None:
            raise ValueError("scales are applied to groups given by offs; without offs the "
                             "product is xgemm.matmul's batched one: pass offs (each group's "
                             "end), or scale the result")
        from .api import matmul

        return matmul(a, b, out_dtype=dtype_name(out_dtype))
    if through_autograd(a, b):
        if out_dtype is not None or scale_a is not None or scale_b is not None:
            raise ValueError("grouped_matmul with out_dtype or scales records no gradient "
                             "yet: call it under torch.no_grad(), or on detached tensors")
        from .torch import grouped_mm

        return grouped_mm(a, b, offs, **(params or {}))
    return grouped_product(a, b, offs, params, out_dtype=dtype_name(out_dtype),
                           scale_a=scale_a, scale_b=scale_b)


def grouped_product(a: Any, b: Any, offs: Any, params: dict[str, int] | None = None,
                    out_dtype: str | None = None, scale_a: Any = None, scale_b: Any = None
                    ) -> Any:
    """The grouped product of :func:`grouped_matmul` with ``offs`` given, outside
    autograd: checked and planned once per signature, then looked up and launched.
    ``xgemm.torch``'s operator runs it."""
    key = _signature(a, b, offs, scale_a, scale_b, out_dtype, params)
    found = GROUPED_PLANS.get(key) if key is not None else None
    if found is None:
        kind = check_grouped_arrays(a, b, offs, scale_a, scale_b)
        ops = tuple(_operand(x, kind) for x in (a, b, offs))
        scales = tuple(None if x is None else _operand(x, kind) for x in (scale_a, scale_b))
        device = grouped_device(a, b, offs, kind, scale_a, scale_b)
        found = (_plan(*ops, *scales, (len(a.shape), len(b.shape)) == (2, 2), out_dtype,
                       device, tuple(sorted((params or {}).items()))), kind)
        if key is not None:
            GROUPED_PLANS.put(key, found)
    return _run(found[0], a, b, offs, found[1], scale_a, scale_b)


#: Grouped plans (with the arrays' framework) by signature: a call whose signature was
#: planned before is looked up and launched, with no check repeated, as ``matmul``'s.
GROUPED_PLANS = PlanCache(512)


def _signature(a: Any, b: Any, offs: Any, scale_a: Any, scale_b: Any, out_dtype: str | None,
               params: dict[str, int] | None) -> tuple | None:
    """What a grouped call's plan depends on: each array's ``xgemm.signature.array_key``
    (shape, strides, dtype, its address's alignment, GPU), the output's dtype and the
    parameters; None where an array is of neither CuPy nor PyTorch."""
    keys = tuple(None if x is None else array_key(x) for x in (a, b, offs, scale_a, scale_b))
    if None in keys[:3] or (scale_a is not None and keys[3] is None) or (
            scale_b is not None and keys[4] is None):
        return None
    return (*keys, out_dtype, tuple(sorted(params.items())) if params else ())


def _operand(x: Any, kind: str) -> Operand:
    """What the checks read of ``x``: its shape, byte strides, dtype name and address."""
    if kind == "torch":
        strides = tuple(s * x.element_size() for s in x.stride())
    else:
        strides = tuple(x.strides)
    # the address past a 16-byte boundary: all a plan depends on (TMA's alignment)
    return Operand(tuple(x.shape), strides, dtype_name(x.dtype), pointer(x) % TMA_ALIGNMENT)


def _plan(a: Operand, b: Operand, ends: Operand, scale_a: Operand | None,
          scale_b: Operand | None, along_k: bool, out_dtype: str | None, device: int,
          params: tuple[tuple[str, int], ...]) -> GroupedPlan:
    """Check a signature and plan it (the operands' addresses count only by how far past
    a 16-byte boundary they lie)."""
    shapes = (check_grouped_k if along_k else check_grouped)(a, b, ends)
    scalings = check_grouped_scales(scale_a, scale_b, shapes)
    shapes = dataclasses.replace(shapes, out_dtype=check_out_dtype(out_dtype, shapes.dtype),
                                 scale_a=scalings[0], scale_b=scalings[1])
    v = get_variant(ALONG_K if along_k else ROWS_FP8 if shapes.dtype in FP8 else ROWS,
                    "grouped")
    p = v.resolve(dict(params), shapes.dtype)
    if along_k and p["TMA_STORE"] == 1 and (shapes.out_dtype or shapes.n * 2 % TMA_ALIGNMENT):
        # C's rows TMA cannot write (staged and sent a row at a time), or float32 C (not
        # staged: from registers, and the ring keeps the staging area's room)
        p = v.resolve({**p, "TMA_STORE": 0 if shapes.out_dtype else 2}, shapes.dtype)
    check_arch(v, shapes.dtype, device)
    smem = check_device_limits(v, p, shapes.dtype, device)
    spec = Spec(shapes.dtype, shapes.a.col, shapes.b.col, out_dtype=shapes.out_dtype,
                scale_a=shapes.scale_a, scale_b=shapes.scale_b)
    grid, block = v.launch(p, shapes.m, shapes.n, gpu.multiprocessors(device))
    import cupy

    with cupy.cuda.Device(device):  # compiled (or found) and loaded on the call's GPU
        function = get_kernel(v.name, p, spec, device, family="grouped").kernel
    launch = geometry(function, grid, block, smem)
    c_matrix = shapes.m * shapes.n if along_k else 0  # elements from one C to the next
    sizes = packed("iiiiiiqqqffi", (
        shapes.m, shapes.n, shapes.k, shapes.a.ld, shapes.b.ld, shapes.n, 0,
        shapes.b.batch_stride, c_matrix, 1.0, 0.0, shapes.groups))
    return GroupedPlan(v, p, shapes, device, launch, sizes)


def _map(plan: GroupedPlan, operand: str, ptr: int, col: bool, rows: int, cols: int, ld: int,
         count: int = 1, matrix: int = 0):
    """The tensor map of ``operand`` (encoded once per address, ``xgemm.launch.tensor_map``):
    ``count`` matrices of rows x cols, ``matrix`` elements apart, ``ld`` apart a line, in
    boxes of the rung's tile (a K-major operand: box rows of 128 bytes; an MN-major one:
    boxes 128 bytes wide, 128 bytes of K deep; C: a consumer's rows)."""
    item = plan.shapes.itemsize if operand != "c" else 2  # (C: the inputs' 16-bit dtype)
    row = 128 // item  # values in a 128-byte swizzled row
    k_contiguous = {"a": not col, "b": col, "c": True}[operand]
    inner, outer = (rows, cols) if col else (cols, rows)
    box = plan.variant.tma_box(operand, plan.params)
    dtype = "uint8" if item == 1 else plan.shapes.dtype  # (TMA moves FP8's bytes)
    return tensor_map(ptr, dtype, (inner, outer, count),
                      (ld * item, (matrix if count > 1 else ld * outer) * item),
                      (row, box if k_contiguous else row, 1))


def _run(plan: GroupedPlan, a: Any, b: Any, offs: Any, kind: str, scale_a: Any = None,
         scale_b: Any = None) -> Any:
    """Make the result and queue the launch on the current stream of ``kind``, on the
    plan's GPU."""
    import cupy

    if cupy.cuda.runtime.getDevice() != plan.device:
        with cupy.cuda.Device(plan.device):
            return _run(plan, a, b, offs, kind, scale_a, scale_b)
    s = plan.shapes
    shape = (s.groups, s.m, s.n) if s.along_k else (s.m, s.n)
    # nothing to multiply: zeros (no tokens, or no groups), or no result at all
    empty = 0 in (s.m, s.n, s.k, s.groups)
    if kind == "torch":
        import torch

        dtype = getattr(torch, s.out_dtype) if s.out_dtype else (
            torch.bfloat16 if s.dtype in FP8 else a.dtype)
        result = (torch.zeros if empty else torch.empty)(shape, dtype=dtype, device=a.device)
        stream = torch_raw_stream()(plan.device)
    else:
        dtype = a.dtype if s.out_dtype is None else s.out_dtype
        result = (cupy.zeros if empty else cupy.empty)(shape, dtype)
        stream = cupy.cuda.get_current_stream().ptr
    if empty:
        return result
    # FP8's scales after the maps (null where there are none)
    scales = tuple(0 if x is None else pointer(x) for x in (scale_a, scale_b)) \
        if s.dtype in FP8 else ()
    ptrs = (pointer(a), pointer(b), pointer(result), pointer(offs), *scales)
    # built once per set of addresses: a layer's calls reuse its weights', and PyTorch's
    # pool hands its activations' and results' blocks back from step to step
    enqueue(plan.launch, remembered(plan.recent_args, ptrs, lambda: _arguments(plan, ptrs)),
            stream)
    return result


def _arguments(plan: GroupedPlan, ptrs: tuple[int, ...]) -> Arguments:
    """The kernel's arguments at A's, B's, C's and the ends' addresses (and the FP8
    scales' after them): the plan's sizes, then the variant's extra arguments by name
    (``Variant.extra_args``): the operands' tensor maps, the scales, the ends and the
    groups' count."""
    s = plan.shapes
    ptr_a, ptr_b, ptr_c, ptr_ends, *scales = ptrs
    extras = {
        "tensor_map_a": _map(plan, "a", ptr_a, s.a.col, s.m, s.k, s.a.ld),
        "tensor_map_b": _map(plan, "b", ptr_b, s.b.col, s.k, s.n, s.b.ld,
                             s.groups if not s.along_k else 1, s.b.batch_stride),
        # C by TMA stores: along K, in the inputs' dtype; else the kernel stores it
        "tensor_map_c": _map(plan, "c", ptr_c, False, s.m, s.n, s.n, s.groups, s.m * s.n)
        if s.along_k and s.out_dtype is None and plan.variant.tma_box("c", plan.params)
        else empty_map(),
        **dict(zip(("scale_a", "scale_b"), scales, strict=False)),
        "group_ends": ptr_ends, "groups": plan.sizes[11]}
    return Arguments([ptr_a, ptr_b, ptr_c, *plan.sizes[:9], 0, *plan.sizes[9:11],
                      *(extras[name] for name in plan.variant.extra_args)])
