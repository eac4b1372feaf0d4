"""The benchmark's two figures, drawn with matplotlib from its results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .bench import Result, intensity


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:
        raise RuntimeError("plots need matplotlib: pip install 'xgemm[bench]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(results: Sequence[Result]) -> dict[str, list[Result]]:
    series: dict[str, list[Result]] = {}
    for r in results:
        if r.ok:
            series.setdefault(r.variant, []).append(r)
    return series


def _dtype(results: Sequence[Result]) -> str:
    """The results' dtype (one run times one)."""
    return results[0].dtype if results else "float32"


def plot_tflops(results: Sequence[Result], machine: dict[str, Any], path: str) -> None:
    """TFLOP/s against size for square problems, one line per variant, cuBLAS in black;
    for float32, the FP32 peak of the exact rungs."""
    plt = _pyplot()
    dtype = _dtype(results)
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.get_cmap("tab20").colors  # a colour per rung: the ladder has more than 10
    for i, (name, rs) in enumerate(_series(results).items()):
        square = sorted((r for r in rs if r.m == r.n == r.k), key=lambda r: r.m)
        if not square:
            continue
        style = ({"color": "black", "linewidth": 2.5} if name == "cublas"
                 else {"marker": "os^v"[i % 4], "color": colors[i % len(colors)]})
        ax.plot([r.m for r in square], [r.tflops for r in square], label=name, **style)
    peak = machine.get("fp32_peak_tflops")
    if peak and dtype == "float32":
        ax.axhline(peak, color="grey", linestyle="--", label=f"FP32 peak {peak:.1f}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M = N = K")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"xgemm {dtype} vs cuBLAS on {machine.get('gpu', 'GPU')}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_roofline(results: Sequence[Result], machine: dict[str, Any], path: str) -> None:
    """A roofline from the measured ceilings, each result at its arithmetic intensity
    (float32: the FP32 peak is its roof)."""
    plt = _pyplot()
    dtype = _dtype(results)
    itemsize = {"float64": 8, "float32": 4}.get(dtype, 2)
    peak = machine.get("fp32_peak_tflops") if dtype == "float32" else None
    bandwidth = machine.get("copy_bandwidth_gbs")
    fig, ax = plt.subplots(figsize=(8, 5))
    points = [r for r in results if r.ok]
    xs = [intensity(r.m, r.n, r.k, itemsize) for r in points] or [1.0]
    lo, hi = min(min(xs) / 4, 0.25), max(xs) * 4
    if peak and bandwidth:
        grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        roof = [min(peak, bandwidth * x / 1000) for x in grid]
        ax.plot(grid, roof, color="grey", linewidth=2,
                label=f"roof: {bandwidth:.0f} GB/s, {peak:.1f} TFLOP/s")
    colors = plt.get_cmap("tab20").colors
    for i, (name, rs) in enumerate(_series(results).items()):
        style = ({"color": "black", "marker": "s"} if name == "cublas"
                 else {"marker": "os^v"[i % 4], "color": colors[i % len(colors)]})
        ax.scatter([intensity(r.m, r.n, r.k, itemsize) for r in rs], [r.tflops for r in rs],
                   label=name, s=18, **style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of minimum DRAM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Roofline, {dtype}, {machine.get('gpu', 'GPU')}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
