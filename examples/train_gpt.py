"""A small GPT, written in plain PyTorch, trained twice from the same initial weights on
the same batches: once with every linear layer on xgemm (``xgemm.torch.swap_linears``),
once on PyTorch's own, the two taking turns step by step. Both in bfloat16 autocast; the
two loss curves go into one figure and each model's median step time (forward, backward
and the AdamW update) is printed.

The text needs no download: a corpus the script writes itself from a seeded grammar
(sentences of a few hundred words), tokenised by characters. The model: 6 blocks of
causal self-attention (PyTorch's scaled_dot_product_attention) and a GELU MLP, width
512, 8 heads, context 256; its linears are the products xgemm runs (q, k, v and output
projections, the MLP's two layers, the head).

    python examples/train_gpt.py                     # 300 steps: bench/results/h100/training
    python examples/train_gpt.py --mode compile      # under torch.compile(fullgraph=True)
    python examples/train_gpt.py --mode cudagraphs   # and its graphs replayed (reduce-overhead)
    python examples/train_gpt.py --figure bench/results/h100/training/train_gpt_eager.json

In eager mode this model's step is bounded by the host (the Python and dispatch of each
call), not by the GPU; replayed as CUDA graphs, it is bounded by the GPU's kernels.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

import xgemm.torch
from xgemm.tools.machine import machine_info

SENTENCE = (
    "the kernel reads a tile of the matrix into shared memory while the warps multiply "
    "what the ring holds and the store of each result waits for no one because the copy "
    "engine writes it out as the next tile arrives from memory"
    )


def characters() -> list[str]:
    """The characters :func:`corpus` writes, sorted: the grammar's letters, the space and
    the full stop (each one is in any corpus of a few thousand words)."""
    return sorted(set(SENTENCE) | {"."})


def corpus(chars: int, seed: int = 0) -> str:
    """A text of ``chars`` characters from a seeded grammar: word pairs that follow one
    another more often than chance, so there is something to learn."""
    rng = random.Random(seed)
    words = sorted(set(SENTENCE.split()))
    follows = {w: rng.sample(words, 5) for w in words}
    out, word, length = [], rng.choice(words), 0
    while length < chars:  # the text's length so far, its spaces included
        out.append(word)
        length += len(word) + 1
        word = rng.choice(follows[word]) if rng.random() < 0.8 else rng.choice(words)
        if rng.random() < 0.08:
            out[-1] += "."
            length += 1
    return " ".join(out)[:chars]


class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, vocab: int, width: int = 512, depth: int = 6, heads: int = 8,
                 context: int = 256) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, width)
        self.positions = torch.nn.Embedding(context, width)
        self.blocks = torch.nn.Sequential(*(Block(width, heads) for _ in range(depth)))
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.norm(self.blocks(x)))


def train(models: dict[str, torch.nn.Module], data: torch.Tensor, steps: int, batch: int,
          context: int, seed: int, mode: str = "eager"
          ) -> dict[str, tuple[list[float], list[float]]]:
    """Each model's losses and step milliseconds (CUDA events) over ``steps`` AdamW steps
    on batches drawn with ``seed``. The models take turns step by step on the same batch,
    so a host or GPU whose speed drifts during the run slows each alike (one model's run
    after the other's measured 0.68-0.80x by the order alone). ``mode``: eager, compile
    (``torch.compile(fullgraph=True)``) or cudagraphs (and ``mode="reduce-overhead"``:
    forward and backward replayed as CUDA graphs)."""
    from tqdm import tqdm  # training's progress bar only: --figure draws without it

    runs = {}
    for name, model in models.items():
        optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1,
                                      fused=True)
        forward = model if mode == "eager" else torch.compile(
            model, fullgraph=True, mode="reduce-overhead" if mode == "cudagraphs" else None)
        runs[name] = (forward, optimizer, [], [])  # its losses and its steps' events
    generator = torch.Generator("cuda").manual_seed(seed)
    # xgemm's first steps compile its kernels for each product's shape (minutes on a cold
    # cache); the median step leaves the first five out
    for _ in tqdm(range(steps), unit="step", leave=False):
        starts = torch.randint(0, len(data) - context - 1, (batch,), device="cuda",
                               generator=generator)
        offsets = torch.arange(context + 1, device="cuda")
        window = data[starts[:, None] + offsets]
        x, y = window[:, :-1], window[:, 1:]
        for forward, optimizer, losses, times in runs.values():
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            if mode == "cudagraphs":  # this step's graphs may overwrite the last step's outputs
                torch.compiler.cudagraph_mark_step_begin()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = forward(x)
                loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                                       y.reshape(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            end.record()
            losses.append(loss.detach().clone() if mode == "cudagraphs" else loss)
            times.append((begin, end))
    torch.cuda.synchronize()
    return {name: ([x.item() for x in losses], [b.elapsed_time(e) for b, e in times])
            for name, (_, _, losses, times) in runs.items()}


def draw(run: dict, vocab: int, path: Path) -> None:
    """The loss curves of a run's two models (its JSON, as ``main`` writes it) into a
    figure at ``path``; ``vocab``: the characters of the corpus (the y axis's top)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name in ("PyTorch", "xgemm"):
        ax.plot(run[name]["losses"], label=f"{name} ({run[name]['step_ms']:.1f} ms a step)",
                alpha=0.8)
    ax.set(xlabel="step", ylabel="cross-entropy", yscale="log",
           title=f"GPT, bfloat16 autocast, {run['mode']}, {run['steps']} steps of "
                 f"{run['batch']} x 256 tokens")
    ax.set_ylim(top=math.log(vocab) * 1.1)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--mode", choices=("eager", "compile", "cudagraphs"), default="eager",
                        help="eager; torch.compile(fullgraph=True); and replayed as CUDA graphs")
    parser.add_argument("--out", help="the figure (.png) and the numbers (.json), without "
                        "suffix (bench/results/h100/training/train_gpt_MODE)")
    parser.add_argument("--figure", metavar="JSON", help="only draw the figure of a saved "
                        "run (its .json) beside it, without a GPU")
    args = parser.parse_args()
    vocab = characters()
    if args.figure:  # (no corpus to write: the grammar says its characters)
        path = Path(args.figure)
        draw(json.loads(path.read_text()), len(vocab), path.with_suffix(".png"))
        return
    text = corpus(2_000_000)
    torch.manual_seed(0)
    index = {ch: i for i, ch in enumerate(vocab)}
    data = torch.tensor([index[ch] for ch in text], device="cuda")
    reference = GPT(len(vocab)).cuda()
    ours = xgemm.torch.swap_linears(copy.deepcopy(reference))
    runs = {}
    trained = train({"PyTorch": reference, "xgemm": ours}, data, args.steps, args.batch, 256,
                    seed=1, mode=args.mode)
    for name, (losses, ms) in trained.items():
        runs[name] = {"losses": losses, "step_ms": statistics.median(ms[5:])}
        print(f"{name:8s} median step {runs[name]['step_ms']:.2f} ms, "
              f"loss {losses[0]:.3f} -> {statistics.mean(losses[-20:]):.3f} (last 20)")
    ratio = runs["PyTorch"]["step_ms"] / runs["xgemm"]["step_ms"]
    print(f"xgemm's step against PyTorch's: {ratio:.3f}x")
    out = Path(args.out or f"bench/results/h100/training/train_gpt_{args.mode}")
    out.parent.mkdir(parents=True, exist_ok=True)
    run = {"steps": args.steps, "batch": args.batch, "mode": args.mode,
           "machine": machine_info(measure=False), **runs}
    out.with_suffix(".json").write_text(json.dumps(run, indent=1) + "\n")
    draw(run, len(vocab), out.with_suffix(".png"))
    print("wrote", out.with_suffix(".png"), "and", out.with_suffix(".json"))


if __name__ == "__main__":
    main()
