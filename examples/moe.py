"""A mixture-of-experts layer on xgemm's grouped products, trained a few steps beside the
same layer on PyTorch's (``F.grouped_mm``), from the same weights on the same tokens.

Each token goes to its top-k experts (a linear router, softmax over the k chosen). The
tokens are sorted by expert so that each expert's are one block of rows; the ends of the
blocks (a cumulative count, computed on the GPU: no synchronisation with the host) are
the groups' ``offs``. An expert is a SiLU MLP: up (width -> hidden) and down (hidden ->
width), each one grouped product over all experts. The backward runs the grouped
products too: dX through groups of rows, dW through groups along K (rungs 29 and 30).

    python examples/moe.py                          # 8 experts, top 2, width 2048
    python examples/moe.py --experts 64 --top-k 8 --hidden 1408

It prints the two layers' outputs' and gradients' difference, and the median time of a
step (forward and backward) of each.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

import xgemm.torch


class MoE(torch.nn.Module):
    """Top-k routed experts, each a SiLU MLP; ``grouped`` multiplies each weight's groups
    (``xgemm.torch.grouped_mm`` or ``F.grouped_mm``: x (rows, K), w (G, K, N), offs)."""

    def __init__(self, width: int, hidden: int, experts: int, top_k: int, grouped,
                 dtype=torch.bfloat16, device="cuda") -> None:
        super().__init__()
        self.top_k, self.grouped = top_k, grouped
        self.router = torch.nn.Linear(width, experts, bias=False, device=device, dtype=dtype)
        # stored as PyTorch stores linear weights, (out, in) a matrix: read K-major
        scale = width ** -0.5
        self.up = torch.nn.Parameter(torch.randn(experts, hidden, width, device=device,
                                                 dtype=dtype) * scale)
        self.down = torch.nn.Parameter(torch.randn(experts, width, hidden, device=device,
                                                   dtype=dtype) * hidden ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores, chosen = self.router(x).topk(self.top_k, dim=-1)
        gates = scores.softmax(dim=-1)
        order = chosen.flatten().argsort(stable=True)  # (token, choice) pairs, by expert
        counts = torch.bincount(chosen.flatten(), minlength=self.up.shape[0])
        offs = counts.cumsum(0).to(torch.int32)
        rows = x[order // self.top_k]
        h = F.silu(self.grouped(rows, self.up.transpose(-2, -1), offs))
        y = self.grouped(h, self.down.transpose(-2, -1), offs)
        out = torch.zeros_like(x)
        weighted = y * gates.flatten()[order, None]
        return out.index_add(0, order // self.top_k, weighted)


def step_ms(layer: MoE, x: torch.Tensor, steps: int) -> tuple[list[float], torch.Tensor]:
    """Each step's milliseconds (CUDA events), forward and backward; the last output."""
    times = []
    for _ in range(steps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        out = layer(x)
        out.float().square().mean().backward()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return times, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    grouped_mm = getattr(F, "grouped_mm", None) or torch._grouped_mm
    ours = MoE(args.width, args.hidden, args.experts, args.top_k,
               lambda x, w, offs: xgemm.torch.grouped_mm(x, w, offs))
    theirs = MoE(args.width, args.hidden, args.experts, args.top_k,
                 lambda x, w, offs: grouped_mm(x, w, offs=offs))
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(args.tokens, args.width, device="cuda", dtype=torch.bfloat16)
    results = {}
    for name, layer in (("xgemm", ours), ("PyTorch", theirs)):
        times, out = step_ms(layer, x, args.steps)
        results[name] = (statistics.median(times[3:]), out, layer.up.grad.clone())
        layer.zero_grad(set_to_none=True)
    (ms_x, out_x, grad_x), (ms_t, out_t, grad_t) = results["xgemm"], results["PyTorch"]

    def relative(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(torch.linalg.norm(a.double() - b.double()) / torch.linalg.norm(b.double()))

    print(f"output difference {relative(out_x, out_t):.2e}, up-projection gradient "
          f"difference {relative(grad_x, grad_t):.2e} (bfloat16)")
    print(f"step (forward + backward), median of {args.steps - 3}: xgemm {ms_x:.3f} ms, "
          f"PyTorch {ms_t:.3f} ms: {ms_t / ms_x:.2f}x")


if __name__ == "__main__":
    main()
