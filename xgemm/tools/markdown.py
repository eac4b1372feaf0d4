"""Markdown tables, as the suites print theirs and README holds them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table of ``header`` and ``rows`` (each row's cells as given, turned into
    text).

    >>> print(table(("a", "b"), [(1, "x")]))
    | a | b |
    | --- | --- |
    | 1 | x |
    """
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
