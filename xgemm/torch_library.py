"""The PyTorch operators' definitions (``torch.library``): ``xgemm::matmul`` and
``xgemm::grouped_mm``, each with its CUDA kernel (xgemm's own launch) and fake
implementation, and what each runs below its autograd kernel. ``xgemm.torch`` registers
their autograd and is what users import; this module is imported by it, with PyTorch.

Example:
    >>> import torch, xgemm.torch  # doctest: +SKIP
    >>> a, b = (torch.randn(64, 64, device="cuda") for _ in range(2))  # doctest: +SKIP
    >>> torch.ops.xgemm.matmul(a, b, None, "none", "auto", None, "").shape  # doctest: +SKIP
    torch.Size([64, 64])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import guard_or_false

from . import api
from .checks import matmul_shapes
from .checks.arguments import AUTO, TUNE
from .grouped import grouped_product

__all__ = ["LIBRARY", "below_autograd", "cuda_is_next", "grouped_below", "grouped_launch",
           "launch", "matmul_below", "matmul_operator", "operator_product", "rows_of",
           "tiles_of", "tiles_text", "traced_product"]


def tiles_text(params: dict[str, int]) -> str:
    """Tile parameters as the operator takes them (its schema has no mapping): "BM=64,BN=128"."""
    if not params:  # most calls: every call of a layer pays for this
        return ""
    return ",".join(f"{name}={value}" for name, value in sorted(params.items()))


def tiles_of(text: str) -> dict[str, int]:
    """The tile parameters of :func:`tiles_text`'s text, as a mapping."""
    if not text:
        return {}
    pairs = (item.split("=") for item in text.split(",") if item)
    return {name: int(value) for name, value in pairs}


def launch(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str,
           variant: str, precision: str | None, tiles: str) -> torch.Tensor:
    """``activation(a @ b + bias)`` by xgemm's kernels (``xgemm.api.product``), from the
    operator's arguments: the operator's CUDA kernel, and the eager path's product."""
    return api.product(a, b, variant=variant, bias=bias,
                       activation=None if activation == "none" else activation,
                       precision=precision, **tiles_of(tiles))


# The operators, defined through torch.library's Library rather than its custom_op: the
# same schema, CUDA kernel and fake, without custom_op's per-call checks of its outputs (a
# few microseconds of Python a call, in each of torch.compile's calls). Their autograd
# kernels (``xgemm.torch``) are registered by hand rather than by register_autograd,
# whose kernel builds a dataclass, walks the arguments and redispatches in Python on every
# call, even in a compiled graph that records nothing (31 us a call under no_grad against
# 17 below autograd, H200).
LIBRARY = torch.library.Library("xgemm", "DEF")
_SCHEMA = ("(Tensor a, Tensor b, Tensor? bias, str activation, str variant, str? precision, "
           "str tiles) -> Tensor")


def _fake(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str,
          variant: str, precision: str | None, tiles: str) -> torch.Tensor:
    # xgemm.matmul returns a new contiguous tensor of a's dtype, of numpy.matmul's shape
    return a.new_empty(matmul_shapes(tuple(a.shape), tuple(b.shape)).out)


def _define(name: str, schema: str, kernel: Callable, fake: Callable,
            tags: tuple[torch.Tag, ...] = ()) -> None:
    """Defines the operator ``xgemm::name`` (an overload where ``name`` has a dot) with
    its schema and tags, its CUDA kernel and its fake (shapes while tracing)."""
    LIBRARY.define(name + schema, tags=tags)
    LIBRARY.impl(name, kernel, "CUDA")
    torch.library.register_fake(f"xgemm::{name}", fake, lib=LIBRARY)


# flexible_layout: inductor passes an operand as a view of the buffer it made (a gradient's
# transpose for a weight's gradient), not a copy in eager's strides, which its default for
# custom operators makes (a kernel a linear's backward, read and written again). Only
# where every layout inductor may pass is read in place: auto's and tune's products of
# 16-bit or float32/64 matrices in exact arithmetic (a batch's view, as attention's
# transposed heads, may be one no single stride walks, which xgemm would copy each call;
# tf32's and 8-bit kernels read A row-major only, and a column-major A would be
# transposed each call). The rest take the overload ``exact``, which inductor gives
# eager's strides (its default). Which overload a product takes is read from its
# arguments, whichever of the two was called. Not for the grouped operator, whose
# kernels read some operands in one layout only.
_define("matmul", _SCHEMA, launch, _fake, tags=(torch.Tag.flexible_layout,))
_define("matmul.exact", _SCHEMA, launch, _fake)
#: the variants whose products of matrices take the flexible overload: they read any layout
_ANY_LAYOUT = (AUTO, TUNE)


def matmul_operator(variant: str, a: torch.Tensor, b: torch.Tensor, precision: str | None
                    ) -> torch._ops.OpOverload:
    """The overload of ``xgemm::matmul`` a product takes: ``default`` (inductor lays its
    operands out as it likes) for auto's and tune's products of matrices in exact
    arithmetic and 16 bits or more, whose layouts they all read in place; else ``exact``
    (eager's strides).

    >>> m = torch.empty(4, 4, device="meta")
    >>> matmul_operator("auto", m, m, None) is torch.ops.xgemm.matmul.default
    True
    >>> matmul_operator("auto", m, m, "tf32") is torch.ops.xgemm.matmul.exact
    True
    """
    if variant in _ANY_LAYOUT and a.dim() <= 2 and b.dim() <= 2 and precision is None \
            and a.element_size() > 1 and b.element_size() > 1:
        return _FLEXIBLE
    return _EXACT


def operator_product(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                     activation: str, variant: str, precision: str | None,
                     tiles: str) -> torch.Tensor:
    """The product through ``xgemm::matmul``'s overload for it (:func:`matmul_operator`),
    as ``torch.ops.xgemm.matmul`` is called."""
    return matmul_operator(variant, a, b, precision)(a, b, bias, activation, variant,
                                                     precision, tiles)


def rows_of(t: torch.Tensor) -> torch.Tensor:
    """A tensor (..., n) as one matrix of its rows, a 1-D one as one row (``reshape(-1,
    n)`` cannot say how many there are where n is 0)."""
    return t if t.dim() == 2 else t.flatten(0, -2) if t.dim() > 2 else t.unsqueeze(0)


#: the most rows one matrix may have: xgemm's kernels index with 32-bit ints
_INT_MAX = 2**31 - 1


def _folds(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a stack ``a`` times one matrix ``b`` goes to the operator as one matrix of
    a's rows: where they lie at one stride (their matrix is a view), or where b's
    gradient, which reads them as one matrix, copies them anyway (torch.matmul's rule);
    and where they are few enough for 32-bit indices (else xgemm runs them as a batch)."""
    if a.dim() <= 2 or b.dim() != 2 or not guard_or_false(
            math.prod(a.shape[:-1]) <= _INT_MAX):
        return False
    if torch.is_grad_enabled() and b.requires_grad:
        return True
    step = None
    for size, stride in zip(reversed(a.shape[:-1]), reversed(a.stride()[:-1]), strict=True):
        if guard_or_false(size == 1):
            continue
        if step is not None and not guard_or_false(stride == step):
            return False
        step = stride * size
    return True


def traced_product(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                   activation: str, variant: str, precision: str | None,
                   tiles: str) -> torch.Tensor:
    """The operator as torch.compile traces it. A stack of matrices times one matrix (a
    linear's activations) goes in as one matrix of rows where that costs no copy
    (:func:`_folds`): auto's product then takes the flexible overload, and inductor hands
    it the buffer the graph keeps for the backward, not a copy in eager's strides."""
    if _folds(a, b):
        rows = operator_product(rows_of(a), b, bias, activation, variant, precision, tiles)
        return rows.view(*a.shape[:-1], b.shape[-1])
    return operator_product(a, b, bias, activation, variant, precision, tiles)


_FLEXIBLE, _EXACT = torch.ops.xgemm.matmul.default, torch.ops.xgemm.matmul.exact

#: The dispatch keys below autograd's, less ADInplaceOrView (which every tensor has).
_BELOW_INPLACE = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.ADInplaceOrView)


def cuda_is_next(keyset: torch._C.DispatchKeySet) -> bool:
    """Whether the dispatcher, below autograd, would call the CUDA kernel next for a call
    of these dispatch keys: no dispatch mode, tensor subclass, fake or functional tensor
    comes before it.

    >>> DK = torch._C.DispatchKey
    >>> keys = torch._C.DispatchKeySet(DK.CUDA) | torch._C.DispatchKeySet(DK.AutogradCUDA)
    >>> cuda_is_next(keys), cuda_is_next(keys | torch._C.DispatchKeySet(DK.Python))
    (True, False)
    """
    raw = keyset.raw_repr()  # the whole set as an int: one call where the test takes three
    answer = _CUDA_NEXT.get(raw)
    if answer is None:
        answer = _CUDA_NEXT[raw] = (keyset & _BELOW_INPLACE).highestPriorityTypeId() \
            == torch._C.DispatchKey.CUDA
    return answer


#: :func:`cuda_is_next`'s answers by the dispatch key set's bits (a few sets ever occur)
_CUDA_NEXT: dict[int, bool] = {}


def below_autograd(op: torch._ops.OpOverload, kernel: Callable) -> Callable:
    """What the operator ``op`` runs below its autograd kernel, called from it with the
    call's dispatch keys: ``kernel`` (its CUDA kernel) where the dispatcher would call it
    next, saving a dispatch through Python; else the dispatcher's next kernel (a fake or
    functional tensor while tracing, a dispatch mode, a subclass)."""

    def below(keyset: torch._C.DispatchKeySet, *args: Any) -> torch.Tensor:
        return kernel(*args) if cuda_is_next(keyset) else _redispatch(op, keyset, *args)

    return below


def _redispatch(op: torch._ops.OpOverload, keyset: torch._C.DispatchKeySet, *args: Any
                ) -> torch.Tensor:
    """``op``'s next kernel below its autograd for a call of these dispatch keys."""
    with torch._C._AutoDispatchBelowAutograd():
        return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)


def matmul_below(keyset: torch._C.DispatchKeySet, a: torch.Tensor, b: torch.Tensor,
                 bias: torch.Tensor | None, activation: str, variant: str,
                 precision: str | None, tiles: str) -> torch.Tensor:
    """``matmul``'s kernels below its autograd, as :func:`below_autograd`'s: the CUDA
    kernel itself where the dispatcher would call it next, else a redispatch through the
    product's overload (:func:`matmul_operator`), the only place the overload matters."""
    if cuda_is_next(keyset):
        return launch(a, b, bias, activation, variant, precision, tiles)
    return _redispatch(matmul_operator(variant, a, b, precision), keyset, a, b, bias,
                       activation, variant, precision, tiles)


def grouped_launch(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, tiles: str
                   ) -> torch.Tensor:
    """The grouped product by xgemm's kernels, from the operator's arguments: the grouped
    operator's CUDA kernel, and the eager path's product."""
    return grouped_product(a, b, offs, tiles_of(tiles))


def _grouped_fake(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, tiles: str
                  ) -> torch.Tensor:
    if b.dim() == 3:  # groups of A's rows: A's rows by N
        return a.new_empty(a.shape[0], b.shape[-1])
    return a.new_empty(offs.shape[0], a.shape[0], b.shape[1])  # along K: a matrix a group


_define("grouped_mm", "(Tensor a, Tensor b, Tensor offs, str tiles) -> Tensor", grouped_launch,
        _grouped_fake)
#: ``grouped_mm``'s kernels below its autograd (:func:`below_autograd`)
grouped_below = below_autograd(torch.ops.xgemm.grouped_mm.default, grouped_launch)
