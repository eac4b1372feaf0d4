"""``xgemm.matmul``, ``xgemm.gemm``, ``xgemm.prepare`` and ``xgemm.source``.

The semantics are numpy.matmul's (1-D operands, broadcast batch dimensions, ``out=``)
plus BLAS's ``C = alpha * A @ B + beta * C`` and a fused epilogue (bias, activation).
A call is a lookup and a launch: the first call with a signature checks everything
(``xgemm.checks``) and plans the launch (``xgemm.plan``), later ones with the same
signature find the plan and launch it (``xgemm.launch``).
"""

from __future__ import annotations

import sys
from typing import Any

from . import autotune
from .checks import AUTO, TUNE, Scales, check_factor, check_scalar, parse_activation, split_scales
from .launch import run
from .plan import PLANS, Plan, build
from .registry import get_variant
from .signature import Call, call_key
from .specs import Spec

#: The variant ``matmul`` uses when none is named: "auto", the tuned or ruled choice.
DEFAULT_VARIANT = AUTO

__all__ = ["AUTO", "DEFAULT_VARIANT", "TUNE", "Launch", "gemm", "matmul", "prepare", "product",
           "source"]


def _planned(a: Any, b: Any, variant: str, target: Any, target_name: str, bias: Any,
             activation: str | None, precision: str | None, out_dtype: str | None,
             alpha: float, beta: float, params: dict[str, int], formats: Any = None,
             scales: Scales | None = None) -> tuple[Plan, tuple]:
    """The plan of this call (one lookup), or a new one, checked and remembered; and the
    call's arrays as a launch takes them (a, b, target, bias, scale_a, scale_b)."""
    key = call_key(a, b, target, target_name, bias, variant, params, activation, precision,
                   out_dtype, target_name == "c" and beta != 0.0, formats, scales)
    plan = PLANS.get(key) if key is not None else None
    if plan is not None:
        if scales is not None or alpha != 1.0:  # what the key does not hold
            check_factor(plan.spec.dtype, plan.spec.c_dtype, alpha, scales)
        return plan, (a, b, target, bias, *((scales.a, scales.b) if scales else (None, None)))
    return _new_plan(key, a, b, Call(variant, target, target_name, bias, activation,
                                     precision, out_dtype, alpha, beta, params, formats,
                                     scales))


def _new_plan(key: tuple | None, a: Any, b: Any, call: Call) -> tuple[Plan, tuple]:
    """:func:`_planned` for a call whose signature ``key`` found no plan: check and plan
    it, and remember the plan."""
    if call.variant == TUNE or (call.variant == AUTO and autotune.enabled()):
        plan, arrays = autotune.build_tuned(a, b, call)
    else:
        plan, arrays = build(a, b, call)
    if key is None:  # an array of neither framework, now converted to CuPy
        scales = call.scales
        converted = Scales(scales.factor, *arrays[4:]) if scales else None
        key = call_key(*arrays[:3], call.target_name, arrays[3], call.variant, call.params,
                       call.activation, call.precision, call.out_dtype, plan.read_c,
                       call.formats, converted)
    if key is not None:
        PLANS.put(key, plan)
    return plan, arrays


def _scales(scale_a: Any, scale_b: Any, formats: Any) -> Scales | None:
    """The call's scales, or None where it names none and no format (a float product: its
    plan's signature then needs nothing more)."""
    if scale_a is None and scale_b is None and formats is None:
        return None
    return split_scales(scale_a, scale_b)


def matmul(a: Any, b: Any, variant: str = DEFAULT_VARIANT, out: Any = None,
           *, bias: Any = None, activation: str | None = None, precision: str | None = None,
           out_dtype: str | None = None, scale_a: Any = None, scale_b: Any = None,
           formats: Any = None, **params: int) -> Any:
    """``a @ b`` with numpy.matmul's semantics, computed by one of xgemm's kernels, with an
    optional fused epilogue: ``activation(a @ b + bias)``.

    Args:
        a, b: CuPy arrays, or any GPU arrays with ``__cuda_array_interface__`` or
            ``__dlpack__`` (PyTorch CUDA tensors), of one dtype: float32, float64,
            float16 or bfloat16 (the 16-bit types accumulate in float32). 1-D operands
            and broadcast batch dimensions follow numpy.matmul; a batch runs in one launch.
        variant: a name from :func:`xgemm.variants`, or "auto" (the default): the variant
            and parameters that ``xgemm.tune`` (or autotuning) found fastest for this GPU,
            dtype and a shape like this one, else the measured rules' pick
            (:func:`xgemm.choice.heuristic`), replaced by the cost model's cheapest
            candidate (``xgemm.cost``) of those it prices at least 10% cheaper (30% for
            a batch); or
            "tune": auto, but the first call with a shape the tuning file does not hold
            times auto's contenders on its operands and remembers the fastest there
            (``xgemm.autotune``; ``XGEMM_AUTOTUNE=1`` makes every "auto" call do so).
        out: optional CuPy array or PyTorch tensor of the result's shape and dtype,
            written in place (an ``out`` that overlaps ``a`` or ``b`` is written through
            a temporary). For 16-bit inputs a float32 ``out`` takes the float32 sums
            unrounded.
        bias: optional 1-D array of length N, added to every row of the product.
        activation: None, "relu", "gelu" (the tanh form) or "silu", applied last.
        precision: None (exact arithmetic, the default) or "tf32": float32 inputs may
            then run on the tensor cores as TF32 (mantissas truncated to 10 bits, float32
            sums; ``auto`` takes ``wgmma_tf32`` on sm_90 and ``mma_tf32`` on other
            GPUs from sm_80, copying a column-major a or a row-major b of a single
            product into the K-major layout they read first, and the exact rungs for
            a batch that is not K-major). Naming a TF32 variant asks for it too.
            "tf32x3": float32's accuracy from three TF32 products of each value's big
            and small parts (``wgmma_tf32x3_parts`` on sm_90 where its 128 x 128 tiles
            fill the SMs, C has 384 rows and columns or more and K >= 256; the exact
            rungs elsewhere); docs/semantics.md gives its error model.
        out_dtype: None (the inputs' dtype) or, for float16 and bfloat16 inputs,
            "float32": the result (and ``bias``) in float32, the sums unrounded. For
            8-bit inputs (below): "bfloat16" (FP8's default), "float16", "float32", or
            "int32" (int8's default: the exact sums, with no epilogue).
        scale_a, scale_b: 8-bit inputs' quantisation scales, applied before ``bias`` and
            ``activation``: ``(scale_a * scale_b) * (a @ b)`` with a number (folded into
            the call's alpha), a float32 GPU scalar, or a float32 GPU vector, one per row
            of a (shape (M,) or (M, 1)) or per column of b ((N,) or (1, N)), shared by a
            batch.
        formats: what 8-bit bytes hold, where the array's dtype does not say: for CuPy
            uint8 arrays of FP8 values, "float8_e4m3fn" or "float8_e5m2", or a pair (a's,
            b's; e4m3 and e5m2 mix). PyTorch float8 tensors (``torch.float8_e4m3fn``,
            ``torch.float8_e5m2``) and int8 arrays need none. 8-bit products run on
            ``wgmma_8bit`` (sm_90), int8 ones elsewhere from sm_80 and small ones on
            ``mma_int8``, and few rows or columns over a long K on ``skinny``; all read a
            row-major and b column-major (``w.T`` of a weight ``w`` stored N x K) in
            place, and copy other layouts first (``prepare(...).copies``).
        **params: the variant's tile parameters (``tile=16``, ``BM=64``...); those left
            out take the variant's defaults.

    Returns:
        The product, in the framework of ``a``: a CuPy array for CuPy inputs, a PyTorch
        tensor for PyTorch inputs (made by PyTorch's allocator, no copy); ``out`` itself
        when given.

    Layouts: every operand with a unit stride in one of its last two dimensions (C- or
    F-ordered, transposed views ``w.T``, slices of larger arrays) is read in place, by
    a kernel specialised for its layout. Only operands with no unit stride there (a step
    slice, negative strides), or whose batch dimensions no single stride can walk, are
    copied once; ``prepare(...).copies`` names them. For large exact float32 products
    ``auto`` also copies a row-major ``a`` or a column-major ``b`` (such as ``w.T``) into
    the layout its kernel reads fastest, by xgemm's transpose kernel, where that measured
    faster (``Variant.transpose_first``); a variant named in the call reads them in place.

    Devices and streams: the product runs on the GPU the arrays are on, whichever is
    current, and on the current stream of the inputs' framework there: CuPy's for CuPy
    arrays, PyTorch's (``torch.cuda.current_stream``) for PyTorch tensors, so it is
    ordered with the work around it and can be captured in a CUDA graph. Nothing in a
    call waits for the GPU or copies between host and device. Arrays on two GPUs are
    refused with a ValueError naming each one's GPU.

    PyTorch: where a tensor requires grad (and grad mode is on), under
    ``torch.compile``, or inside forward-mode AD, the call goes through
    ``xgemm.torch.matmul``, a PyTorch operator with a backward made of xgemm's products
    (and which refuses a dual tensor's tangent). It takes no ``out``, ``out_dtype`` or 8-bit
    scales: with those, a tensor that requires grad is refused (ValueError), and so is a
    dual tensor (NotImplementedError), rather than losing its derivative.

    Cost: the first call with a signature (shapes, strides, dtypes, address alignment,
    GPU, variant, epilogue, precision, ``out``) checks and plans; later calls look the
    plan up and launch (``xgemm.plan.PLANS``).

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
    if out is None and out_dtype is None and scale_a is None and scale_b is None \
            and formats is None:
        if through_autograd(a, b, bias):
            from . import torch as xgemm_torch  # (needs PyTorch: a is a PyTorch tensor)

            return xgemm_torch.matmul(a, b, bias=bias, activation=activation,
                                      variant=variant, precision=precision, **params)
    elif _differentiated(a, b, bias):
        raise ValueError(
            "xgemm.matmul with out, out_dtype, scale_a, scale_b or formats records no "
            "gradient, and a PyTorch operand requires grad: drop those arguments (the "
            "differentiable path takes none of them), or call it under torch.no_grad() "
            "or on detached tensors")
    if scale_a is None and scale_b is None and formats is None:  # most calls: no keywords
        return _product(a, b, variant, out, bias, activation, precision, out_dtype, params)
    return _scaled_product(a, b, variant, out, bias, activation, precision, out_dtype, scale_a,
                           scale_b, formats, params)


#: PyTorch's Tensor type, its two mode queries and its forward-mode AD module, looked up
#: once PyTorch is imported
_torch_hooks: tuple[Any, Any, Any, Any] | None = None


def _hooks() -> tuple[Any, Any, Any, Any] | None:
    """PyTorch's Tensor type, its two mode queries (compiling, grad mode on) and
    ``torch.autograd.forward_ad`` (whose ``_current_level`` is -1 outside a dual level),
    looked up once PyTorch is imported; None before."""
    global _torch_hooks
    if _torch_hooks is None and (torch := sys.modules.get("torch")) is not None:
        from torch.autograd import forward_ad

        _torch_hooks = (torch.Tensor, torch.compiler.is_compiling, torch.is_grad_enabled,
                        forward_ad)
    return _torch_hooks


def through_autograd(a: Any, b: Any, bias: Any = None) -> bool:
    """Whether a product the PyTorch operators can express (no ``out``, ``out_dtype`` or
    8-bit scales: the caller asks first) goes through them (``xgemm.torch``): PyTorch
    tensors that record a graph (:func:`_recording`), traced by ``torch.compile``, or
    inside forward-mode AD (where the operators refuse a tangent). ``matmul`` and
    ``grouped_matmul`` ask on every call, so in few steps: a CuPy call pays a lookup.

    >>> import numpy as np
    >>> through_autograd(np.ones((2, 2)), np.ones((2, 2)))  # not a PyTorch tensor
    False
    """
    hooks = _torch_hooks or _hooks()
    if hooks is None or not isinstance(a, hooks[0]):
        return False
    # _recording's test written out: a generator a call costs half a microsecond here
    return hooks[1]() or hooks[3]._current_level >= 0 or hooks[2]() and (
        a.requires_grad or getattr(b, "requires_grad", False)
        or bias is not None and getattr(bias, "requires_grad", False))


def _recording(a: Any, *others: Any) -> bool:
    """Whether autograd would record a product of these (``a`` a PyTorch tensor, grad mode
    on, and one of them requires grad: a product outside the operator would then leave
    no gradient). A CuPy call pays one type test."""
    hooks = _torch_hooks or _hooks()
    if hooks is None or not isinstance(a, hooks[0]) or not hooks[2]():
        return False
    return a.requires_grad or any(getattr(x, "requires_grad", False) for x in others)


def _differentiated(a: Any, b: Any, bias: Any) -> bool:
    """For a call the operators cannot express (``out``, ``out_dtype``, 8-bit scales):
    NotImplementedError where forward-mode AD is on and one of the arrays is a dual tensor
    (:func:`_refuse_tangents`); else whether autograd would record the product
    (:func:`_recording`), which the caller refuses. One lookup of PyTorch's hooks for
    both: a CuPy call pays an attribute read and a type test.

    >>> import numpy as np
    >>> _differentiated(np.ones((2, 2)), np.ones((2, 2)), None)
    False
    """
    hooks = _torch_hooks or _hooks()
    if hooks is None:
        return False
    if hooks[3]._current_level >= 0:  # any of them may be dual, a's framework aside
        _refuse_tangents(a, b, bias)
    return isinstance(a, hooks[0]) and hooks[2]() and (
        a.requires_grad or getattr(b, "requires_grad", False)
        or bias is not None and getattr(bias, "requires_grad", False))


def _refuse_tangents(*arrays: Any) -> None:
    """NotImplementedError where forward-mode AD is on and one of these is a dual tensor,
    whose tangent a product outside the operator would drop."""
    hooks = _torch_hooks or _hooks()
    if hooks is None or hooks[3]._current_level < 0:
        return
    forward_ad = hooks[3]
    if any(isinstance(x, hooks[0]) and forward_ad.unpack_dual(x).tangent is not None
           for x in arrays):
        raise NotImplementedError(
            "xgemm has no forward-mode derivative (jvp) of a product with out, out_dtype, "
            "scales, formats or an in-place C, so a dual tensor's tangent would be dropped: "
            "use reverse mode, or torch.matmul for forward-mode AD")


def product(a: Any, b: Any, variant: str = DEFAULT_VARIANT, out: Any = None,
            *, bias: Any = None, activation: str | None = None, precision: str | None = None,
            out_dtype: str | None = None, scale_a: Any = None, scale_b: Any = None,
            formats: Any = None, **params: int) -> Any:
    """:func:`matmul` outside autograd: the kernels' product, whatever the tensors
    record (``xgemm.torch``'s operator runs this).

    Example:
        >>> import cupy as cp, xgemm
        >>> a = cp.random.standard_normal((30, 20), dtype=cp.float32)
        >>> c = xgemm.api.product(a, a.T)
        >>> c.shape
        (30, 30)
    """
    if scale_a is None and scale_b is None and formats is None:
        return _product(a, b, variant, out, bias, activation, precision, out_dtype, params)
    return _scaled_product(a, b, variant, out, bias, activation, precision, out_dtype, scale_a,
                           scale_b, formats, params)


def _scaled_product(a: Any, b: Any, variant: str, out: Any, bias: Any, activation: str | None,
                    precision: str | None, out_dtype: str | None, scale_a: Any, scale_b: Any,
                    formats: Any, params: dict[str, int]) -> Any:
    """A product with 8-bit scales or formats, its arguments passed by position (an 8-bit
    call's host time is most of it where its kernel is short)."""
    scales = _scales(scale_a, scale_b, formats)
    plan, (a, b, out, bias, sa, sb) = _planned(a, b, variant, out, "out", bias, activation,
                                               precision, out_dtype, 1.0, 0.0, params, formats,
                                               scales)
    return run(plan, a, b, out, bias, scales.factor, 0.0, sa, sb)


def _product(a: Any, b: Any, variant: str, out: Any, bias: Any, activation: str | None,
             precision: str | None, out_dtype: str | None, params: dict[str, int]) -> Any:
    """A product with no 8-bit scales or formats (most calls): a lookup and a launch, in
    as few frames as they take, its arguments passed by position (keywords cost more)."""
    key = call_key(a, b, out, "out", bias, variant, params, activation, precision,
                   out_dtype, False)
    plan = PLANS.get(key) if key is not None else None
    if plan is None:
        plan, (a, b, out, bias, _, _) = _new_plan(
            key, a, b, Call(variant, out, "out", bias, activation, precision, out_dtype,
                            params=params))
    return run(plan, a, b, out, bias, 1.0, 0.0)


def gemm(a: Any, b: Any, c: Any, alpha: float = 1.0, beta: float = 0.0, *,
         variant: str = DEFAULT_VARIANT, bias: Any = None, activation: str | None = None,
         precision: str | None = None, scale_a: Any = None, scale_b: Any = None,
         formats: Any = None, **params: int) -> Any:
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
    _refuse_tangents(a, b, c, bias)
    if _recording(a, b, c, bias):
        raise ValueError("xgemm.gemm updates c in place and records no gradient, and a "
                         "PyTorch operand requires grad: call it under torch.no_grad() or "
                         "on detached tensors, or use xgemm.torch.matmul, which does")
    alpha, beta = check_scalar("alpha", alpha), check_scalar("beta", beta)
    scales = _scales(scale_a, scale_b, formats)
    plan, (a, b, c, bias, sa, sb) = _planned(a, b, variant, c, "c", bias, activation,
                                             precision, None, alpha, beta, params, formats,
                                             scales)
    return run(plan, a, b, c, bias, alpha * (scales.factor if scales else 1.0), beta, sa, sb)


class Launch:
    """A planned product bound to its arrays: ``prepare`` makes one, calling it runs the
    product (one launch, or one per 65535 products of a larger batch) and returns the
    result.

    It holds the plan and references to the arrays, never copies of them: each call
    reads ``a``, ``b`` and ``c`` as they are at that moment, makes its own copies,
    output and staging array (split-K's workspace is kept per stream and thread), and
    runs on the current stream of its framework at that moment. So a Launch may be
    called again after its inputs changed in place, or from another stream, or from two
    threads at once.

    Example:
        >>> import cupy as cp, xgemm
        >>> a = cp.random.standard_normal((512, 256), dtype=cp.float32)
        >>> b = cp.random.standard_normal((256, 128), dtype=cp.float32)
        >>> run = xgemm.prepare(a, b)  # planned once: calling it only launches
        >>> run().shape, run.device
        ((512, 128), 0)
    """

    def __init__(self, plan: Plan, arrays: tuple, alpha: float, beta: float) -> None:
        self.plan = plan
        self.a, self.b, self.target, self.bias, self.scale_a, self.scale_b = arrays
        self.alpha, self.beta = alpha, beta

    variant = property(lambda self: self.plan.variant, doc="The variant that runs.")
    params = property(lambda self: self.plan.params, doc="Its parameters, resolved.")
    spec = property(lambda self: self.plan.spec, doc="Its specialisation (layouts, epilogue).")
    device = property(lambda self: self.plan.device, doc="The GPU it runs on.")
    block = property(lambda self: self.plan.block, doc="Threads per block.")
    shared_mem = property(lambda self: self.plan.shared_mem, doc="Dynamic shared memory.")
    copies = property(lambda self: self.plan.copies,
                      doc='Operands each call copies (or pads for TMA), by name: "a", "b".')

    @property
    def dtype(self) -> str:
        return self.plan.spec.dtype

    @property
    def grids(self) -> list[tuple[int, ...]]:
        """One grid per launch (a batch over 65535 products takes several)."""
        return [chunk.grid for chunk in self.plan.chunks]

    @property
    def grid(self) -> tuple[int, ...]:
        """The first launch's grid; () when nothing runs (an empty output)."""
        return self.plan.chunks[0].grid if self.plan.chunks else ()

    @property
    def layouts(self):
        """How the kernel reads A, B and writes C (``xgemm.checks.Layout``)."""
        return self.plan.a.layout, self.plan.b.layout, self.plan.layout_c

    def kernel(self):
        """The compiled kernel (compiled now unless the in-process cache has it)."""
        return self.plan.kernel()

    def __call__(self) -> Any:
        return run(self.plan, self.a, self.b, self.target, self.bias, self.alpha, self.beta,
                   self.scale_a, self.scale_b)


def prepare(a: Any, b: Any, variant: str = DEFAULT_VARIANT, out: Any = None,
            *, c: Any = None, alpha: float = 1.0, beta: float = 0.0,
            bias: Any = None, activation: str | None = None, precision: str | None = None,
            out_dtype: str | None = None, scale_a: Any = None, scale_b: Any = None,
            formats: Any = None, **params: int) -> Launch:
    """Check the operands and parameters and plan the launch, without running it.

    ``matmul(a, b, ...)`` is ``prepare(a, b, ...)()`` and ``gemm(a, b, c, ...)`` is
    ``prepare(a, b, ..., c=c, alpha=..., beta=...)()``. Useful to inspect a call, or to
    run it again (see :class:`Launch` for what each run reads and makes):

    >>> import cupy as cp, xgemm  # doctest: +SKIP
    >>> launch = xgemm.prepare(cp.ones((64, 32), "f"), cp.ones((32, 16), "f"))  # doctest: +SKIP
    >>> launch.variant.name, launch.grid, launch.copies  # doctest: +SKIP
    """
    if out is not None and c is not None:
        raise ValueError("give out= (matmul) or c= (gemm), not both")
    alpha, beta = check_scalar("alpha", alpha), check_scalar("beta", beta)
    target, name = (c, "c") if c is not None else (out, "out")
    scales = _scales(scale_a, scale_b, formats)
    plan, arrays = _planned(a, b, variant, target, name, bias, activation, precision,
                            out_dtype, alpha, beta, params, formats, scales)
    return Launch(plan, arrays, alpha * (scales.factor if scales else 1.0), beta)


def source(variant: str, dtype: str = "float32", *, a_col: bool = False, b_col: bool | None = None,
           bias: bool = False, activation: str = "none", read_c: bool = False,
           out_dtype: str | None = None, b_dtype: str | None = None, scale_a: str = "none",
           scale_b: str = "none", **params: int | bool) -> str:
    """The CUDA C that ``variant`` compiles for ``params`` (defaults for the rest) and a
    specialisation: dtype, operand layouts, epilogue, output dtype; for 8-bit inputs also
    B's dtype where it differs and how the scales apply ("none", "tensor", "vector").

    Boolean flags such as ``aligned`` of ``vectorized`` default to True; ``b_col``
    defaults to the first layout the variant reads. The point is rendered as given, not as
    a call plans it: rung 14 at a width in 16s (``BN=144``) compiles only with
    ``b_col=True`` and ``TMA_STORE`` 0 or 2, which a call's plan sets itself.

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
        b_col = v.layouts(dtype)[1][0] == "col"
    spec = Spec(dtype, a_col, b_col, bias, parse_activation(activation), read_c, flags,
                out_dtype, b_dtype, scale_a, scale_b)
    return v.source(v.resolve(params, dtype), spec)
