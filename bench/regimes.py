"""Where the generalisation suites' rows lose to cuBLAS, by regime, read from result files
without a GPU: each row's kernel time (auto's pick, and the fastest candidate timed on
it) against cuBLAS's, and each against a roofline bound (the operands and C moved once at
the file's device-copy bandwidth, or the multiply-adds at the dtype's dense peak,
whichever is longer; no launch latency, so small products sit far above it).

The regimes are those the ladder has no rung for: few rows or few columns (the big
operand streamed once), tiny K (C is most of the bytes), 16-bit operands copied for TMA,
narrow outputs (33-256 rows or columns: few tiles, ragged waves), and the rest.

    python bench/regimes.py bench/results/h100/random_*_seed*.json.gz \\
        bench/results/h100/models_bfloat16.json
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xgemm.tools.results import load_json  # noqa: E402

#: Dense multiply-add peaks of an H100 SXM, FLOP/s: what the tensor cores reach in
#: practice for 16-bit (below the 989 TFLOP/s of the datasheet), FFMA for float32.
PEAK = {"float16": 800e12, "bfloat16": 800e12, "float32": 66.9e12, "tf32": 400e12,
        "float64": 60e12}
ITEM = {"float16": 2, "bfloat16": 2, "float32": 4, "tf32": 4, "float64": 8}
#: Where the file does not say: the H100's device-to-device copy, bytes/s.
COPY_BANDWIDTH = 3.01e12


def regime(row: dict) -> str:
    """The regime of one row, the first that applies."""
    m, n, k = row["m"], row["n"], row["k"]
    if min(m, n) <= 32:
        return "few rows or columns (<= 32)"
    if k <= 64:
        return "tiny K (<= 64)"
    if row.get("copies") and ITEM[row["part"]] == 2:
        return "16-bit rows copied for TMA"
    if min(m, n) <= 256:
        return "narrow output (33-256)"
    return "the rest"


def bound_ms(row: dict, bandwidth: float) -> float:
    """The roofline bound of a row's product, milliseconds."""
    item = ITEM[row["part"]]
    batch = math.prod(row.get("lead") or [1])
    m, n, k = row["m"], row["n"], row["k"]
    moved = (m * k + k * n + m * n) * item * batch / bandwidth
    computed = 2 * m * n * k * batch / PEAK[row["part"]]
    return max(moved, computed) * 1e3


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    groups: dict[tuple[str, str, str], list[tuple[dict, float, float]]] = defaultdict(list)
    for path in args.files:
        data = load_json(path)  # .json or .json.gz
        bandwidth = data.get("machine", {}).get("copy_bandwidth", COPY_BANDWIDTH)
        for row in data["rows"]:
            if row.get("status") != "ok":
                continue
            timed = [c["ms"] for c in row.get("candidates", []) if c.get("status") == "ok"]
            best = min([*timed, row["auto_ms"]])
            dtype = "16-bit" if ITEM[row["part"]] == 2 else row["part"]
            suite = data.get("suite", "models" if row.get("name") else "random")
            groups[suite, dtype, regime(row)].append((row, best, bound_ms(row, bandwidth)))
    print("| suite | dtype | regime | rows | auto x cuBLAS | best x cuBLAS | below 0.7x "
          "| cuBLAS us | auto us | bound us |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (suite, dtype, name), rows in sorted(groups.items()):
        auto = geomean([r["cublas_ms"] / r["auto_ms"] for r, _, _ in rows])
        best = geomean([r["cublas_ms"] / b for r, b, _ in rows])
        below = sum(r["cublas_ms"] / r["auto_ms"] < 0.7 for r, _, _ in rows)
        us = [statistics.median(x) * 1e3 for x in zip(*[(r["cublas_ms"], r["auto_ms"], bd)
                                                         for r, _, bd in rows], strict=True)]
        print(f"| {suite} | {dtype} | {name} | {len(rows)} | {auto:.2f} | {best:.2f} | "
              f"{below} | {us[0]:.1f} | {us[1]:.1f} | {us[2]:.1f} |")


if __name__ == "__main__":
    main()
