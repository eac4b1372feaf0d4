"""The 8-bit rungs at a handful of points on the random suite's 8-bit cases, against
cuBLASLt: what auto's 8-bit rule is fitted to (``xgemm.choice.heuristic``).

For each case of ``xgemm.tools.generalisation.eight_bit_cases(seed)`` (N and K rounded up to 16,
B a weight's transposed view), and 4096^3 and 8192^3 with --squares: the kernel time
(CUDA events, median of 10, the L2 scrubbed before each where the operands and C fit in it
four times) of ``torch._scaled_mm`` (FP8 e4m3, a float32 scale per row of A and per column
of B, bfloat16 C) or ``torch._int_mm`` (int8, int32 C; it refuses 16 rows or fewer), of
auto's pick, and of each point below. Products of at most 16 rows or columns also time
rung 20 (``skinny``) at 2-16 splits, and report the rate at which its best point reads
the big operand against the device-to-device copy bandwidth measured in the same run.
--decode adds decode steps (1-16 rows of 4096 x 4096, 14336 x 4096 and 4096 x 14336
weights); --seeds 0 leaves the random cases out. Every point's result is checked
against float64 first.

    PYTHONPATH=. python bench/eight_bit_points.py --part float8 --seeds 10,11 [--squares]
        [--decode] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

import xgemm
from xgemm.timing import scrub_pays, time_launches
from xgemm.tools import generalisation
from xgemm.tools.machine import measure_copy_bandwidth

#: Rungs 18 and 25 at 64 x 128 tiles (one consumer warpgroup), timed for both parts.
NARROW = (("wgmma_8bit", {"BM": 64, "CONSUMERS": 1, "BN": 128, "STAGES": 4}),
          ("wgmma_8bit", {"BM": 64, "CONSUMERS": 1, "BN": 128, "STAGES": 6}),
          ("wgmma_8bit_last_round", {"BM": 64, "CONSUMERS": 1, "BN": 128, "STAGES": 6}))

#: (variant, parameters): rung 18 at its default 128 x 256 tiles, at 128 x 128 (3 or 4
#: stages) and 256 x 128, C staged for a TMA store or not, and 64 x 128 (one consumer
#: warpgroup; 4 or 6 stages); rung 25 (rung 18 with tiles cut along K) at 128 x 256,
#: 128 x 128 and 64 x 128; rung 19 (int8 only) at 64 x 64.
POINTS = {
    "float8": (("wgmma_8bit", {}), ("wgmma_8bit", {"BN": 128, "STAGES": 4}),
               ("wgmma_8bit", {"BN": 128, "STAGES": 3}),
               ("wgmma_8bit", {"BN": 128, "STAGES": 4, "TMA_STORE": 0}),
               ("wgmma_8bit", {"BM": 256, "BN": 128, "STAGES": 3}),
               ("wgmma_8bit", {"TMA_STORE": 0}),
               ("wgmma_8bit_last_round", {}), ("wgmma_8bit_last_round", {"BN": 128, "STAGES": 4}),
               *NARROW),
    "int8": (("wgmma_8bit", {}), ("wgmma_8bit", {"BN": 128, "STAGES": 4}),
             ("wgmma_8bit", {"BM": 256, "BN": 128, "STAGES": 3}),
             ("wgmma_8bit", {"TMA_STORE": 0}),
             ("wgmma_8bit", {"BN": 128, "STAGES": 4, "TMA_STORE": 0}),
             ("wgmma_8bit_last_round", {}), ("wgmma_8bit_last_round", {"BN": 128, "STAGES": 4}),
             ("mma_int8", {}), ("mma_int8", {"BM": 64, "BN": 64, "WM": 32, "WN": 32}),
             ("mma_int8", {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "STAGES": 4}), *NARROW),
}


#: Rows (or columns) of C up to which rung 20's points are timed too.
FEW = 16


def label(variant: str, params: dict) -> str:
    short = {"wgmma_8bit": "r18", "mma_int8": "r19", "skinny": "r20",
             "wgmma_8bit_last_round": "r25"}[variant]
    return short + "".join(f" {k}{v}" for k, v in params.items()) if params else short


def skinny_points(m: int, n: int, dtype: str) -> list[tuple[str, dict]]:
    """Rung 20's points for a product of few rows (or, FEW_COLUMNS, few columns): BM the
    power of two that holds them, 2 to 16 splits (those its constraints allow)."""
    few = min(m, n)
    if few > FEW:
        return []
    skinny = xgemm.get_variant("skinny")
    points = []
    for splits in (2, 4, 8, 16):
        point = {"BM": 1 << (few - 1).bit_length(), "SPLITS": splits, "FEW_COLUMNS": int(n < m)}
        if not skinny.broken_rules({**skinny.defaults, **point}, dtype):
            points.append(("skinny", point))
    return points


def measure(part: str, m: int, n: int, k: int, generator: torch.Generator) -> dict:
    """One case's row: cuBLASLt's, auto's and each point's kernel milliseconds."""
    if part == "int8":
        a = torch.randint(-127, 128, (m, k), device="cuda", dtype=torch.int8,
                          generator=generator)
        b = torch.randint(-127, 128, (n, k), device="cuda", dtype=torch.int8,
                          generator=generator).T
        scale_a = scale_b = None

        def baseline() -> torch.Tensor:
            return torch._int_mm(a, b)
    else:
        a, b = (torch.randn(shape, device="cuda", generator=generator).to(torch.float8_e4m3fn)
                for shape in ((m, k), (n, k)))
        b = b.T
        scale_a = torch.rand((m, 1), device="cuda", generator=generator) + 0.5
        scale_b = torch.rand((1, n), device="cuda", generator=generator) + 0.5

        def baseline() -> torch.Tensor:
            return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    flush = scrub_pays(m * k + k * n + 4 * m * n, torch.cuda.current_device())

    def kernel_ms(call) -> float:
        return statistics.median(time_launches(call, repeat=10, flush_l2=flush))

    expected = a.double() @ b.double()
    if scale_a is not None:
        expected = scale_a.double() * expected * scale_b.double()
    row: dict = {"part": part, "case": f"{m}x{n}x{k}"}
    try:
        row["cublas_ms"] = kernel_ms(baseline)
    except RuntimeError:  # a shape cuBLASLt's 8-bit product does not take
        row["cublas_ms"] = None
    auto = xgemm.prepare(a, b, scale_a=scale_a, scale_b=scale_b)
    row["auto"] = label(auto.variant.name, {})
    row["auto_params"] = dict(auto.params)
    row["auto_ms"] = kernel_ms(auto)
    fmt = "int8" if part == "int8" else "float8_e4m3fn"
    for variant, params in (*POINTS[part], *skinny_points(m, n, fmt)):
        launch = xgemm.prepare(a, b, variant=variant, scale_a=scale_a, scale_b=scale_b,
                               **params)
        result = launch().double()
        error = float((result - expected).norm() / max(float(expected.norm()), 1e-30))
        if not error < 1e-2:
            raise SystemExit(f"{part} {row['case']} {variant} {params}: error {error:.2e}")
        if part == "int8" and not torch.equal(result, expected):
            raise SystemExit(f"{part} {row['case']} {variant} {params}: int32 sums not exact")
        row[label(variant, params)] = kernel_ms(launch)
    skinny = {name: ms for name, ms in row.items() if name.startswith("r20")}
    if skinny:
        best = min(skinny, key=skinny.__getitem__)
        row["skinny_best"], row["skinny_ms"] = best, skinny[best]
        row["skinny_gbs"] = max(m, n) * k / (skinny[best] * 1e-3) / 1e9  # the big operand
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=sorted(POINTS), required=True)
    parser.add_argument("--seeds", default="10,11")
    parser.add_argument("--squares", action="store_true", help="4096^3 and 8192^3 too")
    parser.add_argument("--decode", action="store_true", help="decode steps too")
    parser.add_argument("--json")
    args = parser.parse_args()
    generator = torch.Generator("cuda").manual_seed(1)
    shapes = [(c.m, c.n, c.k) for seed in map(int, args.seeds.split(",")) if seed
              for c in generalisation.eight_bit_cases(seed)]
    shapes += [(s, s, s) for s in (4096, 8192)] if args.squares else []
    shapes += [(rows, n, k) for rows in (1, 4, 8, 16)
               for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))] if args.decode else []
    copy_gbs = measure_copy_bandwidth()
    print(f"device-to-device copy: {copy_gbs:.0f} GB/s (read + written)")
    names = [label(*point) for point in POINTS[args.part]]
    print(f"{'case':>17} {'cuBLAS':>7} {'auto':>7} " + " ".join(f"{n:>22}" for n in names)
          + "  (kernel us) | rung 20's best: us, GB/s of the big operand, x copy")
    rows = []
    for shape in shapes:
        row = measure(args.part, *shape, generator)
        rows.append({**row, "copy_gbs": copy_gbs})
        cublas = f"{row['cublas_ms'] * 1e3:7.1f}" if row["cublas_ms"] else f"{'-':>7}"
        skinny = (f" | {row['skinny_best']}: {row['skinny_ms'] * 1e3:.1f} us, "
                  f"{row['skinny_gbs']:.0f} GB/s, {row['skinny_gbs'] / copy_gbs:.2f}"
                  if "skinny_ms" in row else "")
        print(f"{row['case']:>17} {cublas} {row['auto_ms'] * 1e3:7.1f} "
              + " ".join(f"{row[n] * 1e3:22.1f}" for n in names) + skinny, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
