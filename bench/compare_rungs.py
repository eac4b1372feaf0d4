"""Every rung's defaults against a baseline checkout of xgemm, in one process on one GPU.

For a change to the templates that must not make any kernel slower: each GEMM variant at
its defaults, at 4096^3 (and the Hopper rungs at 8192^3 too), in the dtypes it is for
(float32 for the exact rungs and the TF32 ones, float16 and bfloat16 for the tensor-core
rungs, float64 for the rung that takes only that, int8 for the 8-bit ones: CuPy has no
FP8), in the layout it reads first, timed for the baseline and for this tree in turns
(--rounds turns each, three by default; CUDA events with the GPU held busy while the
host launches, so each time is the kernel's alone); the table gives the medians and
their ratio. Both sides check their result against cuBLAS first.

    git worktree add /tmp/baseline <commit>
    PYTHONPATH=. python bench/compare_rungs.py --baseline /tmp/baseline --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cupy

import xgemm
from xgemm.timing import time_launches
from xgemm.tools.bench import relative_error
from xgemm.tools.tolerances import TOLERANCE

sys.path.insert(0, str(Path(__file__).resolve().parent))
from first_call import load_baseline  # noqa: E402  (the baseline imported as a package)

SIZE, LARGE = 4096, 8192
HOPPER = {"wgmma", "wgmma_tf32"}
#: One bound for every dtype against float64 (1e-2, the 16-bit entries): a check that
#: both sides compute the product before they are timed, not a precision test.
LOOSEST = max(TOLERANCE["float64"].values())


def cases(variants: list[str]) -> list[tuple[str, str, int]]:
    """(variant, dtype, size) to time: the dtypes each rung is for, at 4096 (and 8192)."""
    rows = []
    for name in variants:
        v = xgemm.get_variant(name)
        # FP8 has no CuPy dtype: the 8-bit rungs are timed on int8, their other path
        dtypes = ["float32"] if "float32" in v.dtypes else [
            d for d in v.dtypes if not d.startswith("float8")
            and (d != "float64" or v.dtypes == ("float64",))]
        for dtype in dtypes:
            rows += [(name, dtype, SIZE)] + ([(name, dtype, LARGE)] if name in HOPPER else [])
    return rows


def operands(name: str, dtype: str, size: int) -> tuple:
    """Random operands in the layouts ``name`` reads first (B column-major as w.T)."""
    v = xgemm.get_variant(name)
    rng = cupy.random.default_rng(size)
    if dtype == "int8":
        a, b = (rng.integers(-127, 128, (size, size), dtype=cupy.int8) for _ in "ab")
    else:
        a = rng.standard_normal((size, size), dtype=cupy.float32).astype(dtype)
        b = rng.standard_normal((size, size), dtype=cupy.float32).astype(dtype)
    if v.a_layouts[0] == "col":
        a = cupy.asfortranarray(a)
    if v.b_layouts[0] == "col":
        b = cupy.asfortranarray(b)
    return a, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True,
                        help="a source checkout of the xgemm to compare with")
    parser.add_argument("--variants", help="comma-separated (default: every GEMM variant)")
    parser.add_argument("--rounds", type=int, default=3, help="turns each side takes")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args()
    baseline = load_baseline(args.baseline)
    names = args.variants.split(",") if args.variants else xgemm.variants()
    rows = cases([n for n in names if n in baseline.variants()])
    inputs = {(dtype, size, name): operands(name, dtype, size) for name, dtype, size in rows}

    def prepared(side, name: str, dtype: str, size: int):
        launch = side.prepare(*inputs[dtype, size, name], variant=name)
        launch.plan.kernel()  # compiled here, in parallel
        return launch

    with ThreadPoolExecutor(16) as pool:  # NVRTC compiles run side by side
        jobs = {(side_name, row): pool.submit(prepared, side, *row)
                for side_name, side in (("baseline", baseline), ("xgemm", xgemm))
                for row in rows}
        launches = {key: job.result() for key, job in jobs.items()}

    table = []
    print(f"{'variant':12s} {'dtype':8s} {'size':>5s} {'base ms':>9s} {'new ms':>9s} {'ratio':>6s}")
    for row in rows:
        name, dtype, size = row
        a, b = inputs[dtype, size, name]
        reference = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
        times = {"baseline": [], "xgemm": []}
        for side in times:
            error = relative_error(launches[side, row](), reference)
            assert error < LOOSEST, f"{side} {name} {dtype} {size}: error {error}"
        for _ in range(args.rounds):
            for side in times:
                times[side] += time_launches(launches[side, row], repeat=10, max_seconds=1.0)
        before, after = (statistics.median(times[s]) for s in ("baseline", "xgemm"))
        table.append({"variant": name, "dtype": dtype, "size": size, "baseline_ms": before,
                      "xgemm_ms": after, "ratio": after / before})
        print(f"{name:12s} {dtype:8s} {size:5d} {before:9.3f} {after:9.3f} {after / before:6.3f}",
              flush=True)
    worst = max(table, key=lambda r: r["ratio"])
    print(f"worst: {worst['variant']} {worst['dtype']} {worst['size']}^3 at "
          f"{worst['ratio']:.3f}x the baseline's time")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
