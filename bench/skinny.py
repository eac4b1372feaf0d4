"""Products of few rows (decode steps): rung 20 (``skinny``) against cuBLAS and auto.

For each dtype, B layout (column-major ``w.T`` of a weight, or row-major), row count and
(N, K): the kernel time of ``skinny`` at a handful of points (the best is reported), of
auto's pick, and of ``torch.matmul`` (cuBLAS) on the same tensors, CUDA events with
the L2 scrubbed before each call (B fits in the H100's 50 MB L2, which would otherwise
serve it); and the bandwidth at which skinny reads B, against the device-to-device
copy bandwidth measured in the same run (bytes read plus written, as copies count).
Every skinny result is checked against float64 first.

    PYTHONPATH=. python bench/skinny.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import cupy
import torch

import xgemm
from xgemm.bench import measure_copy_bandwidth, relative_error
from xgemm.timing import time_launches

ROWS = (1, 4, 8, 16)
SIZES = ((4096, 4096), (14336, 4096), (4096, 14336), (2048, 2048))  # (N, K)
POINTS = ({}, {"SPLITS": 2}, {"SPLITS": 8}, {"BN": 64}, {"BN": 16, "WARPS": 4})


def kernel_ms(call) -> float:
    return statistics.median(time_launches(call, warmup=3, repeat=25, flush_l2=True))


def row(dtype: str, b_col: bool, m: int, n: int, k: int) -> dict:
    t = getattr(torch, dtype)
    a = torch.randn(m, k, device="cuda").to(t)
    b = (torch.randn(n, k, device="cuda").to(t).T if b_col
         else torch.randn(k, n, device="cuda").to(t))
    expected = cupy.asarray(a.double().cpu().numpy()) @ cupy.asarray(b.double().cpu().numpy())
    best = (float("inf"), None)
    for change in POINTS:
        v = xgemm.get_variant("skinny")
        try:
            params = v.resolve({**v.defaults, **change}, dtype)
        except ValueError:
            continue
        launch = xgemm.prepare(a, b, "skinny", **params)
        error = relative_error(cupy.asarray(launch().double()), expected)
        assert error < (2e-2 if t in (torch.float16, torch.bfloat16) else 1e-5), (change, error)
        best = min(best, (kernel_ms(launch), change), key=lambda x: x[0])
    auto = xgemm.prepare(a, b)
    cublas = kernel_ms(lambda: torch.matmul(a, b))
    ms, change = best
    return {"dtype": dtype, "b": "col" if b_col else "row", "m": m, "n": n, "k": k,
            "skinny_ms": ms, "skinny_point": change, "auto": auto.variant.name,
            "auto_ms": kernel_ms(auto), "cublas_ms": cublas,
            "b_gbs": b.numel() * b.element_size() / ms / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json")
    parser.add_argument("--dtypes", default="float16,bfloat16,float32")
    args = parser.parse_args()
    copy_gbs = measure_copy_bandwidth()
    rows = [row(dtype, b_col, m, n, k) for dtype in args.dtypes.split(",")
            for b_col in (True, False) for m in ROWS for n, k in SIZES]
    print(f"device copy {copy_gbs:.0f} GB/s (read + written)")
    print(f"{'dtype':9s} {'B':3s} {'shape':>17s} {'skinny':>8s} {'auto':>8s} {'cuBLAS':>8s}"
          f" {'x cuBLAS':>8s} {'x auto':>7s} {'B GB/s':>7s} {'x copy':>6s}  point")
    for r in rows:
        us = [r[key] * 1e3 for key in ("skinny_ms", "auto_ms", "cublas_ms")]
        print(f"{r['dtype']:9s} {r['b']:3s} {r['m']:>5d}x{r['n']:>5d}x{r['k']:>5d} "
              f"{us[0]:7.1f}u {us[1]:7.1f}u {us[2]:7.1f}u"
              f" {r['cublas_ms'] / r['skinny_ms']:8.2f} {r['auto_ms'] / r['skinny_ms']:7.2f}"
              f" {r['b_gbs']:7.0f} {r['b_gbs'] / copy_gbs:6.2f}  {r['skinny_point']} ({r['auto']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_gbs": copy_gbs, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
