"""What a benchmark's results were measured on: the GPU, its clocks and driver, the
software, the measured copy bandwidth, and the commit of the xgemm measured. Every results
file carries it as ``"machine"``.

Example:
    >>> from xgemm.tools.machine import machine_info
    >>> machine_info(measure=False)["gpu"]  # doctest: +SKIP
    'NVIDIA H100 80GB HBM3'
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from pathlib import Path
from typing import Any

from ..timing import time_launches

#: FP32 lanes per SM on the GPUs this library targets (Ampere GA100 has 64: see fp32_peak).
FP32_LANES_PER_SM = 128


def fp32_peak_tflops(sm_count: int, clock_mhz: float, lanes: int = FP32_LANES_PER_SM) -> float:
    """FP32 peak: SMs x FP32 lanes x 2 FLOP per FMA x clock.

    >>> round(fp32_peak_tflops(132, 1980), 1)
    66.9
    """
    return sm_count * lanes * 2 * clock_mhz * 1e6 / 1e12


def _nvidia_smi(query: str) -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits",
                              "-i", "0"], capture_output=True, text=True, timeout=20, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def measure_copy_bandwidth(nbytes: int = 2**30, repeat: int = 10) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    import cupy

    src = cupy.empty(nbytes // 4, cupy.float32)
    dst = cupy.empty_like(src)
    src.fill(1.0)
    times = time_launches(lambda: dst.__setitem__(Ellipsis, src), warmup=2, repeat=repeat)
    return 2 * nbytes / (statistics.median(times) * 1e-3) / 1e9


def source_commit() -> str | None:
    """The commit of the xgemm being measured: ``$XGEMM_COMMIT`` where set (a copy of the
    tree without ``.git``, as on a lent machine), else ``git rev-parse --short HEAD`` of
    the repository this package is imported from, with ``-dirty`` where tracked files
    differ from it; None where neither is known (an installed package).

    >>> source_commit()  # doctest: +SKIP
    'edca202'
    """
    if os.environ.get("XGEMM_COMMIT"):
        return os.environ["XGEMM_COMMIT"]
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=20)

    try:
        top = git("rev-parse", "--show-toplevel")
        if top.returncode or Path(top.stdout.strip()).resolve() != root:
            return None  # not a checkout of xgemm (or inside another repository)
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode:
            return None
        dirty = git("diff", "--quiet", "HEAD", "--").returncode == 1
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty else "")


def machine_info(measure: bool = True) -> dict[str, Any]:
    """What the results were measured on, with the measured ceilings and the commit
    (``source_commit``; omitted where unknown)."""
    import cupy

    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    attrs = dev.attributes
    smi = _nvidia_smi("driver_version,clocks.max.sm,clocks.sm")
    driver, max_clock, clock = (smi.split(", ") + [None] * 3)[:3] if smi else (None, None, None)
    clock_mhz = float(max_clock) if max_clock else attrs.get("ClockRate", 0) / 1000 or None
    sm_count = attrs["MultiProcessorCount"]
    info: dict[str, Any] = {
        "gpu": props["name"].decode(),
        "compute_capability": f"{props['major']}.{props['minor']}",
        "sm_count": sm_count,
        "l2_bytes": attrs.get("L2CacheSize"),
        "max_sm_clock_mhz": clock_mhz,
        "sm_clock_mhz_at_start": float(clock) if clock else None,
        "driver": driver,
        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "cupy": cupy.__version__,
        "python": platform.python_version(),
        "fp32_peak_tflops": fp32_peak_tflops(sm_count, clock_mhz) if clock_mhz else None,
    }
    commit = source_commit()
    if commit:
        info["commit"] = commit
    if measure:
        info["copy_bandwidth_gbs"] = measure_copy_bandwidth()
    return info
