"""What a call costs besides its kernel (``xgemm bench --overhead``): host microseconds per
call on a plan-cache hit, and the queued time per call of products small enough for the
call to matter, each beside ``cupy.matmul`` and ``torch.matmul`` on the same data in the
same run.

Host time: ``calls`` calls in a row with no synchronisation between them, over the host
clock; the median of ``rounds``, the contenders taking turns. Short runs and many rounds:
the lent host's speed changes from second to second, and turns of a few milliseconds put
each contender in the same spells. The launch queue holds the whole run, so a kernel
slower than its call (the decode product's in float32) does not make the host wait.
Queued time: ``calls`` calls between two CUDA events, over ``calls``: what a loop of such
products takes, host and GPU together; the median of ``rounds``. Kernel time: CUDA
events around each single call of a prepared launch, the GPU held busy while the host
makes the call (``xgemm.timing.time_launches``), so it is the GPU's time alone.

Example:
    >>> from xgemm.tools import overhead
    >>> rows = overhead.host_rows(calls=200)  # doctest: +SKIP
    >>> print(overhead.table(rows))  # doctest: +SKIP
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from ..specs import numpy_dtype

#: The host-time cases (M, N, K, batch, B a transposed weight): 64 x 64 x 64, a batch of
#: eight of them, and a decode step's linear, x of shape (8, 1, 2048) @ w.T, w 2048 x 2048.
HOST_SHAPES = ((64, 64, 64, 1, False), (64, 64, 64, 8, False), (1, 2048, 2048, 8, True))
#: The queued-time cases (M, N, K): a small square and a skinny product.
QUEUED_SHAPES = ((1024, 1024, 1024), (16, 4096, 4096))
DTYPES = ("float32", "float16", "bfloat16")


def host_us(calls: dict[str, Callable[[], Any]], n: int = 200, rounds: int = 51
            ) -> dict[str, float]:
    """Host microseconds per call of each of ``calls``: ``n`` calls in a row, the GPU
    synchronised after each run of ``n``; the contenders take turns, round after round
    (so a slow spell of the machine hits them alike), and each gets its median round.
    One untimed round first."""
    import cupy

    times: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(rounds + 1):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(n):
                call()
            if r:
                times[name].append((time.perf_counter() - start) / n * 1e6)
            cupy.cuda.Device().synchronize()
    return {name: statistics.median(t) for name, t in times.items()}


def queued_ms(call: Callable[[], Any], calls: int = 50, rounds: int = 7,
              stream: Any = None) -> float:
    """Milliseconds per call of ``call`` queued ``calls`` times between two CUDA events on
    ``stream`` (the current CuPy stream by default): the median over ``rounds``."""
    import cupy

    stream = stream or cupy.cuda.get_current_stream()
    for _ in range(3):
        call()
    times = []
    for _ in range(rounds):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        for _ in range(calls):
            call()
        stop.record(stream)
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / calls)
    return statistics.median(times)


def queued_ms_in_turns(contenders: dict[str, Callable[[], Any]], calls: int = 50,
                      rounds: int = 7) -> dict[str, float]:
    """Each contender's milliseconds per call, ``calls`` of them queued between two CUDA
    events (``queued_ms``, one round at a time), the contenders taking turns round after
    round, so a GPU that slows as it warms slows each alike: the median round of each.

    >>> queued_ms_in_turns({"cupy": lambda: cupy.matmul(a, b),  # doctest: +SKIP
    ...                     "xgemm": lambda: xgemm.matmul(a, b)})
    {'cupy': 0.0271, 'xgemm': 0.0265}
    """
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, call in contenders.items():
            times[name].append(queued_ms(call, calls, rounds=1))
    return {name: statistics.median(t) for name, t in times.items()}


def calls_per_round(kernel_ms: float, work_ms: float = 20.0, most: int = 200) -> int:
    """Calls to queue in one round of ``queued_ms``: about ``work_ms`` of kernels of
    ``kernel_ms`` each, at least 3 and at most ``most`` (a round of a call the host
    bounds at 10 us, 200 calls, lasts 2 ms).

    >>> calls_per_round(0.5), calls_per_round(0.001), calls_per_round(50.0)
    (40, 200, 3)
    """
    return max(3, min(most, math.ceil(work_ms / max(kernel_ms, 1e-3))))


def call_against_baselines(baselines: dict[str, Callable[[], Any]], auto: Callable[[], Any],
                           calls: int = 50, rounds: int = 7) -> dict[str, Any]:
    """Queued milliseconds per call of ``auto`` and of the fastest of ``baselines`` (each
    timed in turns with the others, ``queued_ms_in_turns``): ``cublas_call_ms``,
    ``auto_call_ms`` and ``call_baseline``, that baseline's name. The fastest call, not
    the baseline with the fastest kernel: cupy.matmul and torch.matmul run the same
    cuBLAS kernel, but their host costs differ by 2x where the host bounds the call.

    >>> call_against_baselines({"cupy.matmul": lambda: cupy.matmul(a, b),  # doctest: +SKIP
    ...                         "torch.matmul": lambda: torch.matmul(ta, tb)},
    ...                        lambda: xgemm.matmul(a, b))
    {'cublas_call_ms': 0.0091, 'auto_call_ms': 0.0098, 'call_baseline': 'torch.matmul'}
    """
    if not baselines or "auto" in baselines:
        raise ValueError("name one baseline or more, none of them 'auto'")
    times = queued_ms_in_turns({**baselines, "auto": auto}, calls, rounds)
    fastest = min(baselines, key=times.__getitem__)
    return {"cublas_call_ms": times[fastest], "auto_call_ms": times["auto"],
            "call_baseline": fastest}


def _inputs(m: int, n: int, k: int, batch: int, dtype: str, weight: bool = False):
    """The same values as CuPy arrays and as PyTorch tensors (None without PyTorch);
    ``weight``: B is ``w.T`` of a row-major N x K ``w``, as a linear layer reads it."""
    import cupy

    lead = (batch,) if batch > 1 else ()
    gen = cupy.random.default_rng()
    a = gen.standard_normal((*lead, m, k), dtype=cupy.float32).astype(numpy_dtype(dtype))
    b = gen.standard_normal((n, k) if weight else (k, n), dtype=cupy.float32).astype(
        numpy_dtype(dtype))
    out = cupy.empty((*lead, m, n), dtype=a.dtype)
    try:
        import torch
    except ImportError:
        return (a, b.T if weight else b, out), None
    ta, tb, tout = (torch.from_dlpack(x) for x in (a, b, out))
    return (a, b.T if weight else b, out), (ta, tb.T if weight else tb, tout)


def _torch_paths(a: Any, b: Any) -> dict[str, Callable[[], Any]]:
    """xgemm.torch's two paths on tensors ``a`` and ``b``: the operator
    (``torch.ops.xgemm.matmul``, what torch.compile's graphs call) and
    ``xgemm.torch.matmul`` on tensors that require grad (eager training: the product,
    and the graph node its backward needs)."""
    import torch

    import xgemm.torch

    ga, gb = a.detach().requires_grad_(), b.detach().requires_grad_()
    return {"xgemm_op_us": lambda: torch.ops.xgemm.matmul(a, b, None, "none", "auto", None, ""),
            "xgemm_grad_us": lambda: xgemm.torch.matmul(ga, gb)}


def host_rows(calls: int = 200, rounds: int = 51) -> list[dict[str, Any]]:
    """Host microseconds per call, per dtype, shape and with or without ``out=``: xgemm
    (auto, its plan cached) on CuPy arrays and on PyTorch tensors, beside cupy.matmul and
    torch.matmul on the same values, all measured in turns; without ``out=``, also
    xgemm.torch's operator and its eager path on tensors that require grad."""
    import cupy

    import xgemm

    rows = []
    for dtype in DTYPES:
        for m, n, k, batch, weight in HOST_SHAPES:
            cupy_arrays, torch_arrays = _inputs(m, n, k, batch, dtype, weight)
            for with_out in (False, True):
                contenders = {}
                for label, arrays in (("cupy", cupy_arrays), ("torch", torch_arrays)):
                    if arrays is None:
                        continue
                    a, b, out = arrays
                    kw = {"out": out} if with_out else {}
                    contenders[f"xgemm_{label}_us"] = (
                        lambda a=a, b=b, kw=kw: xgemm.matmul(a, b, **kw))
                    if label == "torch":
                        import torch

                        baseline = torch.matmul
                    else:
                        baseline = cupy.matmul
                        try:
                            baseline(a, b, **kw)
                        except (TypeError, NotImplementedError):  # no batched bfloat16
                            continue
                    contenders[f"{label}.matmul_us"] = (
                        lambda a=a, b=b, kw=kw, f=baseline: f(a, b, **kw))
                    if label == "torch" and not with_out:
                        contenders.update(_torch_paths(a, b))
                shape = (f"x({batch},{m},{k}) @ w.T" if weight else
                         f"{batch}x{m}x{n}x{k}" if batch > 1 else f"{m}x{n}x{k}")
                row = {"dtype": dtype, "out": with_out, "shape": shape,
                       "xgemm_cupy_us": None, "cupy.matmul_us": None,
                       "xgemm_torch_us": None, "torch.matmul_us": None,
                       "xgemm_op_us": None, "xgemm_grad_us": None}
                row.update(host_us(contenders, calls, rounds))
                rows.append(row)
    return rows


def queued_rows(calls: int = 50, rounds: int = 7) -> list[dict[str, Any]]:
    """Per call, for each queued case in float16 and float32: the kernel alone (events
    around one call), xgemm's queued time, cupy.matmul's and torch.matmul's (in turns)."""
    import cupy

    import xgemm
    from xgemm import timing

    rows = []
    for dtype in ("float16", "float32"):
        for m, n, k in QUEUED_SHAPES:
            (a, b, out), torch_arrays = _inputs(m, n, k, 1, dtype)
            launch = xgemm.prepare(a, b, out=out)
            kernel = statistics.median(timing.time_launches(launch, warmup=3, repeat=30))
            contenders = {"xgemm_ms": lambda a=a, b=b: xgemm.matmul(a, b),
                          "cupy_ms": lambda a=a, b=b: cupy.matmul(a, b)}
            if torch_arrays is not None:
                import torch

                ta, tb, _ = torch_arrays
                contenders["torch_ms"] = lambda ta=ta, tb=tb: torch.matmul(ta, tb)
            row = {"dtype": dtype, "shape": f"{m}x{n}x{k}", "variant": launch.variant.name,
                   "kernel_ms": kernel, **queued_ms_in_turns(contenders, calls, rounds)}
            row["x_cupy"] = row["cupy_ms"] / row["xgemm_ms"]
            rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table, one column per key of the first row."""
    if not rows:
        return ""
    keys = list(dict.fromkeys(k for row in rows for k in row))

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.4f}" if value < 1 else f"{value:.1f}"
        return str(value)

    body = [keys] + [[cell(row.get(k)) for k in keys] for row in rows]
    widths = [max(len(line[i]) for line in body) for i in range(len(keys))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                     for line in body)
