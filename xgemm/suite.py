"""The practitioner's suite (``xgemm bench --suite PART``): ``auto`` against cuBLAS on the
cases a user of each dtype meets, kernel time and the time of the whole call.

Each case is measured on one set of fresh random inputs, shared by both contenders:

- kernel: CUDA events around each single call, the GPU held busy while the host makes it
  (``xgemm.bench.time_launches``), so it is the GPU's time alone: for ``auto`` that of
  the prepared plan, copies included; the median of the runs.
- call: ``xgemm.matmul`` queued back to back between two CUDA events, and the baseline
  the same way: what a loop of such products costs, host and GPU together; the two take
  turns, round after round, so that a GPU slowing as it warms slows both alike.

The baseline is cuBLAS through ``cupy.matmul`` or ``torch.matmul``, whichever ran the
kernel faster (CuPy has no batched bfloat16, and takes ten times PyTorch's time over a
batch of float16 products); for ``tf32`` cuBLAS runs in TF32 in both (``CUPY_TF32=1``,
read by CuPy at its first float32 product, which is why a part is one process). The
result is checked against cuBLAS's before anything is timed.

Example:
    >>> [case.label for case in CASES["float64"]]
    ['4096x4096x4096', '8192x8192x8192']
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The parts, each run in its own process (TF32 is a CuPy setting read once).
PARTS = ("tf32", "float64", "float16", "bfloat16", "float32")


@dataclass(frozen=True)
class Case:
    """One product: ``batch`` x (m x k) @ (k x n) in ``layout`` ("NT": B a transposed view)."""

    m: int
    n: int
    k: int
    batch: int = 1
    layout: str = "NN"

    @property
    def label(self) -> str:
        """``[BATCHx]MxNxK[:LAYOUT]``, as ``xgemm bench --shapes`` takes it."""
        shape = f"{self.m}x{self.n}x{self.k}"
        return (f"{self.batch}x" if self.batch > 1 else "") + shape + (
            f":{self.layout}" if self.layout != "NN" else "")


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
    # the FP32 issue's nine shapes (8192 x 64 x 8192 with B transposed: a skinny N)
    "float32": [*_squares(1024, 2048, 4096, 8192, 4095), Case(3000, 2000, 1000),
                Case(8192, 64, 8192, layout="NT"), Case(64, 4096, 64), Case(128, 128, 65536)],
}


def _calls(kernel_ms: float) -> int:
    """Calls per queued round: about 30 ms of work, 3 to 50 calls."""
    return max(3, min(50, math.ceil(30 / max(kernel_ms, 1e-3))))


def measure(part: str, case: Case, repeat: int = 30, rounds: int = 5) -> dict[str, Any]:
    """One row: ``auto``'s pick and both contenders' kernel and call milliseconds."""
    import cupy

    import xgemm
    from xgemm import bench, overhead

    dtype = "float32" if part == "tf32" else part
    precision = "tf32" if part == "tf32" else None
    problem = bench.Problem(case.m, case.n, case.k, batch=case.batch, layout=case.layout,
                            dtype=dtype, precision=precision)
    a, b, c = problem.a, problem.b, problem.c

    def kernel_ms(fn) -> float:
        return statistics.median(bench.time_launches(fn, repeat=repeat,
                                                     flush_l2=problem.flush_l2))

    baselines = _baselines(a, b, precision)
    timed = {name: kernel_ms(fn) for name, fn in baselines.items()}
    baseline_name = min(timed, key=timed.__getitem__)
    baseline = baselines[baseline_name]
    launch = xgemm.prepare(a, b, out=c, precision=precision)
    c.fill(cupy.nan)
    launch()
    tolerance = bench.CHECK_TOLERANCE["tf32" if precision else dtype]
    # against cupy.matmul's product (in float32, rounded, for a batch of bfloat16)
    error = bench.relative_error(c, problem.expected)
    row: dict[str, Any] = {"part": part, "case": case.label, "variant": launch.variant.name,
                           "params": dict(launch.params), "copies": list(launch.copies),
                           "baseline": baseline_name, "error": error}
    if not error < tolerance:
        row["status"] = f"wrong result: error {error:.3g} against cuBLAS"
        return row
    kernel = {"cublas_ms": timed[baseline_name], "auto_ms": kernel_ms(launch)}
    calls = _calls(kernel["cublas_ms"])
    call = overhead.queued_ms_in_turns(
        {"cublas_call_ms": baseline,
         "auto_call_ms": lambda: xgemm.matmul(a, b, precision=precision)}, calls, rounds)
    row.update(kernel, **call, status="ok",
               x_kernel=kernel["cublas_ms"] / kernel["auto_ms"],
               x_call=call["cublas_call_ms"] / call["auto_call_ms"])
    return row


def _baselines(a: Any, b: Any, precision: str | None) -> dict[str, Callable[[], Any]]:
    """cuBLAS through CuPy and through PyTorch, those that take the case, by name."""
    import cupy

    found: dict[str, Callable[[], Any]] = {}
    try:
        cupy.matmul(a, b)
        found["cupy.matmul"] = lambda: cupy.matmul(a, b)
    except TypeError:  # no batched bfloat16
        pass
    try:
        import torch
    except ImportError:
        return found
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
    found["torch.matmul"] = lambda: torch.matmul(ta, tb)
    return found


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
