"""Products of few rows (decode steps) or few columns: the skinny rungs (20, ``skinny``;
21, ``skinny_mma`` and 22, ``skinny_ring``, with --variant) against cuBLAS and auto.

For each side (few rows of C: A small and B big; few columns: B small and A big, the
rungs' FEW_COLUMNS points), dtype, layout of the big operand (along K: ``w.T`` of a
weight as B, a row-major A; or across K), count of rows (or columns) and (N, K): the
kernel time of the rung at a handful of points (the best is reported), of auto's pick,
and of ``torch.matmul`` (cuBLAS) on the same tensors, CUDA events with the L2 scrubbed
before each call (the big operand fits in the H100's 50 MB L2, which would otherwise
serve it); and the bandwidth at which the rung, and auto's pick, read the big operand,
against the device-to-device copy bandwidth measured in the same run (bytes read plus
written, as copies count). Every result is checked against float64 first. With --ragged,
N and K are one more than the sizes below: no row of either operand starts on 16 bytes.

    PYTHONPATH=. python bench/skinny.py [--json out.json] [--sides rows,columns]
        [--variant skinny_mma --dtypes float16,bfloat16] [--rows 1,4,8,16] [--ragged]
"""

from __future__ import annotations

import argparse
import statistics

import cupy
import torch

import xgemm
from xgemm.timing import time_launches
from xgemm.tools.bench import relative_error
from xgemm.tools.machine import measure_copy_bandwidth
from xgemm.tools.results import save_json

ROWS = (1, 4, 8, 16)
SIZES = ((4096, 4096), (14336, 4096), (4096, 14336), (2048, 2048))  # (N, K)
#: The points timed of each skinny rung (--variant); the best is reported.
POINTS = {"skinny": ({}, {"SPLITS": 2}, {"SPLITS": 8}, {"BN": 64}, {"BN": 16, "WARPS": 4},
                     {"BM": 16, "SPLITS": 2}),
          "skinny_mma": ({}, {"SPLITS": 2}, {"SPLITS": 8}, {"WARPS": 8}, {"UNROLL": 1},
                         {"BM": 16}, {"BM": 16, "SPLITS": 8}),
          "skinny_ring": ({}, {"SPLITS": 4}, {"SPLITS": 8}, {"WARPS": 8, "STAGES": 3},
                          {"BM": 16})}


def kernel_ms(call) -> float:
    return statistics.median(time_launches(call, warmup=3, repeat=25, flush_l2=True))


def row(variant: str, dtype: str, along_k: bool, few: int, n: int, k: int,
        columns: bool = False) -> dict:
    """One product: ``few`` rows of A by the big (K x n) B, or with ``columns`` the big
    (n x K) A by ``few`` columns of B; the big operand runs along K where ``along_k``."""
    t = getattr(torch, dtype)

    def big() -> torch.Tensor:  # (n x K) as A where columns, else (K x n) as B
        def randn(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, device="cuda").to(t)

        if columns:
            return randn(n, k) if along_k else randn(k, n).T
        return randn(n, k).T if along_k else randn(k, n)

    if columns:
        a, b = big(), torch.randn(k, few, device="cuda").to(t)
    else:
        a, b = torch.randn(few, k, device="cuda").to(t), big()
    m = a.shape[0]
    expected = cupy.asarray(a.double().cpu().numpy()) @ cupy.asarray(b.double().cpu().numpy())
    best = (float("inf"), None)
    v = xgemm.get_variant(variant)
    for change in POINTS[variant]:
        try:
            params = v.resolve({**v.defaults, **change, "FEW_COLUMNS": int(columns)}, dtype)
        except ValueError:  # a point the dtype's rules exclude
            continue
        launch = xgemm.prepare(a, b, variant, **params)
        error = relative_error(cupy.asarray(launch().double()), expected)
        assert error < (2e-2 if t in (torch.float16, torch.bfloat16) else 1e-5), (change, error)
        best = min(best, (kernel_ms(launch), change), key=lambda x: x[0])
    auto = xgemm.prepare(a, b)
    auto_ms = kernel_ms(auto)
    cublas = kernel_ms(lambda: torch.matmul(a, b))
    ms, change = best
    large = a if columns else b
    return {"variant": variant, "dtype": dtype, "side": "columns" if columns else "rows",
            "big": "along K" if along_k else "across K", "m": m, "n": b.shape[1], "k": k,
            "skinny_ms": ms, "skinny_point": change, "auto": auto.variant.name,
            "auto_ms": auto_ms, "cublas_ms": cublas,
            "big_gbs": large.numel() * large.element_size() / ms / 1e6,
            "auto_big_gbs": large.numel() * large.element_size() / auto_ms / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json")
    parser.add_argument("--variant", choices=sorted(POINTS), default="skinny")
    parser.add_argument("--dtypes", default="float16,bfloat16,float32")
    parser.add_argument("--sides", default="rows,columns",
                        help="few rows of C, few columns, or both")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)),
                        help="counts of C's few rows (or columns) to time")
    parser.add_argument("--ragged", action="store_true",
                        help="N and K one more than the sizes: rows at every alignment")
    args = parser.parse_args()
    sizes = [(n + args.ragged, k + args.ragged) for n, k in SIZES]
    copy_gbs = measure_copy_bandwidth()
    dtypes = [d for d in args.dtypes.split(",") if d in xgemm.get_variant(args.variant).dtypes]
    rows = [row(args.variant, dtype, along_k, few, n, k, side == "columns")
            for side in args.sides.split(",") for dtype in dtypes
            for along_k in (True, False) for few in map(int, args.rows.split(","))
            for n, k in sizes]
    print(f"device copy {copy_gbs:.0f} GB/s (read + written)")
    print(f"{'dtype':9s} {'big':8s} {'shape':>17s} {'skinny':>8s} {'auto':>8s} {'cuBLAS':>8s}"
          f" {'x cuBLAS':>8s} {'x auto':>7s} {'big GB/s':>8s} {'x copy':>6s}"
          f" {'auto x copy':>11s}  point")
    for r in rows:
        us = [r[key] * 1e3 for key in ("skinny_ms", "auto_ms", "cublas_ms")]
        print(f"{r['dtype']:9s} {r['big']:8s} {r['m']:>5d}x{r['n']:>5d}x{r['k']:>5d} "
              f"{us[0]:7.1f}u {us[1]:7.1f}u {us[2]:7.1f}u"
              f" {r['cublas_ms'] / r['skinny_ms']:8.2f} {r['auto_ms'] / r['skinny_ms']:7.2f}"
              f" {r['big_gbs']:8.0f} {r['big_gbs'] / copy_gbs:6.2f}"
              f" {r['auto_big_gbs'] / copy_gbs:11.2f}  {r['skinny_point']}"
              f" ({r['auto']})")
    if args.json:
        save_json(args.json, {"copy_gbs": copy_gbs, "rows": rows})


if __name__ == "__main__":
    main()
