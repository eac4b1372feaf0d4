"""xgemm inside a model: a decoder-only transformer's prefill and decode forward and its
training step, every ``nn.Linear`` on xgemm (``xgemm.torch.swap_linears``) against the
same model on PyTorch's own linears (``xgemm bench --suite torch``).

The model is written here in plain PyTorch, so nothing is downloaded. It has Llama's
block: RMSNorm, causal attention (``scaled_dot_product_attention``) and a SwiGLU MLP,
without rotary embeddings, which no linear layer sees. Its linears are the products
xgemm runs: the fused q/k/v and output projections, the gate/up and down projections,
and the head. The parts:

- ``prefill``: a batch of prompts through the model (no gradients), weights in the dtype;
- ``decode``: one new token for each of a batch of sequences, attending to a KV cache of
  ``context`` tokens (no gradients), weights in the dtype. The new token is written into
  the cache's last slot each time, so every timed step does the same work;
- ``train``: forward, backward and a fused AdamW update, float32 weights under
  ``torch.autocast`` in the dtype (as examples/train_gpt.py trains).

Each part's steps are timed as users meet them: queued back to back between two CUDA
events, the two models taking turns round after round (``overhead.queued_ms_in_turns``),
the median round of each.

Example:
    >>> from xgemm.tools import torch_suite
    >>> rows = torch_suite.run(["bfloat16"])  # doctest: +SKIP
    >>> print(torch_suite.table(rows))  # doctest: +SKIP
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: The parts, in the order they run and print.
PARTS = ("prefill", "decode", "train")


@dataclass(frozen=True)
class Model:
    """The decoder's sizes: ``depth`` blocks of ``width``, ``heads`` heads, an MLP of
    ``hidden``, a vocabulary of ``vocab``."""

    width: int = 2048
    depth: int = 8
    heads: int = 16
    hidden: int = 5632
    vocab: int = 32000


@dataclass(frozen=True)
class Case:
    """One part at one size: ``batch`` sequences of ``tokens`` (prefill, train) or one new
    token each after ``tokens`` in the cache (decode)."""

    part: str
    batch: int
    tokens: int

    @property
    def label(self) -> str:
        return f"{self.part} {self.batch} x {self.tokens}"


#: The cases ``run`` measures for each dtype.
CASES = (Case("prefill", 1, 2048), Case("prefill", 8, 1024), Case("decode", 1, 2048),
         Case("decode", 16, 1024), Case("train", 4, 1024))


def decoder(model: Model = Model()) -> Any:
    """The decoder as a ``torch.nn.Module`` (random weights, float32, on the CPU).

    >>> import torch
    >>> net = decoder(Model(width=32, depth=2, heads=4, hidden=64, vocab=50))
    >>> net(torch.zeros(2, 7, dtype=torch.long)).shape
    torch.Size([2, 7, 50])
    """
    import torch
    import torch.nn.functional as F

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = model.heads
            self.norm1 = torch.nn.RMSNorm(model.width)
            self.qkv = torch.nn.Linear(model.width, 3 * model.width, bias=False)
            self.out = torch.nn.Linear(model.width, model.width, bias=False)
            self.norm2 = torch.nn.RMSNorm(model.width)
            self.gate_up = torch.nn.Linear(model.width, 2 * model.hidden, bias=False)
            self.down = torch.nn.Linear(model.hidden, model.width, bias=False)

        def forward(self, x: Any, cache: tuple | None = None) -> Any:
            b, t, c = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads
                                                    ).permute(2, 0, 3, 1, 4)
            if cache is None:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # the new tokens go into the cache's last slots and see all of it
                keys, values = cache
                keys[:, :, -t:], values[:, :, -t:] = k, v
                y = F.scaled_dot_product_attention(q, keys, values)
            x = x + self.out(y.transpose(1, 2).reshape(b, t, c))
            gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = torch.nn.Embedding(model.vocab, model.width)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(model.depth))
            self.norm = torch.nn.RMSNorm(model.width)
            self.head = torch.nn.Linear(model.width, model.vocab, bias=False)

        def forward(self, idx: Any, caches: Sequence[tuple] | None = None) -> Any:
            x = self.tokens(idx)
            for i, block in enumerate(self.blocks):
                x = block(x, None if caches is None else caches[i])
            return self.head(self.norm(x))

    return Decoder()


def _steps(case: Case, net: Any, dtype: Any, model: Model) -> Callable[[], Any]:
    """One step of ``case`` on ``net`` (on the GPU), its inputs made once."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator("cuda").manual_seed(case.batch * 7919 + case.tokens)
    length = 1 if case.part == "decode" else case.tokens
    idx = torch.randint(0, model.vocab, (case.batch, length), device="cuda",
                        generator=generator)
    if case.part == "prefill":
        return torch.no_grad()(lambda: net(idx))
    if case.part == "decode":
        shape = (case.batch, model.heads, case.tokens + 1, model.width // model.heads)
        caches = [tuple(torch.randn(shape, device="cuda", dtype=dtype, generator=generator)
                        for _ in range(2)) for _ in range(model.depth)]
        return torch.no_grad()(lambda: net(idx, caches))
    target = torch.randint(0, model.vocab, (case.batch, length), device="cuda",
                           generator=generator)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True)

    def step() -> None:
        with torch.autocast("cuda", dtype=dtype):
            logits = net(idx)
        loss = F.cross_entropy(logits.float().view(-1, model.vocab), target.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def measure(case: Case, dtype_name: str, nets: dict[str, Any], model: Model = Model(),
            calls: int = 5, rounds: int = 7) -> dict[str, Any]:
    """One row: ``case`` on each of ``nets`` (by name, "PyTorch" and "xgemm"), milliseconds
    per step queued back to back, the nets taking turns; ``x``: PyTorch's over xgemm's."""
    import torch

    from .overhead import queued_ms_in_turns

    dtype = getattr(torch, dtype_name)
    steps = {name: _steps(case, net, dtype, model) for name, net in nets.items()}
    times = queued_ms_in_turns(steps, calls, rounds)
    return {"part": case.part, "dtype": dtype_name, "case": case.label,
            "pytorch_ms": times["PyTorch"], "xgemm_ms": times["xgemm"],
            "x": times["PyTorch"] / times["xgemm"]}


def run(dtypes: Sequence[str] = ("bfloat16", "float16"), model: Model = Model(),
        cases: Sequence[Case] = CASES, progress: Callable[[dict], None] | None = None
        ) -> list[dict[str, Any]]:
    """Every case in every dtype: the decoder on PyTorch's linears and a copy on xgemm's
    (the same weights), in the dtype for inference and in float32 for training."""
    import torch

    import xgemm.torch

    torch.manual_seed(0)
    reference = decoder(model)
    rows = []
    for dtype_name in dtypes:
        for training in (False, True):
            part_cases = [c for c in cases if (c.part == "train") == training]
            if not part_cases:
                continue
            kind = torch.float32 if training else getattr(torch, dtype_name)
            base = copy.deepcopy(reference).to("cuda", kind)
            nets = {"PyTorch": base, "xgemm": xgemm.torch.swap_linears(copy.deepcopy(base))}
            for case in part_cases:
                rows.append(measure(case, dtype_name, nets, model))
                if progress:
                    progress(rows[-1])
            del nets, base
            torch.cuda.empty_cache()
    return rows


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as aligned text.

    >>> print(table([{"part": "decode", "dtype": "bfloat16", "case": "decode 1 x 2048",
    ...               "pytorch_ms": 4.0, "xgemm_ms": 5.0, "x": 0.8}]))
    dtype     case             PyTorch ms  xgemm ms  PyTorch / xgemm
    bfloat16  decode 1 x 2048  4.000       5.000     0.80x
    """
    from .overhead import table as aligned

    return aligned([{"dtype": r["dtype"], "case": r["case"], "PyTorch ms": f"{r['pytorch_ms']:.3f}",
                     "xgemm ms": f"{r['xgemm_ms']:.3f}", "PyTorch / xgemm": f"{r['x']:.2f}x"}
                    for r in rows])
