"""README.md's generated parts, rendered from the benchmark's result files.

``bench/results/<gpu>/`` holds one benchmark run, as ``bench/run_canonical.sh`` writes it:
a JSON per dtype (``xgemm bench --dtype D --json``; the TF32 rungs' run,
``--precision tf32``, as its own column), the call cost (``xgemm bench --overhead
--json``) and the figures (PNG); ``results.load`` reads it. The file names do not matter:
each JSON says what it holds (a bench run's dtype, a TF32 rung or ``"precision": "tf32"``
among its records, or the call cost's ``host_us``). Several runs of one dtype are read
together, each rung's figure from the last file (by name) that measured it.

README.md marks each generated region::

    <!-- xgemm report: ladder -->
    ...
    <!-- end -->

with the regions ``ladder`` (one row per rung, in ladder order: ``ladder_table``),
``machine`` (what the results were measured on), ``figures``, ``call_cost``, ``suite``
(``auto`` against cuBLAS on the practitioner's cases, ``xgemm bench --suite``),
``generalisation``, ``training`` (``examples/train_gpt.py``'s runs, under ``training/``)
and ``torch_suite`` (a decoder on xgemm's linears, ``--suite torch``). ``xgemm report
--check`` fails with a diff where README.md differs from what the results render;
``xgemm report --write`` rewrites the regions. Nothing here needs
CuPy or a GPU.

Example:
    >>> from xgemm.tools import report
    >>> results = report.load("bench/results/h100")  # doctest: +SKIP
    >>> print(report.ladder_table(results))  # doctest: +SKIP
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import markdown
from .ladder_table import escape, ladder_table  # (which registers the ladder)
from .results import OWN_SUITES, Results, load, own_suite
from .suite import PARTS, geomean

#: The repository xgemm is imported from (README.md and bench/ beside the package).
REPO = Path(__file__).resolve().parents[2]
#: The results README.md is rendered from, relative to the repository.
RESULTS = Path("bench") / "results" / "h100"
#: The regions README.md may mark, in the order ``xgemm report`` prints them.
REGIONS = ("ladder", "machine", "figures", "call_cost", "suite", "generalisation", "training",
           "torch_suite")
#: examples/train_gpt.py's modes, in the training table's order.
TRAINING_MODES = ("eager", "compile", "cudagraphs")

_REGION = re.compile(r"(<!-- xgemm report: (\w+) -->\n)(.*?)(<!-- end -->)", re.S)


# -- the machine -------------------------------------------------------------------------
def _cuda(version: Any) -> str:
    return f"{version // 1000}.{version % 1000 // 10}" if isinstance(version, int) else str(version)


def _values(labelled: Sequence[tuple[str, Any]], show=str) -> str:
    """One value, or each distinct value with the files it came from."""
    groups: dict[str, list[str]] = {}
    for label, value in labelled:
        groups.setdefault(show(value), []).append(label)
    if len(groups) == 1:
        return next(iter(groups))
    return ", ".join(f"{value} ({', '.join(labels)})" for value, labels in groups.items())


def machine_line(results: Results, readme_dir: str | os.PathLike[str] = REPO) -> str:
    """What the results were measured on: GPU, clocks, ceilings, driver, CUDA, CuPy, the
    commit (where recorded), and the files.

    >>> machine_line(Results(Path("bench/results/none")), ".")
    'No results in `bench/results/none/`.'
    """
    where = _relative(results.directory, readme_dir)
    sources = [(run.path.name, run.machine) for run in results.runs]
    if results.call_cost is not None and results.call_cost_path is not None:
        sources.append((results.call_cost_path.name, results.call_cost.get("machine", {})))
    if not sources:
        return f"No results in `{where}/`."

    def field_(key: str, show=str) -> str:
        have = [(name, m[key]) for name, m in sources if m.get(key) is not None]
        return _values(have, show) if have else ""

    gpu = field_("gpu")
    facts = []
    if field_("compute_capability"):
        facts.append("sm_" + field_("compute_capability", lambda v: str(v).replace(".", "")))
    if field_("sm_count"):
        facts.append(field_("sm_count") + " SMs")
    if field_("max_sm_clock_mhz"):
        facts.append(field_("max_sm_clock_mhz", lambda v: f"{v:.0f}") + " MHz")
    if field_("fp32_peak_tflops"):
        facts.append("FP32 peak " + field_("fp32_peak_tflops", lambda v: f"{v:.1f}")
                     + " TFLOP/s")
    bandwidths = [m["copy_bandwidth_gbs"] for _, m in sources if m.get("copy_bandwidth_gbs")]
    if bandwidths:
        lo, hi = f"{min(bandwidths) / 1000:.2f}", f"{max(bandwidths) / 1000:.2f}"
        facts.append(f"device copy {lo if lo == hi else lo + '-' + hi} TB/s")
    software = []
    for key, label, show in (("driver", "driver", str), ("cuda_runtime", "CUDA runtime", _cuda),
                             ("cupy", "CuPy", str), ("python", "Python", str)):
        if field_(key):
            software.append(f"{label} {field_(key, show)}")
    text = f"Measured on an {gpu}" if gpu else "Measured"
    text += f" ({', '.join(facts)})" if facts else ""
    text += f" with {', '.join(software)}" if software else ""
    commit = field_("commit")
    text += f", commit {commit}" if commit else ""
    files = ", ".join(f"`{name}`" for name, _ in sources)
    return text + f"; from {files} in `{where}/`."


def _relative(path: Path, start: str | os.PathLike[str]) -> str:
    return Path(os.path.relpath(Path(path).resolve(), Path(start).resolve())).as_posix()


# -- figures and the call cost -----------------------------------------------------------
def figures(results: Results, readme_dir: str | os.PathLike[str] = REPO) -> str:
    """Markdown images of the figures in the results directory.

    >>> figures(Results(Path(".")))
    ''
    """
    lines = []
    for path in results.figures:
        column, _, kind = path.stem.partition("_")
        what = "roofline from the measured ceilings" if kind == "roofline" else \
            "TFLOP/s against size, every rung and cuBLAS" if not kind else path.stem
        lines.append(f"![{column}: {what}]({_relative(path, readme_dir)})")
    return "\n\n".join(lines)


_HOST = {"xgemm_cupy_us": "xgemm (CuPy in)", "cupy.matmul_us": "cupy.matmul",
         "xgemm_torch_us": "xgemm (PyTorch in)", "torch.matmul_us": "torch.matmul",
         "xgemm_op_us": "torch.ops.xgemm.matmul", "xgemm_grad_us": "xgemm.torch, recording"}
_QUEUED = {"variant": "auto runs", "kernel_ms": "kernel ms", "xgemm_ms": "xgemm ms",
           "cupy_ms": "cupy.matmul ms", "torch_ms": "torch.matmul ms",
           "x_cupy": "x cupy.matmul"}


def _table(rows: Sequence[Mapping[str, Any]], labels: Mapping[str, str], show) -> list[str]:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    return markdown.table([labels.get(k, k) for k in keys],
                          ([show(k, row.get(k)) for k in keys] for row in rows)).split("\n")


def _show(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if key.startswith("x_"):
            return f"{value:.2f}"
        return f"{value:.4f}" if key.endswith("_ms") else f"{value:.1f}"
    return f"`{value}`" if key == "variant" else str(value)


def call_cost_tables(results: Results) -> str:
    """The call cost (``xgemm bench --overhead --json``) as two Markdown tables: host
    microseconds per call with the plan cached, and queued milliseconds per call.

    >>> call_cost_tables(Results(Path(".")))
    'No call-cost results (`xgemm bench --overhead --json`).'
    """
    data = results.call_cost
    if not data:
        return "No call-cost results (`xgemm bench --overhead --json`)."
    lines = []
    if data.get("host_us"):
        lines.append("Host microseconds per call, the plan cached:")
        lines.append("")
        lines += _table(data["host_us"], {"out": "out=", **_HOST}, _show)
    if data.get("queued_ms"):
        lines += [""] if lines else []
        lines.append("Milliseconds per call queued back to back (kernel: the GPU's time "
                     "alone):")
        lines.append("")
        lines += _table(data["queued_ms"], _QUEUED, _show)
    return "\n".join(lines)


def suite_table(results: Results) -> str:
    """The practitioner's suite (``xgemm bench --suite PART --json``) as one Markdown
    table: per case what ``auto`` ran and its speed over cuBLAS's, kernel and whole call,
    then each part's geometric mean.

    >>> suite_table(Results(Path(".")))
    'No suite results (`xgemm bench --suite PART --json`).'
    """
    if not results.suite:
        return "No suite results (`xgemm bench --suite PART --json`)."
    lines = ["| part | case | auto runs | kernel ms, auto / cuBLAS | kernel x cuBLAS"
             " | call x cuBLAS | cuBLAS through |", "|" + " --- |" * 7]
    order = {part: i for i, part in enumerate(PARTS)}
    rows = sorted(results.suite, key=lambda r: order.get(r.get("part"), len(order)))
    for part in dict.fromkeys(r.get("part") for r in rows):
        mine = [r for r in rows if r.get("part") == part]
        for r in mine:
            if r.get("status") != "ok":
                lines.append(f"| {part} | {r.get('case')} | - | - | - | - |"
                             f" {escape(str(r.get('status')))} |")
                continue
            lines.append(f"| {part} | {r['case']} | `{r['variant']}` | {r['auto_ms']:.4f} /"
                         f" {r['cublas_ms']:.4f} | {r['x_kernel']:.2f} | {r['x_call']:.2f} |"
                         f" {r['baseline']} |")
        done = [r for r in mine if r.get("status") == "ok"]
        kernel, call = (geomean([r[key] for r in done]) for key in ("x_kernel", "x_call"))
        if kernel is not None:
            lines.append(f"| {part} | **geometric mean** | | | **{kernel:.2f}** |"
                         f" **{call:.2f}** | |")
    wide = [f"{r['part']} {r['case']} {r['x_bf16']:.2f}x" for r in rows
            if r.get("status") == "ok" and "x_bf16" in r]
    if wide:
        lines += ["", "8-bit kernels against xgemm's own bfloat16 `wgmma` on the same values"
                  " (kernel time): " + ", ".join(wide) + "."]
    lines += ["", f"Commit {', '.join(sorted(results.suite_commits))}, on the machine above."]
    return "\n".join(lines)


def generalisation_table(results: Results) -> str:
    """The generalisation suites' summaries (``xgemm bench --suite random|models --json``),
    one row per file: auto's whole call and kernel against cuBLAS (geometric means, the
    worst call) and its regret against the fastest candidate.

    >>> generalisation_table(Results(Path(".")))
    'No generalisation results (`xgemm bench --suite random --json`).'
    """
    if not results.generalisation:
        return "No generalisation results (`xgemm bench --suite random --json`)."

    def number(value: Any) -> str:
        return "-" if value is None else f"{value:.2f}"

    header = ("suite", "part", "seed", "shapes", "call x cuBLAS", "kernel x cuBLAS",
              "worst call x", "regret, geomean", "regret, worst", "commit")
    order = {"float16": 0, "bfloat16": 1, "float32": 2, "tf32": 3, "float64": 4,
             "float8": 5, "int8": 6}
    runs = sorted(results.generalisation, key=lambda d: (
        d.get("suite") != "random", d["summary"].get("seed") or 0, order.get(d.get("part"), 9)))
    return markdown.table(header, (
        (d.get("suite"), d.get("part"), d["summary"].get("seed") or "-",
         f"{d['summary'].get('ok')} of {d['summary'].get('cases')}",
         *(number(d["summary"].get(key)) for key in (
             "geomean_call_x", "geomean_kernel_x", "min_call_x", "geomean_regret",
             "max_regret")),
         d.get("machine", {}).get("commit", "unknown")) for d in runs))


def training_table(results: Results, readme_dir: str | os.PathLike[str] = REPO) -> str:
    """examples/train_gpt.py's runs: each mode's median step, PyTorch's linears against
    xgemm's, and the eager run's loss curves.

    >>> training_table(Results(Path(".")))
    'No training runs (`python examples/train_gpt.py --mode MODE`).'
    """
    if not results.training:
        return "No training runs (`python examples/train_gpt.py --mode MODE`)."
    header = ("mode", "steps", "PyTorch ms a step", "xgemm ms a step", "PyTorch / xgemm",
              "final loss (PyTorch, xgemm)", "GPU", "commit")
    order = {mode: i for i, mode in enumerate(TRAINING_MODES)}
    runs = sorted(results.training, key=lambda r: order.get(r["mode"], len(order)))
    lines = [markdown.table(header, (
        (run["mode"], run["steps"], f"{run['PyTorch']['step_ms']:.2f}",
         f"{run['xgemm']['step_ms']:.2f}",
         f"{run['PyTorch']['step_ms'] / run['xgemm']['step_ms']:.2f}x",
         ", ".join(f"{sum(r['losses'][-20:]) / 20:.3f}" for r in (run["PyTorch"], run["xgemm"])),
         run["machine"].get("gpu", "?"), run["machine"].get("commit", "unknown"))
        for run in runs))]
    for path in results.training_figures:
        lines += ["", f"![{path.stem}: loss against step]({_relative(path, readme_dir)})"]
    return "\n".join(lines)


def torch_suite_table(results: Results) -> str:
    """``xgemm bench --suite torch``'s rows: each case's step queued back to back, the
    decoder on PyTorch's linears against the same decoder on xgemm's.

    >>> torch_suite_table(Results(Path(".")))
    'No decoder runs (`xgemm bench --suite torch --json FILE`).'
    """
    if not results.torch_suite:
        return "No decoder runs (`xgemm bench --suite torch --json FILE`)."
    machine = results.torch_suite.get("machine", {})
    header = ("dtype", "case", "PyTorch ms a step", "xgemm ms a step", "PyTorch / xgemm", "GPU",
              "commit")
    return markdown.table(header, (
        (row["dtype"], row["case"], f"{row['pytorch_ms']:.3f}", f"{row['xgemm_ms']:.3f}",
         f"{row['x']:.2f}x", machine.get("gpu", "?"), machine.get("commit", "unknown"))
        for row in results.torch_suite["torch_suite"]))


def own_suite_table(results: Results, suite: str) -> str:
    """``xgemm bench --suite SUITE``'s rows, for the suites of their own cases ("grouped",
    "tf32x3": ``xgemm.tools.<suite>_suite.table``), and the GPU and commit they ran on.

    >>> own_suite_table(Results(Path(".")), "grouped")
    'No grouped runs (`xgemm bench --suite grouped --json FILE`).'
    """
    data = results.own_suites.get(suite)
    if not data:
        return f"No {suite} runs (`xgemm bench --suite {suite} --json FILE`)."
    table = own_suite(suite).table
    machine = data.get("machine", {})
    return (table(data[f"{suite}_suite"]) + f"\n\n{machine.get('gpu', '?')},"
            f" commit {machine.get('commit', 'unknown')}.")


# -- README ------------------------------------------------------------------------------
def render(results: Results, readme_dir: str | os.PathLike[str] = REPO) -> dict[str, str]:
    """Every region's text, by region name.

    >>> sorted(render(Results(Path("."))))  # doctest: +NORMALIZE_WHITESPACE
    ['call_cost', 'figures', 'generalisation', 'grouped_suite', 'ladder', 'machine', 'suite',
     'tf32x3_suite', 'torch_suite', 'training']
    """
    return {"ladder": ladder_table(results), "machine": machine_line(results, readme_dir),
            "figures": figures(results, readme_dir), "call_cost": call_cost_tables(results),
            "suite": suite_table(results), "generalisation": generalisation_table(results),
            "training": training_table(results, readme_dir),
            "torch_suite": torch_suite_table(results),
            **{f"{name}_suite": own_suite_table(results, name) for name in OWN_SUITES}}


def update(text: str, regions: Mapping[str, str]) -> str:
    """``text`` with each marked region's body replaced by its rendering; ValueError for
    an unknown region or a text with none.

    >>> update("a\\n<!-- xgemm report: ladder -->\\nold\\n<!-- end -->\\n", {"ladder": "new"})
    'a\\n<!-- xgemm report: ladder -->\\nnew\\n<!-- end -->\\n'
    """
    found = [m.group(2) for m in _REGION.finditer(text)]
    if not found:
        raise ValueError("no '<!-- xgemm report: NAME -->' ... '<!-- end -->' regions; "
                         f"the regions are {', '.join(REGIONS)}")
    unknown = sorted(set(found) - set(regions))
    if unknown:
        raise ValueError(f"unknown region {', '.join(unknown)}: the regions are "
                         f"{', '.join(regions)}")
    return _REGION.sub(lambda m: m.group(1) + regions[m.group(2)].rstrip("\n") + "\n"
                       + m.group(4), text)


def _paths(readme: str | os.PathLike[str] | None, directory: str | os.PathLike[str] | None
           ) -> tuple[Path, Path]:
    return (Path(readme) if readme is not None else REPO / "README.md",
            Path(directory) if directory is not None else REPO / RESULTS)


def check(readme: str | os.PathLike[str] | None = None,
          directory: str | os.PathLike[str] | None = None) -> str:
    """A unified diff from ``readme`` to what the results in ``directory`` render; empty
    where they agree. Default: the repository's README.md and bench/results/h100.

    >>> check()  # doctest: +SKIP
    ''
    """
    readme, directory = _paths(readme, directory)
    text = readme.read_text()
    new = update(text, render(load(directory), readme.parent))
    return "".join(difflib.unified_diff(text.splitlines(True), new.splitlines(True),
                                        str(readme), f"{readme} (xgemm report)"))


def write(readme: str | os.PathLike[str] | None = None,
          directory: str | os.PathLike[str] | None = None) -> bool:
    """Rewrite ``readme``'s regions from ``directory``'s results; whether it changed.

    >>> write()  # doctest: +SKIP
    False
    """
    readme, directory = _paths(readme, directory)
    text = readme.read_text()
    new = update(text, render(load(directory), readme.parent))
    if new != text:
        readme.write_text(new)
    return new != text
