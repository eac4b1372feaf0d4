"""Autotuning on first call, opt-in: ``variant="tune"``, or ``XGEMM_AUTOTUNE=1`` for every
``auto`` call of the process.

The first call with a signature the tuning file does not hold (this GPU, dtype and shape,
exactly) plans auto's contenders: the rules' pick and the cost model's cheapest few
others (``xgemm.plan.build(..., contenders=N)``). It compiles them in parallel threads,
times each on the call's own operands (read, never written: each contender writes an
output of its own) with CUDA events, the GPU held busy while the host queues the call
(``xgemm.timing``), and remembers the fastest in the tuning file (``xgemm.tunefile``:
merged under its file lock, so processes share it). The call itself then runs the
winner, writing its output once. Later calls with the signature find the plan with one
lookup; later processes, and ``auto`` calls without autotuning, find the file's entry.

What it costs, once per shape: the contenders' compiles (seconds, less where CuPy's disk
cache has them) and a few milliseconds of timing, for which the first call waits for the
GPU. Nothing else synchronises.

Example:
    >>> import cupy as cp, xgemm
    >>> a = cp.random.standard_normal((3000, 700), dtype=cp.float32)  # doctest: +SKIP
    >>> b = cp.random.standard_normal((700, 500), dtype=cp.float32)  # doctest: +SKIP
    >>> c = xgemm.matmul(a, b, variant="tune")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import gpu, tunefile
from .checks import AUTO, TUNE
from .frameworks import external_stream
from .launch import run, stream_pointer
from .plan import Plan, build
from .signature import Call
from .timing import time_launches

#: The environment variable that turns autotuning on for every ``auto`` call ("1").
ENV = "XGEMM_AUTOTUNE"
#: The cost model's cheapest candidates timed besides the rules' pick.
CONTENDERS = 3
#: Timed calls per contender (the median counts), after one untimed call.
REPEAT = 7
#: Microseconds the GPU is held before each timed call: more than a first call's host
#: time with its copies (``xgemm.timing.hold_gpu``).
HOLD_US = 1000.0


def enabled() -> bool:
    """Whether ``auto`` calls tune on first call in this process (``XGEMM_AUTOTUNE=1``)."""
    return os.environ.get(ENV, "") not in ("", "0")


def build_tuned(a: Any, b: Any, call: Call) -> tuple[Plan, tuple]:
    """``xgemm.plan.build`` for ``auto`` with the choice timed: where the tuning file does
    not hold this shape, auto's contenders are timed on these operands, the fastest is
    stored, and the call's plan runs it. Every check happens first, as for any call
    (``params`` are refused, as for auto).

    >>> import cupy as cp  # doctest: +SKIP
    >>> a = cp.random.standard_normal((3000, 700), dtype=cp.float32)  # doctest: +SKIP
    >>> plan, arrays = build_tuned(a, a.T, Call("tune"))  # doctest: +SKIP
    """
    plan, arrays = build(a, b, dataclasses.replace(call, variant=TUNE),
                         contenders=CONTENDERS)
    if len(plan.contenders) < 2:
        return plan, arrays
    import cupy

    with cupy.cuda.Device(plan.device):
        timed = _time(plan, arrays, call)
    if not timed:
        return plan, arrays
    ms, best = min(timed, key=lambda x: x[0])
    shapes = plan.shapes
    tunefile.tune_cache().store(gpu.gpu_name(plan.device), plan.spec.dtype, shapes.m,
                                shapes.n, shapes.k, best.variant.name, best.params, ms)
    if (best.variant, best.params) == (plan.variant, plan.params):
        return plan, arrays
    return build(a, b, dataclasses.replace(call, variant=AUTO, params={}),
                 choice=(best.variant, best.params))


def _time(plan: Plan, arrays: tuple, call: Call) -> list[tuple[float, Plan]]:
    """(median ms, plan) of each contender of ``plan`` that compiles, each planned as auto
    plans it with an output of its own (so the call's output is written once, by the
    winner) and timed on the call's operands. The GPU is synchronised here."""
    a, b = arrays[0], arrays[1]
    own_output = dataclasses.replace(call, variant=AUTO, target=None, target_name="out",
                                     out_dtype=plan.spec.out_dtype, alpha=1.0, beta=0.0,
                                     params={})
    plans = [build(a, b, own_output, choice=choice)[0] for choice in plan.contenders]

    def compiled(contender: Plan) -> Plan | None:
        try:
            contender.function()
        except Exception as exc:  # a contender that fails to build is skipped
            warnings.warn(f"autotuning skips {contender.variant.name} {contender.params}: "
                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                          stacklevel=4)
            return None
        return contender

    with ThreadPoolExecutor(max_workers=min(len(plans), os.cpu_count() or 2)) as pool:
        ready = [p for p in pool.map(compiled, plans) if p is not None]
    sa, sb = arrays[4], arrays[5]
    factor = call.scales.factor if call.scales else 1.0
    timed = []
    # The events on the stream the calls run on: PyTorch's current one for its tensors
    on_stream = (external_stream(stream_pointer(plan), plan.device)
                 if plan.framework == "torch" else contextlib.nullcontext())
    with on_stream:
        for contender in ready:
            def call(contender: Plan = contender) -> Any:
                return run(contender, a, b, None, arrays[3], factor, 0.0, sa, sb)

            times = time_launches(call, warmup=1, repeat=REPEAT, hold_us=HOLD_US)
            timed.append((statistics.median(times), contender))
    return timed
