"""The same suites measured on two GPUs, read from result files without a GPU: for each
file name found in both directories (a random seed, the models suite, a suite part), the
geometric means of auto's whole call and kernel against cuBLAS on each GPU, how many rows
auto picked the same variant and parameters for, how much faster cuBLAS's kernel ran on
the second GPU (its time on the first over its time on the second, a geometric mean:
above 1, the second is faster), and the commit each file ran on. Files in one directory
only are listed with their own summary. ``--under X`` then lists the second directory's
random rows under X times cuBLAS a call.

Where both files ran on the same commit, the picks are the same code's, and the ratios
say whether a calibration fitted on the first GPU still serves on the second; where the
commits differ, a changed pick may be the code's change, not the GPU's.

    python bench/compare_gpus.py bench/results/h100 bench/results/h200 --under 0.6
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xgemm.tools.generalisation import geomean  # noqa: E402
from xgemm.tools.results import load_json, result_files, result_name  # noqa: E402


def load(path: Path) -> tuple[str, dict[str, dict[str, Any]]] | None:
    """A suite file's commit and its measured rows by name and case (None for a file that
    holds no suite rows, or none measured)."""
    data = load_json(path)
    rows = data.get("rows", data.get("suite"))
    if not isinstance(rows, list):
        return None
    measured = [r for r in rows if r.get("status") == "ok" and "x_call" in r]
    by_case = {f"{r.get('name', '')} {r['case']}": r for r in measured}
    if len(by_case) != len(measured):
        raise ValueError(f"{path}: two measured rows share a name and case")
    return (data.get("machine", {}).get("commit", "?"), by_case) if by_case else None


def pick(row: dict[str, Any]) -> tuple[str, Any]:
    """What auto ran: the variant and its parameters."""
    return row["variant"], row.get("params")


def compare(first: dict[str, dict], second: dict[str, dict]
            ) -> dict[str, float | int | None]:
    """Summaries of two measurements of one file's cases, on the cases both measured."""
    both = sorted(set(first) & set(second))
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


def number(value: float | None, width: int = 6) -> str:
    """A ratio to three places, '-' where there is none."""
    return f"{value:{width}.3f}" if value is not None else f"{'-':>{width}}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="one GPU's results directory")
    parser.add_argument("second", type=Path, help="the other GPU's results directory")
    parser.add_argument("--under", type=float, help="list the second directory's random "
                        "rows under this many times cuBLAS a call")
    args = parser.parse_args()
    files = [{result_name(p): p for p in result_files(d)} for d in (args.first, args.second)]
    names = sorted(set(files[0]) | set(files[1]))
    print(f"{'file':26} {'cases':>5} {'same':>5} {'call x':>13} {'kernel x':>13} "
          f"{'cuBLAS':>7}  commits")
    print(f"{'':26} {'':>5} {'pick':>5} {'1st':>6} {'2nd':>6} {'1st':>6} {'2nd':>6} "
          f"{'1st/2nd':>7}  1st / 2nd")
    for name in names:
        first, second = (load(found[name]) if name in found else None for found in files)
        if first is None and second is None:
            continue
        if first is None or second is None:
            commit, rows = first or second
            call = number(geomean([r["x_call"] for r in rows.values()]))
            kernel = number(geomean([r["x_kernel"] for r in rows.values()]))
            calls, kernels = ((call, "-"), (kernel, "-")) if first else (("-", call),
                                                                          ("-", kernel))
            commits = f"{commit} / -" if first else f"- / {commit}"
            print(f"{name:26} {len(rows):5} {'-':>5} {calls[0]:>6} {calls[1]:>6} "
                  f"{kernels[0]:>6} {kernels[1]:>6} {'-':>7}  {commits}")
            continue
        s = compare(first[1], second[1])
        ratios = " ".join(number(s[key]) for key in ("call_first", "call_second",
                                                     "kernel_first", "kernel_second"))
        print(f"{name:26} {s['cases']:5} {s['same_pick']:5} {ratios} "
              f"{number(s['cublas_speedup'], 7)}  {first[0]} / {second[0]}")
    if args.under is None:
        return
    print(f"\nRandom rows of {args.second} under {args.under}x cuBLAS a call "
          "(regret: auto's kernel over the fastest candidate's, '-' where not measured)")
    for path in result_files(args.second, "random_*"):
        loaded = load(path)
        for row in (loaded[1].values() if loaded else ()):
            if row["x_call"] < args.under:
                regret = f"{row['regret']:.2f}" if row.get("regret") else "-"
                print(f"{result_name(path):26} {row['case']:18} {row['variant']:14} "
                      f"copies {','.join(row.get('copies') or []) or '-':4} "
                      f"call {row['x_call']:.2f} kernel {row['x_kernel']:.2f} "
                      f"regret {regret}")


if __name__ == "__main__":
    main()
