"""The first run of the wgmma rung on the H100 (bench/results/h100/evidence/wgmma_probe.txt):
correctness in every layout and dtype against float64 (and, had a layout with an MN-major
operand failed, the same with its descriptor's two byte offsets swapped: none did), then
CUDA-event timings (3 warm-ups, median of 20) of a few tile shapes against cupy.matmul on
the same arrays, in one process.

    PYTHONPATH=. python3 bench/probe_wgmma.py
"""

from __future__ import annotations

import time

import cupy as cp
import numpy as np

import xgemm
import xgemm.compile
import xgemm.registry
from xgemm.specs import numpy_dtype

SHAPES = ((256, 256, 128), (1000, 700, 300), (127, 129, 255), (4096, 4096, 4096))
CONFIGS = [{}, {"BN": 128, "STAGES": 6}, {"BM": 256, "BN": 128, "STAGES": 4},
           {"BN": 256, "STAGES": 3}, {"BM": 128, "BN": 128, "CONSUMERS": 1, "STAGES": 6}]
rng = cp.random.default_rng(int(time.time()))


def error(c, a, b) -> float:
    ref = cp.matmul(a.astype(cp.float64), b.astype(cp.float64))
    return float(cp.linalg.norm((c.astype(cp.float64) - ref).ravel())
                 / cp.linalg.norm(ref.ravel()))


def mat(rows: int, cols: int, order: str, dtype: str):
    """Standard normal values; order "T": a transposed view (column-major)."""
    shape = (cols, rows) if order == "T" else (rows, cols)
    x = rng.standard_normal(shape, dtype=cp.float32).astype(numpy_dtype(dtype))
    return x.T if order == "T" else x


def run_checks(tag: str) -> int:
    bad = 0
    for dtype in ("float16", "bfloat16"):
        for layout in ("NN", "NT", "TN", "TT"):
            for m, n, k in SHAPES:
                a, b = mat(m, k, layout[0], dtype), mat(k, n, layout[1], dtype)
                c = cp.full((m, n), cp.nan, dtype=numpy_dtype(dtype))
                copies = "?"
                try:
                    launch = xgemm.prepare(a, b, variant="wgmma", out=c)
                    launch()
                    cp.cuda.runtime.deviceSynchronize()
                    err, copies = error(c, a, b), launch.copies
                except Exception as exc:  # noqa: BLE001  (report it and go on)
                    err = f"{type(exc).__name__}: {str(exc)[:300]}"
                ok = isinstance(err, float) and err < 1e-2
                bad += not ok
                print(f"{tag} {dtype} {layout} {m}x{n}x{k} copies={copies} err={err}",
                      flush=True)
    return bad


def timeit(f, reps: int = 20) -> float:
    for _ in range(3):
        f()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(reps):
        start.record()
        f()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def main() -> None:
    real_render = xgemm.registry.render
    if run_checks("std"):
        def swapped(template, **variables):
            return real_render(template, **variables).replace(
                "BOX * BK * sizeof(T), SWIZZLE_ATOM)", "SWIZZLE_ATOM, BOX * BK * sizeof(T))")

        xgemm.registry.render = swapped
        xgemm.compile._kernel.cache_clear()
        bad = run_checks("swap")
        print("swap fixes" if bad == 0 else f"swap: {bad} bad")
        xgemm.registry.render = real_render
        xgemm.compile._kernel.cache_clear()

    for dtype in ("float16", "bfloat16"):
        for size in (4096, 8192):
            a, b = mat(size, size, "N", dtype), mat(size, size, "N", dtype)
            flop = 2 * size**3
            t_cublas = timeit(lambda a=a, b=b: cp.matmul(a, b))
            print(f"TIME {dtype} {size}^3 cublas {t_cublas:.3f} ms "
                  f"{flop / t_cublas / 1e9:.1f} TF", flush=True)
            for params in CONFIGS:
                try:
                    t = timeit(xgemm.prepare(a, b, variant="wgmma", **params))
                    print(f"TIME {dtype} {size}^3 wgmma {params} {t:.3f} ms "
                          f"{flop / t / 1e9:.1f} TF x{t_cublas / t:.2f}", flush=True)
                except Exception as exc:  # noqa: BLE001
                    print(f"TIME {dtype} {size}^3 wgmma {params} FAILED {exc}", flush=True)
            for layout in ("NT", "TN"):
                a2, b2 = mat(size, size, layout[0], dtype), mat(size, size, layout[1], dtype)
                t = timeit(xgemm.prepare(a2, b2, variant="wgmma"))
                print(f"TIME {dtype} {size}^3 wgmma {layout} {t:.3f} ms "
                      f"{flop / t / 1e9:.1f} TF x{t_cublas / t:.2f}", flush=True)


if __name__ == "__main__":
    main()
