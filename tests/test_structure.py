"""The library core's shape, which a newcomer reads: modules of at most 500 lines,
functions of at most 60 lines of code (docstrings aside), and imports among its modules
that form no cycle. The tools (``xgemm/tools/``) are apart and not held to the sizes."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = [p for p in sorted((ROOT / "xgemm").rglob("*.py")) if "tools" not in p.parts]


def _name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


@pytest.mark.parametrize("path", CORE, ids=_name)
def test_module_is_at_most_500_lines(path):
    assert len(path.read_text().splitlines()) <= 500


def test_functions_are_at_most_60_lines_of_code():
    long = []
    for path in CORE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                body = node.body
                if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    body = body[1:] or body  # its docstring aside
                if node.end_lineno - body[0].lineno + 1 > 60:
                    long.append(f"{_name(path)}.{node.name}")
    assert not long, long


def test_core_imports_form_no_cycle():
    imports = {}
    for path in CORE:
        module = _name(path)
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        found = set()
        for node in ast.parse(path.read_text()).body:  # module level: what importing runs
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[:len(package) - node.level + 1]
                if node.module:
                    found.add(".".join([*base, node.module]))
                else:
                    found.update(".".join([*base, alias.name]) for alias in node.names)
        imports[module] = found

    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:  # depth first; path: the way here
        for imported in imports.get(module, ()):
            assert imported not in path, "a cycle: " + " -> ".join([*path, imported])
            if imported not in done:
                visit(imported, [*path, imported])
        done.add(module)

    for module in imports:
        visit(module, [module])


def test_every_import_of_xgemm_names_something_there():
    """Each ``from xgemm... import name`` in the package, at module level or inside a
    function (which only a call would run), names a module or an attribute that exists:
    a module moved between packages leaves no import of its old place behind."""
    import importlib
    import importlib.util

    missing = []
    for path in sorted((ROOT / "xgemm").rglob("*.py")):
        module = _name(path)
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1],
                                 *([node.module] if node.module else [])])
            elif node.module and node.module.split(".")[0] == "xgemm":
                base = node.module
            else:
                continue
            target = importlib.import_module(base)
            for alias in node.names:
                if not hasattr(target, alias.name) and importlib.util.find_spec(
                        f"{base}.{alias.name}") is None:
                    missing.append(f"{module}:{node.lineno} from {base} import {alias.name}")
    assert not missing, missing
