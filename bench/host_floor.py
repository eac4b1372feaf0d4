"""Where a PyTorch call's host microseconds go: the floor under a launch from Python, and
each step of ``xgemm.matmul`` on a plan-cache hit, timed alone on the same host.

The floor: an empty kernel launched through CuPy's ``RawKernel``, cuda-bindings'
``cuLaunchKernel``, ctypes and CuPy's driver binding (as xgemm launches), with no
arguments and with a GEMM's sixteen; PyTorch's cheapest operations (``torch.empty``, an
in-place fill) and ``torch.matmul`` at 64^3. The steps: the plan's key, the cache lookup,
PyTorch's stream, the output's allocation, the launch; then the whole call; in float32
and in bfloat16 (whose plans may run another rung, with other arguments), at 64^3 and for
a decode step's linear. Each figure is the median of ``--rounds`` rounds of ``--calls``
calls, the GPU synchronised between rounds.

    PYTHONPATH=. python bench/host_floor.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import cupy
import torch

import xgemm
from xgemm import launch as launching
from xgemm import plan as planning
from xgemm import signature, workspaces

EMPTY = r"""
extern "C" __global__ void empty0() {}
extern "C" __global__ void empty16(const float* a, const float* b, float* c, int m, int n,
    int k, int lda, int ldb, int ldc, long long sa, long long sb, long long sc,
    const float* bias, float alpha, float beta, const void* extra) {}
struct alignas(64) Map { unsigned char bytes[128]; };  // a TMA tensor map's size
extern "C" __global__ void empty16_maps(const float* a, const float* b, float* c, int m,
    int n, int k, int lda, int ldb, int ldc, long long sa, long long sb, long long sc,
    const float* bias, float alpha, float beta, const __grid_constant__ Map map_a,
    const __grid_constant__ Map map_b, const __grid_constant__ Map map_c) {}
"""


def per_call_us(call, calls: int, rounds: int) -> float:
    """Median over ``rounds`` of the host microseconds per call of ``calls`` in a row."""
    times = []
    for r in range(rounds + 1):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        if r:
            times.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def floor_rows(calls: int, rounds: int) -> dict[str, float]:
    module = cupy.RawModule(code=EMPTY)
    empty0, empty16 = (module.get_function(name).kernel for name in ("empty0", "empty16"))
    stream = cupy.cuda.get_current_stream()
    x = cupy.empty(64 * 64, dtype=cupy.float32)
    held = [int(v) for v in (64,) * 6 + (0,) * 3]
    args16 = (cupy.intp(x.data.ptr),) * 3 + tuple(cupy.int32(v) for v in held[:6]) + tuple(
        cupy.int64(v) for v in held[6:]) + (cupy.intp(0), cupy.float32(1), cupy.float32(0),
                                           cupy.intp(0))
    rows = {
        "cupy launch, 0 args": per_call_us(lambda: empty0((1,), (32,), (), 0, stream),
                                           calls, rounds),
        "cupy launch, 16 args": per_call_us(lambda: empty16((1,), (32,), args16, 0, stream),
                                            calls, rounds),
    }
    try:
        import ctypes

        from cuda.bindings import driver
    except ImportError:
        rows["cuda-bindings launch, 16 args"] = None
    else:
        values = [ctypes.c_void_p(x.data.ptr)] * 3 + [ctypes.c_int(64)] * 6 \
            + [ctypes.c_longlong(0)] * 3 + [ctypes.c_void_p(0), ctypes.c_float(1.0),
                                            ctypes.c_float(0.0), ctypes.c_void_p(0)]
        params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        function = driver.CUfunction(empty16.ptr)
        raw_stream = driver.CUstream(stream.ptr)
        address_of = ctypes.addressof(params)

        def launch_driver():
            driver.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, raw_stream, address_of, 0)

        rows["cuda-bindings launch, 16 args"] = per_call_us(launch_driver, calls, rounds)
        launch_kernel, f_ptr = cupy.cuda.driver.launchKernel, empty16.ptr
        rows["CuPy's driver launchKernel, 16 args"] = per_call_us(
            lambda: launch_kernel(f_ptr, 1, 1, 1, 32, 1, 1, 0, stream.ptr, address_of, 0),
            calls, rounds)
        maps = [(ctypes.c_ubyte * 128)() for _ in range(3)]  # wgmma's three tensor maps
        with_maps = (ctypes.c_void_p * (len(values) + 2))(
            *[ctypes.addressof(v) for v in values[:-1]], *map(ctypes.addressof, maps))
        function_maps = driver.CUfunction(module.get_function("empty16_maps").kernel.ptr)
        maps_address = ctypes.addressof(with_maps)
        rows["cuda-bindings launch, 15 args + 3 maps"] = per_call_us(
            lambda: driver.cuLaunchKernel(function_maps, 1, 1, 1, 32, 1, 1, 0, raw_stream,
                                          maps_address, 0), calls, rounds)
        libcuda = ctypes.CDLL("libcuda.so.1")
        launch_c = libcuda.cuLaunchKernel
        launch_c.restype = ctypes.c_int
        launch_c.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        rows["ctypes libcuda launch, 16 args"] = per_call_us(
            lambda: launch_c(f_ptr, 1, 1, 1, 32, 1, 1, 0, stream.ptr, address_of, None),
            calls, rounds)
    device = torch.device("cuda", 0)
    t = torch.empty((64, 64), device=device)
    rows["torch.empty (64, 64)"] = per_call_us(
        lambda: torch.empty((64, 64), dtype=torch.float32, device=device), calls, rounds)
    rows["torch.empty_like"] = per_call_us(lambda: torch.empty_like(t), calls, rounds)
    rows["torch fill_ (in place)"] = per_call_us(lambda: t.fill_(1.0), calls, rounds)
    a, b = torch.randn(64, 64, device=device), torch.randn(64, 64, device=device)
    rows["torch.matmul 64^3"] = per_call_us(lambda: torch.matmul(a, b), calls, rounds)
    rows["torch.matmul 64^3 out="] = per_call_us(lambda: torch.matmul(a, b, out=t), calls,
                                                 rounds)
    return rows


def step_rows(calls: int, rounds: int, dtype: torch.dtype) -> dict[str, float]:
    device = torch.device("cuda", 0)
    a, b = (torch.randn(64, 64, device=device, dtype=dtype) for _ in range(2))
    out = torch.empty(64, 64, device=device, dtype=dtype)
    xgemm.matmul(a, b)
    xgemm.matmul(a, b, out=out)
    key = signature.call_key(a, b, None, "out", None, "auto", {}, None, None, None, False)
    plan = planning.PLANS.get(key)
    stream = launching.stream_pointer(plan)
    launches = next(iter(plan.recent_args.values()))
    rows = {
        "call_key": per_call_us(lambda: signature.call_key(
            a, b, None, "out", None, "auto", {}, None, None, None, False), calls, rounds),
        "call_key with out": per_call_us(lambda: signature.call_key(
            a, b, out, "out", None, "auto", {}, None, None, None, False), calls, rounds),
        "PLANS.get": per_call_us(lambda: planning.PLANS.get(key), calls, rounds),
        "stream_pointer": per_call_us(lambda: launching.stream_pointer(plan), calls, rounds),
        "output a.new_empty": per_call_us(lambda: a.new_empty(plan.shapes.full), calls,
                                          rounds),
        "output plan.new_torch_result": per_call_us(plan.new_torch_result, calls, rounds),
        "enqueue (memoised args)": per_call_us(lambda: [
            launching.enqueue(launch, args, stream) for launch, args in launches],
            calls, rounds),
        f"launches: {plan.variant.name}, {len(launches)}": None,
        "launch.run (plan in hand)": per_call_us(lambda: launching.run(
            plan, a, b, None, None, 1.0, 0.0), calls, rounds),
        "xgemm.matmul": per_call_us(lambda: xgemm.matmul(a, b), calls, rounds),
        "torch.matmul": per_call_us(lambda: torch.matmul(a, b), calls, rounds),
        "xgemm.matmul out=": per_call_us(lambda: xgemm.matmul(a, b, out=out), calls, rounds),
        "torch.matmul out=": per_call_us(lambda: torch.matmul(a, b, out=out), calls, rounds),
    }
    x = torch.randn(8, 1, 2048, device=device, dtype=dtype)
    w = torch.randn(2048, 2048, device=device, dtype=dtype)
    y = torch.empty(8, 1, 2048, device=device, dtype=dtype)
    linear = xgemm.prepare(x, w.T)
    rows[f"x @ w.T runs: {linear.variant.name}, {len(linear.grids)} launch"] = None
    xgemm.matmul(x, w.T)
    xgemm.matmul(x, w.T, out=y)
    wt = w.T
    key = signature.call_key(x, wt, None, "out", None, "auto", {}, None, None, None, False)
    plan = planning.PLANS.get(key)
    rows["x @ w.T call_key"] = per_call_us(lambda: signature.call_key(
        x, wt, None, "out", None, "auto", {}, None, None, None, False), calls, rounds)
    rows["x @ w.T call_key with out"] = per_call_us(lambda: signature.call_key(
        x, wt, y, "out", None, "auto", {}, None, None, None, False), calls, rounds)
    rows["x @ w.T output new_torch_result"] = per_call_us(plan.new_torch_result, calls, rounds)
    if plan.partials_bytes:
        rows["x @ w.T split-K workspace"] = per_call_us(
            lambda: workspaces.split_k(plan, stream, []), calls, rounds)
    launches = next(iter(plan.recent_args.values()))
    rows["x @ w.T enqueue (memoised args)"] = per_call_us(lambda: [
        launching.enqueue(launch, args, stream) for launch, args in launches], calls, rounds)
    rows["x @ w.T launch.run (plan in hand)"] = per_call_us(lambda: launching.run(
        plan, x, wt, None, None, 1.0, 0.0), calls, rounds)
    rows["xgemm x(8,1,2048) @ w.T"] = per_call_us(lambda: xgemm.matmul(x, w.T), calls, rounds)
    rows["torch x(8,1,2048) @ w.T"] = per_call_us(lambda: torch.matmul(x, w.T), calls, rounds)
    rows["xgemm x @ w.T out="] = per_call_us(lambda: xgemm.matmul(x, w.T, out=y), calls, rounds)
    rows["torch x @ w.T out="] = per_call_us(lambda: torch.matmul(x, w.T, out=y), calls, rounds)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = {"floor": floor_rows(args.calls, args.rounds),
            **{f"steps, {dtype}": step_rows(args.calls, args.rounds, getattr(torch, dtype))
               for dtype in ("float32", "bfloat16")}}
    for part, found in rows.items():
        print(f"-- {part}")
        for name, us in found.items():
            print(f"{name:34s} {'-' if us is None else f'{us:6.2f}'} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
