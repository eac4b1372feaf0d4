"""The benchmark of the memory-bound families (``xgemm bench --family F``): effective
bandwidth, the bytes the operation must move over its time, against a device-to-device
copy of the same bytes and against the CuPy equivalent, all in one run on the same input.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..memory_bound import PLANNERS
from ..registry import get_variant, variants
from ..specs import numpy_dtype
from ..timing import time_launches
from .bench import relative_error
from .tolerances import TOLERANCE

#: Each family's default cases: the lectures' sizes (8192^2 float32 for transpose,
#: reverse and the stencil, 2^28 elements for sum), plus odd sizes.
DEFAULT_SHAPES = {
    "transpose": [(8192, 8192), (4095, 8191)],
    "reverse": [(8192 * 8192,), (10**7 + 1,)],
    "sum": [(2**28,), (10**7 + 1,)],
    "stencil": [(8192, 8192), (4095, 8191)],
}


@dataclass
class Row:
    """One measurement: a variant (or "copy", "cupy") on one case."""

    family: str
    variant: str
    params: dict[str, int]
    shape: tuple[int, ...]
    dtype: str
    ms: float | None = None
    gbps: float | None = None      # bytes that must move / median time
    vs_copy: float | None = None   # gbps over the copy's
    vs_cupy: float | None = None   # the CuPy equivalent's time over this one's (> 1: faster)
    status: str = "ok"
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def cupy_equivalent(family: str, x, weights=None):
    """What a CuPy user writes for the same result."""
    import cupy

    if family == "transpose":
        return x.T.copy()
    if family == "reverse":
        return x[::-1].copy()
    if family == "sum":
        return x.sum()
    from cupyx.scipy import ndimage

    if not x.size:
        return cupy.empty_like(x)
    return ndimage.correlate(x, weights, mode="constant", cval=0.0)


def make_input(family: str, shape: tuple[int, ...], dtype: str, seed: int | None = None):
    import cupy

    gen = cupy.random.default_rng(seed)
    x = gen.standard_normal(shape, dtype=cupy.float32).astype(numpy_dtype(dtype))
    weights = None
    if family == "stencil":
        weights = gen.standard_normal((3, 3), dtype=cupy.float32).astype(x.dtype)
    return x, weights


def _reference(family: str, x, weights) -> tuple[Any, float | None]:
    """What a variant's result is checked against, and the scale of its error: CuPy's
    result and (None) its own norm; for sum the float64 sum and the sum of |x|, since a
    sum of random signs can land near zero, where any rounding is a large fraction of it
    (the bound ``xgemm.memory_bound.sum_error_bound`` uses the same scale)."""
    import cupy

    if family == "sum":
        wide = x.astype(cupy.float64)
        return wide.sum(), float(cupy.abs(wide).sum())
    return cupy_equivalent(family, x, weights), None


def _error(got, expected, scale: float | None = None) -> float:
    """The GEMM benchmark's relative Frobenius error, computed in float64; with ``scale``
    the error's norm over that instead."""
    import cupy

    got, expected = got.astype(cupy.float64).ravel(), expected.astype(cupy.float64).ravel()
    if scale is None:
        return relative_error(got, expected)
    diff = float(cupy.linalg.norm(got - expected))
    return diff / scale if scale else diff


def _baselines(family: str, x, weights, **timing: Any) -> Iterator[Row]:
    """The device-to-device copy of x's bytes, then the CuPy equivalent, on ``x``."""
    import cupy

    nbytes = x.size * x.itemsize
    moved = nbytes if family == "sum" else 2 * nbytes
    dst = cupy.empty_like(x)
    copy_ms = statistics.median(time_launches(
        lambda: dst.data.copy_from_device_async(x.data, x.nbytes), **timing))
    copy_gbps = 2 * nbytes / copy_ms / 1e6  # a copy reads and writes every byte
    yield Row(family, "copy", {}, x.shape, x.dtype.name, copy_ms, copy_gbps, 1.0)
    cupy_ms = statistics.median(time_launches(lambda: cupy_equivalent(family, x, weights),
                                              **timing))
    yield Row(family, "cupy", {}, x.shape, x.dtype.name, cupy_ms, moved / cupy_ms / 1e6,
              moved / cupy_ms / 1e6 / copy_gbps, 1.0)


def measure(family: str, name: str, params: dict[str, int], x, weights,
            reference: tuple[Any, float | None], copy: Row, cupy_row: Row,
            **timing: Any) -> Row:
    """One variant at ``params`` on ``x``: checked against ``reference`` (from
    ``_reference``), then timed."""
    import cupy

    dtype = x.dtype.name
    row = Row(family, name, dict(params), x.shape, dtype)
    try:
        args = (x, weights) if family == "stencil" else (x,)
        run = PLANNERS[family](*args, variant=name, **params)
        row.params = dict(run.steps[0].params) if run.steps else row.params
        with cupy.cuda.Device(x.device.id):  # the run's GPU, and so the events'
            err = _error(run(), *reference)
            row.extra["error"] = err
            if not err < TOLERANCE["CuPy"][dtype]:
                against = "the float64 sum" if family == "sum" else "CuPy"
                row.status, row.error = "wrong result", f"error {err:.3g} against {against}"
                return row
            row.ms = statistics.median(time_launches(run, **timing))
    except Exception as exc:  # noqa: BLE001  (a failure is a row, not the end)
        first = (str(exc).strip().splitlines() or [""])[0]
        row.status, row.error = "error", f"{type(exc).__name__}: {first}"
        return row
    row.gbps = run.bytes / row.ms / 1e6
    row.vs_copy = row.gbps / copy.gbps
    row.vs_cupy = cupy_row.ms / row.ms
    return row


def iterate(family: str, shapes: Sequence[tuple[int, ...]], dtype: str = "float32",
            names: Sequence[str] | None = None, **timing: Any) -> Iterator[Row]:
    """For each case: the copy, the CuPy equivalent, then each variant at its defaults."""
    for shape in shapes:
        x, weights = make_input(family, shape, dtype)
        copy, cupy_row = _baselines(family, x, weights, **timing)
        yield copy
        yield cupy_row
        reference = _reference(family, x, weights)
        for name in names or variants(family):
            yield measure(family, name, {}, x, weights, reference, copy, cupy_row, **timing)


def sweep(family: str, name: str, shape: tuple[int, ...], dtype: str = "float32",
          **timing: Any) -> list[Row]:
    """Every valid point of the variant's declared space on one case (``xgemm sweep
    NAME --family F``): the copy and CuPy rows first, then the points, fastest first."""
    x, weights = make_input(family, shape, dtype)
    copy, cupy_row = _baselines(family, x, weights, **timing)
    reference = _reference(family, x, weights)
    points = [measure(family, name, point, x, weights, reference, copy, cupy_row, **timing)
              for point in get_variant(name, family).points(dtype)]
    return [copy, cupy_row, *sorted(points, key=lambda r: (not r.ok, r.ms or 0.0))]


def table(rows: Sequence[Row]) -> str:
    """The rows as an aligned text table (the fastest variant of each case starred)."""
    best: dict[tuple, Row] = {}
    for r in rows:
        if r.ok and r.variant not in ("copy", "cupy") and (
                r.shape not in best or r.ms < best[r.shape].ms):
            best[r.shape] = r
    header = ("family", "variant", "params", "shape", "dtype", "ms", "GB/s", "x copy",
              "x cupy", "")
    lines = [header]
    for r in rows:
        def num(v, fmt):
            return format(v, fmt) if v is not None else ""
        note = "*" if best.get(r.shape) is r else (r.status + ": " + r.error if not r.ok else "")
        lines.append((r.family, r.variant, ",".join(f"{k}={v}" for k, v in r.params.items()),
                      "x".join(map(str, r.shape)), r.dtype, num(r.ms, ".3f"), num(r.gbps, ".0f"),
                      num(r.vs_copy, ".2f"), num(r.vs_cupy, ".2f"), note))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line[:-1], widths, strict=True))
                     + ("  " + line[-1] if line[-1] else "") for line in lines)


def to_json(rows: Sequence[Row]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
