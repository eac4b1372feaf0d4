"""Time wgmma's cooperative (PINGPONG=0) and ping-pong (PINGPONG=1) schedules side by side
with cuBLAS, one process, on the lent H100. Used once to choose wgmma's defaults
(bench/h100_pingpong_probe_*.txt); ``xgemm sweep wgmma --space ...`` walks the same points.

    python3 bench/probe_pingpong.py 4096x4096x4096 float16,bfloat16 compile  # in parallel
    python3 bench/probe_pingpong.py 4096x4096x4096 float16,bfloat16 time

cuBLAS is timed before and after the points: when the two differ, the clock moved during
the run and the ranking is not to be trusted.
"""

import itertools
import sys
from concurrent.futures import ThreadPoolExecutor

import cupy

import xgemm
from xgemm.bench import time_launches


def median_tflops(launch, flop: int) -> float:
    times = sorted(time_launches(launch, warmup=5, repeat=50))
    return flop / times[len(times) // 2] / 1e9


shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[1].split(",")]
dtypes, mode = sys.argv[2].split(","), sys.argv[3]
points = [p for p in xgemm.get_variant("wgmma").points("float16")
          if p["CONSUMERS"] == 2 and p["STORE"] == 2 and p["STAGES"] in (3, 4, 5)
          and p["BM"] in (64, 128) and p["BN"] in (128, 256)]
rows = []
for dtype, (m, n, k) in itertools.product(dtypes, shapes):
    a = cupy.random.standard_normal((m, k), dtype=cupy.float32).astype(dtype)
    b = cupy.random.standard_normal((k, n), dtype=cupy.float32).astype(dtype)
    c, ref = cupy.empty((m, n), dtype), cupy.matmul(a, b)
    launches = [(p, xgemm.prepare(a, b, variant="wgmma", out=c, **p)) for p in points]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda pair: pair[1].kernel(), launches))
    if mode == "compile":
        continue
    flop = 2 * m * n * k
    cublas_before = median_tflops(lambda a=a, b=b, ref=ref: cupy.matmul(a, b, out=ref), flop)
    for p, launch in launches:
        c.fill(float("nan"))
        launch()
        err = float(cupy.linalg.norm((c - ref).astype(cupy.float32))
                    / cupy.linalg.norm(ref.astype(cupy.float32)))
        rows.append((dtype, f"{m}x{n}x{k}", p, median_tflops(launch, flop), cublas_before, err))
    cublas_after = median_tflops(lambda a=a, b=b, ref=ref: cupy.matmul(a, b, out=ref), flop)
    print(dtype, m, n, k, "cublas before/after", cublas_before, cublas_after)
rows.sort(key=lambda r: (r[0], r[1], -r[3]))
for dtype, shape, p, tflops, cublas, err in rows:
    print(f"{dtype:9} {shape:15} PP={p['PINGPONG']} BM={p['BM']:3} BN={p['BN']} "
          f"ST={p['STAGES']} CL={p['CLUSTER']}  {tflops:6.1f} TF  {tflops / cublas:.3f}x"
          f"  err {err:.1e}")
