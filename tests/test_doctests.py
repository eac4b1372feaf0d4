"""Every docstring example in the package runs, as written, and so do README.md's. Examples
on CuPy arrays need a GPU and carry the `gpu` marker; the others run everywhere, CI
included."""

import doctest
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import xgemm


def _examples() -> list:
    finder, found = doctest.DocTestFinder(), []
    for info in pkgutil.walk_packages(xgemm.__path__, "xgemm."):
        if info.name == "xgemm.__main__":  # runs the command on import
            continue
        module = importlib.import_module(info.name)
        for test in finder.find(module, info.name):
            if not test.examples:
                continue
            source = "".join(example.source for example in test.examples)
            marks = [pytest.mark.gpu] if "cupy" in source or "cuda" in source else []
            found.append(pytest.param(test, marks=marks, id=test.name))
    for test in doctest.DocTestFinder().find(xgemm, "xgemm"):
        if test.examples:
            source = "".join(example.source for example in test.examples)
            marks = [pytest.mark.gpu] if "cupy" in source else []
            found.append(pytest.param(test, marks=marks, id=test.name))
    return found


@pytest.mark.parametrize("test", _examples())
def test_docstring_example(test):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []  # doctest's own account of each failure (it owns stdout meanwhile)
    result = runner.run(test, out=report.append)
    assert result.failed == 0, f"{result.failed} of {result.attempted} failed:\n" + "".join(report)


@pytest.mark.gpu
def test_readme_examples():
    """README.md's Python blocks, in order and in one namespace (a later block uses an
    earlier one's arrays), as a user pastes them (FP8 needs an H100 and PyTorch)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", readme, re.S | re.M)
    assert len(blocks) >= 3, "README.md's quick start and memory-bound examples not found"
    namespace: dict = {}
    for number, block in enumerate(blocks):
        exec(compile(block, f"README.md, Python block {number + 1}", "exec"), namespace)
