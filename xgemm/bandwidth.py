"""The benchmark of the memory-bound families (``xgemm bench --family F``): effective
bandwidth, the bytes the operation must move over its time, against a device-to-device
copy of the same bytes and against the CuPy equivalent, all in one run on the same input.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .bench import time_launches
from .memory import PLANS
from .registry import get_variant, numpy_dtype, variants

#: Each family's default cases: the issue's targets (8192^2 float32 for transpose,
#: reverse and the stencil, 2^28 elements for sum), plus odd sizes.
DEFAULT_SHAPES = {
    "transpose": [(8192, 8192), (4095, 8191)],
    "reverse": [(8192 * 8192,), (10**7 + 1,)],
    "sum": [(2**28,), (10**7 + 1,)],
    "stencil": [(8192, 8192), (4095, 8191)],
}
#: Largest relative error (Frobenius) against the CuPy equivalent before a row is "wrong".
CHECK_TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-2, "bfloat16": 2e-2}


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


def _error(got, expected) -> float:
    import cupy

    got, expected = got.astype(cupy.float64), expected.astype(cupy.float64)
    scale = float(cupy.linalg.norm(expected.ravel()))
    diff = float(cupy.linalg.norm((got - expected).ravel()))
    return diff / scale if scale else diff


def iterate(family: str, shapes: Sequence[tuple[int, ...]], dtype: str = "float32",
            names: Sequence[str] | None = None, **timing: Any) -> Iterator[Row]:
    """For each case: the copy, the CuPy equivalent, then each variant at its defaults."""
    import cupy

    names = list(names or variants(family))
    for shape in shapes:
        x, weights = make_input(family, shape, dtype)
        nbytes = x.size * x.itemsize
        moved = nbytes if family == "sum" else 2 * nbytes
        dst = cupy.empty_like(x)
        copy_ms = statistics.median(time_launches(
            lambda x=x, dst=dst: dst.data.copy_from_device_async(x.data, x.nbytes), **timing))
        copy_gbps = 2 * nbytes / copy_ms / 1e6  # a copy reads and writes every byte
        yield Row(family, "copy", {}, shape, dtype, copy_ms, copy_gbps, 1.0)
        del dst
        expected = cupy_equivalent(family, x, weights)
        cupy_ms = statistics.median(time_launches(
            lambda x=x, w=weights: cupy_equivalent(family, x, w), **timing))
        yield Row(family, "cupy", {}, shape, dtype, cupy_ms, moved / cupy_ms / 1e6,
                  moved / cupy_ms / 1e6 / copy_gbps, 1.0)
        for name in names:
            row = Row(family, name, dict(get_variant(name, family).defaults), shape, dtype)
            try:
                args = (x, weights) if family == "stencil" else (x,)
                run = PLANS[family](*args, variant=name)
                got = run()
                err = _error(got, expected)
                row.extra["error"] = err
                if not err < CHECK_TOLERANCE[dtype]:
                    row.status, row.error = "wrong result", f"error {err:.3g} against CuPy"
                    yield row
                    continue
                row.ms = statistics.median(time_launches(run, **timing))
            except Exception as exc:  # noqa: BLE001  (a failure is a row, not the end)
                first = (str(exc).strip().splitlines() or [""])[0]
                row.status, row.error = "error", f"{type(exc).__name__}: {first}"
                yield row
                continue
            row.gbps = run.bytes / row.ms / 1e6
            row.vs_copy = row.gbps / copy_gbps
            row.vs_cupy = cupy_ms / row.ms
            yield row


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
