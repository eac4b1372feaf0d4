"""A template change against the templates before it, on the same operands in one process:
rung 13's family (the ring, split K, few rows, few columns, ping-pong) at the points auto
picks for LLM-shaped and square bf16 products, kernel microseconds in turns with the L2
scrubbed, cuBLAS beside, and each arm's error against a float32 product. The templates
before are a folder of their own, extracted beforehand, e.g. from main:

    git archive main kernels | tar -x -C scratch/before
    python bench/template_ab.py scratch/before/kernels out.json

Each arm's launches are called once as they are prepared: a plan compiles its kernel on
its first call, from the template folder in use then.
"""

from __future__ import annotations

import json
import pathlib
import sys

import jinja2
import torch

import xgemm
from xgemm import compile as xcompile
from xgemm import plan, render
from xgemm.tools import measuring

P = measuring.Product


def w14(bm: int, bn: int, consumers: int, stages: int) -> tuple[str, dict]:
    return "wgmma", {"BM": bm, "BN": bn, "CONSUMERS": consumers, "STAGES": stages}


ROWS, COLUMNS, SPLIT = "wgmma_rows", "wgmma_columns", "wgmma_splitk"
CASES = [
    (P(512, 1024, 8192, "NT", (1,)), [w14(64, 64, 1, 10)]),
    (P(512, 1024, 4096, "NT", (1,)), [w14(64, 64, 1, 10)]),
    (P(512, 512, 3584, "NT", (1,)), [w14(64, 64, 1, 10)]),
    (
        P(128, 3584, 18944, "NT", (1,)),
        [w14(64, 64, 1, 10), (SPLIT, {"BM": 128, "BN": 64, "CONSUMERS": 2, "SPLITS": 2})],
    ),
    (P(128, 3584, 3584, "NT", (1,)), [w14(64, 64, 1, 10)]),
    (P(128, 14336, 4096, "NT", (1,)), [w14(64, 128, 1, 8), w14(128, 128, 2, 6)]),
    (P(128, 8192, 8192), [w14(64, 128, 1, 8)]),
    (P(128, 1024, 8192, "NT", (1,)), [(SPLIT, {"BM": 64, "BN": 64, "CONSUMERS": 1, "SPLITS": 4})]),
    (
        P(512, 4096, 4096, "NT", (1,)),
        [("wgmma_pingpong", {"BM": 128, "BN": 128, "STAGES": 5}), w14(128, 128, 2, 6)],
    ),
    (P(4096, 4096, 4096), [w14(128, 256, 2, 4)]),
    (P(4096, 14336, 4096, "NT"), [w14(128, 256, 2, 4)]),
    (P(8192, 8192, 8192, "NT"), [w14(128, 256, 2, 4)]),
    (P(1, 4096, 4096, "NT", (1,)), [(ROWS, {"BM": 16, "BN": 64, "SPLITS": 2})]),
    (P(8, 14336, 4096, "NT", (1,)), [(ROWS, {"BM": 16, "BN": 128, "SPLITS": 1})]),
    (P(32, 8192, 8192, "NT", (1,)), [(ROWS, {"BM": 32, "BN": 128, "SPLITS": 2})]),
    (P(4096, 8, 4096, "NT"), [(COLUMNS, {"BM": 16, "BN": 128, "SPLITS": 1})]),
    # a weight gradient over a few tokens: K of one or two phases, kernels of about 7 us
    (P(512, 3584, 8, "TN"), [("wgmma", {**w14(128, 128, 2, 6)[1], "SPREAD": 1})]),
]


def key(variant: str, params: dict) -> str:
    """A point's name in the table: its rung and every parameter given."""
    return variant + ":" + ",".join(f"{name}={value}" for name, value in sorted(params.items()))


def use(folder: str) -> None:
    """Render and compile from ``folder`` from here on (nothing cached from before)."""
    render._env.loader = jinja2.FileSystemLoader(folder)
    for cached in (render._render, xcompile._kernel):
        cached.cache_clear()
    plan.PLANS.clear()


def main(before: str, out: str) -> None:
    arms = (("before", before), ("after", str(render.KERNELS_DIR)))
    rows = []
    for case, points in CASES:
        a, b, c = measuring.operands(case, "bfloat16", 0)
        ref = torch.matmul(a.float(), b.float())
        launches = {"cublas": lambda a=a, b=b, c=c: torch.matmul(a, b, out=c)}
        for arm, folder in arms:
            use(folder)
            for v, p in points:
                launch = xgemm.prepare(a, b, v, out=c, **p)
                launch()  # compiled and loaded now, from this arm's templates
                torch.cuda.synchronize()
                launches[f"{arm}:{key(v, p)}"] = launch
        errors = {}
        for name, fn in launches.items():
            c.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            errors[name] = float((c.float() - ref).norm() / ref.norm())
        ms = measuring.median_ms_in_turns(launches, rounds=15, flush_l2=True)
        rows.append({"case": case.label, "ms": ms, "error": errors})
        line = f"{case.label:22} cuBLAS {ms['cublas'] * 1e3:7.1f}"
        for v, p in points:
            k = key(v, p)
            before_ms, after_ms = ms[f"before:{k}"], ms[f"after:{k}"]
            line += (
                f" | {k} {before_ms * 1e3:7.1f} -> {after_ms * 1e3:7.1f}"
                f" ({after_ms / before_ms:.3f}) error {errors[f'before:{k}']:.1e}"
                f" -> {errors[f'after:{k}']:.1e}"
            )
        print(line, flush=True)
    pathlib.Path(out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
