"""``variant="auto"``: the tuning file's entry for a GPU, dtype and shape, where ``xgemm
tune`` (or an autotuned call) wrote one; otherwise ``xgemm.plan`` asks the cost model
(``xgemm.cost``) for the cheapest candidate. Lookups are cached per device, dtype, shape
and precision, and forgotten when this process writes the tuning file.
"""

from __future__ import annotations

import functools

from . import gpu, tunefile
from .registry import cdiv, get_variant


def eight_bit_choice(m: int, n: int, dtype: str, cc: int, sms: int, batch: int = 1
                     ) -> tuple[str, dict[str, int]]:
    """The one rung that multiplies 8-bit inputs on a GPU of compute capability ``cc`` x
    10 (``wgmma_8bit`` on sm_90, ``mma_int8`` for int8 from sm_80), on its second
    candidate point (narrower tiles, a deeper ring) where its defaults' tiles would leave
    SMs idle: FP8 at 4096^3 ran 0.95x torch._scaled_mm with 4 stages against 0.77x with 3
    (bench/results/h100/evidence/wgmma_8bit.txt). 8-bit rungs have no cost constants yet.

    >>> eight_bit_choice(4096, 4096, "float8_e4m3fn", 90, 132)[1]["BN"]
    256
    >>> eight_bit_choice(1024, 1024, "int8", 80, 108)[0]
    'mma_int8'
    """
    eight_bit = get_variant("wgmma_8bit")
    v = eight_bit if eight_bit.runs_on(cc) or dtype != "int8" else get_variant("mma_int8")
    params, narrow = dict(v.defaults), {**v.defaults, **v.candidates[1]}
    if cdiv(m, params["BM"]) * cdiv(n, params["BN"]) * batch < sms:
        params = narrow
    return v.name, params


@functools.lru_cache(maxsize=4096)
def _tuned(m: int, n: int, k: int, dtype: str, device: int, precision: str | None
           ) -> tuple[str, tuple[tuple[str, int], ...]] | None:
    found = tunefile.tune_cache().lookup(gpu.gpu_name(device), dtype, m, n, k)
    if found is None or (precision is not None
                         and get_variant(found[0]).precision != precision):
        return None
    name, params = found
    return name, tuple(sorted(params.items()))


def choose(m: int, n: int, k: int, dtype: str, device: int, precision: str | None = None,
           batch: int = 1) -> tuple[str, dict[str, int]] | None:
    """The (variant, parameters) tuned for GPU ``device``, this dtype and this shape (or
    its bucket), or None where nothing was tuned. With ``precision="tf32"`` an entry
    counts only if it is a TF32 rung (tuning is exact unless TF32 rungs are named).
    ``batch`` is accepted for the caller's convenience: entries are per product.

    >>> choose(4096, 4096, 4096, "float16", 0)  # doctest: +SKIP
    ('wgmma', {'BM': 128, ...})
    """
    found = _tuned(m, n, k, dtype, device, precision)
    return None if found is None else (found[0], dict(found[1]))


def forget() -> None:
    """Drop every cached lookup (the tuning file changed)."""
    _tuned.cache_clear()


tunefile.on_change(forget)
