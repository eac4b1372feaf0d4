"""The practitioner's suite (``xgemm bench --suite PART``): ``auto`` against cuBLAS on the
cases a user of each dtype meets, kernel time and the time of the whole call.

Each case is measured on one set of fresh random inputs, shared by both contenders:

- kernel: CUDA events around each single call, the GPU held busy while the host makes it
  (``xgemm.timing.time_launches``), so it is the GPU's time alone: for ``auto`` that of
  the prepared plan, copies included; the median of the runs.
- call: ``xgemm.matmul`` queued back to back between two CUDA events, and the baseline
  the same way: what a loop of such products costs, host and GPU together; the two take
  turns, round after round, so that a GPU slowing as it warms slows both alike.

The baseline is cuBLAS through ``cupy.matmul`` or ``torch.matmul``: for the kernel time,
whichever ran the kernel faster; for the call, whichever made the faster call, the two
timed in turns with ``auto`` (they run the same kernel, but CuPy's call costs the host
about twice PyTorch's; CuPy has no batched bfloat16, and takes ten times PyTorch's time
over a batch of float16 products); for ``tf32`` cuBLAS runs in TF32 in both (``CUPY_TF32=1``,
read by CuPy at its first float32 product, which is why a part is one process). The
result is checked against cuBLAS's before anything is timed.

The 8-bit parts (``float8``, ``int8``) run on PyTorch tensors: the baseline is cuBLASLt
through ``torch._scaled_mm`` (FP8, bfloat16 out, the same scales) or ``torch._int_mm``
(int8, int32 out), B a transposed view (``w.T``: the K-major layout both read in place).
Their rows also time xgemm's own bfloat16 ``wgmma`` on the same values (``bf16_ms``,
``x_bf16``: what 8 bits buy over 16), and check the result against a float64 product of
the dequantised inputs.

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

from ..specs import numpy_dtype
from .tolerances import TOLERANCE

#: The parts, each run in its own process (TF32 is a CuPy setting read once).
PARTS = ("tf32", "float64", "float16", "bfloat16", "float32", "float8", "int8")
#: The 8-bit parts and their results' dtype, which keys their tolerance against the
#: float64 product of the dequantised inputs (``tolerances.TOLERANCE["8-bit"]``).
EIGHT_BIT_OUTPUT = {"float8": "bfloat16", "int8": "int32"}


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
    # the FP32 issue's nine shapes (8192 x 64 x 8192 with B transposed: a skinny N)
    "float32": [*_squares(1024, 2048, 4096, 8192, 4095), Case(3000, 2000, 1000),
                Case(8192, 64, 8192, layout="NT"), Case(64, 4096, 64), Case(128, 128, 65536)],
    # the squares, an LLM layer, mixed formats and the per-row / column scales of
    # quantised inference
    "float8": [*_squares(4096, 8192, layout="NT"), Case(4096, 11008, 4096, layout="NT"),
               Case(8192, 8192, 8192, layout="NT", b_format="float8_e5m2"),
               Case(8192, 8192, 8192, layout="NT", scales="vector")],
    "int8": [*_squares(4096, 8192, layout="NT"), Case(4096, 11008, 4096, layout="NT")],
}


def measure(part: str, case: Case, repeat: int = 30, rounds: int = 5) -> dict[str, Any]:
    """One row: ``auto``'s pick and both contenders' kernel and call milliseconds."""
    if part in EIGHT_BIT_OUTPUT:
        return measure_eight_bit(part, case, repeat, rounds)
    import cupy

    import xgemm

    from .. import timing
    from . import bench, overhead

    dtype = "float32" if part == "tf32" else part
    precision = "tf32" if part == "tf32" else None
    problem = bench.Problem(case.m, case.n, case.k, batch=case.batch, layout=case.layout,
                            dtype=dtype, precision=precision)
    a, b, c = problem.a, problem.b, problem.c

    def kernel_ms(fn) -> float:
        return statistics.median(timing.time_launches(fn, repeat=repeat,
                                                      flush_l2=problem.flush_l2))

    baselines = _baselines(a, b, precision)
    timed = {name: kernel_ms(fn) for name, fn in baselines.items()}
    baseline_name = min(timed, key=timed.__getitem__)
    launch = xgemm.prepare(a, b, out=c, precision=precision)
    c.fill(cupy.nan)
    launch()
    tolerance = TOLERANCE["cuBLAS"]["tf32" if precision else dtype]
    # against cupy.matmul's product (in float32, rounded, for a batch of bfloat16)
    error = bench.relative_error(c, problem.expected)
    row: dict[str, Any] = {"part": part, "case": case.label, "variant": launch.variant.name,
                           "params": dict(launch.params), "copies": list(launch.copies),
                           "baseline": baseline_name, "error": error}
    if not error < tolerance:
        row["status"] = f"wrong result: error {error:.3g} against cuBLAS"
        return row
    kernel = {"cublas_ms": timed[baseline_name], "auto_ms": kernel_ms(launch)}
    calls = overhead.calls_per_round(kernel["cublas_ms"], 30, 50)
    call = overhead.call_against_baselines(
        baselines, lambda: xgemm.matmul(a, b, precision=precision), calls, rounds)
    row.update(kernel, **call, status="ok",
               x_kernel=kernel["cublas_ms"] / kernel["auto_ms"],
               x_call=call["cublas_call_ms"] / call["auto_call_ms"])
    return row


def measure_eight_bit(part: str, case: Case, repeat: int = 30, rounds: int = 5
                      ) -> dict[str, Any]:
    """One row of an 8-bit part: ``auto`` (``wgmma_8bit``) against cuBLASLt through
    PyTorch, kernel and call, and against xgemm's bfloat16 ``wgmma`` on the same values
    (kernel times with the L2 scrubbed before each launch where the operands and C fit
    four times in it, ``timing.scrub_pays``, as the other parts decide). A shape cuBLASLt
    refuses gets the status "no baseline: ..." and no times."""
    import torch

    import xgemm

    from .. import timing
    from . import overhead

    generator = torch.Generator("cuda").manual_seed(case.m * 7 + case.n * 3 + case.k)
    m, n, k = case.m, case.n, case.k
    out_bytes = numpy_dtype(EIGHT_BIT_OUTPUT[part]).itemsize  # int32 sums, or bfloat16
    flush_l2 = timing.scrub_pays(m * k + k * n + out_bytes * m * n, torch.cuda.current_device())

    def draw(rows: int, cols: int, fmt: str) -> Any:
        if fmt == "int8":
            return torch.randint(-127, 128, (rows, cols), device="cuda", dtype=torch.int8,
                                 generator=generator)
        values = torch.randn((rows, cols), device="cuda", generator=generator)
        return values.to(getattr(torch, fmt))

    fmt_a, fmt_b = ("int8", "int8") if part == "int8" else ("float8_e4m3fn", case.b_format)
    a, w = draw(m, k, fmt_a), draw(n, k, fmt_b)
    b = w.T  # K-major B: a weight stored N x K
    if part == "int8":
        scale_a = scale_b = None
        baseline_name = "torch._int_mm"

        def baseline() -> Any:
            return torch._int_mm(a, b)
    else:
        shapes = ((m, 1), (1, n)) if case.scales == "vector" else ((), ())
        scale_a, scale_b = (torch.rand(shape, device="cuda", generator=generator) + 0.5
                            for shape in shapes)
        baseline_name = "torch._scaled_mm"

        def baseline() -> Any:
            return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)

    def auto() -> Any:
        return xgemm.matmul(a, b, scale_a=scale_a, scale_b=scale_b)

    def kernel_ms(fn) -> float:
        return statistics.median(timing.time_launches(fn, repeat=repeat, flush_l2=flush_l2))

    launch = xgemm.prepare(a, b, scale_a=scale_a, scale_b=scale_b)
    expected = a.double() @ b.double()
    if scale_a is not None:
        expected = scale_a.double() * expected * scale_b.double()
    error = _error(launch(), expected)
    row: dict[str, Any] = {"part": part, "case": case.label, "variant": launch.variant.name,
                           "params": dict(launch.params), "copies": list(launch.copies),
                           "baseline": baseline_name, "error": error}
    try:
        row["baseline_error"] = _error(baseline(), expected)
    except RuntimeError as exc:  # a shape cuBLASLt's 8-bit product does not take
        row["status"] = f"no baseline: {baseline_name} refused it ({exc})"
        return row
    if not error <= TOLERANCE["8-bit"][EIGHT_BIT_OUTPUT[part]]:
        row["status"] = f"wrong result: error {error:.3g} against float64"
        return row
    # the same values in bfloat16 (exact: FP8 and int8 values up to 256 are bfloat16's)
    wide_a, wide_b = a.to(torch.bfloat16), b.to(torch.bfloat16)
    kernel = {"cublas_ms": kernel_ms(baseline), "auto_ms": kernel_ms(launch),
              "bf16_ms": kernel_ms(lambda: xgemm.matmul(wide_a, wide_b, variant="wgmma"))}
    calls = overhead.calls_per_round(kernel["cublas_ms"], 30, 50)
    call = overhead.queued_ms_in_turns({"cublas_call_ms": baseline, "auto_call_ms": auto},
                                       calls, rounds)
    row.update(kernel, **call, status="ok",
               x_kernel=kernel["cublas_ms"] / kernel["auto_ms"],
               x_call=call["cublas_call_ms"] / call["auto_call_ms"],
               x_bf16=kernel["bf16_ms"] / kernel["auto_ms"])
    return row


def _error(c: Any, expected: Any) -> float:
    """Relative Frobenius error of a PyTorch result against a float64 one."""
    scale = float(expected.norm())
    return float((c.double() - expected).norm()) / (scale if scale > 0 else 1.0)


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
