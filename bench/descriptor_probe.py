"""(Run from the repository root, main's kernels/ extracted to scratch/oldk: git archive main
kernels | tar -x -C scratch/oldk.) Rung 13's consumer loop before (main's templates, scratch/oldk) and after (this tree: descriptors
from a slot address taken once, two commit groups in flight): kernel us in turns, L2 scrubbed,
bf16, same operands, same points; cuBLAS beside; error of each against a float32 product."""
import json, sys
import jinja2, torch
import xgemm
from xgemm import compile as xcompile, plan, render
from xgemm.tools import measuring
P = measuring.Product
W14 = lambda bm, bn, c, st: ("wgmma", dict(BM=bm, BN=bn, CONSUMERS=c, STAGES=st))
cases = [
    (P(512, 1024, 8192, "NT", (1,)), [W14(64, 64, 1, 10)]),
    (P(512, 1024, 4096, "NT", (1,)), [W14(64, 64, 1, 10)]),
    (P(512, 512, 3584, "NT", (1,)), [W14(64, 64, 1, 10)]),
    (P(128, 3584, 18944, "NT", (1,)), [W14(64, 64, 1, 10), ("wgmma_splitk", dict(BM=128, BN=64, CONSUMERS=2, SPLITS=2))]),
    (P(128, 3584, 3584, "NT", (1,)), [W14(64, 64, 1, 10)]),
    (P(128, 14336, 4096, "NT", (1,)), [W14(64, 128, 1, 8), W14(128, 128, 2, 6)]),
    (P(128, 8192, 8192), [W14(64, 128, 1, 8)]),
    (P(128, 1024, 8192, "NT", (1,)), [("wgmma_splitk", dict(BM=64, BN=64, CONSUMERS=1, SPLITS=4))]),
    (P(512, 4096, 4096, "NT", (1,)), [("wgmma_pingpong", dict(BM=128, BN=128, STAGES=5)), W14(128, 128, 2, 6)]),
    (P(4096, 4096, 4096), [W14(128, 256, 2, 4)]),
    (P(4096, 14336, 4096, "NT"), [W14(128, 256, 2, 4)]),
    (P(8192, 8192, 8192, "NT"), [W14(128, 256, 2, 4)]),
    (P(1, 4096, 4096, "NT", (1,)), [("wgmma_rows", dict(BM=16, BN=64, SPLITS=2))]),
    (P(8, 14336, 4096, "NT", (1,)), [("wgmma_rows", dict(BM=16, BN=128, SPLITS=1))]),
    (P(32, 8192, 8192, "NT", (1,)), [("wgmma_rows", dict(BM=32, BN=128, SPLITS=2))]),
    (P(4096, 8, 4096, "NT"), [("wgmma_columns", dict(BM=16, BN=128, SPLITS=1))]),
]
def use(folder):
    render._env.loader = jinja2.FileSystemLoader(folder)
    for f in (render._render, xcompile._kernel):
        f.cache_clear()
    plan.PLANS.clear()
rows = []
for case, points in cases:
    a, b, c = measuring.operands(case, "bfloat16", 0)
    ref = torch.matmul(a.float(), b.float())
    launches = {"cublas": lambda: torch.matmul(a, b, out=c)}
    for arm, folder in (("old", "scratch/oldk/kernels"), ("new", str(render.KERNELS_DIR))):
        use(folder)
        for v, p in points:
            launch = xgemm.prepare(a, b, v, out=c, **p)
            launch()  # compiled and loaded now, from this arm's templates: a plan compiles
            torch.cuda.synchronize()  # on its first call and keeps the function it loaded
            launches[f"{arm}:{v}:{p['BM']}x{p['BN']}"] = launch
    errors = {}
    for name, fn in launches.items():
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        errors[name] = float((c.float() - ref).norm() / ref.norm())
    ms = measuring.median_ms_in_turns(launches, rounds=15, flush_l2=True)
    rows.append({"case": case.label, "ms": ms, "error": errors})
    line = f"{case.label:22} cub {ms['cublas']*1e3:7.1f}"
    for v, p in points:
        k = f"{v}:{p['BM']}x{p['BN']}"
        line += f" | {k} {ms['old:'+k]*1e3:7.1f} -> {ms['new:'+k]*1e3:7.1f} ({ms['new:'+k]/ms['old:'+k]:.3f}) err {errors['new:'+k]:.1e}"
    print(line, flush=True)
json.dump(rows, open(sys.argv[1], "w"), indent=1)
