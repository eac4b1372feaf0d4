"""``xgemm bench --suite tf32x3``: float32 products with ``precision="tf32x3"`` (rung 31)
beside cuBLAS SGEMM (``cupy.matmul`` with TF32 off) on the same data, time and error side
by side, and TF32's error (``wgmma_tf32`` by name) for scale.

Two kinds of case: squares (4096^3 and 8192^3, A row-major and B column-major, the layouts
rung 31 reads in place; and B row-major, which the call first copies), for the speed; and
the error model's (M = N = 512, K from 16 to 65536, normal, uniform [0, 1), rows scaled
by 2^-30..2^30, and terms that cancel), for the accuracy. Errors are relative Frobenius
errors against the float64 product of the same inputs. Kernel times: CUDA events, the L2
scrubbed before each, median of many; call times: 20 calls queued back to back.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from . import markdown

#: (label, M, N, K, input kind, B column-major)
CASES = [(f"{s}^3 {'NT' if col else 'NN'}", s, s, s, "normal", col)
         for s in (4096, 8192) for col in (True, False)] + [
    (f"512x512x{k} {kind}", 512, 512, k, kind, True)
    for kind in ("normal", "uniform", "scaled_rows", "cancel") for k in (16, 256, 4096, 65536)]


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
    """One case's row: SGEMM's, tf32x3's (auto's pick: rung 31), rung 32's and rung 33's
    kernel and call times and errors, and TF32's error."""
    import cupy

    import xgemm
    from xgemm.timing import time_launches

    os.environ["CUPY_TF32"] = "0"  # cuBLAS's SGEMM, not its TF32
    a, b = inputs(kind, m, n, k, b_col)
    ref = a.astype(cupy.float64) @ b.astype(cupy.float64)
    scale = float(cupy.linalg.norm(ref))

    def error(c: Any) -> float:
        return float(cupy.linalg.norm(c.astype(cupy.float64) - ref)) / scale

    three = xgemm.prepare(a, b, precision="tf32x3")
    contenders = {"sgemm": lambda: cupy.matmul(a, b), "tf32x3": three}
    if b_col:  # rungs 32 and 33, named (they read a column-major B only)
        contenders["rs"] = xgemm.prepare(a, b, variant="wgmma_tf32x3_rs")
        contenders["parts"] = xgemm.prepare(a, b, variant="wgmma_tf32x3_parts")
    row: dict[str, Any] = {"case": label, "m": m, "n": n, "k": k, "kind": kind,
                           "layout": "NT" if b_col else "NN", "variant": three.variant.name,
                           # TF32 by name: for small K, precision="tf32" runs exact
                           "tf32_error": error(xgemm.matmul(a, cupy.asfortranarray(b),
                                                            variant="wgmma_tf32"))}
    for name, launch in contenders.items():
        row[f"{name}_error"] = error(launch())
        row[f"{name}_ms"] = statistics.median(time_launches(launch, flush_l2=True))
        launch()
        cupy.cuda.get_current_stream().synchronize()
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(20):
            launch()
        stop.record()
        stop.synchronize()
        row[f"{name}_call_ms"] = cupy.cuda.get_elapsed_time(start, stop) / 20
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
    """The rows as a Markdown table: speed-ups over SGEMM (kernel, call) and the errors.

    >>> print(table([{"case": "c", "variant": "wgmma_tf32x3", "tflops": 120.0,
    ...               "sgemm_ms": 2.0, "tf32x3_ms": 1.0, "sgemm_call_ms": 2.0,
    ...               "tf32x3_call_ms": 1.1, "sgemm_error": 1e-6, "tf32x3_error": 5e-7,
    ...               "tf32_error": 1e-3}]).splitlines()[-1])
    | c | wgmma_tf32x3 | 120 | 2.00x | 1.82x | 1.0e-06 | 5.0e-07 | 0.50 | 1.0e-03 | - | - | - | - |
    """
    header = ("case", "variant", "tf32x3 TFLOP/s", "x SGEMM", "x SGEMM (call)",
              "SGEMM error", "tf32x3 error", "error / SGEMM's", "TF32 error",
              "rung 32 x SGEMM", "rung 32 error / SGEMM's", "rung 33 x SGEMM",
              "rung 33 error / SGEMM's")
    return markdown.table(header, (
        (r["case"], r["variant"], f"{r['tflops']:.0f}", f"{r['sgemm_ms'] / r['tf32x3_ms']:.2f}x",
         f"{r['sgemm_call_ms'] / r['tf32x3_call_ms']:.2f}x", f"{r['sgemm_error']:.1e}",
         f"{r['tf32x3_error']:.1e}", f"{r['tf32x3_error'] / r['sgemm_error']:.2f}",
         f"{r['tf32_error']:.1e}",
         f"{r['sgemm_ms'] / r['rs_ms']:.2f}x" if "rs_ms" in r else "-",
         f"{r['rs_error'] / r['sgemm_error']:.2f}" if "rs_error" in r else "-",
         f"{r['sgemm_ms'] / r['parts_ms']:.2f}x" if "parts_ms" in r else "-",
         f"{r['parts_error'] / r['sgemm_error']:.2f}" if "parts_error" in r else "-")
        for r in rows))
