"""Rung 25 (``wgmma_last_round``) against rung 14 (``wgmma``), auto and cuBLAS, kernel time,
on the models suite's 16-bit products and a random sample's: what a rule taking rung 25
would be fitted to.

For each case (``xgemm.tools.generalisation.model_cases()`` and ``random_cases(seed)``, PyTorch
operands in the case's layout): the kernel time (CUDA events, median of 10, the L2
scrubbed before each where the operands and C fit in it four times) of torch.matmul, of
auto's pick, and of each point below, each point's result first checked against float64.
The contenders take turns, one timed call each a turn, so a GPU that heats and slows
down over a large case's runs slows them all alike (timed one after another, the later
ones of a large product read up to 15% slow).
Printed per case with the tile count and the waves rung 14's default tiles make on this
GPU; --json keeps every row.

    PYTHONPATH=. python bench/last_round_points.py [--models [--tokens 512,4096]] [--seeds 10,11]
        [--dtype bfloat16] [--json out.json]
"""

from __future__ import annotations

import argparse

import torch

import xgemm
from xgemm import gpu
from xgemm.expressions import cdiv
from xgemm.timing import scrub_pays
from xgemm.tools import generalisation, measuring
from xgemm.tools.results import save_json

#: Timed calls of each contender (their median is its time).
REPEAT = 10
#: (variant, parameters): rung 14's default and narrower tiles, and rung 25 at the same.
POINTS = (("wgmma", {}), ("wgmma", {"BN": 128, "STAGES": 6}),
          ("wgmma_last_round", {}), ("wgmma_last_round", {"BN": 128, "STAGES": 4}))


def label(variant: str, params: dict) -> str:
    short = {"wgmma": "r14", "wgmma_last_round": "r25"}[variant]
    return short + "".join(f" {k}{v}" for k, v in params.items()) if params else short


def measure(case: measuring.Product, dtype: str, seed: int) -> dict:
    """One case's row: torch.matmul's, auto's and each point's kernel milliseconds."""
    a, b, c = measuring.operands(case, dtype, seed)
    expected = a.double() @ b.double()
    flush = scrub_pays((case.m * case.k + case.k * case.n + case.m * case.n) * a.element_size(),
                       torch.cuda.current_device())

    sms = gpu.multiprocessors(torch.cuda.current_device())
    tiles = cdiv(case.m, 128) * cdiv(case.n, 256)
    auto = xgemm.prepare(a, b, out=c)
    calls = {"cublas_ms": lambda: torch.matmul(a, b, out=c), "auto_ms": auto}
    for variant, params in POINTS:
        launch = xgemm.prepare(a, b, out=c, variant=variant, **params)
        launch()
        error = float((c.double() - expected).norm() / max(float(expected.norm()), 1e-30))
        if not error < 2e-2:
            raise SystemExit(f"{case.label} {variant} {params}: error {error:.2e}")
        calls[label(variant, params)] = launch
    row: dict = {"case": case.label, "name": case.name, "tiles": tiles, "waves": tiles / sms,
                 "auto": auto.variant.name, "auto_params": dict(auto.params)}
    row.update(measuring.median_ms_in_turns(calls, REPEAT, flush))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", action="store_true", help="the models suite's products")
    parser.add_argument("--tokens", default="", help="only these token counts of the models'")
    parser.add_argument("--seeds", default="", help="random samples' seeds, comma-separated")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    parser.add_argument("--json")
    args = parser.parse_args()
    tokens = [int(t) for t in args.tokens.split(",") if t] or generalisation.TOKENS
    cases = list(generalisation.model_cases(tokens)) if args.models else []
    cases += [c for seed in args.seeds.split(",") if seed
              for c in generalisation.random_cases(int(seed))]
    names = [label(*point) for point in POINTS]
    print(f"{'case':>26} {'waves':>5} {'cuBLAS':>7} {'auto':>7} "
          + " ".join(f"{n:>20}" for n in names) + "  (kernel us)")
    rows = []
    for i, case in enumerate(cases):
        row = measure(case, args.dtype, seed=i)
        rows.append(row)
        print(f"{row['case']:>26} {row['waves']:5.2f} {row['cublas_ms'] * 1e3:7.1f} "
              f"{row['auto_ms'] * 1e3:7.1f} " + " ".join(f"{row[n] * 1e3:20.1f}" for n in names),
              flush=True)
    if args.json:
        save_json(args.json, rows)


if __name__ == "__main__":
    main()
