"""``xgemm bench --suite tf32x3``: float32 products with ``precision="tf32x3"`` (auto's
pick: rung 33 where it pays, an exact rung elsewhere) beside cuBLAS SGEMM (``cupy.matmul``
with TF32 off) on the same data, time and error side by side, each 3xTF32 rung by name
(31, 32, 33) where B lies as they read it, and TF32's error (``wgmma_tf32`` by name) for
scale.

Two kinds of case: squares (4096^3 and 8192^3, B column-major, as the 3xTF32 rungs read
it by name, and row-major, which rung 33's split transposes as it reads it), for the
speed; and the error model's (M = N = 2048, an output large enough that auto takes rung
33; K from 16 to 65536; normal, uniform [0, 1), rows scaled by 2^-30..2^30, and terms that
cancel), for the accuracy. Errors are relative Frobenius
errors against the float64 product of the same inputs. Kernel times: CUDA events, the L2
scrubbed before each, median of many (a prepared launch, its pre-pass included). Call
times: ``xgemm.matmul(a, b, precision="tf32x3")`` against ``cupy.matmul``, queued back
to back in turns (``overhead.call_against_baselines``): what a user's call costs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from . import markdown, overhead
from .bench import relative_error

#: The operands' dtype (``xgemm bench --suite tf32x3`` takes no other).
DTYPE = "float32"
#: (label, M, N, K, input kind, B column-major)
CASES = [(f"{s}^3 {'NT' if col else 'NN'}", s, s, s, "normal", col)
         for s in (4096, 8192) for col in (True, False)] + [
    (f"2048x2048x{k} {kind}", 2048, 2048, k, kind, True)
    for kind in ("normal", "uniform", "scaled_rows", "cancel") for k in (16, 256, 4096, 65536)]
#: Rows a run writes: one a case.
ROWS = len(CASES)


#: The 3xTF32 rungs, timed by name beside auto's pick: rung number -> variant.
RUNGS = {"31": "wgmma_tf32x3", "32": "wgmma_tf32x3_rs", "33": "wgmma_tf32x3_parts"}


def inputs(kind: str, m: int, n: int, k: int, b_col: bool, seed: int = 0) -> tuple[Any, Any]:
    """A (M x K) and B (K x N) float32 of ``kind`` (the module text); B column-major
    where ``b_col``. The cancelling kind repeats the first half of K negated, to 1e-3."""
    import cupy

    rng = cupy.random.default_rng(seed)
    if kind == "uniform":
        a, b = rng.random((m, k), dtype=cupy.float32), rng.random((k, n), dtype=cupy.float32)
    else:
        a = rng.standard_normal((m, k), dtype=cupy.float32)
        b = rng.standard_normal((k, n), dtype=cupy.float32)
    if kind == "scaled_rows":
        a *= cupy.ldexp(cupy.float32(1), rng.integers(-30, 31, (m, 1)).astype(cupy.int32))
    elif kind == "cancel":
        half = k // 2
        a[:, half:2 * half] = a[:, :half]
        b[half:2 * half] = -b[:half] * (1 + 1e-3 * rng.standard_normal((half, n),
                                                                      dtype=cupy.float32))
    return a, cupy.asfortranarray(b) if b_col else b


def measure(label: str, m: int, n: int, k: int, kind: str, b_col: bool) -> dict[str, Any]:
    """One case's row: SGEMM's, tf32x3's (auto's pick) and each 3xTF32 rung's (by name,
    where B is column-major) kernel and call times and errors, and TF32's error."""
    import cupy

    import xgemm
    from xgemm.timing import time_launches

    a, b = inputs(kind, m, n, k, b_col)
    ref = a.astype(cupy.float64) @ b.astype(cupy.float64)

    def error(c: Any) -> float:
        return relative_error(c.astype(cupy.float64), ref)

    three = xgemm.prepare(a, b, precision="tf32x3")
    contenders = {"sgemm": lambda: cupy.matmul(a, b), "tf32x3": three}
    if b_col:  # the rungs by name (they read a column-major B only)
        for rung, name in RUNGS.items():
            contenders[rung] = xgemm.prepare(a, b, variant=name)
    row: dict[str, Any] = {"case": label, "m": m, "n": n, "k": k, "kind": kind,
                           "layout": "NT" if b_col else "NN", "variant": three.variant.name,
                           # TF32 by name: for small K, precision="tf32" runs exact
                           "tf32_error": error(xgemm.matmul(a, cupy.asfortranarray(b),
                                                            variant="wgmma_tf32"))}
    for name, launch in contenders.items():
        row[f"{name}_error"] = error(launch())
        row[f"{name}_ms"] = statistics.median(time_launches(launch, flush_l2=True))
    row.update(overhead.call_against_baselines(  # the whole call, checks and lookup included
        {"cupy.matmul": lambda: cupy.matmul(a, b)},
        lambda: xgemm.matmul(a, b, precision="tf32x3"),
        overhead.calls_per_round(row["sgemm_ms"])))
    row["tflops"] = 2 * m * n * k / row["tf32x3_ms"] / 1e9
    return row


def run(progress: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
    """Every case (:data:`CASES`): one row each."""
    rows = []
    for case in CASES:
        rows.append(measure(*case))
        if progress:
            progress(rows[-1])
    return rows


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table: auto's speed-ups over SGEMM (kernel, whole call; "-"
    in a file whose call column timed a prepared launch instead, before 2026-11-27), the
    errors, and each rung's by name (kernel speed-up, error over SGEMM's).

    >>> row = {"case": "c", "variant": "wgmma_tf32x3_parts", "tflops": 120.0,
    ...        "sgemm_ms": 2.0, "tf32x3_ms": 1.0, "cublas_call_ms": 2.0, "auto_call_ms": 1.1,
    ...        "sgemm_error": 1e-6, "tf32x3_error": 5e-7, "tf32_error": 1e-3,
    ...        "31_ms": 4.0, "31_error": 1e-6}
    >>> print(table([row]).splitlines()[-1].split(" | ")[3:])
    ['2.00x', '1.82x', '1.0e-06', '5.0e-07', '0.50', '1.0e-03', '0.50x / - / -', '1.00 / - / - |']
    """
    header = ("case", "auto's pick", "TFLOP/s", "x SGEMM", "x SGEMM (call)",
              "SGEMM error", "tf32x3 error", "error / SGEMM's", "TF32 error",
              "rungs 31 / 32 / 33 x SGEMM", "their error / SGEMM's")

    def rungs(r: dict[str, Any], field: str) -> str:
        """Each rung's speed-up ("ms") or error ratio ("error"), "-" where not timed."""
        return " / ".join(
            "-" if f"{rung}_ms" not in r else f"{r['sgemm_ms'] / r[f'{rung}_ms']:.2f}x"
            if field == "ms" else f"{r[f'{rung}_error'] / r['sgemm_error']:.2f}"
            for rung in RUNGS)

    return markdown.table(header, (
        (r["case"], r["variant"], f"{r['tflops']:.0f}", f"{r['sgemm_ms'] / r['tf32x3_ms']:.2f}x",
         f"{r['cublas_call_ms'] / r['auto_call_ms']:.2f}x" if "auto_call_ms" in r else "-",
         f"{r['sgemm_error']:.1e}",
         f"{r['tf32x3_error']:.1e}", f"{r['tf32x3_error'] / r['sgemm_error']:.2f}",
         f"{r['tf32_error']:.1e}", rungs(r, "ms"), rungs(r, "error"))
        for r in rows))
