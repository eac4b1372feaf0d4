"""Parameter sweeps and autotuning, remembered per GPU: what ``variant="auto"`` uses.

A sweep walks a variant's declared space (or one you pass): points that break a declared
constraint or this GPU's limits are reported as invalid without compiling, the rest are
compiled in parallel threads, checked against cuBLAS and timed. ``tune`` sweeps several
variants on one shape and keeps the fastest (variant, parameters) in a JSON file in the
user's cache directory (``xgemm.tunefile``), keyed by GPU name, dtype and shape bucket;
``matmul`` with ``variant="auto"`` (the default) looks it up, and without an entry asks
the cost model (``xgemm.cost``).

Example:
    >>> import xgemm
    >>> res = xgemm.sweep("coarse2d", m=2048, n=2048, k=2048,
    ...                   space={"BM": [64, 128], "TM": [4, 8]})  # doctest: +SKIP
    >>> res.best.params  # doctest: +SKIP
    >>> best = xgemm.tune(m=4096, n=4096, k=4096)  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import os
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import registry
from ..gpu import gpu_name
from ..registry import get_variant
from ..tunefile import tune_cache
from . import bench


# -- sweeps ----------------------------------------------------------------------------
class SweepResults(list):
    """A list of :class:`xgemm.tools.bench.Result`, fastest first, failures last.

    >>> results = sweep("tiled", 1024, 1024, 1024)  # doctest: +SKIP
    >>> [r.status for r in results][:2], results.best is results[0]  # doctest: +SKIP
    (['ok', 'ok'], True)
    """

    @property
    def best(self):
        """The fastest correct point, or None."""
        return next((r for r in self if r.ok), None)

    def sorted(self) -> SweepResults:
        return SweepResults(sorted(self, key=lambda r: (not r.ok, r.ms or 0.0)))

    def to_csv(self, path: str) -> None:
        bench.write_csv(path, self, {})

    def to_pandas(self):
        """The records as a pandas DataFrame (pandas must be installed)."""
        try:
            import pandas
        except ImportError as exc:
            raise RuntimeError("to_pandas() needs pandas: pip install pandas") from exc
        return pandas.DataFrame([r.to_json() for r in self])

    def table(self) -> str:
        return bench.table(self)


def expand(name: str, space: Mapping[str, Sequence[int]] | None = None) -> list[dict[str, int]]:
    """Every point of the Cartesian product of ``name``'s space, each parameter's values
    replaced by ``space[param]`` where given. Constraints are not applied here.

    >>> len(expand("tiled")), expand("tiled", {"tile": [4]})
    (3, [{'tile': 4}])
    """
    variant = get_variant(name)
    space = dict(space or {})
    unknown = sorted(set(space) - set(variant.defaults))
    if unknown:
        raise ValueError(f"variant {name!r} has no parameter {', '.join(unknown)}; "
                         f"its parameters are {', '.join(variant.defaults)}")
    full = {p: list(space.get(p, variant.space[p])) for p in variant.defaults}
    return [dict(zip(full, values, strict=True)) for values in itertools.product(*full.values())]


def _progress(total: int, enabled: bool | None, label: str):
    import sys

    if enabled is False or (enabled is None and not sys.stderr.isatty()):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=label, file=sys.stderr, unit="point", leave=False)


def sweep(variant: str, m: int, n: int, k: int, *, space: Mapping[str, Sequence[int]] | None = None,
          strategy: str = "exhaustive", max_points: int | None = None,
          seconds: float | None = None, seed: int | None = None, problem: Any = None,
          progress: bool | None = None, compile_threads: int | None = None,
          warmup: int = 2, repeat: int = 10, dtype: str = "float32") -> SweepResults:
    """Time every point of ``variant``'s space on an (m, k) @ (k, n) problem.

    Every point gets a record: "ok" (time, TFLOP/s, fraction of cuBLAS), "invalid" (the
    rule it broke, found before compiling), "compile error" (the log's first lines),
    "wrong result" (its error against cuBLAS) or "error". One bad point never ends it.

    Args:
        space: values to walk per parameter, replacing the declared ones.
        strategy: "exhaustive" (every point) or "random" (points in random order, until
            ``max_points`` are timed or ``seconds`` have passed).
        max_points, seconds: budgets (either strategy).
        compile_threads: threads compiling at once (default: the CPU count).
        dtype: the operands' dtype (float32, float64, float16 or bfloat16).

    Example:
        >>> res = sweep("tiled", 1024, 1024, 1024)  # doctest: +SKIP
        >>> res.best.params, res.best.vs_cublas  # doctest: +SKIP
    """
    if strategy not in ("exhaustive", "random"):
        raise ValueError(f"strategy must be 'exhaustive' or 'random', got {strategy!r}")
    points = expand(variant, space)
    if strategy == "random":  # the defaults first, so a budgeted tune never does worse
        random.Random(seed).shuffle(points)
        defaults = dict(get_variant(variant).defaults)
        points.sort(key=lambda point: point != defaults)
    if problem is None:
        problem = bench.Problem(m, n, k, dtype=dtype)
    cublas = bench.bench_cublas(problem, warmup=warmup, repeat=repeat)

    results = SweepResults()
    launches = []
    for point in points:
        launch, result = bench.plan(problem, variant, point)
        if launch is None:
            results.append(result)
        elif max_points is None or len(launches) < max_points:
            launches.append((launch, result))

    # NVRTC runs in parallel threads; each point's compile time is its own.
    with ThreadPoolExecutor(max_workers=compile_threads or os.cpu_count() or 2) as pool:
        compiled = list(pool.map(lambda lr: bench.compile_launch(*lr), launches))

    deadline = time.perf_counter() + seconds if seconds else None
    bar = _progress(len(launches), progress, variant)
    best_ms = None
    for (launch, result), ok in zip(launches, compiled, strict=True):
        if deadline is not None and time.perf_counter() > deadline:
            break
        if ok:
            bench.measure(problem, launch, result, cublas.ms, warmup=warmup, repeat=repeat)
            if result.ok and (best_ms is None or result.ms < best_ms):
                best_ms = result.ms
        results.append(result)
        if bar is not None:
            bar.set_postfix_str(f"best {best_ms:.3f} ms" if best_ms else "")
            bar.update()
    if bar is not None:
        bar.close()
    return results.sorted()


def tune(m: int, n: int, k: int, dtype: str = "float32", variants: Iterable[str] | None = None,
         *, save: bool = True, progress: bool | None = None, **sweep_options: Any
         ) -> SweepResults:
    """Sweep several variants (default: every one for ``dtype``) on one shape, remember the
    fastest for this GPU, dtype and shape bucket, and return every point, fastest first.

    Example:
        >>> res = tune(4096, 4096, 4096)  # doctest: +SKIP
        >>> res.best.variant, res.best.params  # doctest: +SKIP
    """
    names = list(variants or [v for v in registry.variants() if dtype in get_variant(v).dtypes
                              and get_variant(v).precision is None])  # TF32 only by name
    problem = bench.Problem(m, n, k, dtype=dtype)
    results = SweepResults()
    for name in names:
        results.extend(sweep(name, m, n, k, problem=problem, progress=progress, **sweep_options))
    results = results.sorted()
    best = results.best
    if best is not None and save:
        tune_cache().store(gpu_name(problem.a.device.id), dtype, m, n, k, best.variant,
                           best.params, best.ms)
    return results
