"""The lectures' other shared-memory kernels: transpose, reverse, sum and a 3 x 3 stencil.

They are memory-bound: what counts is how close they come to the device's copy
bandwidth (``xgemm bench --family ...``). Each family's variants are declared in
``declarations`` (registered with the GEMM ladder's) and rendered from
``kernels/<family>/``. A call is checked by ``planning`` (GPU arrays and their dtype,
then the family's rules from ``checks``: shapes, parameters against the declaration;
all before CuPy is even imported), laid out there (the device's limits, copies, the
launches) and launched; nothing is compiled or launched before every check has passed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..registry import get_variant
from .declarations import FAMILY_DEFAULTS
from .planning import PLANNERS, Run, Step, plan_reverse, plan_stencil3x3, plan_sum, plan_transpose

if TYPE_CHECKING:
    import cupy

#: Each family's variant when none is named (``declarations.FAMILY_DEFAULTS``).
DEFAULTS = FAMILY_DEFAULTS


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


def reverse(x: Any, variant: str | None = None, **params: int) -> cupy.ndarray:
    """``x[::-1]`` as a new array, by "static_smem" (the default) or "dynamic_smem":
    each block reverses a chunk of BLOCK x ITEMS elements through shared memory, any
    length.

    >>> import cupy as cp, xgemm
    >>> xgemm.reverse(cp.arange(5, dtype=cp.float32)).tolist()
    [4.0, 3.0, 2.0, 1.0, 0.0]
    """
    return plan_reverse(x, variant, **params)()


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


__all__ = ["DEFAULTS", "PLANNERS", "Run", "Step", "plan_reverse", "plan_stencil3x3", "plan_sum",
           "plan_transpose", "reverse", "stencil3x3", "sum", "sum_error_bound", "transpose"]
