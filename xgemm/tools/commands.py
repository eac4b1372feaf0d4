"""What each ``xgemm`` command does, given its parsed arguments (``cli`` parses them):
``run_bench`` (and its suites, the memory-bound families and the call cost), ``run_plot``,
``run_sweep``, ``run_tune``, ``run_report`` and ``run_calibrate``. Each returns the exit
status.

Example:
    >>> from xgemm.tools import cli, commands
    >>> commands.run_report(cli.parser().parse_args(["report", "--check"]))  # doctest: +SKIP
    0
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .machine import machine_info
from .results import OWN_SUITES, own_suite, save_json

#: The square sizes ``xgemm bench`` runs where none are given.
DEFAULT_SIZES = (128, 256, 512, 1024, 2048, 4096, 8192)


def shape_argument(text: str) -> tuple[int, int, int]:
    """An MxNxK argument; argparse.ArgumentTypeError naming the problem where it is not one."""
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not MxNxK, e.g. 4097x31x1025") from None
    if min(m, n, k) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every dimension must be at least 1")
    return m, n, k


def case_argument(text: str) -> tuple[int, int, int, int, str]:
    """A --shapes case (``bench.parse_case``), its errors as argparse.ArgumentTypeError."""
    from .bench import parse_case

    try:
        return parse_case(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def need_gpu(command: str) -> bool:
    from ..gpu import gpu_unavailable

    reason = gpu_unavailable()
    if reason:
        print(f"xgemm {command}: {reason}; it needs a CUDA GPU", file=sys.stderr)
    return reason is None


def run_sweep(args: argparse.Namespace) -> int:
    if args.family:
        os.environ["CUPY_TF32"] = "0"
        return _sweep_family(args)
    from ..registry import get_variant
    from .tuning import expand, sweep

    # a TF32 rung is measured against cuBLAS in TF32, exact ones against exact cuBLAS
    tf32 = get_variant(args.variant).precision == "tf32"
    os.environ["CUPY_TF32"] = "1" if tf32 else "0"

    try:
        shape = shape_argument(args.shape)
    except argparse.ArgumentTypeError as exc:
        _usage_error(str(exc), "sweep")
    expand(args.variant, args.space)  # unknown names fail here, before any work
    if not need_gpu("sweep"):
        return 2
    results = sweep(args.variant, *shape, space=args.space, strategy=args.strategy,
                    max_points=args.max_points, seconds=args.seconds, dtype=args.dtype)
    if args.csv:
        results.to_csv(args.csv)
    print(results.table())
    return 0 if results.best is not None else 1


def _sweep_family(args: argparse.Namespace) -> int:
    from ..registry import get_variant

    if args.space or args.strategy != "exhaustive" or args.max_points or args.seconds \
            or args.csv:
        _usage_error("--family sweeps every point of the declared space; --space, "
                     "--strategy, --max-points, --seconds and --csv are for the GEMMs", "sweep")
    get_variant(args.variant, args.family)  # an unknown name fails here, with suggestions
    shape = _input_shape(args.shape, "sweep")
    if not need_gpu("sweep"):
        return 2
    from . import bandwidth

    rows = bandwidth.sweep(args.family, args.variant, shape, args.dtype)
    print(bandwidth.table(rows))
    return 0 if any(r.ok for r in rows[2:]) else 1


def run_tune(args: argparse.Namespace) -> int:
    os.environ["CUPY_TF32"] = "0"
    from ..registry import get_variant
    from ..tunefile import cache_path, tune_cache
    from .tuning import SweepResults, tune

    for name in args.variants or []:
        get_variant(name)
    if args.clear:
        tune_cache().clear()
        print(f"cleared {cache_path()}")
    if not args.shapes:
        return 0
    if not need_gpu("tune"):
        return 2
    everything = SweepResults()
    summary = []
    for m, n, k in args.shapes:
        results = tune(m, n, k, variants=args.variants, strategy=args.strategy,
                       max_points=args.max_points, seconds=args.seconds)
        everything.extend(results)
        summary.append(results.best)
    if args.csv:
        everything.to_csv(args.csv)
    from .bench import table

    print(f"best per shape, remembered in {cache_path()}:")
    print(table([r for r in summary if r is not None]))
    return 0 if all(r is not None for r in summary) else 1


def _progress(total: int):
    """A tqdm bar on stderr when it is a terminal and tqdm is installed; else None."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, file=sys.stderr, unit="point", leave=False)


def _input_shape(text: str, command: str = "bench") -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.lower().split("x"))
    except ValueError:
        _usage_error(f"{text!r} is not an input shape like 8192x8192 or 268435456", command)


def _usage_error(message: str, command: str = "bench"):
    """As argparse does with a bad argument: the message on stderr, exit status 2."""
    print(f"xgemm {command}: {message}", file=sys.stderr)
    raise SystemExit(2)


def _bench_family(args: argparse.Namespace) -> int:
    from ..registry import get_variant

    if args.sizes or args.precision or args.csv or args.plot or args.roofline:
        _usage_error("--family takes its cases from --shapes (RxC or N) and writes --json; "
                     "--sizes, --precision, --csv, --plot and --roofline are for the GEMMs")
    names = args.variants or None
    for name in names or []:
        get_variant(name, args.family)  # an unknown name fails here, with suggestions
    if not need_gpu("bench"):
        return 2
    from . import bandwidth

    shapes = [_input_shape(t) for t in args.shapes] or bandwidth.DEFAULT_SHAPES[args.family]
    rows = list(bandwidth.iterate(args.family, shapes, args.dtype, names, warmup=args.warmup,
                                  repeat=args.repeat))
    if getattr(args, "json", None):
        save_json(args.json, bandwidth.to_json(rows))
    print(bandwidth.table(rows))
    return 0 if all(r.ok for r in rows) else 1


def _bench_overhead(args: argparse.Namespace) -> int:
    if args.family or args.sizes or args.shapes or args.variants or args.precision \
            or args.csv or args.plot or args.roofline:
        _usage_error("--overhead measures its own cases; it takes --json only")
    if not need_gpu("bench"):
        return 2
    from . import overhead

    machine = machine_info(measure=False)
    host = overhead.host_rows()
    queued = overhead.queued_rows()
    if args.json:
        save_json(args.json, {"machine": machine, "host_us": host, "queued_ms": queued})
    print(f"host microseconds per call (plan cached), {machine['gpu']}:")
    print(overhead.table(host))
    print("\nqueued milliseconds per call (50 calls between two events):")
    print(overhead.table(queued))
    return 0


def _bench_generalisation(args: argparse.Namespace) -> int:
    if args.family or args.sizes or args.shapes or args.variants or args.overhead \
            or args.csv or args.plot or args.roofline:
        _usage_error(f"--suite {args.suite} draws its own cases; it takes --dtype, "
                     "--precision, --seed, --count, --min-dim, --min-k, --max-k, --max-m, "
                     "--max-n, --min-m, --multiple, "
                     "--no-regret, --repeat and --json")
    if args.precision and args.dtype not in (None, "float32"):
        _usage_error(f"--precision {args.precision} is for float32: leave out --dtype "
                     f"{args.dtype}")
    part = args.precision or args.dtype
    if part in ("float8", "int8") and (args.suite != "random" or args.precision
                                       or args.min_dim != 1 or args.max_k is not None
                                       or args.min_k is not None
                                       or args.max_m is not None or args.max_n is not None
                                       or args.min_m is not None or args.multiple != 1):
        _usage_error(f"--dtype {part} runs --suite random only, without --precision, "
                     "--min-dim, --min-k, --max-k, --max-m, --max-n, --min-m or --multiple")
    if args.multiple < 1:
        _usage_error(f"--multiple {args.multiple}: give a positive multiple (1: as drawn)")
    if args.min_k is not None and not 1 <= args.min_k <= (args.max_k or args.min_k):
        _usage_error(f"--min-k {args.min_k}: give a positive K no larger than --max-k")
    if args.max_m is not None and args.max_m < max(1, args.min_dim):
        _usage_error(f"--max-m {args.max_m}: give a count of rows from --min-dim up")
    if args.max_n is not None and args.max_n < max(1, args.min_dim):
        _usage_error(f"--max-n {args.max_n}: give a count of columns from --min-dim up")
    from .generalisation import MAX_DIM

    if args.min_m is not None and not max(1, args.min_dim) <= args.min_m <= MAX_DIM:
        _usage_error(f"--min-m {args.min_m}: give a count of rows from --min-dim to {MAX_DIM}")
    if args.min_m is not None and args.max_m is not None:
        _usage_error("--min-m and --max-m: give one (a stratum of many rows, or of few)")
    os.environ["CUPY_TF32"] = "1" if part == "tf32" else "0"
    if not need_gpu("bench"):
        return 2
    from . import generalisation, overhead

    # how the sample was drawn, saved with it: a stratum's file says which stratum it is
    draw: dict = {}
    if args.suite == "random" and part in generalisation.EIGHT_BIT_PARTS:
        cases, seed = generalisation.eight_bit_cases(args.seed, args.count), args.seed
        draw = {"seed": seed, "count": args.count}
    elif args.suite == "random":
        draw = {"seed": args.seed, "count": args.count, "min_dim": args.min_dim,
                "max_k": args.max_k, "multiple": args.multiple, "max_m": args.max_m,
                "min_k": args.min_k, "max_n": args.max_n, "min_m": args.min_m}
        cases = generalisation.random_cases(**draw)
        seed = args.seed
    else:
        cases, seed = generalisation.model_cases(), None
    machine = machine_info(measure=False)
    bar = _progress(len(cases))
    rows: list = []

    def save() -> None:  # after every row: a run cut short keeps what it measured
        if bar:
            bar.update()
        if args.json:
            save_json(args.json, {"machine": machine, "suite": args.suite, "part": part,
                                    **({"draw": draw} if draw else {}),
                                    "summary": generalisation.summary(rows, seed),
                                    "rows": rows})

    generalisation.run(part, cases, regret=args.regret, repeat=min(args.repeat, 10),
                       rows=rows, progress=save)
    if bar:
        bar.close()
    summary = generalisation.summary(rows, seed)
    columns = ("case", "variant", "auto_ms", "cublas_ms", "x_kernel", "x_call", "regret",
               "status")
    print(overhead.table([{c: r.get(c) for c in columns} for r in rows]))
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in summary.items()))
    # a shape the baseline refuses (an 8-bit part's) is no failure of auto's
    return 0 if all(row.get("status") == "ok" or row.get("status", "").startswith(
        "no baseline") for row in rows) else 1


def _bench_torch_suite(args: argparse.Namespace) -> int:
    if args.family or args.sizes or args.shapes or args.variants or args.precision \
            or args.overhead or args.csv or args.plot or args.roofline:
        _usage_error("--suite torch measures its own model; it takes --dtype and --json only")
    # no --dtype: both 16-bit types
    dtypes = ["bfloat16", "float16"] if args.dtype is None else \
        [args.dtype] if args.dtype in ("bfloat16", "float16") else None
    if dtypes is None:
        _usage_error(f"--suite torch runs in bfloat16 or float16, not {args.dtype}")
    if not need_gpu("bench"):
        return 2
    from . import torch_suite

    return _own_cases(args, "torch_suite", len(dtypes) * len(torch_suite.CASES),
                      functools.partial(torch_suite.run, dtypes), torch_suite.table)


def _own_cases(args: argparse.Namespace, key: str, cases: int, run: Callable[..., list],
               table: Callable[[list], str]) -> int:
    """Run a suite of its own cases (``run``, a row a case, a bar over the ``cases``),
    write its rows under ``key`` in --json's file, print its table."""
    machine = machine_info(measure=False)
    bar = _progress(cases)
    rows = run(progress=(lambda row: bar.update(1)) if bar else None)
    if bar:
        bar.close()
    if args.json:
        save_json(args.json, {"machine": machine, key: rows})
    print(table(rows))
    return 0


def _bench_own_cases(args: argparse.Namespace) -> int:
    """--suite grouped (mixture-of-experts products against F.grouped_mm, bfloat16) or
    tf32x3 (float32 as three TF32 products against SGEMM)."""
    if args.family or args.sizes or args.shapes or args.variants or args.precision \
            or args.overhead or args.csv or args.plot or args.roofline \
            or args.dtype not in (None, own_suite(args.suite).DTYPE):
        _usage_error(f"--suite {args.suite} measures its own cases; it takes --json only")
    os.environ["CUPY_TF32"] = "0"  # before CuPy's first float32 product: SGEMM
    if not need_gpu("bench"):
        return 2
    suite = own_suite(args.suite)
    return _own_cases(args, f"{args.suite}_suite", suite.ROWS, suite.run, suite.table)


def _bench_suite(args: argparse.Namespace) -> int:
    if args.suite == "torch":
        return _bench_torch_suite(args)
    if args.suite in OWN_SUITES:
        return _bench_own_cases(args)
    args.dtype = args.dtype or "float32"
    if args.suite in ("random", "models"):
        return _bench_generalisation(args)
    if args.family or args.sizes or args.shapes or args.variants or args.precision \
            or args.overhead or args.csv or args.plot or args.roofline:
        _usage_error("--suite measures its own cases; it takes --repeat and --json only")
    # before CuPy's first float32 product, which fixes its compute type for the process
    os.environ["CUPY_TF32"] = "1" if args.suite == "tf32" else "0"
    if not need_gpu("bench"):
        return 2
    from . import overhead, suite

    machine = machine_info(measure=False)
    rows = suite.run(args.suite, repeat=args.repeat)
    if args.json:
        save_json(args.json, {"machine": machine, "suite": rows})
    print(overhead.table(rows))
    return 0 if all(row.get("status") == "ok" for row in rows) else 1


def run_bench(args: argparse.Namespace) -> int:
    if args.suite:
        return _bench_suite(args)
    args.dtype = args.dtype or "float32"
    if args.dtype in ("float8", "int8"):
        _usage_error(f"--dtype {args.dtype} is for --suite random (xgemm.tools.suite's 8-bit "
                     "parts: --suite float8 or int8)")
    if args.overhead:
        return _bench_overhead(args)
    if args.family:
        return _bench_family(args)
    # cuBLAS in exact float32, like the kernels, or in TF32 against the TF32 rungs
    os.environ["CUPY_TF32"] = "1" if args.precision == "tf32" else "0"
    from ..registry import get_variant, variants

    names = args.variants or ["auto"] * bool(args.precision) + [
        name for name in variants() if get_variant(name).precision == args.precision
        and args.dtype in get_variant(name).dtypes]  # by default, what takes this dtype
    for name in names:
        if name != "auto":
            get_variant(name)  # an unknown name fails here, with suggestions, before any work
    shapes = [(s, s, s, 1, "NN")
              for s in (args.sizes or ([] if args.shapes else DEFAULT_SIZES))]
    try:
        shapes += [case_argument(t) for t in args.shapes]
    except argparse.ArgumentTypeError as exc:
        _usage_error(str(exc))
    if not need_gpu("bench"):
        return 2

    from . import bench

    machine = machine_info()
    results: list[bench.Result] = []
    bar = _progress(len(shapes) * (len(names) + 1))
    interrupted = False
    try:
        for result in bench.iterate(names, shapes, dtype=args.dtype, warmup=args.warmup,
                                    repeat=args.repeat, precision=args.precision):
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


def run_plot(args: argparse.Namespace) -> int:
    from . import bench

    machine, results = bench.read_json(args.json)
    _report(results, machine, args)
    return 0


def run_report(args: argparse.Namespace) -> int:
    from . import report

    readme = args.readme or "README.md"
    if args.check:
        diff = report.check(args.readme, args.results)
        if diff:
            print(diff, end="")
            where = "".join(f" --{flag} {value}" for flag, value in
                            (("results", args.results), ("readme", args.readme)) if value)
            print(f"{readme} differs from the results: run `xgemm report{where} --write`",
                  file=sys.stderr)
        return 1 if diff else 0
    if args.write:
        changed = report.write(args.readme, args.results)
        print(f"{readme} rewritten" if changed else f"{readme} already agrees with the results")
        return 0
    regions = report.render(report.load(args.results or report.REPO / report.RESULTS),
                            Path(args.readme).parent if args.readme else report.REPO)
    for name in report.REGIONS:
        print(f"<!-- xgemm report: {name} -->\n{regions[name]}\n<!-- end -->\n")
    return 0


def run_calibrate(args: argparse.Namespace) -> int:
    from .. import calibrate
    from .results import load_json

    if args.copies_sampled and not args.copies:
        _usage_error("--copies-sampled says what the samples' copies cost; --copies must say "
                     "what a copy costs now", "calibrate")
    if args.add_to and (args.bandwidth or args.copies or args.copies_sampled or args.host):
        _usage_error("--add-to keeps its file's bandwidth, copies and host costs (the new "
                     "points are fitted with them): leave out the options that set them",
                     "calibrate")
    rows, machine = [], {}
    for path in args.json:
        data = load_json(path)
        rows += data.get("rows", [])
        machine = data.get("machine", machine)
    bandwidth = args.bandwidth or (machine.get("copy_bandwidth_gbs") or 3000.0) * 1e9
    copies, sampled = (calibrate.copy_constants(load_json(path)) if path else None
                       for path in (args.copies, args.copies_sampled))
    base = load_json(args.add_to) if args.add_to else None
    if base:
        bandwidth, copies = base["bandwidth"], calibrate.copy_constants(base)
    cal, errors = calibrate.fit(rows, machine.get("gpu", "unknown"),
                           machine.get("sm_count") or 132, bandwidth, copies=copies,
                           sampled_copies=sampled)
    if args.host:
        host = load_json(args.host)
        cal.call_host, cal.copy_host = host["call_host_us"] * 1e-6, host["copy_host_us"] * 1e-6
    data = cal.to_json()
    data["fitted_on"] = [os.path.basename(p) for p in
                         (*args.json, args.copies, args.copies_sampled, args.host) if p]
    data["rms_log_error"] = errors
    if base:
        data = calibrate.extended(base, data, os.path.basename(args.add_to))
    save_json(args.out, data)
    fitted = sum(len(points) for points in cal.points.values())
    print(f"{fitted} candidates fitted from {len(rows)} rows -> {args.out}")
    return 0
