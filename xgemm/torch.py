"""xgemm's products as PyTorch operators: differentiable, traced by ``torch.compile``
without a graph break, and captured in CUDA graphs.

``xgemm.matmul`` on PyTorch tensors launches a kernel and returns a tensor outside
autograd; this module registers the product as a ``torch.library`` custom operator,
``torch.ops.xgemm.matmul``, with a fake implementation (the result's shape, dtype and
strides, for tracing) and a backward made of the same operator (``dA = dC @ B^T``,
``dB = A^T @ dC``, the bias's gradient, the activation's derivative); where nothing
records (a compiled graph runs under no_grad) its autograd kernel calls the CUDA kernel
directly (``xgemm.torch_library`` defines the operators). Where nothing traces (eager
mode) the same product and backward are called directly, without the operator's
dispatch. Importing it needs PyTorch; ``import xgemm`` does not.

Example:
    >>> import torch, xgemm.torch  # doctest: +SKIP
    >>> x = torch.randn(8, 128, 512, device="cuda", requires_grad=True)  # doctest: +SKIP
    >>> layer = xgemm.torch.Linear(512, 256, device="cuda")  # doctest: +SKIP
    >>> layer(x).sum().backward()  # doctest: +SKIP
    >>> x.grad.shape, layer.weight.grad.shape  # doctest: +SKIP
    (torch.Size([8, 128, 512]), torch.Size([256, 512]))
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.autograd import forward_ad

from . import api
from .specs import ACTIVATIONS
from .torch_library import (
    LIBRARY,
    grouped_below,
    grouped_launch,
    launch,
    matmul_below,
    operator_product,
    rows_of,
    tiles_text,
    traced_product,
)

__all__ = ["Linear", "grouped_mm", "linear", "matmul", "swap_linears"]


def _as_matrices(a: torch.Tensor, b: torch.Tensor, grad: torch.Tensor):
    """a, b and the result's gradient with the dimensions numpy.matmul adds to 1-D
    operands put back: a (..., M, K), b (..., K, N), grad (..., M, N)."""
    if a.dim() == 1 and b.dim() == 1:
        return a.view(1, -1), b.view(-1, 1), grad.reshape(1, 1)
    if a.dim() == 1:
        return a.unsqueeze(0), b, grad.unsqueeze(-2)
    if b.dim() == 1:
        return a, b.unsqueeze(-1), grad.unsqueeze(-1)
    return a, b, grad


def _setup_context(ctx, inputs, output) -> None:
    a, b, bias, activation, variant, precision, tiles = inputs
    ctx.activation, ctx.variant, ctx.precision, ctx.tiles = activation, variant, precision, tiles
    ctx.has_bias = bias is not None
    # the operands, the bias where the activation's derivative needs the product again
    # (gelu, silu), the result where relu's is read from it
    ctx.save_for_backward(a, b, bias if activation in ("gelu", "silu") else None,
                          output if activation == "relu" else None)


def _gradients(product: Callable, saved: tuple, activation: str, variant: str,
               precision: str | None, tiles: str, has_bias: bool,
               needs: tuple[bool, ...], grad: torch.Tensor) -> tuple:
    """The gradients of ``activation(a @ b + bias)`` in a, b and bias, made by ``product``
    (called as the operator is): ``dA = dC @ B^T``, ``dB = A^T @ dC`` with numpy.matmul's
    broadcasting summed back, the bias's gradient, the activation's derivative.
    ``saved``: a, b, the bias (gelu, silu) and the result (relu), as saved."""
    a, b, bias, result = saved
    if activation == "relu":
        grad = grad * (result > 0)
    elif activation != "none":  # gelu, silu: the product again, then its derivative
        creating = torch.is_grad_enabled()  # a backward that records (create_graph)
        with torch.enable_grad():
            z = product(a, b, bias, "none", variant, precision, tiles).requires_grad_()
            y = F.gelu(z, approximate="tanh") if activation == "gelu" else F.silu(z)
            (grad,) = torch.autograd.grad(y, z, grad, create_graph=creating)
    grad_a = grad_b = grad_bias = None
    a2, b2, g2 = _as_matrices(a, b, grad)
    # C's rows as one matrix, made once for the bias's sum and a weight's gradient, and
    # only where one is asked for (an expanded gradient's rows are a copy)
    sums_rows = has_bias and needs[2]
    rows_g = rows_of(g2) if sums_rows or (needs[1] and b2.dim() == 2) else None
    if sums_rows:  # summed over all but C's columns (a 1-D b: its one)
        grad_bias = rows_g.sum(0)
    if needs[0]:
        grad_a = product(g2, b2.mT, None, "none", variant, precision, tiles)
        if grad_a.shape != a.shape:  # a broadcast batch summed back, a 1-D a's row dropped
            grad_a = grad_a.sum_to_size(a2.shape).view(a.shape)
    if needs[1]:
        if b2.dim() == 2:  # one b for the batch (a weight): one product over all its rows
            k, n = b2.shape
            rows_a = rows_of(a2)
            stride_k, stride_n = b2.stride()
            if stride_k == 1 and stride_n != 1 and (stride_n == k or n == 1):
                # b is a transposed view (x @ w.T): make w's gradient, dB^T = dC^T A, in
                # w's own layout, so that autograd takes it as it is instead of copying it
                grad_b = product(rows_g.mT, rows_a, None, "none", variant, precision,
                                 tiles).mT
            else:
                grad_b = product(rows_a.mT, rows_g, None, "none", variant, precision, tiles)
        else:
            grad_b = product(a2.mT, g2, None, "none", variant, precision, tiles)
            grad_b = grad_b.sum_to_size(b2.shape)
        if grad_b.shape != b.shape:
            grad_b = grad_b.view(b.shape)
    return grad_a, grad_b, grad_bias


def _direct(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str,
            variant: str, precision: str | None, tiles: str) -> torch.Tensor:
    """The operator's product without its dispatch: xgemm's kernels on plain CUDA tensors
    with no dispatch mode, the operator itself on others (meta, fake or functional tensors,
    a subclass, CPU where a test registers a CPU kernel) and under a dispatch mode (which
    then sees the operator)."""
    if _plain(a, b, bias):
        return launch(a, b, bias, activation, variant, precision, tiles)
    return operator_product(a, b, bias, activation, variant, precision, tiles)


#: What xgemm's kernels take without the operator's dispatch: tensors and parameters (a
#: Linear's bias reaches the product as its Parameter), no subclass of them.
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _plain(a: torch.Tensor, b: torch.Tensor, third: torch.Tensor | None) -> bool:
    """Whether xgemm's kernels may take the tensors without the operator's dispatch: plain
    CUDA tensors (the third one optional), and no dispatch mode that would see the call."""
    return (type(a) in _PLAIN and type(b) in _PLAIN and a.is_cuda
            and (third is None or type(third) in _PLAIN)
            and not torch._C._len_torch_dispatch_stack())


def _backward_of(ctx, grad: torch.Tensor, product: Callable) -> tuple:
    return (*_gradients(product, ctx.saved_tensors, ctx.activation, ctx.variant,
                        ctx.precision, ctx.tiles, ctx.has_bias, ctx.needs_input_grad,
                        grad), None, None, None, None)


def _eager_backward(ctx, grad: torch.Tensor) -> tuple:
    # forward over reverse (a dual tensor's tangent in the incoming gradient): refused here
    # as the operator refuses it, before the kernels below, which would drop it
    _refuse_tangents("xgemm.torch.matmul", "torch.matmul", grad)
    # a backward that records (create_graph, for a second derivative) takes the operator,
    # whose own autograd records its products; one that does not, the kernels directly
    return _backward_of(ctx, grad, operator_product if torch.is_grad_enabled()
                        else _direct)


class _Eager(torch.autograd.Function):
    """The operator's forward and backward: called directly where nothing traces them,
    and by the operator's autograd kernel where a graph records through it. Called
    directly, they save the operator's dispatch, tens of microseconds a call on the host,
    which bounds a small model's training step: examples/train_gpt.py's step ran 2.6-4.1 ms
    (11-18%) faster (bench/results/h100/evidence/train_gpt_eager_f22745d.txt).

    Its forward takes ``ctx`` itself rather than a ``setup_context``: with one, every
    ``apply`` binds its arguments through ``inspect.signature``, 30 us an apply against 7
    without (timeit of a trivial Function of the same arguments, torch 2.13). torch.func's
    transforms need one: they get :class:`_Transformable`."""

    @staticmethod
    def forward(ctx, a, b, bias, activation, variant, precision, tiles):
        output = _direct(a, b, bias, activation, variant, precision, tiles)
        _setup_context(ctx, (a, b, bias, activation, variant, precision, tiles), output)
        return output

    backward = staticmethod(_eager_backward)


class _Transformable(torch.autograd.Function):
    """:class:`_Eager` with a ``setup_context``, for torch.func's transforms (``grad``,
    ``vjp``), which refuse a Function without one; the operator's own autograd does not
    support them either."""

    setup_context = staticmethod(_setup_context)
    generate_vmap_rule = True  # vmap (and hessian, jacrev) run forward and backward batched

    @staticmethod
    def forward(a, b, bias, activation, variant, precision, tiles):
        # through the operator (its autograd records nothing here): vmap's batched
        # tensors, wrappers with no storage of their own, reach its batching fallback
        return operator_product(a, b, bias, activation, variant, precision, tiles)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple:
        # a backward that records (torch.func's grad records each one, for a grad of a
        # grad) makes its products with this Function again: the operator's autograd has
        # no setup_context for the transforms
        return _backward_of(ctx, grad, _Transformable.apply if torch.is_grad_enabled()
                            else operator_product)


def _autograd(keyset: torch._C.DispatchKeySet, a: torch.Tensor, b: torch.Tensor,
              bias: torch.Tensor | None, activation: str, variant: str, precision: str | None,
              tiles: str) -> torch.Tensor:
    """``matmul``'s autograd kernel: :class:`_Eager` where autograd records (its forward,
    on traced tensors or under a mode, calls ``matmul`` again with nothing to record),
    else the kernels below autograd (``matmul_below``: the CUDA kernel itself on plain
    tensors, the dispatch a compiled graph's calls take; under torch.inference_mode the
    dispatcher skips this and runs the CUDA kernel). Refused, not wrong: a dual tensor of
    forward-mode AD, and a gradient asked by torch.func (whose transforms cannot run a
    Function from inside the dispatcher)."""
    _refuse_tangents("torch.ops.xgemm.matmul", "torch.matmul", a, b, bias)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or (
            bias is not None and bias.requires_grad)):
        _refuse_transforms("torch.ops.xgemm.matmul called itself",
                           "call xgemm.torch.matmul, whose products they differentiate")
        return _Eager.apply(a, b, bias, activation, variant, precision, tiles)
    return matmul_below(keyset, a, b, bias, activation, variant, precision, tiles)


LIBRARY.impl("matmul", _autograd, "Autograd", with_keyset=True)
LIBRARY.impl("matmul.exact", _autograd, "Autograd", with_keyset=True)


def _product(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str,
             variant: str, precision: str | None, tiles: str, recording: bool) -> torch.Tensor:
    """The operator where torch.compile traces, else the same product and backward called
    directly (:class:`_Eager`; :class:`_Transformable` inside a torch.func transform), or
    where autograd records nothing (``recording`` false: inference), the product alone."""
    if torch.compiler.is_compiling():
        return traced_product(a, b, bias, activation, variant, precision, tiles)
    if torch._C._are_functorch_transforms_active():
        return _Transformable.apply(a, b, bias, activation, variant, precision, tiles)
    if recording:
        return _Eager.apply(a, b, bias, activation, variant, precision, tiles)
    # An autograd Function's apply costs the host microseconds a call even where it
    # records nothing, and a decoder's decode step is bounded by the host
    return _direct(a, b, bias, activation, variant, precision, tiles)


def _autocast(*tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The tensors as ``torch.matmul`` takes them under ``torch.autocast("cuda")``: the
    floating ones cast to the autocast dtype; as they are outside autocast."""
    if not torch.is_autocast_enabled("cuda"):
        return tensors
    dtype = torch.get_autocast_dtype("cuda")
    return tuple(t.to(dtype) if t is not None and t.is_floating_point()
                 and t.element_size() > 1 else t for t in tensors)


def _refuse_tangents(entry: str, instead: str, *tensors: torch.Tensor | None) -> None:
    """Raises where one of the tensors is a dual tensor of forward-mode AD (with a
    tangent: inside ``forward_ad.dual_level()`` or ``torch.func.jvp``), whose tangent
    xgemm's products would drop: ``entry`` has no forward-mode derivative."""
    # a dual level is open only inside those: other calls read one int
    if forward_ad._current_level >= 0 and any(
            t is not None and forward_ad.unpack_dual(t).tangent is not None for t in tensors):
        raise NotImplementedError(
            f"{entry} has no forward-mode derivative (jvp), so a dual tensor's tangent would "
            f"be dropped; use reverse mode (backward, torch.func.grad or vjp) or {instead} "
            "for forward-mode AD")


def _refuse_transforms(entry: str, instead: str) -> None:
    """Raises inside a torch.func transform, whose gradients (grad, vjp, jacrev) cannot
    run an autograd Function from an operator's autograd kernel, below their layer."""
    if torch._C._are_functorch_transforms_active():
        raise NotImplementedError(
            f"{entry} has no rule for torch.func's gradient transforms (grad, vjp, "
            f"jacrev): {instead}")


def _activation_name(activation: str | None) -> str:
    name = "none" if activation is None else activation
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {ACTIVATIONS[1:]} or None")
    return name


def matmul(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None,
           activation: str | None = None, variant: str = api.DEFAULT_VARIANT,
           precision: str | None = None, **params: int) -> torch.Tensor:
    """``activation(a @ b + bias)`` with ``xgemm.matmul``'s semantics, as a PyTorch
    operator: differentiable in ``a``, ``b`` and ``bias``, traced by ``torch.compile``
    (no graph break) and cast as ``torch.matmul`` is under ``torch.autocast``.

    Example:
        >>> a = torch.randn(4, 100, 64, device="cuda", requires_grad=True)  # doctest: +SKIP
        >>> w = torch.randn(32, 64, device="cuda", requires_grad=True)  # doctest: +SKIP
        >>> xgemm.torch.matmul(a, w.T, activation="relu").sum().backward()  # doctest: +SKIP
        >>> w.grad.shape  # doctest: +SKIP
        torch.Size([32, 64])
    """
    name = _activation_name(activation)
    # Inference on CUDA tensors with nothing to record, cast or trace (a decoder's decode
    # step, which the host bounds): the product alone, in as few frames as it takes; the
    # steps below would come to the same call
    # (torch.compile first: its tracing cannot read the dispatch mode stack that _plain does)
    if not params and not torch.compiler.is_compiling() and _plain(a, b, bias) \
            and forward_ad._current_level < 0 and not torch.is_autocast_enabled("cuda") \
            and not (torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or (
                bias is not None and bias.requires_grad))) \
            and not torch._C._are_functorch_transforms_active():
        return api.product(a, b, variant, None, bias=bias,
                           activation=None if name == "none" else name, precision=precision)
    tiles = tiles_text(params)
    _refuse_tangents("xgemm.torch.matmul", "torch.matmul", a, b, bias)
    a, b, bias = _autocast(a, b, bias)
    recording = torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or (
        bias is not None and bias.requires_grad))
    if name != "none" and recording:
        # recording a graph: the product, then PyTorch's activation, whose backward keeps
        # the product rather than computing it again
        z = _product(a, b, bias, "none", variant, precision, tiles, recording)
        return torch.relu(z) if name == "relu" else (
            F.gelu(z, approximate="tanh") if name == "gelu" else F.silu(z))
    return _product(a, b, bias, name, variant, precision, tiles, recording)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str | None = None, *, variant: str = api.DEFAULT_VARIANT) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` (``x @ weight.T + bias``), then ``activation``, on
    xgemm's kernels: :func:`matmul` with the weight read in place through its transpose.

    Example:
        >>> x = torch.randn(2, 10, 64, device="cuda", dtype=torch.bfloat16)  # doctest: +SKIP
        >>> w = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)  # doctest: +SKIP
        >>> xgemm.torch.linear(x, w, activation="gelu").shape  # doctest: +SKIP
        torch.Size([2, 10, 32])
    """
    return matmul(x, weight.T, bias=bias, activation=activation, variant=variant)


class Linear(torch.nn.Linear):
    """``torch.nn.Linear`` whose forward runs on xgemm: the same parameters, ``state_dict``
    and initialisation, and optionally an activation fused into the product.

    Example:
        >>> layer = xgemm.torch.Linear(64, 32, device="cuda")  # doctest: +SKIP
        >>> layer(torch.randn(5, 64, device="cuda")).shape  # doctest: +SKIP
        torch.Size([5, 32])
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None, *, activation: str | None = None,
                 variant: str = api.DEFAULT_VARIANT) -> None:
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.activation, self.variant = _activation_name(activation), variant

    @classmethod
    def from_linear(cls, module: torch.nn.Linear, *, variant: str = api.DEFAULT_VARIANT
                    ) -> Linear:
        """A Linear sharing ``module``'s parameters (the same tensors: an optimiser built
        on the old module trains the new one)."""
        new = cls.__new__(cls)
        torch.nn.Module.__init__(new)
        new.in_features, new.out_features = module.in_features, module.out_features
        new.weight, new.bias = module.weight, module.bias
        new.activation, new.variant = "none", variant
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return matmul(x, self.weight.T, bias=self.bias, activation=None
                      if self.activation == "none" else self.activation, variant=self.variant)

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", activation={self.activation}"
                                       if self.activation != "none" else "") + (
            f", variant={self.variant}" if self.variant != api.DEFAULT_VARIANT else "")


def swap_linears(model: torch.nn.Module,
                 keep: Callable[[str, torch.nn.Linear], bool] | None = None, *,
                 variant: str = api.DEFAULT_VARIANT) -> torch.nn.Module:
    """Replace, in place, every ``torch.nn.Linear`` of ``model`` (for which ``keep(name,
    module)`` is true, where given) by a :class:`Linear` on the same parameters; returns
    ``model``. Run it before building the optimiser or after: the parameters are the
    same tensors.

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())  # doctest: +SKIP
        >>> xgemm.torch.swap_linears(model)[0]  # doctest: +SKIP
        Linear(in_features=64, out_features=64, bias=True)
    """
    swaps: list[tuple[torch.nn.Module, str, torch.nn.Linear]] = []
    for name, module in model.named_modules():
        for child_name, child in module.named_children():
            full = f"{name}.{child_name}" if name else child_name
            # nn.Linear itself: a subclass may change its forward (and ours is done)
            if type(child) is torch.nn.Linear and (keep is None or keep(full, child)):
                swaps.append((module, child_name, child))
    for parent, child_name, child in swaps:
        setattr(parent, child_name, Linear.from_linear(child, variant=variant))
    return model


# -- the grouped product ----------------------------------------------------------------------
def _grouped_direct(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, tiles: str
                    ) -> torch.Tensor:
    """The grouped operator's product without its dispatch: xgemm's kernels on plain CUDA
    tensors with no dispatch mode, the operator itself on others (as :func:`_direct`)."""
    if _plain(a, b, offs):
        return grouped_launch(a, b, offs, tiles)
    return torch.ops.xgemm.grouped_mm(a, b, offs, tiles)


def _grouped_gradients(product: Callable, a: torch.Tensor, b: torch.Tensor,
                       offs: torch.Tensor, needs_input_grad: tuple, grad: torch.Tensor):
    """Both gradients by the grouped products themselves (``product``: the operator, or
    :func:`_grouped_direct`), each in the layout its rung reads (the tile parameters were
    the forward's: the backward takes the defaults). Groups of rows, C = A_g B_g: dA =
    dC_g B_g^T (rows again), dB_g = A_g^T dC_g (along K). Along K, C_g = A_g B_g over the
    group's tokens: dA^T = B dC_g^T and dB = A^T dC_g, both groups of rows."""
    grad = grad.contiguous()
    da = db = None
    if b.dim() == 3:
        if needs_input_grad[0]:
            da = product(grad, b.transpose(-2, -1), offs, "")
        if needs_input_grad[1]:
            db = product(a.contiguous().t(), grad, offs, "")
    else:
        if needs_input_grad[0]:
            da = product(b.contiguous(), grad.transpose(-2, -1), offs, "").t()
        if needs_input_grad[1]:
            db = product(a.t().contiguous(), grad, offs, "")
    return da, db, None, None


class _GroupedEager(torch.autograd.Function):
    """The grouped operator's forward and backward, as :class:`_Eager` is the product's:
    called directly in eager mode (a mixture-of-experts layer's training step calls it six
    times, each a custom operator's dispatch fewer), and by the operator's autograd."""

    @staticmethod
    def forward(ctx, a, b, offs, tiles):
        ctx.save_for_backward(a, b, offs)
        return _grouped_direct(a, b, offs, tiles)

    @staticmethod
    def backward(ctx, grad):
        _refuse_tangents("xgemm.torch.grouped_mm", "F.grouped_mm", grad)
        a, b, offs = ctx.saved_tensors
        product = torch.ops.xgemm.grouped_mm if torch.is_grad_enabled() else _grouped_direct
        return _grouped_gradients(product, a, b, offs, ctx.needs_input_grad, grad)


def _grouped_autograd(keyset: torch._C.DispatchKeySet, a: torch.Tensor, b: torch.Tensor,
                      offs: torch.Tensor, tiles: str) -> torch.Tensor:
    """``grouped_mm``'s autograd kernel, as :func:`_autograd` is matmul's."""
    _refuse_tangents("torch.ops.xgemm.grouped_mm", "F.grouped_mm", a, b)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        _refuse_transforms("xgemm.torch.grouped_mm",
                           "differentiate it with backward (torch.autograd), or use "
                           "F.grouped_mm under torch.func")
        return _GroupedEager.apply(a, b, offs, tiles)
    return grouped_below(keyset, a, b, offs, tiles)


LIBRARY.impl("grouped_mm", _grouped_autograd, "Autograd", with_keyset=True)


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, **params: int
               ) -> torch.Tensor:
    """``xgemm.grouped_matmul`` with ``offs`` as a PyTorch operator: differentiable in
    ``a`` and ``b`` through the grouped products themselves, traced by ``torch.compile``,
    captured in CUDA graphs (the ends stay on the GPU). Cast as ``torch.matmul`` is under
    ``torch.autocast``.

    Example (a mixture-of-experts layer's up-projection, trained):
        >>> x = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16,
        ...                 requires_grad=True)  # doctest: +SKIP
        >>> w = torch.randn(8, 2048, 768, device="cuda", dtype=torch.bfloat16,
        ...                 requires_grad=True)  # doctest: +SKIP
        >>> ends = torch.arange(1, 9, device="cuda", dtype=torch.int32) * 512  # doctest: +SKIP
        >>> xgemm.torch.grouped_mm(x, w, ends).sum().backward()  # doctest: +SKIP
        >>> w.grad.shape  # doctest: +SKIP
        torch.Size([8, 2048, 768])
    """
    _refuse_tangents("xgemm.torch.grouped_mm", "F.grouped_mm", a, b)
    a, b = _autocast(a, b)
    tiles = tiles_text(params)
    if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        return torch.ops.xgemm.grouped_mm(a, b, offs, tiles)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return _GroupedEager.apply(a, b, offs, tiles)
    return _grouped_direct(a, b, offs, tiles)
