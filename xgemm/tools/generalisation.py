"""Suites that measure ``auto`` on shapes nobody tuned for (``xgemm bench --suite random``
and ``--suite models``), and how far its pick is from the best it could have made.

- **random**: a seeded sample of single products, M, N and K drawn log-uniformly from 1 to
  16384, layouts NN, NT and TN (a transposed view), under a cap on the multiply-adds so
  a run fits the GPU's time (:func:`random_cases`).
- **models**: the linear layers of public model configurations (:data:`MODELS`) at 1 to
  16384 tokens, the forward ``x @ W.T`` with x 3-D as a model passes it and both backward
  products, ``dY @ W`` and ``dY.T @ X`` (:func:`model_cases`), shapes shared by several
  models measured once.

Each row is measured by ``xgemm.tools.measuring`` on PyTorch tensors (the practitioner's
case), with ``out=`` given: the kernel and the whole call against cuBLAS's, and
**regret**: auto's kernel time over the fastest kernel time among the candidates, every
point that a rung declares for ``auto`` (``Variant.candidates``) timed on the same
operands, read as they lie. A regret of 1 means auto picked the best it had.

Example:
    >>> [c.label for c in random_cases(7, 3)]
    ['431x6043x1858:TN', '2891x2287x94:TN', '134x215x15684:TN']
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import ranking
from ..registry import Variant
from .measuring import PARTS, Product, measure, measure_eight_bit

__all__ = ["PARTS", "Product", "eight_bit_cases", "model_cases", "random_cases", "run",
           "summary"]

#: The largest dimension the random sample draws.
MAX_DIM = 16384
#: The most floating-point operations (2 M N K) of a random case: 2^38, 275 GFLOP.
FLOP_CAP = 2**38
#: The fewest: 2^22, 4 MFLOP. Below it every rung's kernel is its launch (2-4 us on an
#: H100) and the host's time per call is all that tells two choices apart.
FLOP_FLOOR = 2**22
#: The layouts the random sample draws: A and B row-major, B a transposed view (a weight
#: ``w.T``), A a transposed view (a backward product ``dY.T``).
RANDOM_LAYOUTS = ("NN", "NT", "TN")
#: The token counts of the models suite: decode (1-32), prefill and training batches.
TOKENS = (1, 8, 32, 128, 512, 4096, 16384)
#: The 8-bit parts of the random suite (``--dtype float8`` or ``int8``): FP8 (e4m3) with a
#: scale per row of A and per column of B against ``torch._scaled_mm``, int8 against
#: ``torch._int_mm`` (``measuring.measure_eight_bit``'s rows), no regret (auto's 8-bit
#: pick is a rule, not the cost model).
EIGHT_BIT_PARTS = ("float8", "int8")


def random_cases(seed: int, count: int = 36, cap: int = FLOP_CAP, floor: int = FLOP_FLOOR,
                 max_dim: int = MAX_DIM, min_dim: int = 1, max_k: int | None = None,
                 multiple: int = 1, max_m: int | None = None,
                 min_k: int | None = None, max_n: int | None = None,
                 min_m: int | None = None) -> list[Product]:
    """``count`` products drawn with ``numpy.random.default_rng(seed)``: M, N and K
    log-uniform over [min_dim, max_dim] (rounded to the nearest integer; K over
    [1, max_k] where ``max_k`` is given: a stratum of tiny-K products for calibration;
    over [min_k, max_k] where ``min_k`` is given too: a stratum of short K),
    then rounded up to a ``multiple`` (16: a stratum of aligned products, as a model's
    are), a layout from RANDOM_LAYOUTS; a draw of more than ``cap`` or fewer than
    ``floor`` floating-point operations is drawn again. Where ``max_m`` is given, M is
    drawn over [min_dim, max_m] and left as drawn (a stratum of few rows: a decode step's
    tokens, against a model's aligned N and K); ``max_n`` does the same for N (with
    ``max_m`` and ``min_k``: outputs of few tiles over a long K); ``min_m`` draws M over
    [min_m, max_dim] (with ``max_n``: a stratum of few columns under many rows).
    The same seed gives the same sample on every machine.

    >>> random_cases(1, 2) == random_cases(1, 2)
    True
    >>> all(x % 16 == 0 for c in random_cases(1, 4, multiple=16) for x in (c.m, c.n, c.k))
    True
    >>> all(c.m <= 16 and c.n % 64 == 0 for c in random_cases(1, 4, multiple=64, max_m=16))
    True
    >>> all(256 <= c.k <= 1024 for c in random_cases(1, 4, min_k=256, max_k=1024))
    True
    >>> all(32 <= c.m <= 300 and 32 <= c.n <= 300 and c.k >= 4096
    ...     for c in random_cases(1, 4, min_dim=32, max_m=300, max_n=300, min_k=4096))
    True
    >>> all(c.m >= 1024 and c.n <= 32 for c in random_cases(1, 4, max_n=32, min_m=1024))
    True
    """
    import numpy as np

    if min_m is not None and max_m is not None:
        raise ValueError("min_m and max_m: give one (a stratum of many rows, or of few)")
    rng = np.random.default_rng(seed)
    low, high = math.log(min_dim), math.log(max_dim)
    cases: list[Product] = []
    while len(cases) < count:
        if max_k is None and min_k is None:
            draw = rng.uniform(low, high, 3)
        else:
            k_low = math.log(min_k) if min_k is not None else 0.0
            k_high = math.log(max_k) if max_k is not None else high
            draw = rng.uniform([low, low, k_low], [high, high, k_high])
        if max_m is not None:
            draw[0] = rng.uniform(low, math.log(max_m))
        if min_m is not None:
            draw[0] = rng.uniform(math.log(min_m), high)
        if max_n is not None:
            draw[1] = rng.uniform(low, math.log(max_n))
        m, n, k = (-(-int(round(math.exp(x))) // multiple) * multiple for x in draw)
        if max_m is not None:
            m = int(round(math.exp(draw[0])))
        if max_n is not None:
            n = int(round(math.exp(draw[1])))
        layout = RANDOM_LAYOUTS[int(rng.integers(len(RANDOM_LAYOUTS)))]
        if floor <= 2 * m * n * k <= cap:
            cases.append(Product(m, n, k, layout))
    return cases


def eight_bit_cases(seed: int, count: int = 36) -> list[Product]:
    """:func:`random_cases`' draws for an 8-bit part: the same M, N and K rounded up to
    a multiple of 16 (cuBLASLt's 8-bit products take no other), and B a weight's
    transposed view (NT), the layout both cuBLASLt and xgemm's 8-bit rungs read in place.

    >>> [c.label for c in eight_bit_cases(7, 3)]
    ['431x6048x1872:NT', '2891x2288x96:NT', '134x224x15696:NT']
    """
    return [Product(c.m, -(-c.n // 16) * 16, -(-c.k // 16) * 16, "NT")
            for c in random_cases(seed, count)]


@dataclass(frozen=True)
class Model:
    """A decoder's linear layers, from its public configuration."""

    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    def linears(self) -> dict[str, tuple[int, int]]:
        """Each linear layer's weight shape (out features, in features), by name."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return {"q_proj": (q, self.hidden), "k_proj, v_proj": (kv, self.hidden),
                "o_proj": (self.hidden, q), "gate_proj, up_proj": (self.intermediate, self.hidden),
                "down_proj": (self.hidden, self.intermediate), "lm_head": (self.vocab, self.hidden)}


#: The public configurations the models suite takes its layers from (their config.json).
MODELS = (
    Model("Llama-3-8B", 4096, 32, 8, 128, 14336, 128256),
    Model("Llama-3-70B", 8192, 64, 8, 128, 28672, 128256),
    Model("Mistral-7B", 4096, 32, 8, 128, 14336, 32000),
    Model("Qwen2.5-7B", 3584, 28, 4, 128, 18944, 152064),
)


def model_cases(tokens: Iterable[int] = TOKENS, models: Sequence[Model] = MODELS
                ) -> list[Product]:
    """Every distinct product of the models' linears at each token count: the forward
    ``x @ W.T`` (x of shape (1, tokens, in), W (out, in): "NT"), the input's gradient
    ``dY @ W`` (dY (1, tokens, out): "NN") and the weight's ``dY.T @ X`` (over the
    tokens: "TN"). A shape several layers or models share appears once, named after the
    first.

    >>> [c.label for c in model_cases([8], MODELS[:1])][:3]
    ['1x8x4096x4096:NT', '1x8x4096x4096', '4096x4096x8:TN']
    """
    seen: dict[tuple, Product] = {}
    for t in tokens:
        for model in models:
            for layer, (out, inp) in model.linears().items():
                name = f"{model.name} {layer}"
                for product in (Product(t, out, inp, "NT", (1,), f"{name} forward"),
                                Product(t, inp, out, "NN", (1,), f"{name} dX"),
                                Product(out, inp, t, "TN", (), f"{name} dW")):
                    key = (product.m, product.n, product.k, product.layout, product.lead)
                    seen.setdefault(key, product)
    return list(seen.values())


# -- measuring -------------------------------------------------------------------------------
def run(part: str, cases: Sequence[Product], *, regret: bool = True, repeat: int = 10,
        rows: list[dict[str, Any]] | None = None, progress: Any = None
        ) -> list[dict[str, Any]]:
    """Every case, in order, appended to ``rows`` (a new list by default); a failure lands
    in its row. ``progress``: called after each row (to save, or update a bar)."""
    rows = [] if rows is None else rows
    for i, case in enumerate(cases):
        try:
            rows.append(measure_eight_bit(part, case, repeat=repeat,
                                          scales="tensor" if part == "int8" else "vector")
                        if part in EIGHT_BIT_PARTS
                        else measure(part, case, regret=regret, repeat=repeat, seed=i))
        except Exception as exc:  # one broken case must not end the run
            rows.append({"part": part, "case": case.label,
                         "status": f"error: {type(exc).__name__}: {exc}"})
        if progress is not None:
            progress()
    return rows


def summary(rows: Sequence[dict[str, Any]], seed: int | None = None) -> dict[str, Any]:
    """Geometric means and extremes over the rows measured ok.

    >>> s = summary([{"status": "ok", "x_call": 0.5, "x_kernel": 1.0, "regret": 1.0},
    ...              {"status": "ok", "x_call": 2.0, "x_kernel": 1.0, "regret": 1.21}])
    >>> s["geomean_call_x"], s["min_call_x"], round(s["geomean_regret"], 3), s["max_regret"]
    (1.0, 0.5, 1.1, 1.21)
    """
    ok = [r for r in rows if r.get("status") == "ok"]
    regrets = [r["regret"] for r in ok if "regret" in r]
    return {"seed": seed, "cases": len(rows), "ok": len(ok),
            "geomean_call_x": geomean([r["x_call"] for r in ok]),
            "geomean_kernel_x": geomean([r["x_kernel"] for r in ok]),
            "min_call_x": min((r["x_call"] for r in ok), default=None),
            "geomean_regret": geomean(regrets),
            "max_regret": max(regrets, default=None)}


def geomean(values: Sequence[float]) -> float | None:
    """The geometric mean, or None for no values.

    >>> geomean([0.5, 2.0])
    1.0
    """
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def auto_pick(row: dict[str, Any]) -> tuple[Variant, dict[str, int]]:
    """The variant and parameters ``auto`` picks now for a suite row's shape and part (no
    operands: ``ranking.auto_choice``), as on the GPU :func:`xgemm.gpu.properties` answers for.

    >>> row = {"part": "bfloat16", "m": 8192, "n": 8192, "k": 8192, "layout": "NN", "lead": []}
    >>> auto_pick(row)[0].name  # doctest: +SKIP
    'wgmma_pingpong'
    """
    dtype, precision = PARTS[row["part"]]
    return ranking.auto_choice(row["m"], row["n"], row["k"], dtype, row["layout"],
                               math.prod(row.get("lead") or [1]), precision)
