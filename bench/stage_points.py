"""Rung 14 (``wgmma``) at 128 x 256 with 3 stages against 4, and 128 x 128 with 6 stages
where 128 x 256 tiles fill under one round of the SMs, on aligned random products, against
torch.matmul: what rung 14's default depth and the 16-bit few-tile rule were chosen by
(bench/results/h100/evidence/wgmma_stages_0bceb40.txt, which a probe of the same draw and
method measured).

The sample: for each seed, ``numpy.random.default_rng(seed)`` draws M and N log-uniform
over [128, 16384] and K over [256, 16384], rounded up to multiples of 128 (K of 64), a
layout of NN, NT and TN, and keeps products of at least ``MIN_TILES`` 128 x 256 tiles (the
products rung 14's default tiles serve) and at most half 8192³'s multiply-adds, until it has
``--count``. Kernel time: CUDA events, the L2 scrubbed before each timed call, the
contenders taking turns one call each, median of ``--rounds`` (a GPU that slows as it
heats slows them all alike); each point's result is first checked against float64.

    PYTHONPATH=. python bench/stage_points.py --seeds 1,2 [--dtype bfloat16] [--json out.json]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

import xgemm
from xgemm.expressions import cdiv
from xgemm.timing import scrub_pays
from xgemm.tools import measuring
from xgemm.tools.results import save_json

#: 128 x 256 tiles a drawn product has at least: half a round of the H100's 132 SMs.
MIN_TILES = 66
#: The points timed (rung 14's parameters): its default tile at 3 and 4 stages, and the
#: 128 x 128 tile at 6 stages, timed only where 128 x 256 tiles fill under one round.
POINTS = {"S3": {"STAGES": 3}, "S4": {"STAGES": 4}, "128x128 S6": {"BN": 128, "STAGES": 6}}


def draw(seed: int, count: int) -> list[measuring.Product]:
    """The seed's sample (the module's docstring says how it is drawn).

    >>> [c.label for c in draw(1, 3)]
    ['1536x12928x512:TN', '4352x1792x832:TN', '384x14208x2240']
    """
    rng = np.random.default_rng(seed)
    found: list[measuring.Product] = []
    while len(found) < count:
        m, n = (cdiv(round(math.exp(x)), 128) * 128
                for x in rng.uniform(math.log(128), math.log(16384), 2))
        k = cdiv(round(math.exp(rng.uniform(math.log(256), math.log(16384)))), 64) * 64
        layout = ("NN", "NT", "TN")[int(rng.integers(3))]
        if cdiv(m, 128) * cdiv(n, 256) >= MIN_TILES and 2 * m * n * k <= 8192 ** 3:
            found.append(measuring.Product(m, n, k, layout))
    return found


def measure(case: measuring.Product, dtype: str, seed: int, rounds: int, sms: int) -> dict:
    """One product's row: torch.matmul's and each point's kernel milliseconds."""
    a, b, c = measuring.operands(case, dtype, seed)
    expected = a.double() @ b.double()
    flush = scrub_pays((case.m * case.k + case.k * case.n + case.m * case.n) * a.element_size(),
                       torch.cuda.current_device())
    tiles = cdiv(case.m, 128) * cdiv(case.n, 256)
    calls = {"cublas_ms": lambda: torch.matmul(a, b, out=c)}
    for name, params in POINTS.items():
        if name.startswith("128x128") and tiles >= sms:
            continue
        launch = xgemm.prepare(a, b, out=c, variant="wgmma", **params)
        launch()
        error = float((c.double() - expected).norm() / max(float(expected.norm()), 1e-30))
        if not error < 2e-2:
            raise SystemExit(f"{case.label} {name}: error {error:.2e}")
        calls[name] = launch
    return {"case": case.label, "tiles": tiles,
            **measuring.median_ms_in_turns(calls, rounds, flush)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2", help="samples' seeds, comma-separated")
    parser.add_argument("--count", type=int, default=40, help="products a seed")
    parser.add_argument("--rounds", type=int, default=9, help="timed calls of each contender")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    parser.add_argument("--json", help="write every row here")
    args = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    print(f"{'seed':>4} {'case':>24} {'tiles':>5} {'cuBLAS':>8} "
          + " ".join(f"{name:>10}" for name in POINTS) + "  S4/S3  (kernel us)")
    for seed in (int(s) for s in args.seeds.split(",") if s):
        for i, case in enumerate(draw(seed, args.count)):
            row = {"seed": seed, **measure(case, args.dtype, i, args.rounds, sms)}
            rows.append(row)
            print(f"{seed:>4} {row['case']:>24} {row['tiles']:>5} {row['cublas_ms'] * 1e3:8.1f} "
                  + " ".join(f"{row[n] * 1e3:10.1f}" if n in row else f"{'-':>10}"
                             for n in POINTS)
                  + f"  {row['S4'] / row['S3']:.3f}", flush=True)
        mine = [r["S4"] / r["S3"] for r in rows if r["seed"] == seed]
        print(f"seed {seed}: 4 stages / 3 stages, geomean "
              f"{math.exp(sum(map(math.log, mine)) / len(mine)):.3f}, max {max(mine):.3f}")
    if args.json:
        save_json(args.json, rows)


if __name__ == "__main__":
    main()
