"""Time a rung's candidates on the shapes of saved ``--suite random`` runs and add them.

A calibration (``xgemm calibrate``) fits the cost model to every candidate's time on a
seeded sample. When a rung gains candidates, this times only that rung's on the same
shapes and operands (``xgemm.tools.measuring.add_candidates``), writes each file back
with them in its rows, and leaves the others' timings as they were measured: then
``xgemm calibrate`` on the files fits the new points too. Needs a CUDA GPU.

    PYTHONPATH=. python bench/add_candidates.py --variant skinny \
        bench/results/h100/calibration/random_float32_seed1.json.gz ...
"""

from __future__ import annotations

import argparse

from tqdm import tqdm

from xgemm.tools import generalisation, measuring
from xgemm.tools.machine import source_commit
from xgemm.tools.results import load_json, save_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="+", help="files written by xgemm bench --suite random")
    parser.add_argument("--variant", action="append", required=True,
                        help="a rung whose candidates to time (repeat for several)")
    parser.add_argument("--new-points-only", action="store_true",
                        help="time only the points a row has no timing of (a point added to a "
                             "rung), keeping the others' times")
    args = parser.parse_args()
    for path in args.json:
        data = load_json(path)  # .json or .json.gz, written back as it came
        rows = data["rows"]
        with tqdm(total=len(rows), desc=path.rsplit("/", 1)[-1]) as bar:
            measuring.add_candidates(rows, set(args.variant), progress=bar.update,
                                     new_points_only=args.new_points_only)
        data["summary"] = generalisation.summary(rows, data.get("summary", {}).get("seed"))
        data.setdefault("added", []).append({"variants": sorted(args.variant),
                                             "new_points_only": args.new_points_only,
                                             "commit": source_commit()})
        save_json(path, data)


if __name__ == "__main__":
    main()
