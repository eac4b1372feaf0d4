"""Every docstring example in the package runs, as written. Examples on CuPy arrays need a
GPU and carry the `gpu` marker; the others run everywhere, CI included."""

import doctest
import importlib
import pkgutil

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
