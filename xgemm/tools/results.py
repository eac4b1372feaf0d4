"""A results directory (``bench/results/<gpu>/``) as read: its bench runs, call cost,
suites, figures and training runs, each file recognised by what it holds, not its name.
``xgemm report`` renders README.md's regions from it. Nothing here needs CuPy or a GPU.

Example:
    >>> from xgemm.tools.results import load
    >>> load("/nonexistent").runs
    []
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import declarations as _ladder  # noqa: F401  (registers the ladder)
from ..registry import get_variant

#: Column order of the ladder table; a column appears when its results exist.
COLUMNS = ("float32", "tf32", "float16", "bfloat16", "float64")


#: The suites of their own cases whose files README shows (``xgemm bench --suite NAME``):
#: each a module ``xgemm.tools.NAME_suite`` with ``DTYPE``, ``ROWS``, ``run`` and ``table``.
OWN_SUITES = ("grouped", "tf32x3")


def own_suite(name: str) -> Any:
    """The module of suite ``name`` of :data:`OWN_SUITES`.

    >>> own_suite("tf32x3").DTYPE
    'float32'
    """
    import importlib

    return importlib.import_module(f"{__package__}.{name}_suite")


@dataclass
class Run:
    """One ``xgemm bench --json`` file: the machine it ran on and its records."""

    path: Path
    column: str
    machine: dict[str, Any]
    records: list[dict[str, Any]]


@dataclass
class Results:
    """What a results directory holds: bench runs, the call cost, the figures."""

    directory: Path
    runs: list[Run] = field(default_factory=list)
    call_cost: dict[str, Any] | None = None
    call_cost_path: Path | None = None
    suite: list[dict[str, Any]] = field(default_factory=list)
    suite_commits: set[str] = field(default_factory=set)
    #: the generalisation suites' files (``--suite random`` / ``models``), as written
    generalisation: list[dict[str, Any]] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    #: examples/train_gpt.py's runs (``training/*.json``) and figures (``training/*.png``)
    training: list[dict[str, Any]] = field(default_factory=list)
    training_figures: list[Path] = field(default_factory=list)
    #: ``xgemm bench --suite torch --json``'s file, as written (the last by name)
    torch_suite: dict[str, Any] | None = None
    #: the files of ``xgemm bench --suite grouped`` and ``--suite tf32x3``, by suite: each
    #: one's machine and rows (under "grouped_suite", "tf32x3_suite")
    own_suites: dict[str, dict[str, Any]] = field(default_factory=dict)

    def columns(self) -> list[str]:
        """The columns that have runs, in table order.

        >>> Results(Path(".")).columns()
        []
        """
        have = {run.column for run in self.runs}
        return [c for c in COLUMNS if c in have] + sorted(have - set(COLUMNS))


def _is_tf32(name: str) -> bool:
    try:
        return get_variant(name).precision == "tf32"
    except ValueError:  # a variant since renamed or removed
        return False


def column_of(data: Mapping[str, Any]) -> str:
    """The ladder column a bench run fills: "tf32" for a TF32 run (a TF32 rung among its
    records, auto having picked one, or ``machine["precision"]``), else its dtype.

    >>> column_of({"machine": {}, "results": [{"variant": "naive", "dtype": "float64"}]})
    'float64'
    >>> column_of({"machine": {}, "results": [{"variant": "mma_tf32", "dtype": "float32"}]})
    'tf32'
    """
    records = data.get("results", [])
    if data.get("machine", {}).get("precision") == "tf32" or any(
            _is_tf32(r.get("variant", "")) or _is_tf32(str(r.get("params", {}).get("variant")))
            for r in records):
        return "tf32"
    dtypes = sorted({r.get("dtype", "float32") for r in records})
    return "+".join(dtypes) if dtypes else "float32"


def load_json(path: str | os.PathLike[str]) -> Any:
    """A results file, as written or gzip-compressed (``.json.gz``: how
    ``bench/results/<gpu>/`` keeps its random seeds, and its evidence/ its large runs).

    Example:
        >>> import gzip, json, tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "run.json.gz"
        >>> _ = path.write_bytes(gzip.compress(json.dumps({"rows": []}).encode()))
        >>> load_json(path)
        {'rows': []}
    """
    raw = Path(path).read_bytes()
    return json.loads(gzip.decompress(raw) if str(path).endswith(".gz") else raw)


def save_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as :func:`load_json` reads it back: indented JSON, gzip-compressed
    where the name ends in ``.gz`` (with no timestamp, so the same data gives the same
    bytes).

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "run.json.gz"
        >>> save_json(path, {"rows": [1]}); load_json(path)
        {'rows': [1]}
    """
    text = (json.dumps(data, indent=1) + "\n").encode()
    Path(path).write_bytes(gzip.compress(text, mtime=0) if str(path).endswith(".gz") else text)


def result_files(directory: str | os.PathLike[str], pattern: str = "*") -> list[Path]:
    """The results files directly in ``directory`` whose names, less ``.json`` or
    ``.json.gz``, match ``pattern``, in the order of those names.

    >>> result_files("/nonexistent", "random_*_seed*")
    []
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> save_json(folder / "run.json", {}); save_json(folder / "run.json.gz", {})
    >>> result_files(folder)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ...: run both as .json and .json.gz ...
    """
    directory = Path(directory)
    found = [*directory.glob(f"{pattern}.json"), *directory.glob(f"{pattern}.json.gz")]
    names = [result_name(path) for path in found]
    if twice := sorted({name for name in names if names.count(name) > 1}):
        raise ValueError(f"{directory}: {', '.join(twice)} both as .json and .json.gz (one "
                         "run read twice, or an old one beside a new): keep one of each")
    return sorted(found, key=result_name)


def result_name(path: str | os.PathLike[str]) -> str:
    """A results file's name less ``.json`` or ``.json.gz``.

    >>> result_name("bench/results/h200/random_bfloat16_seed90.json.gz")
    'random_bfloat16_seed90'
    """
    return Path(path).name.removesuffix(".gz").removesuffix(".json")


def load(directory: str | os.PathLike[str]) -> Results:
    """Read every results file (``*.json``, ``*.json.gz``) and ``*.png`` directly in
    ``directory`` (not its sweeps/ or evidence/): bench runs, the call cost, figures;
    files in name order.

    >>> load("/nonexistent").runs
    []
    """
    directory = Path(directory)
    results = Results(directory)
    for path in result_files(directory):
        data = load_json(path)
        if not isinstance(data, dict):
            continue
        if "host_us" in data or "queued_ms" in data:
            results.call_cost, results.call_cost_path = data, path
        elif isinstance(data.get("summary"), dict) and isinstance(data.get("rows"), list):
            results.generalisation.append(data)
        elif isinstance(data.get("torch_suite"), list):
            results.torch_suite = data
        elif own := [s for s in OWN_SUITES if isinstance(data.get(f"{s}_suite"), list)]:
            results.own_suites[own[0]] = data
        elif isinstance(data.get("suite"), list):
            results.suite += data["suite"]
            results.suite_commits.add(str(data.get("machine", {}).get("commit") or "unknown"))
        elif isinstance(data.get("results"), list):
            results.runs.append(Run(path, column_of(data), data.get("machine", {}),
                                    data["results"]))
    results.figures = sorted(directory.glob("*.png"), key=_figure_order)
    results.training = [json.loads(path.read_text())
                        for path in sorted((directory / "training").glob("*.json"))]
    results.training_figures = sorted((directory / "training").glob("*.png"))
    return results


def _figure_order(path: Path) -> tuple[int, str]:
    column = path.stem.split("_")[0]
    return (COLUMNS.index(column) if column in COLUMNS else len(COLUMNS), path.stem)
