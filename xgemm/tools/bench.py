"""Timing xgemm's variants against cuBLAS on the same inputs, in one run.

Method (the device guide's METHOD.md): CUDA events around each launch; warm-up launches
first, so compilation and module load stay out (the first call's time is reported apart
as ``compile_s``); the median of many timed launches, with min and max; the L2 cache
flushed before each timed launch when the operands would fit in it; cuBLAS
(``cupy.matmul``, TF32 off) timed in the same run on the same inputs; and every variant's
result checked against cuBLAS's before it is timed: a wrong one is reported, not timed.

Example:
    >>> from xgemm.tools import bench
    >>> from xgemm.tools.machine import machine_info
    >>> results = bench.run(["tiled", "vectorized"], [(1024, 1024, 1024)])  # doctest: +SKIP
    >>> print(bench.table(results, machine_info()))  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import math
import statistics
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..api import AUTO, Launch, prepare
from ..gpu import properties
from ..registry import get_variant
from ..specs import numpy_dtype
from ..timing import scrub_pays, time_launches
from .results import load_json, save_json
from .tolerances import TOLERANCE


@dataclass
class Result:
    """One timed point: the record ``xgemm bench --json`` writes."""

    variant: str
    params: dict[str, int]
    m: int
    n: int
    k: int
    batch: int = 1
    dtype: str = "float32"
    #: How A and B lie in memory: N (row-major) or T (a transposed view), A's letter first.
    layout: str = "NN"
    ms: float | None = None
    tflops: float | None = None
    vs_cublas: float | None = None
    ok: bool = False
    error: str | None = None
    #: "ok", "invalid", "compile error", "wrong result" or "error"; see ``error`` for why.
    status: str = ""
    ms_min: float | None = None
    ms_max: float | None = None
    runs: int = 0
    compile_s: float | None = None
    error_vs_cublas: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> str:
        """MxNxK, with the batch first (BxMxNxK) and the layout last (:NT) where not 1, NN."""
        text = f"{self.batch}x" if self.batch != 1 else ""
        text += f"{self.m}x{self.n}x{self.k}"
        return text + (f":{self.layout}" if self.layout != "NN" else "")

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        record.update(record.pop("extra"))
        return record

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Result:
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        return cls(**{k: v for k, v in record.items() if k in known},
                   extra={k: v for k, v in record.items() if k not in known})


# -- arithmetic of a product -----------------------------------------------------------
def flops(m: int, n: int, k: int, batch: int = 1) -> int:
    """Floating-point operations of a product: one multiply and one add per term."""
    return 2 * m * n * k * batch


def min_bytes(m: int, n: int, k: int, itemsize: int = 4) -> int:
    """The fewest bytes a product moves through DRAM: A and B read once, C written once."""
    return itemsize * (m * k + k * n + m * n)


def intensity(m: int, n: int, k: int, itemsize: int = 4) -> float:
    """Arithmetic intensity: FLOP per byte of the minimum DRAM traffic.

    >>> round(intensity(4096, 4096, 4096), 1)
    682.7
    """
    traffic = min_bytes(m, n, k, itemsize)
    return flops(m, n, k) / traffic if traffic else 0.0


class Problem:
    """One case's inputs, shared by cuBLAS and every variant, and cuBLAS's answer.

    ``batch`` > 1 makes A and B stacks of ``batch`` matrices (one launch each);
    ``layout`` says how A and B lie: "N" row-major, "T" a transposed view of a row-major
    array (column-major), A's letter first, e.g. "NT" for ``a @ w.T``.
    """

    def __init__(self, m: int, n: int, k: int, seed: int | None = None, *, batch: int = 1,
                 layout: str = "NN", dtype: str = "float32", precision: str | None = None
                 ) -> None:
        import cupy

        if len(layout) != 2 or set(layout) - {"N", "T"}:
            raise ValueError(f"layout must be NN, NT, TN or TT, got {layout!r}")
        self.m, self.n, self.k, self.batch, self.layout, self.dtype = m, n, k, batch, layout, dtype
        self.precision = precision  # what "auto" is allowed
        gen = cupy.random.default_rng(seed)
        stack = (batch,) if batch != 1 else ()

        def operand(rows: int, cols: int, transposed: bool):
            shape = (*stack, cols, rows) if transposed else (*stack, rows, cols)
            x = gen.standard_normal(shape, dtype=cupy.float32).astype(numpy_dtype(dtype))
            return cupy.swapaxes(x, -1, -2) if transposed else x

        self.a = operand(m, k, layout[0] == "T")
        self.b = operand(k, n, layout[1] == "T")
        self.c = cupy.empty((*stack, m, n), numpy_dtype(dtype))
        self._b_other = None
        self.flush_l2 = scrub_pays(batch * min_bytes(m, n, k, self.c.itemsize),
                                   cupy.cuda.Device().id)
        try:
            self.expected = cupy.matmul(self.a, self.b)
        except TypeError:  # CuPy has no batched bfloat16 matmul: check against float32
            wide = cupy.matmul(self.a.astype(cupy.float32), self.b.astype(cupy.float32))
            self.expected = wide.astype(self.c.dtype)

    @property
    def device(self) -> int:
        """The GPU the inputs lie on: cuBLAS and every variant run and are timed there."""
        return self.a.device.id

    def b_for(self, layouts: tuple[str, ...]) -> tuple[Any, str]:
        """B as a variant that reads only ``layouts`` can take it, and the problem's layout
        as that variant sees it: the same values, stored the other way (a copy made
        once, outside any timing) when the problem's layout is not among them."""
        import cupy

        have = "col" if self.layout[1] == "T" else "row"
        if have in layouts:
            return self.b, self.layout
        if self._b_other is None:
            swapped = cupy.swapaxes(self.b, -1, -2)
            self._b_other = cupy.swapaxes(cupy.ascontiguousarray(swapped), -1, -2) \
                if have == "row" else cupy.ascontiguousarray(self.b)
        return self._b_other, self.layout[0] + ("T" if have == "row" else "N")


def relative_error(c, ref) -> float:
    """||c - ref|| / ||ref|| (Frobenius; the absolute error where ref is 0), on the GPU."""
    import cupy

    scale = float(cupy.linalg.norm(ref))
    diff = float(cupy.linalg.norm(c - ref))
    return diff / scale if scale else diff


def _record(problem: Problem, variant: str, params: dict) -> Result:
    p = problem
    return Result(variant, params, p.m, p.n, p.k, batch=p.batch, dtype=p.dtype, layout=p.layout)


def bench_cublas(problem: Problem, **timing: Any) -> Result:
    """cuBLAS (GEMM, or strided-batched GEMM for a batch) through ``cupy.matmul`` on the
    problem's inputs."""
    import cupy

    p = problem
    result = _record(p, "cublas", {})
    with cupy.cuda.Device(p.device):
        try:
            cupy.matmul(p.a, p.b, out=p.c)
        except TypeError as exc:  # e.g. batched bfloat16, which CuPy does not multiply
            result.status, result.error = "error", f"cupy.matmul: {exc}"
            return result
        times = time_launches(lambda: cupy.matmul(p.a, p.b, out=p.c), flush_l2=p.flush_l2,
                              **timing)
    _fill(result, times, None)
    result.vs_cublas = 1.0
    return result


def plan(problem: Problem, name: str, params: dict[str, int] | None = None
         ) -> tuple[Launch | None, Result]:
    """Check ``name`` at ``params`` on the problem: a Launch ready to compile, or None with
    the record's status "invalid" and the rule it broke. ``name`` may be "auto"."""
    p = problem
    result = _record(p, name, dict(params or {}))
    try:
        if name == AUTO:
            launch = prepare(p.a, p.b, AUTO, out=p.c, precision=p.precision)
            result.params = {"variant": launch.variant.name, **launch.params}
            return launch, result
        variant = get_variant(name)
        result.params = variant.resolve(params, p.dtype)
        b, read_as = p.b_for(variant.b_layouts)
        if read_as != p.layout:  # noted beside the parameters in the table
            result.extra["read_as"] = read_as
        return prepare(p.a, b, name, out=p.c, **result.params), result
    except (ValueError, TypeError) as exc:  # a broken constraint, a dtype it lacks, limits
        result.status, result.error = "invalid", str(exc)
        return None, result


def compile_launch(launch: Launch, result: Result) -> bool:
    """Compile (or fetch from the cache) the kernel; on failure the record says why."""
    t0 = time.perf_counter()
    try:
        kernel = launch.kernel()
    except Exception as exc:  # NVRTC's error carries the log: keep its first lines
        lines = [line for line in str(exc).splitlines() if line.strip()]
        result.status, result.error = "compile error", " | ".join(lines[:3])
        return False
    result.compile_s = time.perf_counter() - t0
    registers = kernel.attributes.get("num_regs", 0) * math.prod(launch.block)
    limit = properties(launch.device).max_registers_per_block
    if registers > limit:
        result.status = "invalid"
        result.error = f"{registers} registers per block, over the {limit} of this GPU"
        return False
    return True


def measure(problem: Problem, launch: Launch, result: Result, cublas_ms: float | None = None,
            **timing: Any) -> Result:
    """Run once on a NaN-poisoned output and check against cuBLAS, then time."""
    import cupy

    p = problem
    try:
        with cupy.cuda.Device(p.device):  # the launch runs there: so do the events
            p.c.fill(cupy.nan)
            launch()
            result.error_vs_cublas = relative_error(p.c, p.expected)
            # a TF32 rung, or any row of a TF32 run (its cuBLAS reference is TF32 itself)
            tf32 = launch.variant.precision == "tf32" or p.precision == "tf32"
            if not result.error_vs_cublas < TOLERANCE["cuBLAS"]["tf32" if tf32 else p.dtype]:
                result.status = "wrong result"
                result.error = f"error {result.error_vs_cublas:.3g} against cuBLAS"
                return result
            times = time_launches(launch, flush_l2=p.flush_l2, **timing)
    except Exception as exc:  # a launch failure must not end a run
        message = str(exc).strip().splitlines()
        result.status = "error"
        result.error = f"{type(exc).__name__}: {message[0] if message else ''}"
        return result
    _fill(result, times, cublas_ms)
    return result


def bench_variant(problem: Problem, name: str, params: dict[str, int] | None = None,
                  cublas_ms: float | None = None, **timing: Any) -> Result:
    """Check, compile, verify against cuBLAS, then time one variant ("auto" too). Whatever
    goes wrong lands in the record's ``status`` and ``error``, never in an exception."""
    launch, result = plan(problem, name, params)
    if launch is None or not compile_launch(launch, result):
        return result
    return measure(problem, launch, result, cublas_ms, **timing)


def _fill(result: Result, times: Sequence[float], cublas_ms: float | None) -> None:
    result.ok, result.status = True, "ok"
    result.runs = len(times)
    result.ms = statistics.median(times)
    result.ms_min, result.ms_max = min(times), max(times)
    result.tflops = flops(result.m, result.n, result.k, result.batch) / (result.ms * 1e-3) / 1e12
    if cublas_ms:
        result.vs_cublas = cublas_ms / result.ms


def run(variants: Iterable[str], shapes: Iterable[tuple],
        params: dict[str, dict[str, int]] | None = None, dtype: str = "float32",
        **timing: Any) -> list[Result]:
    """cuBLAS and each variant (at its defaults, or at ``params[name]``) on each shape:
    (M, N, K), or (M, N, K, batch, layout) as :func:`parse_case` gives."""
    return list(iterate(list(variants), list(shapes), params, dtype, **timing))


def parse_case(text: str) -> tuple[int, int, int, int, str]:
    """``MxNxK``, ``BxMxNxK`` (a batch of B products) and either with ``:NT`` (a layout:
    N row-major, T transposed, A's letter first) -> (M, N, K, batch, layout).

    >>> parse_case("64x512x512x64:NT")
    (512, 512, 64, 64, 'NT')
    """
    dims, _, layout = text.upper().partition(":")
    try:
        sizes = [int(x) for x in dims.split("X")]
    except ValueError:
        sizes = []
    if len(sizes) not in (3, 4) or min(sizes) < 1:
        raise ValueError(f"{text!r} is not MxNxK or BxMxNxK with positive sizes, "
                         "optionally with :NN/:NT/:TN/:TT, e.g. 64x512x512x64:NT")
    layout = layout or "NN"
    if len(layout) != 2 or set(layout) - {"N", "T"}:
        raise ValueError(f"{text!r}: the layout after ':' is NN, NT, TN or TT")
    batch = sizes.pop(0) if len(sizes) == 4 else 1
    return sizes[0], sizes[1], sizes[2], batch, layout


def iterate(variants: Sequence[str], shapes: Sequence[tuple],
            params: dict[str, dict[str, int]] | None = None, dtype: str = "float32",
            precision: str | None = None, **timing: Any) -> Iterator[Result]:
    """Like :func:`run`, one result at a time (cuBLAS first for each shape); ``precision``
    is what "auto" may use."""
    for case in shapes:
        m, n, k, batch, layout = (*case, 1, "NN")[:5] if len(case) == 3 else case
        problem = Problem(m, n, k, batch=batch, layout=layout, dtype=dtype, precision=precision)
        cublas = bench_cublas(problem, **timing)
        yield cublas
        for name in variants:
            yield bench_variant(problem, name, (params or {}).get(name), cublas.ms, **timing)
        del problem


# -- reporting -------------------------------------------------------------------------
def _itemsize(dtype: str) -> int:
    from ..specs import DTYPES

    return DTYPES[dtype].itemsize if dtype in DTYPES else 4


def best_per_shape(results: Sequence[Result]) -> set[int]:
    """Indices of the fastest correct xgemm variant for each shape (cuBLAS excluded)."""
    best: dict[str, int] = {}
    for i, r in enumerate(results):
        if r.ok and r.variant != "cublas":
            j = best.get(r.shape)
            if j is None or r.ms < results[j].ms:
                best[r.shape] = i
    return set(best.values())


COLUMNS = ("variant", "params", "shape", "ms", "TFLOP/s", "x cuBLAS", "x peak", "FLOP/B",
           "compile s", "")


def rows(results: Sequence[Result], machine: dict[str, Any] | None = None) -> list[tuple[str, ...]]:
    """The table's rows as text: one per result, with the best variant per shape marked *.
    ``compile s`` is the first call's time (compile, module load and one run), apart."""
    peak = (machine or {}).get("fp32_peak_tflops")
    best = best_per_shape(results)
    out = []
    for i, r in enumerate(results):
        params = ",".join(f"{k}={v}" for k, v in r.params.items())
        if r.extra.get("read_as"):
            params += f" (reads {r.extra['read_as']})"
        flop_b = f"{intensity(r.m, r.n, r.k, _itemsize(r.dtype)):.1f}"
        compile_s = f"{r.compile_s:.2f}" if r.compile_s is not None else ""
        if r.ok:
            out.append((r.variant, params, r.shape, f"{r.ms:.3f}", f"{r.tflops:.2f}",
                        f"{r.vs_cublas:.2f}" if r.vs_cublas else "",
                        f"{r.tflops / peak:.2f}" if peak else "", flop_b, compile_s,
                        "*" if i in best else ""))
        else:
            out.append((r.variant, params, r.shape, "", "", "", "", flop_b, compile_s,
                        f"{(r.status or 'failed').upper()}: {r.error}"))
    return out


def table(results: Sequence[Result], machine: dict[str, Any] | None = None) -> str:
    """A fixed-width text table; * marks the fastest xgemm variant of each shape."""
    body = [COLUMNS, *rows(results, machine)]
    widths = [max(len(row[i]) for row in body) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in body)


def write_json(path: str, results: Sequence[Result], machine: dict[str, Any]) -> None:
    """``{"machine": {...}, "results": [{"variant", "params", "m", "n", "k", "batch",
    "dtype", "ms", "tflops", "vs_cublas", "ok", "error", ...}, ...]}``."""
    save_json(path, {"machine": machine, "results": [r.to_json() for r in results]})


def read_json(path: str) -> tuple[dict[str, Any], list[Result]]:
    data = load_json(path)  # as write_json wrote it: gzip-compressed where named .gz
    return data["machine"], [Result.from_json(r) for r in data["results"]]


def write_csv(path: str, results: Sequence[Result], machine: dict[str, Any]) -> None:
    peak = machine.get("fp32_peak_tflops")
    best = best_per_shape(results)
    fields = ["variant", "params", "m", "n", "k", "batch", "dtype", "layout", "ms", "ms_min",
              "ms_max", "tflops", "vs_cublas", "vs_peak", "flop_per_byte", "best", "ok", "error",
              "compile_s"]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for i, r in enumerate(results):
            record = r.to_json()
            record["params"] = ";".join(f"{k}={v}" for k, v in r.params.items())
            record["vs_peak"] = r.tflops / peak if (r.ok and peak) else None
            record["flop_per_byte"] = intensity(r.m, r.n, r.k, _itemsize(r.dtype))
            record["best"] = i in best
            writer.writerow(record)

