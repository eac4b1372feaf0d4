"""README.md's ladder table: one row per rung in ladder order, each dtype's TFLOP/s at
the reported sizes against cuBLAS's, from a results directory (``results.load``).

Example:
    >>> from xgemm.tools import ladder_table, results
    >>> print(ladder_table.ladder_table(results.load("bench/results/h100")))  # doctest: +SKIP
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import declarations as _ladder  # noqa: F401  (registers the ladder)
from ..registry import get_variant, variants
from .results import Results, Run

#: The sizes (M = N = K) the ladder table reports.
SIZES = (4096, 8192)


def rungs(family: str = "gemm") -> dict[str, str]:
    """Each variant's rung: the number of its template file (``gemm/13_wgmma.cu.j2`` ->
    13), with a prime for each further variant on the same template.

    >>> r = rungs()
    >>> r["naive"], r["transposed_b"], r["mma_tf32"] == r["mma"] + "'"
    ('1', '7', True)
    """
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for name in variants(family):
        template = get_variant(name, family).template
        match = re.match(r"(\d+)_", Path(template).name)
        number = str(int(match.group(1))) if match else "?"
        out[name] = number + "'" * seen.get(template, 0)
        seen[template] = seen.get(template, 0) + 1
    return out


def _params(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def defaults_text(name: str) -> str:
    """A variant's defaults as the table shows them; for a further variant on the same
    template, what differs from the first.

    >>> defaults_text("tiled")
    'tile=16'
    """
    variant = get_variant(name)
    first = next(n for n in variants() if get_variant(n).template == variant.template)
    if first == name:
        return _params(variant.defaults)
    base = get_variant(first).defaults
    changed = {k: v for k, v in variant.defaults.items() if base.get(k) != v}
    gone = [k for k in base if k not in variant.defaults]
    text = f"as `{first}`"
    if changed or gone:
        text += ", but " + ", ".join([f"{k}={v}" for k, v in changed.items()]
                                     + [f"no {k}" for k in gone])
    return text


def _square(records: Iterable[dict[str, Any]], variant: str, size: int
            ) -> dict[str, Any] | None:
    """The record of ``variant`` at size³ (unbatched): row-major operands first."""
    found = [r for r in records if r.get("variant") == variant and r.get("batch", 1) == 1
             and r.get("m") == r.get("n") == r.get("k") == size]
    found.sort(key=lambda r: r.get("layout", "NN") != "NN")
    return found[0] if found else None


def _measured(runs: Sequence[Run], variant: str, size: int) -> dict[str, Any] | None:
    """The record from the last run (by file name) that measured ``variant`` at size³."""
    for run in reversed(runs):
        record = _square(run.records, variant, size)
        if record is not None:
            return record
    return None


def _tflops(value: float) -> str:
    return f"{value:.1f}"


def _cell(record: dict[str, Any] | None, mark: str = "") -> str:
    if record is None:
        return "–"
    if not record.get("ok"):
        return record.get("status") or "failed"
    text = _tflops(record["tflops"])
    if record.get("vs_cublas"):
        text += f" ({record['vs_cublas']:.2f}x)"
    return text + mark


def _span(values: Sequence[float]) -> str:
    if not values:
        return "–"
    lo, hi = _tflops(min(values)), _tflops(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def escape(text: str) -> str:
    """``text`` for a Markdown table's cell: its ``|`` escaped."""
    return text.replace("|", "\\|")


def ladder_table(results: Results) -> str:
    """The ladder as a Markdown table: cuBLAS, then one row per rung in ladder order, with
    TFLOP/s (x cuBLAS of the same run) at 4096³ / 8192³ per column; notes below it.

    >>> print(ladder_table(Results(Path("."))).splitlines()[0])
    | rung | variant | what it adds | defaults |
    """
    columns = results.columns()
    by_column = {c: [run for run in results.runs if run.column == c] for c in columns}
    eight_bit = _eight_bit_squares(results)  # part -> size -> the suite's row
    header = ["rung", "variant", "what it adds", "defaults"]
    for column in columns:
        layouts = {r.get("layout", "NN") for size in SIZES for name in variants()
                   if (r := _measured(by_column[column], name, size)) is not None}
        header.append(column + (f" ({', '.join(sorted(layouts))})"
                                if layouts and layouts != {"NN"} else ""))
    header += [f"{part} (NT)" for part in eight_bit]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    cublas = ["", "cuBLAS", "`cupy.matmul` on the same arrays (tf32: `CUPY_TF32=1`; 8-bit:"
              " cuBLASLt through `torch._scaled_mm`, `torch._int_mm`)", ""]
    for column in columns:
        cublas.append(" / ".join(
            _span([r["tflops"] for run in by_column[column]
                   if (r := _square(run.records, "cublas", size)) and r.get("ok")])
            for size in SIZES))
    for rows in eight_bit.values():
        cublas.append(" / ".join(_tflops(2 * size**3 / rows[size]["cublas_ms"] / 1e9)
                                 if size in rows else "–" for size in SIZES))
    lines.append("| " + " | ".join(cublas) + " |")

    notes: dict[str, list[str]] = {}  # note -> columns
    numbers = rungs()
    for name in variants():
        variant = get_variant(name)
        row = [numbers[name], f"`{name}`", escape(variant.adds), escape(defaults_text(name))]
        for column in columns:
            cells = []
            for size in SIZES:
                record = _measured(by_column[column], name, size)
                mark = ""
                if record is not None and record.get("ok"):
                    note = _params_note(name, record)
                    if note:
                        mark = "†"
                        notes.setdefault(note, [])
                        if column not in notes[note]:
                            notes[note].append(column)
                    if record.get("read_as"):
                        read = f"`{name}` is handed B stored as it reads it " \
                               f"({record['read_as']}), the same values"
                        notes.setdefault(read, [])
                        if column not in notes[read]:
                            notes[read].append(column)
                cells.append(_cell(record, mark))
            row.append("" if set(cells) == {"–"} else " / ".join(cells))
        for rows in eight_bit.values():
            cells = [f"{_tflops(2 * size**3 / r['auto_ms'] / 1e9)} ({r['x_kernel']:.2f}x)"
                     if (r := rows.get(size)) and r["variant"] == name else "–"
                     for size in SIZES]
            row.append("" if set(cells) == {"–"} else " / ".join(cells))
        lines.append("| " + " | ".join(row) + " |")

    lines.append("")
    lines.append("TFLOP/s at " + " / ".join(f"{s}³" for s in SIZES)
                 + " (M = N = K, row-major operands unless a column says otherwise) and, in "
                 "parentheses, the fraction of cuBLAS's TFLOP/s in the same run; – : not "
                 "measured at that size.")
    for note, cols in notes.items():
        lines += ["", f"{note} ({', '.join(cols)})."]
    if eight_bit:
        lines += ["", f"{' and '.join(eight_bit)}: from the practitioner's suite below (`auto`,"
                  " B a transposed view, per-tensor scales, bfloat16 or int32 out), TFLOP/s"
                  " (TOPS for int8) of the kernel."]
    return "\n".join(lines)


def _eight_bit_squares(results: Results) -> dict[str, dict[int, dict[str, Any]]]:
    """The suite's 8-bit rows at the ladder's square sizes (B transposed), by part and
    size: the ladder's 8-bit columns."""
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for part in ("float8", "int8"):
        for size in SIZES:
            for r in results.suite:
                if (r.get("part") == part and r.get("status") == "ok"
                        and r.get("case") == f"{size}x{size}x{size}:NT"):
                    found.setdefault(part, {})[size] = r
    return found


def _params_note(name: str, record: Mapping[str, Any]) -> str:
    """Where a record was measured at parameters other than today's defaults: which."""
    defaults = get_variant(name).defaults
    params = {k: v for k, v in record.get("params", {}).items() if k != "variant"}
    if params == dict(defaults):
        return ""
    changed = [f"{k}={v}" for k, v in params.items() if defaults.get(k) != v]
    missing = [k for k in defaults if k not in params]
    return (f"† `{name}` measured at " + ", ".join(changed)
            + (f"{', ' if changed else ''}without {', '.join(missing)}" if missing else "")
            + ", not today's defaults")
