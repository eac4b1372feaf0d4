"""Whether a CUDA GPU can be used here, and if not, why."""

from __future__ import annotations

import functools


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
