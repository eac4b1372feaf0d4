"""xgemm.grouped_matmul against PyTorch's grouped kernel (F.grouped_mm) and a loop of
torch.matmul on the same data, and against xgemm's dense wgmma on the same multiply-adds:
the cases of the grouped issue (bfloat16, x (tokens, K), w (G, K, N) as the transpose of a
(G, N, K) weight), evenly and skewedly routed.

Kernel time: CUDA events around each call, the L2 scrubbed before each, median of many.
Call time: 20 calls queued back to back, per call. Error: against a float64 loop.

    python bench/grouped.py --json bench/results/h100/evidence/grouped_COMMIT.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tqdm import tqdm  # noqa: E402

import xgemm  # noqa: E402
from xgemm.timing import time_launches  # noqa: E402
from xgemm.tools.machine import machine_info  # noqa: E402

# (name, groups, rows, K, N): the three, Mixtral-8x7B's up-projection (4096 tokens,
# two experts each) and a DeepSeek-V3-like layer (256 experts, 4096 tokens, eight each)
CASES = [("8 x 4096 x 2048 -> 768", 8, 4096, 2048, 768),
         ("64 x 8192 x 2048 -> 1408", 64, 8192, 2048, 1408),
         ("128 x 16384 x 4096 -> 1536", 128, 16384, 4096, 1536),
         ("Mixtral 8 x 8192 x 4096 -> 14336", 8, 8192, 4096, 14336),
         ("DeepSeek-V3 256 x 32768 x 7168 -> 2048", 256, 32768, 7168, 2048)]


def counts_of(groups: int, rows: int, routing: str, seed: int = 0) -> list[int]:
    """Rows a group: even, or skewed (one group half of them, a quarter of the groups
    empty, the rest spread at random)."""
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


def call_ms(launch, calls: int = 20) -> float:
    """A call's milliseconds, ``calls`` of them queued back to back."""
    launch()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        launch()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / calls


def measure(name: str, groups: int, rows: int, k: int, n: int, routing: str,
            grouped_mm) -> dict:
    """One case's row: each contender's kernel and call times and TFLOP/s, and xgemm's
    error against PyTorch's grouped kernel."""
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

    contenders = {"xgemm": lambda: xgemm.grouped_matmul(x, w, offs=ends),
                  "grouped_mm": lambda: grouped_mm(x, w, offs=ends),
                  "loop": loop,
                  "dense": lambda: xgemm.matmul(x, w[0])}  # the same multiply-adds
    row = {"case": name, "routing": routing, "groups": groups, "rows": rows, "k": k, "n": n,
           "counts": counts, "error_vs_grouped_mm": error}
    for label, launch in contenders.items():
        kernel = statistics.median(time_launches(launch, repeat=30, flush_l2=True))
        row[f"{label}_ms"], row[f"{label}_call_ms"] = kernel, call_ms(launch)
        row[f"{label}_tflops"] = flops / kernel / 1e9
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--cases", type=int, default=len(CASES), help="the first N cases")
    args = parser.parse_args()
    grouped_mm = getattr(F, "grouped_mm", None) or torch._grouped_mm
    rows_out = []
    jobs = [(c, r) for c in CASES[:args.cases] for r in ("even", "skewed")]
    for (name, groups, rows, k, n), routing in tqdm(jobs, unit="case"):
        rows_out.append(measure(name, groups, rows, k, n, routing, grouped_mm))
    header = ("case", "routing", "xgemm TF/s", "grouped_mm TF/s", "x grouped_mm",
              "x grouped_mm call", "x dense", "loop TF/s")
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for r in rows_out:
        print(f"| {r['case']} | {r['routing']} | {r['xgemm_tflops']:.0f} | "
              f"{r['grouped_mm_tflops']:.0f} | {r['grouped_mm_ms'] / r['xgemm_ms']:.2f}x | "
              f"{r['grouped_mm_call_ms'] / r['xgemm_call_ms']:.2f}x | "
              f"{r['dense_ms'] / r['xgemm_ms']:.2f}x | {r['loop_tflops']:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine_info(), "rows": rows_out},
                                              indent=1))


if __name__ == "__main__":
    main()
