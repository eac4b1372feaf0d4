"""From a rendered template to a kernel: CuPy's NVRTC at run time, and an offline
NVRTC build (no GPU needed) that reports what ptxas did with every variant."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .registry import get_variant

#: NVRTC options for every kernel, at run time and in the offline check alike.
NVRTC_OPTIONS = ("-std=c++17",)


@functools.cache
def _kernel(name: str, params: tuple[tuple[str, int], ...], dtype: str,
            flags: tuple[tuple[str, bool], ...], device: int):
    import cupy

    variant = get_variant(name)
    source = variant.source(dict(params), dtype, **dict(flags))
    kernel = cupy.RawKernel(source, variant.kernel_name, options=NVRTC_OPTIONS)
    kernel.compile()  # now, for the current device, so that errors surface here
    return kernel


def get_kernel(name: str, params: Mapping[str, int], dtype: str, flags: Mapping[str, bool],
               device: int):
    """The compiled ``cupy.RawKernel`` for a variant at resolved ``params``.

    Cached in-process by (variant, parameters, dtype, flags, device): the second call for
    the same key compiles nothing. CuPy's on-disk cache keeps the binaries across
    processes, so a new process pays only for the module load.
    """
    return _kernel(name, tuple(sorted(params.items())), dtype, tuple(sorted(flags.items())),
                   device)


#: Statistics of the in-process kernel cache (hits, misses, size).
kernel_cache_info = _kernel.cache_info


@dataclass(frozen=True)
class PtxasReport:
    """What ptxas said about one kernel: resources and spills."""

    arch: str
    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int
    log: str

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0 or self.stack_bytes > 0


class CompileError(RuntimeError):
    """NVRTC rejected a rendered template; the message holds its log."""


def compile_offline(source: str, arch: str, name: str = "kernel.cu") -> PtxasReport:
    """Compile ``source`` to a cubin for ``arch`` (e.g. "sm_90") with NVRTC, no GPU needed.

    Uses the NVRTC that ``cuda-bindings`` finds (the ``nvidia-cuda-nvrtc`` wheel), with
    ptxas in verbose mode, and parses its report.

    >>> from xgemm import get_variant
    >>> v = get_variant("tiled")
    >>> compile_offline(v.source(v.defaults), "sm_80").spills
    False
    """
    from cuda.bindings import nvrtc

    def check(result):
        err, *rest = result
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC: {err}")
        return rest

    (prog,) = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []))
    try:
        options = [o.encode() for o in (*NVRTC_OPTIONS, f"--gpu-architecture={arch}",
                                          "--ptxas-options=-v")]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        (size,) = check(nvrtc.nvrtcGetProgramLogSize(prog))
        log_bytes = b" " * size
        check(nvrtc.nvrtcGetProgramLog(prog, log_bytes))
        log = log_bytes.rstrip(b"\0 ").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"{name} for {arch} failed to compile:\n{log}")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return _parse_ptxas(log, arch)


def _parse_ptxas(log: str, arch: str) -> PtxasReport:
    def number(pattern: str) -> int:
        found = re.search(pattern, log)
        if not found:
            raise CompileError(f"no {pattern!r} in the ptxas report:\n{log}")
        return int(found.group(1))

    smem = re.search(r"(\d+) bytes smem", log)
    return PtxasReport(
        arch=arch,
        registers=number(r"Used (\d+) registers"),
        stack_bytes=number(r"(\d+) bytes stack frame"),
        spill_store_bytes=number(r"(\d+) bytes spill stores"),
        spill_load_bytes=number(r"(\d+) bytes spill loads"),
        shared_bytes=int(smem.group(1)) if smem else 0,
        log=log,
    )
