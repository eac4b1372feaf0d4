"""The published random rows whose pick ``auto`` makes differently now, read without a GPU:
for each 16-bit and float32 random file of a results directory, each measured row's
pick against ``xgemm.ranking.auto_choice`` on its shape (the GPU stood in for by the
file's name, compute capability and SMs; no tuning file; the shipped calibration).

A row listed here was measured on the pick named first; its figures are that pick's,
not the present library's. The directory's ``evidence/picks_changed.txt`` holds this
script's output, and a CPU test checks it is what the script prints now: a change to
auto that moves a published pick either measures the file again or lists the row, so
no figure silently stops describing the code. (The 8-bit parts' picks are a rule's,
not the model's, and are left out.)

    python bench/picks_changed.py bench/results/h100 > bench/results/h100/evidence/picks_changed.txt
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xgemm import gpu  # noqa: E402
from xgemm.tools.generalisation import auto_pick  # noqa: E402
from xgemm.tools.results import load_json, result_files, result_name  # noqa: E402

HEADER = ("# Published rows whose pick auto makes differently now: file, case, the pick "
          "measured -> the pick now\n# (bench/picks_changed.py; their figures are the "
          "measured pick's)\n")


def label(variant: str, params: dict[str, Any]) -> str:
    """A pick as one word: the variant and its parameters in their declared order."""
    return variant + "[" + ",".join(f"{k}={v}" for k, v in params.items()) + "]"


def pick_now(row: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The variant and parameters auto picks now for a row's shape, the parameters a
    plan sets from the operands (TMA_STORE, and the stages that leave room to stage a
    ragged C) taken as the row ran them."""
    v, p = auto_pick(row)
    now = dict(p)
    if v.name == row["variant"]:
        planned = ("TMA_STORE", "STAGES") if row["params"].get("TMA_STORE") == 2 else (
            "TMA_STORE",)
        now.update({k: row["params"][k] for k in planned if k in now and k in row["params"]})
    return v.name, now


def changed(path: Path) -> Iterator[str]:
    """One line for each of a file's measured rows whose pick moved."""
    data = load_json(path)
    with gpu.standing_in(data["machine"]):
        for row in data["rows"]:
            if row.get("status") != "ok":
                continue
            now = pick_now(row)
            if now != (row["variant"], row["params"]):
                yield (f"{result_name(path)} {row['case']} {label(row['variant'], row['params'])}"
                       f" -> {label(*now)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a GPU's results directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as empty:  # no tuned entries: the model's picks
        os.environ["XGEMM_TUNE_CACHE"] = os.path.join(empty, "tuned.json")
        os.environ.pop("XGEMM_CALIBRATION", None)
        print(HEADER, end="")
        for path in result_files(args.results, "random_*_seed*"):
            if not result_name(path).startswith(("random_float8", "random_int8")):
                for line in changed(path):
                    print(line)


if __name__ == "__main__":
    main()
