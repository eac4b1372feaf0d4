"""A call's signature: what of its arrays and arguments a plan depends on, as a key
(:func:`call_key`), made on every call before the plan is looked up, so in few steps;
and a call's arguments besides its operands (:class:`Call`), for planning it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .checks import Scales, extent
from .frameworks import framework


@dataclass(frozen=True, eq=False)
class Call:
    """What a product asks for besides its operands, as ``xgemm.plan.build`` takes it:
    ``matmul``'s and ``gemm``'s arguments, unchecked. Made only for a call whose
    signature finds no plan (its key is made from the same arguments, more cheaply);
    compared by identity, as it holds arrays and a dict.

    >>> Call("coarse2d", params={"BM": 64, "BN": 64}).target_name
    'out'
    """

    variant: str
    target: Any = None           # out= (matmul) or C (gemm), or None
    target_name: str = "out"     # "out" or "c": which of them, in errors and checks
    bias: Any = None
    activation: str | None = None
    precision: str | None = None
    out_dtype: str | None = None
    alpha: Any = 1.0
    beta: Any = 0.0
    params: dict[str, int] = field(default_factory=dict)
    formats: Any = None          # the 8-bit operands' formats
    scales: Scales | None = None


def array_key(x: Any) -> tuple | None:
    """What of ``x`` decides a plan: shape, strides, dtype, the alignment of its address
    (the largest power of two up to 64 that divides it: every alignment rule of the
    kernels reads only this), its GPU (and by its dtype object, its framework); None for
    an array of neither CuPy nor PyTorch, which a call converts first."""
    return _keyed(x)[0]


def _keyed(x: Any) -> tuple[tuple | None, int]:
    """:func:`array_key` of ``x`` and its address (0 with no key)."""
    kind = framework(type(x))
    if kind == "torch":
        address = x.data_ptr()
        capped = address | 64
        return (x.shape, x.stride(), x.dtype, capped & -capped, x.get_device()), address
    if kind == "cupy":
        data = x.data
        address = data.ptr
        capped = address | 64
        return (x.shape, x.strides, x.dtype, capped & -capped, data.device_id), address
    return None, 0


@functools.lru_cache(maxsize=1024)
def _reach(key: tuple) -> tuple[int, int]:
    """The bytes an array of :func:`array_key` ``key`` spans, from its first element's
    address to one past its last (``xgemm.checks.extent``): cached, as a loop's calls
    repeat a few shapes and strides (PyTorch's strides are in elements, CuPy's in bytes,
    and a key's dtype object says which)."""
    shape, strides, dtype = key[:3]
    itemsize = dtype.itemsize
    if isinstance(dtype, np.dtype):
        return extent(0, shape, strides, itemsize)
    return extent(0, shape, tuple(s * itemsize for s in strides), itemsize)


def call_key(a: Any, b: Any, target: Any, target_name: str, bias: Any, variant: str,
             params: dict[str, int], activation: str | None, precision: str | None,
             out_dtype: str | None, read_c: bool, formats: Any = None,
             scales: Scales | None = None) -> tuple | None:
    """The signature of a call, or None if an array is of neither CuPy nor PyTorch."""
    if type(a) is type(b) and framework(type(a)) == "torch":
        # most calls: two PyTorch tensors, keyed here rather than by a call of _keyed
        # each (as _keyed keys them: a function call costs about what its work does)
        address_a, address_b = a.data_ptr(), b.data_ptr()
        capped_a, capped_b = address_a | 64, address_b | 64
        key_a = (a.shape, a.stride(), a.dtype, capped_a & -capped_a, a.get_device())
        key_b = (b.shape, b.stride(), b.dtype, capped_b & -capped_b, b.get_device())
    else:
        (key_a, address_a), (key_b, address_b) = _keyed(a), _keyed(b)
        if key_a is None or key_b is None:
            return None
    key = (key_a, key_b, variant, tuple(sorted(params.items())) if params else (),
           activation, precision, out_dtype)
    if formats is not None or scales is not None:  # 8-bit products
        if not (formats is None or isinstance(formats, str) or (
                isinstance(formats, (tuple, list))
                and all(f is None or isinstance(f, str) for f in formats))):
            return None  # not a format's name: the checks say so
        key_sa = key_sb = None
        if scales is not None:
            if scales.a is not None and (key_sa := _keyed(scales.a)[0]) is None:
                return None
            if scales.b is not None and (key_sb := _keyed(scales.b)[0]) is None:
                return None
        key += (tuple(formats) if isinstance(formats, list) else formats, (key_sa, key_sb))
    if target is not None:
        target_key, start = _keyed(target)
        if target_key is None:
            return None
        bias_key, address_bias = (None, 0) if bias is None else _keyed(bias)
        if bias is not None and bias_key is None:
            return None
        # Whether the target shares a byte with an input (it is then written through a
        # temporary): from each array's address and its cached reach
        low, high = _reach(target_key)
        low, high = start + low, start + high
        first, end = _reach(key_a)
        shared = low < address_a + end and address_a + first < high
        if not shared:
            first, end = _reach(key_b)
            shared = low < address_b + end and address_b + first < high
        if bias is not None and not shared:
            first, end = _reach(bias_key)
            shared = low < address_bias + end and address_bias + first < high
        key += (target_name, target_key, read_c, shared)
        return key if bias is None else key + (bias_key,)
    if bias is not None:
        bias_key = array_key(bias)
        if bias_key is None:
            return None
        key += (bias_key,)
    return key
