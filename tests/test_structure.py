"""The package's shape, which a newcomer reads: modules of at most 500 lines, the core's
functions of at most 60 lines of code (docstrings aside; the tools, ``xgemm/tools/``, are
not held to it), imports among the core's modules that form no cycle, no name taken
from xgemm that is not there, every module named in README's layout of the
repository, and every package shipped by pyproject.toml."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = [p for p in sorted((ROOT / "xgemm").rglob("*.py")) if "tools" not in p.parts]


def _name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


@pytest.mark.parametrize("path", sorted((ROOT / "xgemm").rglob("*.py")), ids=_name)
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
        # Importing a.b.c runs package a.b's __init__ first, unless the importer is
        # inside a.b (then a.b is already initialising); xgemm's own runs before all
        own = {".".join(package[:i]) for i in range(1, len(package) + 1)}
        parents = {".".join(name.split(".")[:i]) for name in found
                   for i in range(2, name.count(".") + 1)}
        imports[module] = found | (parents - own)

    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:  # depth first; path: the way here
        for imported in imports.get(module, ()):
            assert imported not in path, "a cycle: " + " -> ".join([*path, imported])
            if imported not in done:
                visit(imported, [*path, imported])
        done.add(module)

    for module in imports:
        visit(module, [module])


def _resolve(base: str, name: str):
    """``base.name``: an attribute of module ``base`` or its submodule; None if neither."""
    import importlib
    import importlib.util

    module = importlib.import_module(base)
    if hasattr(module, name):
        return getattr(module, name)
    if hasattr(module, "__path__") and importlib.util.find_spec(f"{base}.{name}") is not None:
        return importlib.import_module(f"{base}.{name}")
    return None


SCRIPTS = sorted([*(ROOT / "xgemm").rglob("*.py"), *(ROOT / "bench").glob("*.py"),
                  *(ROOT / "examples").glob("*.py")])


def _own_nodes(scope: ast.AST):
    """The nodes of a module or function, without those of the functions inside it."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _own_nodes(child)


def test_every_name_taken_from_xgemm_is_there():
    """Each ``from xgemm... import name`` in the package, the bench scripts and the
    examples (inside functions too, which only a call would run), and each attribute read
    of a module so imported (``cost.fit``), names something that exists: a function or
    module moved elsewhere leaves no use of its old place behind."""
    import types

    missing = []
    for path in SCRIPTS:
        tree = ast.parse(path.read_text())
        module = _name(path)
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        scopes = [tree, *(n for n in ast.walk(tree)
                          if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))]
        at_module: dict[str, types.ModuleType] = {}
        for scope in scopes:  # the module first: its imports are seen in its functions
            modules = dict(at_module)  # local name -> module, for the attribute reads
            nodes = list(_own_nodes(scope))
            for node in nodes:
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    modules.pop(node.id, None)  # a local of that name hides the module
            for node in nodes:
                if not isinstance(node, ast.ImportFrom):
                    continue
                if node.level and path.is_relative_to(ROOT / "xgemm"):
                    base = ".".join([*package[:len(package) - node.level + 1],
                                     *([node.module] if node.module else [])])
                elif not node.level and node.module and node.module.split(".")[0] == "xgemm":
                    base = node.module
                else:
                    continue
                for alias in node.names:
                    found = _resolve(base, alias.name)
                    if found is None:
                        missing.append(f"{module}:{node.lineno} from {base} import {alias.name}")
                    elif isinstance(found, types.ModuleType):
                        modules[alias.asname or alias.name] = found
            if scope is tree:
                at_module = modules
            for node in nodes:
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                        and node.value.id in modules
                        and _resolve(modules[node.value.id].__name__, node.attr) is None):
                    missing.append(f"{module}:{node.lineno} "
                                   f"{modules[node.value.id].__name__}.{node.attr}")
    assert not missing, missing


def _layout_entries() -> list[tuple[str, str]]:
    """README.md's "Layout of the repository" block: (path, text) for each entry, an entry
    being a line that starts with its path and the indented lines under it."""
    text = (ROOT / "README.md").read_text().split("\n## Layout of the repository\n", 1)[1]
    block = text.split("```", 2)[1]
    entries: list[tuple[str, str]] = []
    for line in block.splitlines()[1:]:  # past the fence's own line
        if line[:1].strip():
            entries.append((line.split()[0], line))
        elif entries:
            entries[-1] = (entries[-1][0], entries[-1][1] + "\n" + line)
    return entries


def test_readme_layout_names_every_module():
    """Every module under xgemm/ (``__init__.py`` and ``__main__.py`` aside) is named by
    its file name in README's layout: in its directory's entry (``xgemm/tools/``'s for
    ``xgemm/tools/bench.py``), or, for a top-level module, in an entry of a file of
    xgemm/ (``xgemm/render.py, compile.py``)."""
    entries = _layout_entries()
    missing = []
    for path in sorted((ROOT / "xgemm").rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        folder = path.parent.relative_to(ROOT).as_posix() + "/"
        named = re.compile(rf"(?<![\w.]){re.escape(path.name)}(?!\w)")
        if folder == "xgemm/":
            texts = [t for p, t in entries if p.startswith("xgemm/") and not p.endswith("/")]
        else:
            texts = [t for p, t in entries if p == folder]
        if not any(named.search(t) for t in texts):
            missing.append(path.relative_to(ROOT).as_posix())
    assert not missing, f"README.md's layout section does not name {missing}"


def test_pyproject_ships_every_package():
    """An installed (not editable) xgemm has every package under xgemm/: setuptools
    ships only those pyproject.toml names."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {_name(p) for p in (ROOT / "xgemm").rglob("__init__.py")}
    assert found <= listed, f"pyproject.toml's packages lack {sorted(found - listed)}"
