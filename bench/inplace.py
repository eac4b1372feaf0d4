"""Rung 24 (``wgmma_inplace``, operands read in place at any alignment) against auto's
pick (which pads such operands with a copy on every call) and cuBLAS (``torch.matmul``),
on 16-bit products whose rows TMA cannot read: kernel time (CUDA events, median; the L2
scrubbed before each call below 2e11 multiply-adds) at a handful of rung-24 points (the
best is reported), and the whole call queued back to back, in turns. Every rung-24 result
is checked against float64 first.

    PYTHONPATH=. python bench/inplace.py [--json out.json] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import json
import statistics

import cupy
import torch

import xgemm
from xgemm.timing import time_launches
from xgemm.tools.bench import relative_error
from xgemm.tools.overhead import queued_ms_in_turns

#: (M, N, K, layout): "T" is a transposed view. Odd K or M: no row starts on 16 bytes.
CASES = ((7181, 35, 5492, "TN"), (3528, 62, 10787, "NN"), (2767, 206, 13614, "NT"),
         (88, 2232, 4194, "NT"), (115, 268, 13634, "NN"), (4095, 4095, 4095, "NN"),
         (4096, 4096, 4096, "NN"))
POINTS = ({}, {"RAW": 3, "STAGES": 3}, {"RAW": 2, "STAGES": 3}, {"BM": 128, "STAGES": 3, "RAW": 3},
          {"BN": 128, "STAGES": 3, "RAW": 3}, {"BM": 128, "BN": 128, "STAGES": 2, "RAW": 3})


def operand(rows: int, cols: int, transposed: bool, dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn((cols, rows) if transposed else (rows, cols), device="cuda").to(dtype)
    return x.t() if transposed else x


def measure(m: int, n: int, k: int, layout: str, dtype: torch.dtype) -> dict:
    """One case's row: rung 24's best point, auto and cuBLAS, kernel and call times."""
    a, b = operand(m, k, layout[0] == "T", dtype), operand(k, n, layout[1] == "T", dtype)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    flush = m * n * k < 2e11

    def kernel_ms(call, hold_us: float = 100.0) -> float:
        return statistics.median(time_launches(call, flush_l2=flush, repeat=15,
                                               hold_us=hold_us))

    def inplace(point: dict):
        return lambda: xgemm.matmul(a, b, variant="wgmma_inplace", out=out, **point)

    exact = cupy.from_dlpack(a.double() @ b.double())
    times = {}
    for point in POINTS:
        inplace(point)()
        error = relative_error(cupy.from_dlpack(out.double()), exact)
        if not error < 2e-2:
            raise SystemExit(f"{m}x{n}x{k}:{layout} {point}: relative error {error:.2e}")
        times[json.dumps(point)] = kernel_ms(inplace(point))
    best = json.loads(min(times, key=times.__getitem__))
    launch = xgemm.prepare(a, b, out=out)
    calls = queued_ms_in_turns({"cublas": lambda: torch.matmul(a, b, out=out),
                                "auto": lambda: xgemm.matmul(a, b, out=out),
                                "inplace": inplace(best)},
                               calls=100 if flush else 20, rounds=5)
    return {"shape": f"{m}x{n}x{k}:{layout}", "dtype": str(dtype).removeprefix("torch."),
            "auto": launch.variant.name, "auto_copies": list(launch.copies),
            "cublas_kernel_ms": kernel_ms(lambda: torch.matmul(a, b, out=out)),
            "auto_kernel_ms": kernel_ms(lambda: xgemm.matmul(a, b, out=out), hold_us=300.0),
            "inplace_kernel_ms": min(times.values()), "inplace_point": best,
            "points_ms": times, **{f"{name}_call_ms": ms for name, ms in calls.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--dtype", default="bfloat16", choices=("float16", "bfloat16"))
    args = parser.parse_args()
    rows = [measure(*case, getattr(torch, args.dtype)) for case in CASES]
    print(f"{'shape':>20} {'auto (pads)':>22} | kernel us: cuBLAS   auto rung24"
          " | call us: cuBLAS   auto rung24 | rung24 x cuBLAS (call)")
    for r in rows:
        auto = r["auto"] + (" pads " + "".join(r["auto_copies"]) if r["auto_copies"] else "")
        ratio = r["cublas_call_ms"] / r["inplace_call_ms"]
        print(f"{r['shape']:>20} {auto:>22} | {r['cublas_kernel_ms'] * 1e3:13.1f}"
              f" {r['auto_kernel_ms'] * 1e3:6.1f} {r['inplace_kernel_ms'] * 1e3:6.1f}"
              f" | {r['cublas_call_ms'] * 1e3:11.1f} {r['auto_call_ms'] * 1e3:6.1f}"
              f" {r['inplace_call_ms'] * 1e3:6.1f} | {ratio:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
