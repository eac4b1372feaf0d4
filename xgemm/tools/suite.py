"""The practitioner's suite (``xgemm bench --suite PART``): ``auto`` against cuBLAS on the
cases a user of each dtype meets, kernel time and the time of the whole call.

Each case is measured by ``xgemm.tools.measuring``, as the random and models suites'
products are: one set of fresh random inputs shared by both contenders, the kernel time
(CUDA events, the GPU held busy while the host launches) and the whole call queued back
to back, in turns, against cuBLAS through ``cupy.matmul`` or ``torch.matmul`` (whichever
ran faster, ``out=`` given to each), the result checked against cuBLAS's first. The
floating parts give xgemm CuPy arrays (over PyTorch's tensors' memory: CuPy has no
batched bfloat16 product, so PyTorch's checks those); for ``tf32`` cuBLAS runs in TF32 in
both (``CUPY_TF32=1``, read by CuPy at its first float32 product, which is why a part is
one process). The 8-bit parts (``float8``, ``int8``) run on PyTorch tensors against
cuBLASLt (``torch._scaled_mm``, ``torch._int_mm``), B a weight's transposed view, and
also time xgemm's own bfloat16 ``wgmma`` on the same values (``x_bf16``: what 8 bits buy
over 16).

Example:
    >>> [case.label for case in CASES["float64"]]
    ['4096x4096x4096', '8192x8192x8192']
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .measuring import EIGHT_BIT_OUTPUT, Product, measure_eight_bit
from .measuring import measure as measure_product

#: The parts, each run in its own process (TF32 is a CuPy setting read once).
PARTS = ("tf32", "float64", "float16", "bfloat16", "float32", "float8", "int8")


@dataclass(frozen=True)
class Case:
    """One product: ``batch`` x (m x k) @ (k x n) in ``layout`` ("NT": B a transposed view)."""

    m: int
    n: int
    k: int
    batch: int = 1
    layout: str = "NN"
    #: 8-bit parts: B's FP8 format where it differs from A's (e4m3), and the scales: one
    #: per operand ("tensor") or per row of A and column of B ("vector")
    b_format: str = "float8_e4m3fn"
    scales: str = "tensor"

    @property
    def label(self) -> str:
        """``[BATCHx]MxNxK[:LAYOUT]``, as ``xgemm bench --shapes`` takes it (8-bit cases
        add B's format or their scales where those are not the first case's)."""
        shape = f"{self.m}x{self.n}x{self.k}"
        extra = ("" if self.b_format == "float8_e4m3fn" else " e4m3 x e5m2") + (
            "" if self.scales == "tensor" else " row/column scales")
        return (f"{self.batch}x" if self.batch > 1 else "") + shape + (
            f":{self.layout}" if self.layout != "NN" else "") + extra


def _squares(*sizes: int, layout: str = "NN") -> list[Case]:
    return [Case(s, s, s, layout=layout) for s in sizes]


_SIXTEEN_BIT = [*_squares(1024, 2048, 4095, 4096, 8192), Case(4096, 11008, 4096),
                Case(8192, 1024, 8192), Case(16, 4096, 4096),
                Case(1024, 1024, 64, batch=64),   # attention scores: q @ k^T per head
                Case(1024, 64, 1024, batch=64)]   # attention output: p @ v per head
#: The cases of each part.
CASES: dict[str, list[Case]] = {
    "tf32": [c for layout in ("NN", "NT", "TN", "TT") for c in _squares(4096, 8192, layout=layout)],
    "float64": _squares(4096, 8192),
    "float16": _SIXTEEN_BIT,
    "bfloat16": _SIXTEEN_BIT,
    # squares, a mid-sized product, and float32's hard cases: a skinny N (8192 x 64 x 8192,
    # B transposed), a tiny K, and a long K over one tile
    "float32": [*_squares(1024, 2048, 4096, 8192, 4095), Case(3000, 2000, 1000),
                Case(8192, 64, 8192, layout="NT"), Case(64, 4096, 64), Case(128, 128, 65536)],
    # squares, an LLM layer, mixed formats and the per-row / column scales of
    # quantised inference
    "float8": [*_squares(4096, 8192, layout="NT"), Case(4096, 11008, 4096, layout="NT"),
               Case(8192, 8192, 8192, layout="NT", b_format="float8_e5m2"),
               Case(8192, 8192, 8192, layout="NT", scales="vector")],
    "int8": [*_squares(4096, 8192, layout="NT"), Case(4096, 11008, 4096, layout="NT")],
}


def measure(part: str, case: Case, repeat: int = 30, rounds: int = 5) -> dict[str, Any]:
    """One row: ``auto``'s pick and both contenders' kernel and call milliseconds
    (``measuring.measure`` on CuPy arrays, or ``measuring.measure_eight_bit``).

    >>> measure("float64", CASES["float64"][0])["status"]  # doctest: +SKIP
    'ok'
    """
    lead = (case.batch,) if case.batch > 1 else ()
    product = Product(case.m, case.n, case.k, case.layout, lead, b_lead=lead)
    if part in EIGHT_BIT_OUTPUT:
        row = measure_eight_bit(part, product, repeat=repeat, rounds=rounds,
                                b_format=case.b_format, scales=case.scales)
    else:
        row = measure_product(part, product, regret=False, repeat=repeat, rounds=rounds,
                              framework="cupy")
    return {**row, "case": case.label}


def run(part: str, repeat: int = 30, rounds: int = 5) -> list[dict[str, Any]]:
    """Every case of ``part`` (one of PARTS), in order; a failure lands in its row."""
    if part not in CASES:
        raise ValueError(f"unknown suite part {part!r}: one of {', '.join(PARTS)}")
    rows = []
    for case in CASES[part]:
        try:
            rows.append(measure(part, case, repeat, rounds))
        except Exception as exc:  # one broken case must not end the run
            rows.append({"part": part, "case": case.label,
                         "status": f"error: {type(exc).__name__}: {exc}"})
    return rows


def geomean(values: list[float]) -> float | None:
    """The geometric mean, or None for no values.

    >>> round(geomean([0.5, 2.0]), 6)
    1.0
    """
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None
