"""The ``xgemm`` command: ``xgemm bench`` and ``xgemm plot``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

DEFAULT_SIZES = (128, 256, 512, 1024, 2048, 4096, 8192)


def _shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not MxNxK, e.g. 4097x31x1025") from None
    if min(m, n, k) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every dimension must be at least 1")
    return m, n, k


def _list(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xgemm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="time every variant against cuBLAS, in one run")
    bench.add_argument("--variants", type=_list, help="comma-separated names (default: all)")
    bench.add_argument("--sizes", type=lambda t: [int(x) for x in _list(t)],
                       help="square sizes, comma-separated (default: 128..8192, powers of 2)")
    bench.add_argument("--shapes", type=lambda t: [_shape(x) for x in _list(t)], default=[],
                       help="extra MxNxK shapes, comma-separated")
    bench.add_argument("--dtype", default="float32", choices=["float32"])
    bench.add_argument("--repeat", type=int, default=30, help="timed launches per point")
    bench.add_argument("--warmup", type=int, default=3, help="untimed launches first")
    _outputs(bench)

    plot = sub.add_parser("plot", help="draw the figures from a saved --json")
    plot.add_argument("json", help="a file written by xgemm bench --json")
    _outputs(plot, with_json=False)
    return parser


def _outputs(parser: argparse.ArgumentParser, with_json: bool = True) -> None:
    if with_json:
        parser.add_argument("--json", help="write machine and results as JSON")
    parser.add_argument("--csv", help="write the results as CSV")
    parser.add_argument("--plot", help="write TFLOP/s against size as a PNG")
    parser.add_argument("--roofline", help="write a roofline PNG")


def _progress(total: int):
    """A tqdm bar on stderr when it is a terminal and tqdm is installed; else None."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, file=sys.stderr, unit="point", leave=False)


def _bench(args: argparse.Namespace) -> int:
    os.environ["CUPY_TF32"] = "0"  # cuBLAS in exact float32, like the kernels
    from .registry import get_variant, variants

    names = args.variants or variants()
    for name in names:
        get_variant(name)  # an unknown name fails here, with suggestions, before any work
    shapes = [(s, s, s) for s in (args.sizes or ([] if args.shapes else DEFAULT_SIZES))]
    shapes += args.shapes

    from .gpu import gpu_unavailable

    reason = gpu_unavailable()
    if reason:
        print(f"xgemm bench: {reason}; the benchmark needs a CUDA GPU", file=sys.stderr)
        return 2

    from . import bench

    machine = bench.machine_info()
    results: list[bench.Result] = []
    bar = _progress(len(shapes) * (len(names) + 1))
    interrupted = False
    try:
        for result in bench.iterate(names, shapes, warmup=args.warmup, repeat=args.repeat):
            results.append(result)
            if bar is not None:
                bar.set_postfix_str(f"{result.variant} {result.shape}")
                bar.update()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if bar is not None:
            bar.close()
    _report(results, machine, args)
    if interrupted:
        print(f"interrupted: {len(results)} of {len(shapes) * (len(names) + 1)} points measured",
              file=sys.stderr)
        return 130
    return 0 if all(r.ok for r in results) else 1


def _report(results, machine, args: argparse.Namespace) -> None:
    from . import bench

    if getattr(args, "json", None):
        bench.write_json(args.json, results, machine)
    if args.csv:
        bench.write_csv(args.csv, results, machine)
    if args.plot or args.roofline:
        from . import plots

        if args.plot:
            plots.plot_tflops(results, machine, args.plot)
        if args.roofline:
            plots.plot_roofline(results, machine, args.roofline)
    print(bench.table(results, machine))


def _plot(args: argparse.Namespace) -> int:
    from . import bench

    machine, results = bench.read_json(args.json)
    _report(results, machine, args)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``xgemm`` command.

    Example:
        >>> main(["bench", "--variants", "tiled", "--sizes", "1024"])  # doctest: +SKIP
    """
    args = _parser().parse_args(argv)
    try:
        return {"bench": _bench, "plot": _plot}[args.command](args)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"xgemm {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
