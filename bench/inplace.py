"""The rungs that read 16-bit rows TMA cannot read in one map, in place: 24
(``wgmma_inplace``, at any alignment, its default point) and 34 (``wgmma_any_ld``, eight
maps an operand, its candidates), against auto's pick (which pads such operands with a
copy on every call, where it takes neither) and cuBLAS (``torch.matmul``): kernel time
(CUDA events, median; the L2 scrubbed before each call below 2e11 multiply-adds), each
rung at its best point, and the whole call queued back to back, in turns. Every result
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
#: The first seven: rung 24's first cases; then the random suites' least calls of this
#: kind (seeds 11, 14, 44, 45, 10, 17).
CASES = ((7181, 35, 5492, "TN"), (3528, 62, 10787, "NN"), (2767, 206, 13614, "NT"),
         (88, 2232, 4194, "NT"), (115, 268, 13634, "NN"), (4095, 4095, 4095, "NN"),
         (4096, 4096, 4096, "NN"), (678, 55, 7039, "TN"), (54, 9121, 8048, "TN"),
         (92, 281, 16065, "NN"), (84, 383, 12957, "TN"), (4997, 44, 4534, "NT"),
         (8236, 52, 1394, "TN"))
#: The points timed of each rung
POINTS = {"wgmma_inplace": ({},), "wgmma_any_ld": tuple(
    xgemm.get_variant("wgmma_any_ld").candidate_points("bfloat16"))}


def operand(rows: int, cols: int, transposed: bool, dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn((cols, rows) if transposed else (rows, cols), device="cuda").to(dtype)
    return x.t() if transposed else x


def measure(m: int, n: int, k: int, layout: str, dtype: torch.dtype) -> dict:
    """One case's row: each rung's best point, auto and cuBLAS, kernel and call times."""
    a, b = operand(m, k, layout[0] == "T", dtype), operand(k, n, layout[1] == "T", dtype)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    flush = m * n * k < 2e11

    def kernel_ms(call, hold_us: float = 100.0) -> float:
        return statistics.median(time_launches(call, flush_l2=flush, repeat=15,
                                               hold_us=hold_us))

    def rung(name: str, point: dict):
        return lambda: xgemm.matmul(a, b, variant=name, out=out, **point)

    exact = cupy.from_dlpack(a.double() @ b.double())
    row = {"shape": f"{m}x{n}x{k}:{layout}", "dtype": str(dtype).removeprefix("torch.")}
    calls = {"cublas": lambda: torch.matmul(a, b, out=out),
             "auto": lambda: xgemm.matmul(a, b, out=out)}
    for name, points in POINTS.items():
        times = {}
        for point in points:
            out.fill_(float("nan"))
            launch = xgemm.prepare(a, b, variant=name, out=out, **point)
            launch()
            error = relative_error(cupy.from_dlpack(out.double()), exact)
            if not error < 2e-2:
                raise SystemExit(f"{name} {m}x{n}x{k}:{layout} {point}: relative error {error:.2e}")
            times[json.dumps(point)] = kernel_ms(rung(name, point))
        best = json.loads(min(times, key=times.__getitem__))
        calls[name] = rung(name, best)
        row |= {f"{name}_kernel_ms": min(times.values()), f"{name}_point": best,
                f"{name}_points_ms": times,
                f"{name}_copies": list(xgemm.prepare(a, b, variant=name, out=out,
                                                     **best).copies)}
    launch = xgemm.prepare(a, b, out=out)
    queued = queued_ms_in_turns(calls, calls=100 if flush else 20, rounds=5)
    return {**row, "auto": launch.variant.name, "auto_copies": list(launch.copies),
            "cublas_kernel_ms": kernel_ms(lambda: torch.matmul(a, b, out=out)),
            "auto_kernel_ms": kernel_ms(lambda: xgemm.matmul(a, b, out=out), hold_us=300.0),
            **{f"{name}_call_ms": ms for name, ms in queued.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--dtype", default="bfloat16", choices=("float16", "bfloat16"))
    args = parser.parse_args()
    rows = [measure(*case, getattr(torch, args.dtype)) for case in CASES]
    print(f"{'shape':>20} {'auto (pads)':>24} | kernel us: cuBLAS   auto rung24 rung34"
          " | call us: cuBLAS   auto rung24 rung34 | rung34 x cuBLAS (call) | rung34's point")
    for r in rows:
        auto = r["auto"] + (" pads " + "".join(r["auto_copies"]) if r["auto_copies"] else "")
        ratio = r["cublas_call_ms"] / r["wgmma_any_ld_call_ms"]
        kernels = (r[f"{x}_kernel_ms"] * 1e3 for x in ("auto", "wgmma_inplace", "wgmma_any_ld"))
        calls = (r[f"{x}_call_ms"] * 1e3 for x in ("auto", "wgmma_inplace", "wgmma_any_ld"))
        print(f"{r['shape']:>20} {auto:>24} | {r['cublas_kernel_ms'] * 1e3:13.1f}"
              + "".join(f" {t:6.1f}" for t in kernels)
              + f" | {r['cublas_call_ms'] * 1e3:11.1f}" + "".join(f" {t:6.1f}" for t in calls)
              + f" | {ratio:.2f} | {r['wgmma_any_ld_point']} {r['wgmma_any_ld_copies']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
