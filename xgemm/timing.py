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
    """GPU ``device``'s scrub: a buffer twice the L2's size, and the kernel that drops its
    lines from the L2 without writing them back (None below sm_80, which has no
    ``discard``)."""
    import cupy

    from .gpu import properties

    gpu = properties(device)
    with cupy.cuda.Device(device):
        lines = cupy.empty(2 * gpu.l2_bytes // 4, cupy.float32)
    if gpu.compute_capability < 80:
        return lines, None
    return lines, cupy.RawKernel(r"""
extern "C" __global__ void xgemm_l2_discard(char* base, unsigned long long lines) {
    for (unsigned long long line = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         line < lines; line += (unsigned long long)gridDim.x * blockDim.x) {
        asm volatile("discard.global.L2 [%0], 128;" :: "l"(base + line * 128) : "memory");
    }
}""", "xgemm_l2_discard")


def scrub_l2() -> None:
    """Leave the current device's L2 cold and clean for the next launch: a buffer twice
    its size written (whatever the last launch left is evicted, its dirty lines written
    back now), then the buffer's own lines dropped unwritten. Written alone, the buffer's
    dirty lines would be written back during the launch timed next, which pays for them:
    on an H200, reading a 117 MB weight took 39.7 us after the write and 31.8 after the
    write and the drop, and a 2 MB product 8.5 against 8.0.

    >>> scrub_l2()  # doctest: +SKIP
    """
    import cupy
    import numpy as np

    from .gpu import multiprocessors

    device = cupy.cuda.Device().id
    lines, discard = _l2_scrub(device)
    lines.fill(0)
    if discard is not None:
        discard((4 * multiprocessors(device),), (512,), (lines, np.uint64(lines.nbytes // 128)))


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
            scrub_l2()
        hold_gpu(hold_us)
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
        if len(times) >= 5 and time.perf_counter() > deadline:
            break
    return times

