"""What the GPU is: whether one can be used here, and each device's properties, read
once per device."""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@functools.cache
def gpu_unavailable() -> str | None:
    """None when CuPy sees a CUDA device; otherwise one line saying what is missing.

    >>> reason = gpu_unavailable()
    >>> reason is None or isinstance(reason, str)
    True
    """
    try:
        import cupy
    except ImportError as exc:
        return f"CuPy is not installed ({exc}); pip install 'xgemm[cuda13]'"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver or no device: CuPy raises its own runtime errors
        return f"no CUDA device ({type(exc).__name__}: {str(exc).strip()})"
    return None if count else "no CUDA device"


@dataclass(frozen=True)
class DeviceProperties:
    """What xgemm needs to know of one GPU."""

    name: str
    compute_capability: int     # x 10: 90 for an H100
    multiprocessors: int        # the size of a persistent grid
    max_threads_per_block: int
    max_static_smem: int        # bytes of static shared memory a block may declare
    max_dynamic_smem: int       # bytes of dynamic shared memory a block may opt in to
    max_registers_per_block: int
    l2_bytes: int


@functools.cache
def properties(device: int) -> DeviceProperties:
    """GPU ``device``'s properties, read from the driver on the first call for it.

    >>> properties(0).compute_capability  # doctest: +SKIP
    90
    """
    import cupy

    dev = cupy.cuda.Device(device)
    attrs = dev.attributes
    return DeviceProperties(
        name=cupy.cuda.runtime.getDeviceProperties(device)["name"].decode(),
        compute_capability=int(dev.compute_capability),
        multiprocessors=attrs["MultiProcessorCount"],
        max_threads_per_block=attrs["MaxThreadsPerBlock"],
        max_static_smem=attrs["MaxSharedMemoryPerBlock"],
        max_dynamic_smem=attrs["MaxSharedMemoryPerBlockOptin"],
        max_registers_per_block=attrs["MaxRegistersPerBlock"],
        l2_bytes=attrs.get("L2CacheSize", 50 * 2**20),
    )


def stand_in(machine: dict) -> DeviceProperties:
    """The properties of the GPU a result file's ``machine`` names (its name, compute
    capability and SMs), with an sm_90's per-block limits: planning offline, where the
    GPU that measured the file is not here (``ranking.auto_choice`` after
    ``gpu.properties`` is pointed at it).

    >>> stand_in({"gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
    ...           "sm_count": 132}).multiprocessors
    132
    """
    return DeviceProperties(
        name=machine.get("gpu", "NVIDIA H100 80GB HBM3"),
        compute_capability=round(float(machine.get("compute_capability", "9.0")) * 10),
        multiprocessors=machine.get("sm_count", 132),
        max_threads_per_block=1024,
        max_static_smem=48 * 1024,
        max_dynamic_smem=227 * 1024,
        max_registers_per_block=65536,
        l2_bytes=50 * 2**20,
    )


def compute_capability(device: int) -> int:
    """GPU ``device``'s compute capability x 10 (90 for an H100)."""
    return properties(device).compute_capability


def multiprocessors(device: int) -> int:
    """GPU ``device``'s SM count."""
    return properties(device).multiprocessors


def gpu_name(device: int) -> str:
    """GPU ``device``'s name, as the tuning file keys it ("NVIDIA H100 80GB HBM3")."""
    return properties(device).name


def name_in_use() -> str:
    """The current CUDA device's name, "" where none can be asked (planning offline, where
    a stand-in for :func:`properties` answers instead). Asked afresh each time: the
    device may change, and a stand-in be installed.

    >>> name_in_use()  # doctest: +SKIP
    'NVIDIA H200'
    """
    runtime = _runtime()
    try:
        device = runtime.getDevice() if runtime is not None else 0
    except Exception:  # no driver: a stand-in may still answer for device 0
        device = 0
    try:
        return properties(device).name
    except Exception:
        return ""


@functools.cache
def _runtime() -> Any:
    """CuPy's CUDA runtime module, imported once; None without CuPy."""
    try:
        import cupy
    except ImportError:
        return None
    return cupy.cuda.runtime


def model(name: str) -> str:
    """The model in a GPU's name: a letter and two or three digits ("" where none is).

    >>> model("NVIDIA H100 80GB HBM3"), model("NVIDIA A10G")
    ('H100', '')
    """
    found = re.search(r"\b([A-Z]\d{2,3})\b", name)
    return found.group(1) if found else ""


@contextlib.contextmanager
def standing_in(machine: dict) -> Iterator[DeviceProperties]:
    """Within the block, every device answers :func:`properties` as the GPU a result file's
    ``machine`` names (:func:`stand_in`): planning offline as on the GPU that measured it.

    >>> with standing_in({"gpu": "NVIDIA H200", "compute_capability": "9.0"}):
    ...     name_in_use()
    'NVIDIA H200'
    """
    global properties
    found, before = stand_in(machine), properties

    def standing(device: int) -> DeviceProperties:
        return found

    properties = standing
    try:
        yield found
    finally:
        properties = before
