"""``xgemm bench --suite grouped``: ``xgemm.grouped_matmul`` against PyTorch's grouped
kernel (``F.grouped_mm``), a loop of ``torch.matmul`` on the same data and xgemm's dense
wgmma on the same multiply-adds, and again in FP8: the cases of a mixture-of-experts
layer (bfloat16, x (tokens, K), w (G, K, N) as the transpose of a (G, N, K) weight),
evenly and skewedly routed.

Kernel time: CUDA events around each call, the L2 scrubbed before each, median of many.
Call time: calls queued back to back (about 20 ms of them a round), the contenders in
turns, the median of 7 rounds (``xgemm.tools.overhead.queued_ms_in_turns``). Error:
against F.grouped_mm's result.

Each case's floor says how much faster any kernel could be: the larger of the time to
read A, the weights of the groups that have tokens and write C at the measured copy
bandwidth, and xgemm's dense product of the same multiply-adds (one weight matrix, so
compute-bound). Many experts of a few hundred tokens each are bound by their weights'
bytes: no grouped kernel can beat F.grouped_mm there by more than its time over the floor.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from . import markdown
from .overhead import calls_per_round, queued_ms_in_turns

# (name, groups, rows, K, N): many experts of few tokens (three sizes), Mixtral-8x7B's
# up-projection (4096 tokens, two experts each) and a DeepSeek-V3-like layer (256 experts,
# 4096 tokens, eight each)
#: The operands' dtype (``xgemm bench --suite grouped`` takes no other).
DTYPE = "bfloat16"
CASES = [("8 x 4096 x 2048 -> 768", 8, 4096, 2048, 768),
         ("64 x 8192 x 2048 -> 1408", 64, 8192, 2048, 1408),
         ("128 x 16384 x 4096 -> 1536", 128, 16384, 4096, 1536),
         ("Mixtral 8 x 8192 x 4096 -> 14336", 8, 8192, 4096, 14336),
         ("DeepSeek-V3 256 x 32768 x 7168 -> 2048", 256, 32768, 7168, 2048)]
#: Rows a run writes: each case evenly and skewedly routed.
ROWS = 2 * len(CASES)


def counts_of(groups: int, rows: int, routing: str, seed: int = 0) -> list[int]:
    """Rows a group: even, or skewed (one group half of them, a quarter of the groups
    empty, the rest spread at random).

    >>> counts_of(4, 10, "even"), sum(counts_of(8, 4096, "skewed"))
    ([3, 3, 2, 2], 4096)
    """
    import torch

    if routing == "even":
        return [rows // groups + (g < rows % groups) for g in range(groups)]
    gen = torch.Generator().manual_seed(seed)
    counts = [0] * groups
    counts[0] = rows // 2
    live = [g for g in range(1, groups) if g % 4 != 1] or [0]
    picks = torch.randint(0, len(live), (rows - counts[0],), generator=gen)
    for g, c in zip(live, torch.bincount(picks, minlength=len(live)).tolist(), strict=True):
        counts[g] += c
    return counts


def measure(name: str, groups: int, rows: int, k: int, n: int, routing: str,
            grouped_mm: Callable, bandwidth_gbs: float) -> dict:
    """One case's row: each contender's kernel and call times and TFLOP/s, xgemm's error
    against PyTorch's grouped kernel, and the case's floor (module text) at
    ``bandwidth_gbs``, the copy bandwidth."""
    import torch

    import xgemm
    from xgemm.timing import time_launches

    counts = counts_of(groups, rows, routing)
    gen = torch.Generator("cuda").manual_seed(1)
    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(groups, n, k, device="cuda", dtype=torch.bfloat16,
                    generator=gen).transpose(-2, -1)
    ends = torch.tensor(counts, device="cuda").cumsum(0).int()
    flops = 2 * rows * k * n
    ours = xgemm.grouped_matmul(x, w, offs=ends)
    theirs = grouped_mm(x, w, offs=ends)
    error = float(torch.linalg.norm(ours.double() - theirs.double())
                  / torch.linalg.norm(theirs.double()))
    starts = [0, *torch.tensor(counts).cumsum(0).tolist()]

    def loop():
        for g in range(groups):
            if starts[g + 1] > starts[g]:
                torch.matmul(x[starts[g]:starts[g + 1]], w[g])

    # the same products in FP8 (e4m3), a scale a row of x and a column of each expert's w
    x8, w8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    scale_a = torch.ones(rows, device="cuda")
    scale_b = torch.ones(groups, n, device="cuda")
    contenders = {"xgemm": lambda: xgemm.grouped_matmul(x, w, offs=ends),
                  "xgemm_fp8": lambda: xgemm.grouped_matmul(x8, w8, offs=ends, scale_a=scale_a,
                                                            scale_b=scale_b),
                  "grouped_mm": lambda: grouped_mm(x, w, offs=ends),
                  "loop": loop,
                  "dense": lambda: xgemm.matmul(x, w[0])}  # the same multiply-adds
    row = {"case": name, "routing": routing, "groups": groups, "rows": rows, "k": k, "n": n,
           "counts": counts, "error_vs_grouped_mm": error}
    for label, launch in contenders.items():
        kernel = statistics.median(time_launches(launch, repeat=30, flush_l2=True))
        row[f"{label}_ms"], row[f"{label}_tflops"] = kernel, flops / kernel / 1e9
    # whole calls, the contenders in turns (a GPU that warms slows each alike), enough of
    # them a round that the first call's setup is lost in the rest
    calls = calls_per_round(min(row[f"{label}_ms"] for label in contenders))
    for label, ms in queued_ms_in_turns(contenders, calls=calls).items():
        row[f"{label}_call_ms"] = ms
    item = x.element_size()
    nbytes = item * (rows * k + sum(c > 0 for c in counts) * k * n + rows * n)
    row["bytes_ms"] = nbytes / bandwidth_gbs / 1e6
    row["floor_ms"] = max(row["bytes_ms"], row["dense_ms"])
    return row


def run(progress: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
    """Every case, evenly and skewedly routed: one row each (:func:`measure`)."""
    import torch
    import torch.nn.functional as F

    from .machine import measure_copy_bandwidth

    grouped_mm = getattr(F, "grouped_mm", None) or torch._grouped_mm
    bandwidth = measure_copy_bandwidth()
    rows = []
    for name, groups, tokens, k, n in CASES:
        for routing in ("even", "skewed"):
            rows.append(measure(name, groups, tokens, k, n, routing, grouped_mm, bandwidth))
            if progress:
                progress(rows[-1])
    return rows


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table: TFLOP/s, xgemm's speed-up over F.grouped_mm (kernel
    and call) beside the most the case's floor allows (module text), its own dense
    product of the same multiply-adds against it, and FP8's speed-up over 16 bits.

    >>> print(table([{"case": "c", "routing": "even", "xgemm_tflops": 600.0,
    ...               "grouped_mm_tflops": 300.0, "grouped_mm_ms": 2.0, "xgemm_ms": 1.0,
    ...               "grouped_mm_call_ms": 2.2, "xgemm_call_ms": 1.1, "dense_ms": 0.9,
    ...               "floor_ms": 0.9, "bytes_ms": 0.5, "loop_tflops": 50.0,
    ...               "xgemm_fp8_tflops": 1100.0, "xgemm_fp8_ms": 0.55}]).splitlines()[-1])
    | c | even | 600 | 300 | 2.00x | 2.00x | 2.22x | 0.50 | 0.90x | 50 | 1100 | 1.82x |
    """
    header = ("case", "routing", "xgemm TFLOP/s", "F.grouped_mm TFLOP/s", "x F.grouped_mm",
              "x F.grouped_mm (call)", "floor: x F.grouped_mm at most", "bytes ms",
              "x dense", "loop TFLOP/s", "FP8 TFLOP/s", "FP8 x 16-bit")
    return markdown.table(header, (
        (r["case"], r["routing"], f"{r['xgemm_tflops']:.0f}", f"{r['grouped_mm_tflops']:.0f}",
         f"{r['grouped_mm_ms'] / r['xgemm_ms']:.2f}x",
         f"{r['grouped_mm_call_ms'] / r['xgemm_call_ms']:.2f}x",
         f"{r['grouped_mm_ms'] / r['floor_ms']:.2f}x", f"{r['bytes_ms']:.2f}",
         f"{r['dense_ms'] / r['xgemm_ms']:.2f}x", f"{r['loop_tflops']:.0f}",
         f"{r['xgemm_fp8_tflops']:.0f}", f"{r['xgemm_ms'] / r['xgemm_fp8_ms']:.2f}x")
        for r in rows))
