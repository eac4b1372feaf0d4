"""Render a variant's Jinja2 template into plain CUDA C."""

from __future__ import annotations

import functools
from pathlib import Path

import jinja2


def _kernels_dir() -> Path:
    """The folder of CUDA templates: ``xgemm/kernels`` in an installed wheel (where
    ``kernels/`` is shipped as the package ``xgemm.kernels``), ``kernels/`` beside the
    package in a source checkout or an editable install."""
    package = Path(__file__).resolve().parent
    for candidate in (package / "kernels", package.parent / "kernels"):
        if (candidate / "gemm").is_dir():
            return candidate
    raise FileNotFoundError(f"xgemm's CUDA templates are missing: no kernels/ beside {package}")


KERNELS_DIR = _kernels_dir()

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(KERNELS_DIR),
    undefined=jinja2.StrictUndefined,  # a template variable nobody passed is an error, not ""
    trim_blocks=True,                  # {% ... %} lines leave no blank line behind
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


@functools.cache
def _render(template: str, items: tuple[tuple[str, object], ...]) -> str:
    return _env.get_template(template).render(dict(items))


def render(template: str, **variables: object) -> str:
    """Render ``template`` (a path under ``kernels/``) with the given template variables.

    Rendering is cached: the same template and variables return the same string.

    A variant's source (``Variant.source``) renders its template with every variable its
    templates read: its parameters and its specialisation's.

    >>> import xgemm
    >>> tiled = xgemm.get_variant("tiled")
    >>> "constexpr int TILE = 16;" in tiled.source({"tile": 16}, xgemm.Spec("float32"))
    True
    """
    return _render(template, tuple(sorted(variables.items())))
