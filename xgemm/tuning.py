"""Parameter sweeps and autotuning, remembered per GPU: what ``variant="auto"`` uses.

A sweep walks a variant's declared space (or one you pass): points that break a declared
constraint or this GPU's limits are reported as invalid without compiling, the rest are
compiled in parallel threads, checked against cuBLAS and timed. ``tune`` sweeps several
variants on one shape and keeps the fastest (variant, parameters) in a JSON file in the
user's cache directory, keyed by GPU name, dtype and shape bucket; ``matmul`` with
``variant="auto"`` (the default) looks it up, and without an entry uses ``heuristic``.

Example:
    >>> import xgemm
    >>> res = xgemm.sweep("coarse2d", m=2048, n=2048, k=2048,
    ...                   space={"BM": [64, 128], "TM": [4, 8]})  # doctest: +SKIP
    >>> res.best.params  # doctest: +SKIP
    >>> best = xgemm.tune(m=4096, n=4096, k=4096)  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import filelock

from . import registry
from .registry import cdiv, get_variant
from .version import __version__

#: Environment variable naming the tuning file, instead of the user's cache directory.
CACHE_ENV = "XGEMM_TUNE_CACHE"
#: The tuning file's format; a file of another format, or written by another version of
#: xgemm, is ignored with a warning (and replaced by the next tune).
CACHE_VERSION = 2
#: Seconds a tune waits for another process's write of the tuning file before giving up.
LOCK_TIMEOUT_S = 60


def cache_path() -> Path:
    """The tuning file: ``$XGEMM_TUNE_CACHE``, or ``tuned.json`` in the user cache directory."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("xgemm")) / "tuned.json"


def _pow2(x: int) -> int:
    return 1 << (x - 1).bit_length() if x > 1 else x


def shape_bucket(m: int, n: int, k: int) -> str:
    """Shapes that share tuned parameters: each dimension rounded up to a power of two.

    >>> shape_bucket(4096, 4096, 4096), shape_bucket(4097, 31, 1025)
    ('4096x4096x4096', '8192x32x2048')
    """
    return "x".join(str(_pow2(d)) for d in (m, n, k))


def heuristic(m: int, n: int, k: int, dtype: str = "float32", cc: int = 90,
              precision: str | None = None) -> tuple[str, dict[str, int]]:
    """The variant ``auto`` uses for a shape nobody tuned, on a GPU of compute capability
    ``cc`` x 10: from the H100 measurements in bench/: for 16-bit outputs of 2^16
    elements or more the tensor cores, ``wgmma`` on sm_90 (``prepare`` takes ``mma``
    instead for operands TMA cannot read in place), ``mma`` on sm_80 and newer; the same
    for float32 with ``precision="tf32"`` through ``wgmma_tf32`` or ``mma_tf32``; splitk
    for float32 outputs of at most 2^18 elements with K >= 4096; for outputs of a
    million elements or more the fastest large-tile rung for the dtype (``pipelined`` for
    float32, ``vectorized`` for the others), coarse1d for mid-sized outputs, tiled for
    small ones. All variants are
    correct for every shape, so this only ever costs speed.

    >>> heuristic(4096, 4096, 4096)[0], heuristic(1024, 512, 64)[0], heuristic(64, 64, 64)[0]
    ('pipelined', 'coarse1d', 'tiled')
    >>> [heuristic(4096, 4096, 4096, "float16", cc)[0] for cc in (90, 100, 80, 75)]
    ['wgmma', 'mma', 'mma', 'vectorized']
    >>> [heuristic(4096, 4096, 4096, "float32", cc, "tf32")[0] for cc in (90, 80)]
    ['wgmma_tf32', 'mma_tf32']
    >>> heuristic(128, 128, 65536)[1]["SPLITS"]  # K split across 64 blocks per tile
    64
    """
    outputs = m * n
    wgmma = get_variant("wgmma_tf32" if precision == "tf32" else "wgmma")
    if dtype in wgmma.dtypes and wgmma.runs_on(cc) and outputs >= 1 << 16:
        params = dict(wgmma.defaults)
        if cdiv(m, params["BM"]) * cdiv(n, params["BN"]) < 132:  # fewer tiles than SMs
            params.update(BN=128)
        return wgmma.name, params
    mma = get_variant("mma_tf32" if precision == "tf32" else "mma")
    if dtype in mma.dtypes and mma.runs_on(cc) and outputs >= 1 << 16:
        params = dict(mma.defaults)
        if cdiv(m, params["BM"]) * cdiv(n, params["BN"]) < 132:  # fewer tiles than SMs
            params.update(BM=64, BN=64, WM=32, WN=32)
        return mma.name, params
    splitk = get_variant("splitk")
    if dtype in splitk.dtypes and outputs <= 1 << 18 and k >= 4096:
        # few tiles of C, a long K: split K until there are two blocks per SM of an H100
        tiles = cdiv(m, splitk.defaults["BM"]) * cdiv(n, splitk.defaults["BN"])
        splits = next((s for s in (4, 16, 64) if tiles * s >= 264 or k // s <= 512), 64)
        return "splitk", {**splitk.defaults, "SPLITS": splits}
    if outputs >= 1 << 20:
        pipelined = get_variant("pipelined")
        if dtype in pipelined.dtypes:
            params = dict(pipelined.defaults)  # 128 x 256 tiles: too few of them below 4096^2
            if cdiv(m, params["BM"]) * cdiv(n, params["BN"]) < 264:  # two per SM of an H100
                params.update(BN=128, STAGES=2)
            return "pipelined", params
        name = "vectorized"
    else:
        name = "coarse1d" if outputs >= 1 << 18 else "tiled"
    return name, dict(get_variant(name).defaults)


class TuneCache:
    """The tuning file: ``{"version": 2, "xgemm": "0.1.0", "entries": {"GPU|dtype|bucket":
    {...}}}``.

    A file that cannot be read, or that another version of xgemm (or of the format) wrote,
    or an entry that no longer fits the registry (a variant renamed, a constraint
    tightened), is ignored with a warning: never a crash, never a wrong kernel.

    Several processes may share the file (two ``xgemm tune`` runs, a tune and a program
    calling ``matmul``): a store merges its entries into what is on disk at that moment,
    under a lock file beside it (``filelock``), and replaces the file atomically through a
    temporary file of its own, so a reader sees the old file or the new one, never a part,
    and no process drops another's entries.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.entries = self._read(warn=True)

    @staticmethod
    def key(gpu: str, dtype: str, m: int, n: int, k: int, exact: bool = False) -> str:
        """The entry for a shape's bucket, or (``exact``) for the shape itself."""
        return f"{gpu}|{dtype}|" + (f"={m}x{n}x{k}" if exact else shape_bucket(m, n, k))

    def _read(self, warn: bool) -> dict[str, dict[str, Any]]:
        """The entries on disk now: none if there is no file, or (with a warning if
        ``warn``) if it cannot be read or another version wrote it."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            problem = str(exc)
        else:
            try:
                data = json.loads(text)
                if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
                    raise ValueError("no entries")
                if (data.get("version"), data.get("xgemm")) != (CACHE_VERSION, __version__):
                    raise ValueError(
                        f"written by xgemm {data.get('xgemm', 'before 0.1.0')} (format "
                        f"{data.get('version')!r}); this is xgemm {__version__} (format "
                        f"{CACHE_VERSION}): tune again, and the file is rewritten")
                return data["entries"]
            except ValueError as exc:
                problem = str(exc)
        if warn:
            warnings.warn(f"ignoring the xgemm tuning file {self.path}: {problem}",
                          stacklevel=4)
        return {}

    def lookup(self, gpu: str, dtype: str, m: int, n: int, k: int
               ) -> tuple[str, dict[str, int]] | None:
        """What was tuned for this very shape, else for its bucket, else None."""
        for key in (self.key(gpu, dtype, m, n, k, exact=True), self.key(gpu, dtype, m, n, k)):
            if key in self.entries:
                break
        else:
            return None
        entry = self.entries[key]
        try:
            variant = get_variant(entry["variant"])
            params = variant.resolve(entry["params"], dtype)
        except (KeyError, TypeError, ValueError) as exc:
            warnings.warn(f"ignoring the stale tuning entry {key!r} in {self.path}: {exc}",
                          stacklevel=3)
            del self.entries[key]
            return None
        return variant.name, params

    def store(self, gpu: str, dtype: str, m: int, n: int, k: int, variant: str,
              params: Mapping[str, int], ms: float) -> None:
        """Remember the winner for this shape and (the latest tuned in it wins) its bucket,
        merged into the file as it is on disk now."""
        entry = {"variant": variant, "params": dict(params), "ms": ms, "shape": [m, n, k],
                 "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        ours = {self.key(gpu, dtype, m, n, k, exact): entry for exact in (True, False)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, self._file_lock():
            entries = {**self._read(warn=False), **ours}  # another's entries stay
            self._write({"version": CACHE_VERSION, "xgemm": __version__, "entries": entries})
            self.entries = entries

    def clear(self) -> None:
        with self._lock, self._file_lock():
            self.entries = {}
            self.path.unlink(missing_ok=True)

    def _file_lock(self) -> filelock.FileLock:
        """The lock every writer of the file takes (a ``.lock`` file beside it)."""
        return filelock.FileLock(f"{self.path}.lock", timeout=LOCK_TIMEOUT_S)

    def _write(self, data: dict[str, Any]) -> None:
        """Write through a temporary file of this process's own, then replace the file in
        one step (``os.replace``)."""
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp",
                                   dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


_caches: dict[Path, TuneCache] = {}


def tune_cache() -> TuneCache:
    """The tuning file in use (read once per path and process)."""
    path = cache_path()
    if path not in _caches:
        _caches[path] = TuneCache(path)
    return _caches[path]


@functools.cache
def gpu_name(device: int) -> str:
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(device)["name"].decode()


def choose(m: int, n: int, k: int, dtype: str, device: int, precision: str | None = None
           ) -> tuple[str, dict[str, int]]:
    """The (variant, parameters) ``auto`` runs: tuned for this GPU and shape (or its
    bucket), else the heuristic. With ``precision="tf32"`` a tuned entry counts only if
    it is a TF32 rung (tuning is exact unless TF32 rungs are named)."""
    found = tune_cache().lookup(gpu_name(device), dtype, m, n, k)
    if found is not None and (precision is None or get_variant(found[0]).precision == precision):
        return found
    from .api import _compute_capability

    return heuristic(m, n, k, dtype, _compute_capability(device), precision)


# -- sweeps ----------------------------------------------------------------------------
class SweepResults(list):
    """A list of :class:`xgemm.bench.Result`, fastest first, failures last."""

    @property
    def best(self):
        """The fastest correct point, or None."""
        return next((r for r in self if r.ok), None)

    def sorted(self) -> SweepResults:
        return SweepResults(sorted(self, key=lambda r: (not r.ok, r.ms or 0.0)))

    def to_csv(self, path: str) -> None:
        from .bench import write_csv

        write_csv(path, self, {})

    def to_pandas(self):
        """The records as a pandas DataFrame (pandas must be installed)."""
        try:
            import pandas
        except ImportError as exc:
            raise RuntimeError("to_pandas() needs pandas: pip install pandas") from exc
        return pandas.DataFrame([r.to_json() for r in self])

    def table(self) -> str:
        from .bench import table

        return table(self)


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
    from . import bench

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
    from . import bench

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
