"""The same suites measured on two GPUs, read from result files without a GPU: for each
file name found in both directories (a random seed, the models suite, a suite part), the
geometric means of auto's whole call and kernel against cuBLAS on each GPU, how many rows
auto picked the same variant and parameters for, and how much faster cuBLAS's kernel ran
on the second GPU (its time on the first over its time on the second, a geometric mean:
above 1, the second is faster).
Files in one directory only are listed with their own summary.

It answers whether the shipped calibration, fitted on one GPU, carries to another: the
picks are the calibration's (the same code on both), so the ratios say whether they
still serve there.

    python bench/compare_gpus.py bench/results/h100 bench/results/h200
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def geomean(values: list[float]) -> float:
    """The geometric mean of positive values (nan for none).

    >>> round(geomean([1.0, 4.0]), 6)
    2.0
    """
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def rows_of(path: Path) -> dict[str, dict] | None:
    """A suite file's measured rows by case (None for a file without rows)."""
    data = json.loads(path.read_text())
    rows = data.get("rows", data.get("suite"))
    if not isinstance(rows, list) or not rows or "x_call" not in rows[0]:
        return None
    return {f"{r.get('name', '')} {r['case']}": r for r in rows if r.get("status") == "ok"}


def compare(first: dict[str, dict], second: dict[str, dict]) -> dict[str, float | int]:
    """Summaries of two measurements of one file's cases, on the cases both measured."""
    both = sorted(set(first) & set(second))
    pick = lambda r: (r["variant"], r.get("params"))  # noqa: E731
    return {
        "cases": len(both),
        "same_pick": sum(pick(first[c]) == pick(second[c]) for c in both),
        "call_first": geomean([first[c]["x_call"] for c in both]),
        "call_second": geomean([second[c]["x_call"] for c in both]),
        "kernel_first": geomean([first[c]["x_kernel"] for c in both]),
        "kernel_second": geomean([second[c]["x_kernel"] for c in both]),
        "cublas_speedup": geomean([first[c]["cublas_ms"] / second[c]["cublas_ms"]
                                   for c in both]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="one GPU's results directory")
    parser.add_argument("second", type=Path, help="the other GPU's results directory")
    args = parser.parse_args()
    names = sorted({p.name for d in (args.first, args.second) for p in d.glob("*.json")})
    print(f"{'file':34} {'cases':>5} {'same':>5} {'call x':>13} {'kernel x':>13} "
          f"{'cuBLAS':>7}")
    print(f"{'':34} {'':>5} {'pick':>5} {'1st':>6} {'2nd':>6} {'1st':>6} {'2nd':>6} "
          f"{'1st/2nd':>7}")
    for name in names:
        first, second = (rows_of(d / name) if (d / name).exists() else None
                         for d in (args.first, args.second))
        if first is None and second is None:
            continue
        if first is None or second is None:
            only = first or second
            where = 1 if first else 2
            call = geomean([r["x_call"] for r in only.values()])
            kernel = geomean([r["x_kernel"] for r in only.values()])
            print(f"{name[:-5]:34} {len(only):5} {'-':>5} "
                  + (f"{call:6.3f} {'-':>6} {kernel:6.3f} {'-':>6}" if where == 1 else
                     f"{'-':>6} {call:6.3f} {'-':>6} {kernel:6.3f}") + f" {'-':>7}")
            continue
        s = compare(first, second)
        print(f"{name[:-5]:34} {s['cases']:5} {s['same_pick']:5} {s['call_first']:6.3f} "
              f"{s['call_second']:6.3f} {s['kernel_first']:6.3f} {s['kernel_second']:6.3f} "
              f"{s['cublas_speedup']:7.3f}")


if __name__ == "__main__":
    main()
