"""Checks that need the GPU's properties (``xgemm.gpu``): whether a variant at its
parameters fits a block of this GPU, runs on its architecture, and keeps its split-K
workspace within bounds. Each runs before anything is compiled or launched.
"""

from __future__ import annotations

from typing import Any

from .. import gpu
from ..registry import Variant, get_variant, variants

#: Most bytes of workspace a split-K launch may take for its partial products.
MAX_WORKSPACE_BYTES = 2**30


def check_device_limits(v: Variant, p: dict[str, int], dtype: str, device: int) -> int:
    """ValueError, before anything is compiled, if ``v`` at ``p`` needs more threads or
    shared memory per block than GPU ``device`` gives; else its shared memory in bytes."""
    props = gpu.properties(device)
    max_smem = props.max_dynamic_smem if v.dynamic_smem else props.max_static_smem
    threads, smem = v.threads_per_block(p), v.shared_memory(p, dtype)
    if threads > props.max_threads_per_block or smem > max_smem:
        what = "variant" if v.family == "gemm" else f"{v.family} variant"
        raise ValueError(
            f"{what} {v.name!r} with {p} needs {threads} threads and {smem} bytes of shared "
            f"memory per block; GPU {device} allows {props.max_threads_per_block} and "
            f"{max_smem}: choose smaller tiles or blocks (or fewer STAGES)"
        )
    return smem


def check_arch(v: Variant, dtype: str, device: int, auto: bool = False) -> None:
    """ValueError, before anything is compiled, if ``v`` cannot run on GPU ``device``
    (``auto``: the rules picked it for this shape, so the error names what to pick)."""
    cc = gpu.compute_capability(device)
    if not v.runs_on(cc):
        able = [name for name in variants() if dtype in get_variant(name).dtypes
                and get_variant(name).runs_on(cc)]
        if auto and able:
            raise ValueError(
                f"auto multiplies {dtype} products of this shape on {v.name!r}, built for "
                f"{v.target or 'newer GPUs'} only; on GPU {device} (compute capability "
                f"{cc / 10:.1f}) only {', '.join(map(repr, able))} multiply {dtype}: name it "
                "(variant=...) to run there")
        if not able:
            rungs = [get_variant(name) for name in variants() if dtype in get_variant(name).dtypes]
            raise ValueError(
                f"no xgemm variant multiplies {dtype} on GPU {device} (compute capability "
                f"{cc / 10:.1f}): {dtype} products run on " + " or ".join(
                    f"{r.name!r} (built for {r.target} only)" if r.target
                    else f"{r.name!r} (compute capability {r.min_cc / 10:.1f} or newer)"
                    for r in rungs))
        needs = (f"compute capability {v.min_cc / 10:.1f}" + (
            f" exactly (it is built for {v.target})" if v.target and v.target.endswith("a")
            else " or newer"))
        raise ValueError(
            f"variant {v.name!r} needs {needs}; GPU {device} has {cc / 10:.1f}: use one of "
            f"{', '.join(able)} (or 'auto')"
        )


def check_workspace(v: Variant, p: dict[str, int], workspace: int, shapes: Any) -> None:
    """ValueError if ``v`` at ``p`` needs more than ``MAX_WORKSPACE_BYTES`` of partial
    sums (``workspace`` bytes) for the product ``shapes`` (``checks.Shapes``)."""
    if workspace > MAX_WORKSPACE_BYTES:
        raise ValueError(
            f"variant {v.name!r} at {p} needs {workspace / 2**30:.1f} GiB of partial sums "
            f"for {shapes.count} output(s) of {shapes.m} x {shapes.n} (the limit is "
            f"{MAX_WORKSPACE_BYTES / 2**30:.0f} GiB): use fewer SPLITS, fewer products a "
            "call, or a variant that keeps no partial sums ('pipelined', 'wgmma')"
        )
