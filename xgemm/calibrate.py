"""Fitting the cost model's constants (``xgemm.cost``) to measurements: every candidate's
time on a seeded random sample of shapes (``xgemm bench --suite random --json`` with
regret), per GPU, candidate, dtype key and layout; the copies' constants; the copy
penalty whose picks lose least. ``xgemm calibrate`` runs :func:`fit`; no GPU is needed.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .cost import (
    LAYOUTS,
    PARTS,
    Calibration,
    Constants,
    Shape,
    Work,
    blocks_per_sm,
    dtype_key,
    point_key,
    predict,
    ragged_rows,
    row_bytes,
    work,
)
from .registry import Variant, get_variant
from .specs import DTYPES

#: The grids the fit searches for full_step and latency, seconds (log-spaced).
_STEP_GRID = [10 ** (e / 8) for e in range(-72, -32)]  # 1e-9 .. 1e-4
#: ... and the finer one a layout's full_step is refitted on, alone (a step 1.075x the
#: last, where the grid above's 1.33x left near points' estimates a step apart)
_FINE_STEP_GRID = [10 ** (e / 32) for e in range(-288, -128)]
#: ... and, for the GPU's copies, their launch (seconds) and bandwidth (bytes/s).
_COPY_LAUNCH_GRID = [1e-6, 2e-6, 3e-6, 5e-6, 8e-6, 12e-6]
_COPY_BANDWIDTH_GRID = [10 ** (e / 4) for e in range(42, 50)]  # 3e10 .. 2e12

Sample = tuple[Work, Shape, float]  # what the model counts, the shape, measured seconds


def _lstsq_nonneg(columns: Sequence[Any], target: Any) -> list[float]:
    """Least squares with every coefficient >= 0 (columns dropped while one is negative)."""
    import numpy as np

    cols = np.array(columns, dtype=float).T
    active = list(range(cols.shape[1]))
    while active:
        coef, *_ = np.linalg.lstsq(cols[:, active], target, rcond=None)
        if (coef >= 0).all():
            out = [0.0] * cols.shape[1]
            for i, c in zip(active, coef, strict=True):
                out[i] = float(c)
            return out
        active.pop(int(np.argmin(coef)))
    return [0.0] * cols.shape[1]


def fit_point(samples: Sequence[Sample], cal: Calibration, grid: Sequence[float] = _STEP_GRID
              ) -> tuple[Constants, float]:
    """Constants for one candidate from its samples: for each (full_step, latency) on a
    log grid, launch, tile, fill and ragged_store by least squares on the relative error;
    the pair whose prediction has the least squared log error. Returns the constants and
    the root mean square of that error (0.1: about 10% off)."""
    import numpy as np

    if not samples:
        raise ValueError("no samples to fit")
    times = np.array([t for _, _, t in samples])
    sharing = np.array([w.sharing for w, _, _ in samples], dtype=float)
    last_sharing = np.array([w.last_sharing for w, _, _ in samples], dtype=float)
    rounds = np.array([w.rounds for w, _, _ in samples], dtype=float)
    walked = np.array([w.tiles_per_block * w.steps for w, _, _ in samples], dtype=float)
    tiles = np.array([w.rounds * w.tiles_per_block for w, _, _ in samples], dtype=float)
    fills = tiles * np.array([w.fill_steps for w, _, _ in samples], dtype=float)
    ragged = np.array([w.c_bytes * w.ragged for w, _, _ in samples], dtype=float)
    dram = np.array([w.dram_bytes / cal.bandwidth for w, _, _ in samples])
    # what runs before or after the product, not beside it: the plan's copies, a sum pass
    serial = np.array([cal.copies(s, choosing=False) + w.pass_bytes / cal.bandwidth
                       for w, s, _ in samples])
    store_bandwidth = max((w.c_bytes / t for w, _, t in samples if w.own_store),
                          default=None)
    store_bound = np.array([w.c_bytes / store_bandwidth if store_bandwidth and w.own_store
                            else 0.0 for w, _, _ in samples])
    best: tuple[float, Constants] | None = None
    for full in grid:
        for latency in grid:
            body = walked * ((rounds - 1) * np.maximum(sharing * full, latency)
                             + np.maximum(last_sharing * full, latency))
            launch, tile, fill, per_byte = _lstsq_nonneg(
                [1 / times, tiles / times, fills / times, ragged / times],
                (times - serial - body) / times)
            pred = serial + np.maximum(launch + np.maximum(
                tiles * tile + fills * fill + ragged * per_byte + body, dram), store_bound)
            err = float(np.mean(np.log(pred / times) ** 2))
            if best is None or err < best[0]:
                best = (err, Constants(launch, tile, full, latency,
                                       store_bandwidth=store_bandwidth, fill=fill,
                                       ragged_store=per_byte))
    assert best is not None
    return best[1], math.sqrt(best[0])


@functools.cache
def weighed(name: str, dtype: str) -> frozenset[str]:
    """The ``point_key`` of every point ``auto`` weighs of rung ``name`` for ``dtype`` now:
    what a calibration fits (rows may hold others: a rung's ``auto_dtypes``, a candidate
    dropped since they were timed).

    >>> "skinny:" in weighed("skinny", "float32"), "skinny:" in weighed("skinny", "float16")
    (True, False)
    """
    return frozenset(point_key(name, p) for p in get_variant(name).candidate_points(dtype))


def samples_of(rows: Iterable[Mapping[str, Any]], sms: int,
               blocks: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, str], list]:
    """Each candidate's samples, by (dtype key, ``point_key``), from suite rows with every
    candidate timed (``xgemm.tools.generalisation``, regret on). Times taken once (a candidate
    far slower than the best, timed once and dropped) are left out, and so are points
    ``auto`` does not weigh for the row's dtype now (a rung's ``auto_dtypes``, a
    candidate dropped since the rows were timed): no constants are fitted for them."""
    found: dict[tuple[str, str], list[Sample]] = {}
    for row in rows:
        if row.get("status") != "ok" or "candidates" not in row:
            continue
        dtype, precision = PARTS[row["part"]]
        batch = math.prod(row.get("lead") or [1])
        item = DTYPES[dtype].itemsize
        for cand in row["candidates"]:
            if cand.get("status") != "ok" or cand.get("timed") == "once":
                continue
            v = get_variant(cand["variant"])
            point = point_key(v.name, cand["params"])
            if point not in weighed(v.name, dtype):
                continue
            shape = row_shape(row, batch, item, cand.get("copies", ()))
            key = (dtype_key(dtype, precision), point)
            w = work(v, cand["params"], dtype, shape, sms, blocks.get(key[0], {}).get(point))
            found.setdefault(key, []).append((w, shape, cand["ms"] * 1e-3))
    return found


def row_shape(row: Mapping[str, Any], batch: int, item: int, copies: Sequence[str]) -> Shape:
    """A suite row's product as the model sees it, with the operands its candidate
    padded (``copies``, by name): their bytes and lines."""
    m, n, k, layout = row["m"], row["n"], row["k"], row["layout"]
    sizes = {"a": batch * m * k * item, "b": k * n * item}
    lines = {"a": batch * (m if layout[0] == "N" else k), "b": k if layout[1] == "N" else n}
    return Shape(m, n, k, batch, layout, padded=tuple(sizes[x] for x in copies),
                 padded_lines=tuple(lines[x] for x in copies),
                 ragged_c=ragged_rows(n, item),
                 row_bytes=row_bytes(k if layout[0] == "N" else m,
                                     n if layout[1] == "N" else k, n, item=item))


def fit_copies(samples: Iterable[tuple[int, int, float]]) -> tuple[float, float, float]:
    """A padded copy's constants from measured copies, (bytes, lines, seconds) each:
    ``copy_launch``, ``copy_bandwidth`` (bytes/s) and ``copy_line`` (seconds a line), by
    least squares on the relative error, every term at least zero.

    >>> launch, bandwidth, line = fit_copies(
    ...     [(b, n, 4e-6 + b / 8e11 + n * 5e-10) for b, n in
    ...      [(10**4, 5000), (10**6, 1000), (10**7, 2000), (10**8, 10**4), (10**5, 10**5)]])
    >>> round(launch * 1e6, 2), round(bandwidth / 1e9), round(line * 1e10, 2)
    (4.0, 800, 5.0)
    """
    import numpy as np

    found = [(b, n, t) for b, n, t in samples]
    if len(found) < 3:
        raise ValueError(f"{len(found)} copies measured: fitting three constants needs 3")
    times = np.array([t for _, _, t in found])
    launch, per_byte, line = _lstsq_nonneg(
        [1 / times, [b / t for b, _, t in found], [n / t for _, n, t in found]],
        np.ones(len(found)))
    return launch, 1 / per_byte if per_byte else math.inf, line


def fit(rows: Iterable[Mapping[str, Any]], gpu: str, sms: int, bandwidth: float,
        min_samples: int = 6, copies: tuple[float, float, float] | None = None,
        sampled_copies: tuple[float, float, float] | None = None,
        rows_share_pad_launch: bool | None = None) -> tuple[Calibration, dict]:
    """A calibration from suite rows with every candidate timed: first the copies'
    constants (``copies``: launch, bandwidth and time a line, measured apart by
    ``fit_copies``; else fitted on the candidate with the most samples that pad an
    operand); then each candidate's constants over all its samples, and its full_step
    again per layout where that layout has ``min_samples``. Returns it and, per dtype
    key and candidate, the fit's RMS log error. ``sampled_copies``: the constants of the
    copy the rows' padded times include, where a faster one has replaced it since (the
    rows are not timed again): the candidates and the copy penalty are fitted with
    those, and the calibration returned prices copies with ``copies``.
    ``rows_share_pad_launch``: whether the rows' padded times paid one launch for both
    operands, as a call now does (default: unless ``sampled_copies`` says the rows paid
    an older copy, a launch an operand); the calibration returned prices them so."""
    rows = list(rows)
    blocks = occupancies(rows)
    by_point = samples_of(rows, sms, blocks)
    cal = Calibration(gpu, sms, bandwidth, 3e-6, bandwidth / 4, {}, blocks)
    cal.pads_share_launch = (sampled_copies is None if rows_share_pad_launch is None
                             else rows_share_pad_launch)
    if sampled_copies is not None and copies is None:
        raise ValueError("sampled_copies says what the rows' copies cost: pass copies too")
    if copies is not None:
        cal.copy_launch, cal.copy_bandwidth, cal.copy_line = sampled_copies or copies
    else:
        padded = max(by_point.values(), key=lambda s: sum(bool(x[1].padded) for x in s))
        coarse = _STEP_GRID[::3]
        copy_fits = []
        for launch in _COPY_LAUNCH_GRID:
            for copy_bandwidth in _COPY_BANDWIDTH_GRID:
                trial = Calibration(gpu, sms, bandwidth, launch, copy_bandwidth, {}, blocks)
                copy_fits.append((fit_point(padded, trial, coarse)[1], launch, copy_bandwidth))
        _, cal.copy_launch, cal.copy_bandwidth = min(copy_fits)
    errors: dict[str, dict[str, float]] = {}
    for (dt, key), samples in sorted(by_point.items()):
        if len(samples) < min_samples:
            continue
        c, err = fit_point(samples, cal)
        per_layout = {}
        for layout in LAYOUTS:
            mine = [s for s in samples if s[1].layout == layout]
            # a rung specialised on alignment: its narrow path's step apart, where both
            # paths were measured enough
            narrow = [s for s in mine if s[0].narrow]
            wide = [s for s in mine if not s[0].narrow]
            if len(narrow) >= min_samples and len(wide) >= min_samples:
                per_layout[layout] = _refit_step(c, wide, cal)
                # the same work by narrower loads is never faster: where its samples say
                # so, the step hardly bounds them (a latency or a launch does)
                per_layout[layout + "u"] = max(_refit_step(c, narrow, cal),
                                               per_layout[layout])
            elif len(mine) >= min_samples:
                per_layout[layout] = _refit_step(c, mine, cal)
        if per_layout:
            c = dataclasses.replace(c, layout_step=per_layout)
        cal.points.setdefault(dt, {})[key] = c
        errors.setdefault(dt, {})[key] = err
    cal.copy_penalty = min(_PENALTY_GRID, key=lambda penalty: pick_regret(
        rows, dataclasses.replace(cal, copy_penalty=penalty))[0])
    if copies is not None:
        cal.copy_launch, cal.copy_bandwidth, cal.copy_line = copies
    cal.pads_share_launch = True
    return cal, errors


def registers_of(v: Variant, params: Mapping[str, int], dtype: str, arch: str = "sm_90"
                 ) -> int:
    """Registers a thread of ``v`` at ``params`` takes, from an offline NVRTC build (no GPU)
    of its first layouts and plain epilogue."""
    from .compile import compile_offline
    from .specs import Spec

    flags = tuple(sorted((f, True) for f in v.flags))
    spec = Spec(dtype, v.a_layouts[0] == "col", v.b_layouts[0] == "col", flags=flags)
    report = compile_offline(v.source(params, spec), v.target or arch,
                             name=f"{v.kernel_name}.cu")
    return report.registers


def occupancies(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Blocks per SM of every candidate the rows timed that ``auto`` weighs (:func:`weighed`),
    by dtype key and ``point_key``: its registers from an offline build (two at a time), its
    threads, its shared memory."""
    from concurrent.futures import ThreadPoolExecutor

    todo: dict[tuple[str, str], tuple[Variant, dict, str]] = {}
    for row in rows:
        dtype, precision = PARTS.get(row.get("part"), (None, None))
        for cand in row.get("candidates", ()) if dtype else ():
            v = get_variant(cand["variant"])
            if point_key(v.name, cand["params"]) not in weighed(v.name, dtype):
                continue
            if "SMS" not in " ".join(v.grid):  # persistent grids: one block an SM
                key = (dtype_key(dtype, precision), point_key(v.name, cand["params"]))
                todo.setdefault(key, (v, dict(cand["params"]), dtype))

    def count(item: tuple[Variant, dict, str]) -> int:
        v, params, dtype = item
        return blocks_per_sm(v, params, dtype, registers_of(v, params, dtype))

    found: dict[str, dict[str, int]] = {}
    with ThreadPoolExecutor(2) as pool:
        for (dt, key), n in zip(todo, pool.map(count, todo.values()), strict=True):
            found.setdefault(dt, {})[key] = n
    return found


#: The copy penalties ``fit`` tries, seconds.
_PENALTY_GRID = [0.0, 5e-6, 10e-6, 15e-6, 20e-6, 30e-6, 45e-6]


def pick_regret(rows: Iterable[Mapping[str, Any]], cal: Calibration
                ) -> tuple[float, list[float]]:
    """How the model's picks among each row's timed candidates compare with the fastest
    of them (measured time of the pick over the best): the geometric mean and each row's.
    What ``fit`` chooses the copy penalty by; the suites measure auto itself."""
    regrets = []
    for row in rows:  # candidates timed once (far slower than the best) are left out
        timed = [c for c in row.get("candidates", ())
                 if c.get("status") == "ok" and c.get("timed") != "once"]
        if row.get("status") != "ok" or not timed:
            continue
        dtype, precision = PARTS[row["part"]]
        batch = math.prod(row.get("lead") or [1])
        item = DTYPES[dtype].itemsize
        priced = []
        for cand in timed:
            v = get_variant(cand["variant"])
            c = cal.points.get(dtype_key(dtype, precision), {}).get(
                point_key(v.name, cand["params"]))
            if c is None:
                continue
            shape = row_shape(row, batch, item, cand.get("copies", ()))
            per_sm = cal.blocks.get(dtype_key(dtype, precision), {}).get(
                point_key(v.name, cand["params"]))
            w = work(v, cand["params"], dtype, shape, cal.sms, per_sm)
            priced.append((predict(c, w, shape, cal), cand["ms"]))
        if priced:
            regrets.append(min(priced)[1] / min(c["ms"] for c in timed))
    mean = math.exp(sum(map(math.log, regrets)) / len(regrets)) if regrets else math.inf
    return mean, regrets


def _refit_step(c: Constants, samples: Sequence[Sample], cal: Calibration) -> float:
    """The full_step that fits ``samples`` (one layout's) best, the rest of ``c`` kept,
    on the fine grid."""
    def error(full: float) -> float:
        trial = dataclasses.replace(c, full_step=full)
        return sum(math.log(predict(trial, w, s, cal, choosing=False) / t) ** 2
                   for w, s, t in samples)

    return min(_FINE_STEP_GRID, key=error)


def copy_constants(found: Mapping[str, Any]) -> tuple[float, float, float]:
    """A padded copy's launch (s), bandwidth (bytes/s) and time a line (s), from a
    ``bench/pad_copy.py`` file's JSON or a calibration's.

    >>> copy_constants({"constants": {"copy_launch": 5e-6, "copy_bandwidth": 1e12,
    ...                               "copy_line": 1e-10}})
    (5e-06, 1000000000000.0, 1e-10)
    """
    found = found.get("constants", found)
    return found["copy_launch"], found["copy_bandwidth"], found["copy_line"]


def extended(base: dict[str, Any], fitted: dict[str, Any], name: str) -> dict[str, Any]:
    """Calibration ``base`` (a file's JSON, named ``name``; changed in place and returned)
    with the points ``fitted`` has and it lacks, for ``fitted``'s GPU and SM count: every
    other constant of ``base`` (copies, host, the points it prices) kept; ``fitted_on``
    says which came from where.

    >>> base = {"gpu": "A", "sms": 132, "points": {"16-bit": {"x:": 1}}, "blocks": {},
    ...         "rms_log_error": {}, "fitted_on": ["a.json"]}
    >>> new = {"gpu": "B", "sms": 132, "points": {"16-bit": {"x:": 2, "y:": 3}},
    ...        "blocks": {}, "rms_log_error": {}, "fitted_on": ["b.json"]}
    >>> out = extended(base, new, "base.json")
    >>> out["gpu"], out["points"]["16-bit"], out["fitted_on"][1]
    ('B', {'x:': 1, 'y:': 3}, 'the points base.json lacks: b.json')
    """
    for key, points in fitted["points"].items():
        for point in sorted(set(points) - set(base["points"].get(key, {}))):
            for table in ("points", "blocks", "rms_log_error"):
                if point in fitted[table].get(key, {}):
                    base[table].setdefault(key, {})[point] = fitted[table][key][point]
    base["gpu"], base["sms"] = fitted["gpu"], fitted["sms"]
    base["fitted_on"] = ([f"{name}: {x}" for x in base["fitted_on"]]
                         + [f"the points {name} lacks: {x}" for x in fitted["fitted_on"]])
    return base
