"""A declaration's expressions (``xgemm.declarations``): Python over a rung's parameters
and the names a launch gives (``M``, ``N``, ``SMS``, ``BATCH``, ``THREADS``, ``BYTES``),
with ``cdiv``, ``min`` and ``max``, each compiled once; and the limits of a block and a
grid they are checked against.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import CodeType

#: Most threads a block may have on every GPU CuPy supports.
MAX_THREADS_PER_BLOCK = 1024
#: Most static ``__shared__`` memory a block may declare (opt-in beyond needs dynamic memory).
MAX_STATIC_SMEM_BYTES = 48 * 1024
#: Most dynamic shared memory a block may opt in to on the largest GPU (sm_90: 227 KiB);
#: a launch also checks the GPU it runs on (sm_80 allows 163 KiB, sm_86 99 KiB).
MAX_DYNAMIC_SMEM_BYTES = 227 * 1024
#: Largest grid: x, y, z.
MAX_GRID = (2**31 - 1, 65535, 65535)


def cdiv(a: int, b: int) -> int:
    """Ceiling division, available to the expressions of a declaration."""
    return -(-a // b)


@functools.cache
def _code(expr: str) -> CodeType:
    return compile(expr, f"<xgemm expression: {expr}>", "eval")


def evaluate(expr: str, names: Mapping[str, int]) -> int:
    """Evaluate one of a declaration's expressions (compiled once: matmul calls this)."""
    return eval(_code(expr), {"__builtins__": {}, "cdiv": cdiv, "min": min, "max": max},  # noqa: S307
                dict(names))


def holds(rule: str, names: Mapping[str, int]) -> bool:
    """Whether a constraint holds; one that divides by zero (a derived size of 0) does not."""
    try:
        return bool(evaluate(rule, names))
    except ZeroDivisionError:
        return False
