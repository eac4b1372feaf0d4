"""Kernel arguments as ``cuLaunchKernel`` takes them: values packed once into host
buffers (:func:`packed`), one launch's array of parameter addresses (:class:`Arguments`),
a launch's function, grid, block and shared memory (:func:`geometry`), and where each of
a variant's extra arguments comes from (:class:`Source`, :class:`ExtraArg`). Plans pack
what a signature fixes; each call adds only its addresses.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import functools
import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

#: Sets of kernel arguments kept per plan, by the call's addresses and scalars. A model's
#: layers of one shape share a plan, each calling it at its own addresses, which PyTorch's
#: pool gives again from step to step: a deep model's step is hundreds of calls to one
#: plan. An entry is a few hundred bytes.
RECENT_ARGS = 256


class ByValue:
    """A kernel argument passed by value: the bytes at host ``address``, which lie inside
    ``owner`` (kept alive with the argument). Made once (a plan's sizes, a tensor map), it
    costs nothing per call."""

    __slots__ = ("address", "owner")

    def __init__(self, owner: Any, address: int) -> None:
        self.owner, self.address = owner, address


class Arguments:
    """One launch's kernel parameters as ``cuLaunchKernel`` takes them: an array of host
    addresses, one per parameter, each where that parameter's bytes lie. Device addresses
    (ints) are stored here, 8 bytes each; a :class:`ByValue` stays where it is.

    >>> args = Arguments([0x7f0000000000, *packed("if", (64, 0.5))])  # doctest: +SKIP
    """

    __slots__ = ("address", "_keep")

    def __init__(self, values: Sequence[int | ByValue]) -> None:
        pointers = [v for v in values if isinstance(v, int)]
        stored = (ctypes.c_uint64 * max(len(pointers), 1))(*pointers)
        base, index, addresses = ctypes.addressof(stored), 0, []
        for value in values:
            if isinstance(value, int):
                addresses.append(base + 8 * index)
                index += 1
            else:
                addresses.append(value.address)
        array = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
        self.address = ctypes.addressof(array)
        self._keep = (stored, array, [v.owner for v in values if not isinstance(v, int)])


def remembered(memo: dict, key: tuple, make: Callable[[], Any]) -> Any:
    """``memo[key]``, made and kept there if missing: a plan's kernel arguments, built
    once per set of addresses. ``memo`` keeps the ``RECENT_ARGS`` latest, and may be
    shared between threads (each drop tolerates another's).

    >>> memo = {}
    >>> remembered(memo, (1, 2), lambda: "made"), remembered(memo, (1, 2), lambda: "again")
    ('made', 'made')
    """
    found = memo.get(key)
    if found is None:
        found = make()
        if len(memo) >= RECENT_ARGS:  # the oldest goes (another thread may have taken it)
            with contextlib.suppress(KeyError, StopIteration, RuntimeError):
                del memo[next(iter(memo))]
        memo[key] = found
    return found


def packed(codes: str, values: tuple) -> tuple[ByValue, ...]:
    """``values`` as by-value kernel arguments of the C types ``codes`` names in
    ``struct``'s letters (``i`` int, ``q`` long long, ``f`` float, ``d`` double), packed
    once into one host buffer, each at its natural alignment (as C lays out parameters).

    >>> [arg.address % 8 for arg in packed("id", (7, 0.5))][1]
    0
    """
    size, offsets = _packing(codes)
    buffer = ctypes.create_string_buffer(size)
    struct.pack_into(codes, buffer, 0, *values)
    base = ctypes.addressof(buffer)
    return tuple(ByValue(buffer, base + offset) for offset in offsets)


def geometry(function: Any, grid: tuple[int, ...], block: tuple[int, ...], shared_mem: int
             ) -> tuple:
    """A launch's function (its driver handle), grid, block and dynamic shared memory as
    ``cuLaunchKernel`` takes them (three dimensions each), for :func:`enqueue`."""
    return (function.ptr, *(*grid, 1, 1)[:3], *(*block, 1, 1)[:3], shared_mem)


@functools.cache
def _packing(chars: str) -> tuple[int, tuple[int, ...]]:
    """Bytes and offsets of values of the ``struct`` codes ``chars`` in native layout."""
    ends = [struct.calcsize(chars[:i + 1]) for i in range(len(chars))]
    starts = (end - struct.calcsize(c) for end, c in zip(ends, chars, strict=True))
    return max(ends[-1], 8), tuple(starts)


#: The extra kernel arguments a variant may declare (``Variant.extra_args``). The small
#: parts' maps are rung 33's: A's and B's TF32 small parts, which a pre-pass writes after
#: their big parts (``xgemm.parts.Parts``). The sets of maps are rung 34's: eight maps of
#: an operand, one per residue of its rows mod 8, passed as one argument. The last two are
#: the grouped product's (``xgemm.grouped``, which passes them itself): the address of
#: the groups' ends and their count.
EXTRA_ARGS = ("tensor_map_a", "tensor_map_b", "tensor_map_c", "partials", "arrivals",
              "scale_a", "scale_b", "tensor_map_a_small", "tensor_map_b_small",
              "tensor_maps_a", "tensor_maps_b", "group_ends", "groups")


class Addresses(NamedTuple):
    """A call's device addresses, which its kernel arguments start from: A's, B's and C's
    (as the kernel reads and writes them: the operands' copies where the plan makes
    some), split-K's (or rung 25's) partial sums and arrival counters, an 8-bit
    product's scales; 0 where the call has none. ``xgemm.launch`` makes one per call.

    >>> Addresses(a=0x1000, b=0x2000, c=0x3000).scale_a
    0
    """

    a: int
    b: int
    c: int
    partials: int = 0
    arrivals: int = 0
    scale_a: int = 0
    scale_b: int = 0


class Source(enum.Enum):
    """Which of a call's :class:`Addresses` an extra argument starts from: the value is
    the field's name. ``NONE``: an empty tensor map, for a kernel that reads none."""

    A = "a"
    B = "b"
    C = "c"
    PARTIALS = "partials"
    ARRIVALS = "arrivals"
    SCALE_A = "scale_a"
    SCALE_B = "scale_b"
    NONE = None

    def address(self, addresses: Addresses) -> int:
        """Where this source lies in a call.

        >>> Source.PARTIALS.address(Addresses(1, 2, 3, partials=4))
        4
        """
        return getattr(addresses, self.value)


class ExtraArg(NamedTuple):
    """One extra kernel argument of a launch (``Variant.extra_args``), as planned: the
    address it starts from, bytes past it, and for a tensor map its geometry (dtype name,
    extents, strides in bytes, box); None for a plain pointer.

    >>> ExtraArg(Source.PARTIALS, 4096, None).source.name
    'PARTIALS'
    """

    source: Source
    offset: int
    geometry: tuple | None
