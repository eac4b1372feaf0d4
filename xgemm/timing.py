"""Timing kernels on the GPU: CUDA events around each call, with the GPU held busy while
the host makes it (``hold_gpu``), so an event pair times the GPU's work alone. The
benchmark (``xgemm.tools.bench``) and autotuning on first call (``xgemm.autotune``) time with it.

Example:
    >>> import statistics
    >>> from xgemm.timing import time_launches
    >>> ms = statistics.median(time_launches(lambda: a @ b))  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable


@functools.cache
def _l2_scrub(device: int):
    """A buffer twice the L2's size on GPU ``device``: writing it evicts whatever the last
    launch left."""
    import cupy

    with cupy.cuda.Device(device):
        l2 = cupy.cuda.Device().attributes.get("L2CacheSize", 50 * 2**20)
        return cupy.empty(2 * l2 // 4, cupy.float32)


def scrub_pays(nbytes: int, device: int) -> bool:
    """Whether a product moving ``nbytes`` (its operands and C) should be timed with the
    L2 scrubbed before each launch (``time_launches(flush_l2=...)``): where they fit in the
    L2 four times, a warm L2 would hold them from one launch to the next; larger, DRAM
    serves them anyway.

    >>> scrub_pays(2**20, 0)  # doctest: +SKIP
    True
    """
    from .gpu import properties

    return nbytes < 4 * properties(device).l2_bytes


#: Microseconds the GPU is held busy before each timed launch (``hold_gpu``): longer than
#: any warm call's host time, so the events time the GPU's work and not the host's.
HOLD_US = 200.0


@functools.cache
def _hold_kernel(device: int):
    import cupy

    return cupy.RawKernel(r"""
extern "C" __global__ void xgemm_hold(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}""", "xgemm_hold")


def hold_gpu(us: float = HOLD_US) -> None:
    """Queue a kernel that keeps the current stream busy for ``us`` microseconds: what is
    queued behind it is launched while it runs, so an event recorded after it stamps
    the moment the GPU is free, not the moment the host got there.

    >>> hold_gpu(50.0)  # doctest: +SKIP
    """
    import cupy
    import numpy as np

    _hold_kernel(cupy.cuda.Device().id)((1,), (1,), (np.uint64(us * 1000),))


def time_launches(launch: Callable[[], object], warmup: int = 3, repeat: int = 30,
                  max_seconds: float = 3.0, flush_l2: bool = False,
                  hold_us: float = HOLD_US) -> list[float]:
    """Milliseconds of each of ``repeat`` calls of ``launch``, each between its own pair of
    CUDA events, after ``warmup`` untimed calls; stops after ``max_seconds`` once it has
    five. With ``flush_l2`` the L2 is scrubbed (untimed) before each timed call. Before
    each the GPU is held busy (``hold_gpu``) while the host records the first event and
    makes the call, so the time is the GPU's alone: without the hold, the host time of
    the call (tens of microseconds) would count as kernel time. ``hold_us``: how long,
    longer than the call's host time (a call that copies operands takes more). The events go on the
    current device's current stream: ``launch`` must run there."""
    import cupy

    for _ in range(warmup):
        launch()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times: list[float] = []
    deadline = time.perf_counter() + max_seconds
    for _ in range(repeat):
        if flush_l2:
            _l2_scrub(cupy.cuda.Device().id).fill(0)
        hold_gpu(hold_us)
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
        if len(times) >= 5 and time.perf_counter() > deadline:
            break
    return times

