"""auto's regret, replayed without a GPU: for each row of random or models suite files
written with regret (every candidate timed), the pick ``auto`` makes now
(``xgemm.ranking.auto_choice``, the operands stood in for by their shapes, the GPU by the
file's SM count and compute capability) and the time that candidate took in the file.
What a change to the cost model or its calibration would have picked on rows already
measured, before any GPU time is spent; the GPU then checks it on a seed it has not seen.

    python bench/replay_auto.py bench/results/h100/random_*_seed7.json.gz
    XGEMM_CALIBRATION=new.json python bench/replay_auto.py FILES --show 1.3

A pick the file never timed (a rules' point outside the candidates) counts only where it
is the pick the file recorded (its ``auto_ms``); otherwise it is reported as untimed.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xgemm import gpu  # noqa: E402
from xgemm.tools.generalisation import auto_pick  # noqa: E402
from xgemm.tools.results import load_json  # noqa: E402

PLANNED = ("TMA_STORE",)  # set by the plan from C's rows, not by the choice


def same(params: dict, other: dict) -> bool:
    return all(params.get(x) == other.get(x) for x in {*params, *other} - set(PLANNED))


def replay(row: dict) -> tuple[float | None, str]:
    """The replayed pick's time over the fastest candidate's (None: never timed)."""
    v, p = auto_pick(row)
    timed = [c for c in row["candidates"] if c["status"] == "ok"]
    best = min([c["ms"] for c in timed] + [row["auto_ms"]])
    label = f"{v.name} {p}"
    for c in timed:
        if c["variant"] == v.name and same(c["params"], p):
            return c["ms"] / best, label
    if row["variant"] == v.name and same(row["params"], p):
        return row["auto_ms"] / best, label
    return None, label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--show", type=float, default=math.inf,
                        help="list the rows whose replayed regret is above this")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as empty:  # no tuned entries: the model's picks
        os.environ.setdefault("XGEMM_TUNE_CACHE", os.path.join(empty, "tuned.json"))
        for path in args.files:
            data = load_json(path)  # .json or .json.gz
            rows = data["rows"] if isinstance(data, dict) else data
            machine = data.get("machine", {}) if isinstance(data, dict) else {}
            regrets, untimed = [], 0
            for row in rows:
                if row.get("status") != "ok" or not row.get("candidates"):
                    continue
                with gpu.standing_in(machine):  # the GPU that measured the file
                    regret, label = replay(row)
                if regret is None:
                    untimed += 1
                    continue
                regrets.append(regret)
                if regret > args.show:
                    print(f"  {row['part']} {row['case']}: {label} {regret:.2f}"
                          f" (recorded {row['variant']} {row.get('regret', 0):.2f})")
            mean = math.exp(sum(map(math.log, regrets)) / len(regrets)) if regrets else math.nan
            print(f"{Path(path).name}: {len(regrets)} rows, {untimed} untimed picks,"
                  f" regret geomean {mean:.3f}, max {max(regrets, default=math.nan):.2f}")


if __name__ == "__main__":
    main()
