"""The ``xgemm`` command: its arguments (``parser``) for ``xgemm bench``, ``plot``,
``sweep``, ``tune``, ``report`` and ``calibrate``, and its entry point (``main``). What
each command does is in ``commands``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .commands import (
    run_bench,
    run_calibrate,
    run_plot,
    run_report,
    run_sweep,
    run_tune,
    shape_argument,
)
from .results import OWN_SUITES
from .suite import PARTS


def _list(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xgemm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="time every variant against cuBLAS, in one run")
    bench.add_argument("--variants", type=_list,
                       help="comma-separated names, 'auto' among them (default: all)")
    bench.add_argument("--sizes", type=lambda t: [int(x) for x in _list(t)],
                       help="square sizes, comma-separated (default: 128..8192, powers of 2)")
    bench.add_argument("--shapes", type=_list, default=[],
                       help="extra cases, comma-separated: MxNxK, BxMxNxK (a batch of B), "
                            "either with :NT, :TN or :TT (A, B transposed views), "
                            "e.g. 64x512x512x64,4096x4096x4096:NT; with --family, input "
                            "shapes: RxC (transpose, stencil) or N (reverse, sum)")
    bench.add_argument("--family", choices=["transpose", "reverse", "sum", "stencil"],
                       help="bench a memory-bound family instead: effective bandwidth "
                            "against a device copy of the same bytes and against CuPy")
    bench.add_argument("--overhead", action="store_true",
                       help="what a call costs besides its kernel: host microseconds per "
                            "call (64^3, float32/float16/bfloat16, CuPy and PyTorch inputs, "
                            "with and without out=) and queued time per call (1024^3, "
                            "16x4096x4096), beside cupy.matmul and torch.matmul")
    bench.add_argument("--suite", choices=(*PARTS, "random", "models", "torch", *OWN_SUITES),
                       help="auto against cuBLAS on one part of the practitioner's suite "
                            "(xgemm.tools.suite): kernel time and queued time per call; 'random' "
                            "(a seeded sample of shapes) and 'models' (public models' "
                            "linears) in --dtype (--precision tf32), with auto's regret "
                            "(xgemm.tools.generalisation); 'torch': a decoder's prefill, "
                            "decode and training step on xgemm's linears against PyTorch's, "
                            "in bfloat16 and float16, or --dtype of them "
                            "(xgemm.tools.torch_suite); 'grouped': mixture-of-experts "
                            "layers' grouped products against F.grouped_mm "
                            "(xgemm.tools.grouped_suite); 'tf32x3': float32 as three TF32 "
                            "products against SGEMM, time and error "
                            "(xgemm.tools.tf32x3_suite)")
    bench.add_argument("--seed", type=int, default=1, help="--suite random: the sample's seed")
    bench.add_argument("--count", type=int, default=36,
                       help="--suite random: how many shapes")
    bench.add_argument("--min-dim", type=int, default=1,
                       help="--suite random: the smallest M, N and K drawn (a stratum of "
                            "large shapes for calibration: 512)")
    bench.add_argument("--max-k", type=int, default=None,
                       help="--suite random: draw K from 1 to this (a stratum of tiny-K "
                            "shapes for calibration: 16)")
    bench.add_argument("--min-k", type=int, default=None,
                       help="--suite random: draw K from this up (to --max-k: a stratum of "
                            "short K over large outputs for calibration: 256 to 2048)")
    bench.add_argument("--max-m", type=int, default=None,
                       help="--suite random: draw M from --min-dim to this, unrounded (a "
                            "stratum of few rows for calibration: 64, with --multiple 64)")
    bench.add_argument("--max-n", type=int, default=None,
                       help="--suite random: draw N from --min-dim to this, unrounded (with "
                            "--max-m and --min-k, a stratum of few tiles over long K)")
    bench.add_argument("--min-m", type=int, default=None,
                       help="--suite random: draw M from this up (with --max-n, a stratum "
                            "of few columns under many rows for calibration: 1024 and 32)")
    bench.add_argument("--multiple", type=int, default=1,
                       help="--suite random: round M, N and K up to multiples of this (a "
                            "stratum of aligned shapes for calibration: 16)")
    bench.add_argument("--no-regret", dest="regret", action="store_false",
                       help="--suite random/models: time auto and cuBLAS only, not every "
                            "candidate (no regret)")
    bench.add_argument("--dtype", default=None,
                       choices=["float32", "float64", "float16", "bfloat16", "float8", "int8"],
                       help="float32 unless given (--suite torch: both 16-bit types); float8 "
                            "(e4m3, row and column scales) and int8: --suite random only, "
                            "against torch._scaled_mm / torch._int_mm, no regret")
    bench.add_argument("--precision", choices=["tf32", "tf32x3"],
                       help="tf32: cuBLAS in TF32 (CUPY_TF32=1), auto with precision='tf32', "
                            "and by default the TF32 variants (the default is exact float32, "
                            "TF32 variants only by name); tf32x3: auto with "
                            "precision='tf32x3' and the 3xTF32 variants against cuBLAS's "
                            "exact SGEMM")
    bench.add_argument("--repeat", type=int, default=30, help="timed launches per point")
    bench.add_argument("--warmup", type=int, default=3, help="untimed launches first")
    _outputs(bench)

    sweep = sub.add_parser("sweep", help="time every point of one variant's space")
    sweep.add_argument("variant")
    sweep.add_argument("--shape", required=True,
                       help="MxNxK; with --family the input's shape, RxC or N")
    sweep.add_argument("--family", choices=["transpose", "reverse", "sum", "stencil"],
                       help="sweep a variant of a memory-bound family (bandwidth)")
    sweep.add_argument("--dtype", default="float32",
                       choices=["float32", "float64", "float16", "bfloat16"])
    sweep.add_argument("--space", type=_space, default={},
                       help="values to walk instead of the declared ones, e.g. 'BM=64,128;TM=4,8'")
    _strategy(sweep)
    sweep.add_argument("--csv", help="write every point as CSV")

    tune = sub.add_parser("tune", help="find and remember the fastest variant per shape")
    tune.add_argument("--shapes", type=lambda t: [shape_argument(x) for x in _list(t)], default=[],
                      help="MxNxK shapes, comma-separated")
    tune.add_argument("--variants", type=_list, help="comma-separated names (default: all)")
    tune.add_argument("--clear", action="store_true", help="empty the tuning file first")
    tune.add_argument("--csv", help="write every point of every shape as CSV")
    _strategy(tune)

    calibrate = sub.add_parser(
        "calibrate", help="fit the cost model's constants from suites with regret",
        description="Fit auto's cost model (xgemm.cost) to every candidate's time in "
        "`xgemm bench --suite random --json` runs (each part of one seed, regret on), and "
        "write the GPU's calibration file. Needs no GPU. Point XGEMM_CALIBRATION at the "
        "file to use it.")
    calibrate.add_argument("json", nargs="+", help="suite files written by --suite random")
    calibrate.add_argument("--out", required=True, help="the calibration file to write")
    calibrate.add_argument("--bandwidth", type=float,
                           help="the GPU's DRAM bandwidth, bytes/s (default: the files' "
                                "measured copy bandwidth, else 3.0e12)")
    calibrate.add_argument("--copies",
                           help="a padded copy's constants from this file, written by "
                                "bench/pad_copy.py (default: fitted to the padded candidates)")
    calibrate.add_argument("--copies-sampled",
                           help="the constants, from a file like --copies', of the copy the "
                                "suite files' padded times include, where a faster copy has "
                                "replaced it since: candidates are fitted with these, and the "
                                "calibration prices copies with --copies'")
    calibrate.add_argument("--add-to",
                           help="a calibration file to extend: of the points fitted (with "
                                "its bandwidth and copies), those it has no constants for are "
                                "added; the rest of it is kept (a GPU's new candidates, timed "
                                "there)")
    calibrate.add_argument("--host",
                           help="the host's time a call and a copy's launch adds, from this "
                                "file, written by bench/host_costs.py (default: none: calls "
                                "priced by their GPU time alone)")

    plot = sub.add_parser("plot", help="draw the figures from a saved --json")
    plot.add_argument("json", help="a file written by xgemm bench --json")
    _outputs(plot, with_json=False)

    report = sub.add_parser("report", help="render README.md's tables from bench/results/<gpu>/",
                            description="Render README.md's generated regions (the ladder, "
                            "the machine, the figures, the call cost) from the result files. "
                            "Needs no GPU.")
    report.add_argument("--results", help="the results directory (default: the repository's "
                                          "bench/results/h100)")
    report.add_argument("--readme", help="the README to check or write (default: the "
                                         "repository's README.md)")
    mode = report.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="exit 1 with a diff where README differs from what the results render")
    mode.add_argument("--write", action="store_true", help="rewrite README's regions")
    return parser


def _space(text: str) -> dict[str, list[int]]:
    space = {}
    for part in text.split(";"):
        if not part.strip():
            continue
        name, _, values = part.partition("=")
        try:
            space[name.strip()] = [int(v) for v in values.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not NAME=V1,V2,... (e.g. 'BM=64,128;TM=4,8')") from None
    return space


def _strategy(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strategy", choices=["exhaustive", "random"], default="exhaustive")
    parser.add_argument("--max-points", type=int, help="time at most this many points")
    parser.add_argument("--seconds", type=float, help="stop timing new points after this long")


def _outputs(parser: argparse.ArgumentParser, with_json: bool = True) -> None:
    if with_json:
        parser.add_argument("--json", help="write machine and results as JSON")
    parser.add_argument("--csv", help="write the results as CSV")
    parser.add_argument("--plot", help="write TFLOP/s against size as a PNG")
    parser.add_argument("--roofline", help="write a roofline PNG")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``xgemm`` command.

    Example:
        >>> main(["bench", "--variants", "tiled", "--sizes", "1024"])  # doctest: +SKIP
    """
    args = parser().parse_args(argv)
    try:
        commands = {"bench": run_bench, "plot": run_plot, "sweep": run_sweep,
                    "tune": run_tune, "report": run_report, "calibrate": run_calibrate}
        return commands[args.command](args)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"xgemm {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
