"""The first call with a new signature, against a baseline checkout of xgemm, in one process.

Both packages are imported side by side (the baseline as ``xgemm_baseline``) and called on
the same operands, alternating which goes first, so the ratio of each pair is measured on
the same host at the same moment: host time differs several-fold between lent machines,
and runs in separate processes mix that into the comparison.

For each dtype and size class: ``--shapes`` new (M, N, K), every kernel compiled and loaded
by a warm pass, then xgemm's plans and auto's choices forgotten and each product timed once
more on fresh copies of its operands (new addresses: no tensor map is found encoded). A
call's host time runs from the call until it returns; the GPU is idle at the start.

    git worktree add /tmp/baseline c209e08   # the commit to compare with
    PYTHONPATH=. python bench/first_call.py --baseline /tmp/baseline
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import cupy

import xgemm

SIZES = {"small": 64, "large": 1024}
DTYPES = ("float32", "float16")


def load_baseline(checkout: Path):
    """The ``xgemm`` package of ``checkout`` (a source tree), imported as ``xgemm_baseline``."""
    init = checkout / "xgemm" / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        "xgemm_baseline", init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["xgemm_baseline"] = module
    spec.loader.exec_module(module)
    return module


def operands(dtype: str, base: int, count: int) -> list[tuple]:
    """``count`` products of distinct shapes from ``base`` up, in steps of 16."""
    pairs = []
    for i in range(1, count + 1):
        m, n, k = base + 16 * i, base + 16 * ((i * 7) % 31), base + 16 * ((i * 3) % 29)
        rng = cupy.random.default_rng(i)
        pairs.append((rng.standard_normal((m, k), dtype=cupy.float32).astype(dtype),
                      rng.standard_normal((k, n), dtype=cupy.float32).astype(dtype)))
    return pairs


def host_us(matmul, a, b) -> float:
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    matmul(a, b)
    return (time.perf_counter() - start) * 1e6


def compare(baseline, dtype: str, size: str, count: int) -> dict:
    pairs = operands(dtype, SIZES[size], count)
    for a, b in pairs:  # compile and load every kernel either side runs
        xgemm.matmul(a, b)
        baseline.matmul(a, b)
    fresh = [(a.copy(), b.copy()) for a, b in pairs]
    cupy.cuda.Device().synchronize()
    xgemm.plan.PLANS.clear()
    xgemm.choice.forget()
    ours, theirs = [], []
    for i, (a, b) in enumerate(fresh):
        if i % 2:
            theirs.append(host_us(baseline.matmul, a, b))
            ours.append(host_us(xgemm.matmul, a, b))
        else:
            ours.append(host_us(xgemm.matmul, a, b))
            theirs.append(host_us(baseline.matmul, a, b))
    cupy.cuda.Device().synchronize()
    return {"dtype": dtype, "size": size, "shapes": count,
            "baseline_us": statistics.median(theirs), "xgemm_us": statistics.median(ours),
            "paired_ratio": statistics.median(o / t for o, t in zip(ours, theirs, strict=True))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True,
                        help="a source checkout of the xgemm to compare with")
    parser.add_argument("--shapes", type=int, default=60, help="new shapes per row")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the rows")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args()
    baseline = load_baseline(args.baseline)
    rows = [compare(baseline, dtype, size, args.shapes)
            for _ in range(args.rounds) for dtype in DTYPES for size in SIZES]
    print(f"first call, host us, median of {args.shapes} new shapes; xgemm from "
          f"{Path(xgemm.__file__).parent.parent}, baseline from {args.baseline}")
    print(f"{'dtype':8s} {'size':6s} {'baseline':>9s} {'xgemm':>8s} {'xgemm/baseline':>15s}")
    for row in rows:
        print(f"{row['dtype']:8s} {row['size']:6s} {row['baseline_us']:9.0f} "
              f"{row['xgemm_us']:8.0f} {row['paired_ratio']:15.3f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
