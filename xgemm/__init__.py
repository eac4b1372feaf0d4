"""xgemm: hand-written CUDA matrix-multiply kernels, rung by rung, from Python, and the
lectures' memory-bound shared-memory kernels (transpose, reverse, sum, a 3 x 3 stencil).

Each variant is a Jinja2 CUDA template rendered with its tile parameters and compiled
at run time through ``cupy.RawKernel``.

Example:
    >>> import cupy as cp, xgemm
    >>> a = cp.random.standard_normal((512, 256), dtype=cp.float32)
    >>> b = cp.random.standard_normal((256, 128), dtype=cp.float32)
    >>> c = xgemm.matmul(a, b, variant="coarse2d", BM=64, BN=64)
    >>> xgemm.variants()[0]
    'naive'
"""

from . import declarations as _ladder  # noqa: F401  (registers the ladder)
from .api import AUTO, DEFAULT_VARIANT, TUNE, Launch, gemm, matmul, prepare, source
from .compile import CompileError, PtxasReport, compile_offline
from .grouped import grouped_matmul
from .memory_bound import reverse, stencil3x3, sum, transpose  # noqa: A004
from .registry import Variant, families, get_variant, variants
from .specs import ACTIVATIONS, DTYPES, Spec
from .version import __version__

__all__ = [
    "ACTIVATIONS",
    "AUTO",
    "DTYPES",
    "Spec",
    "gemm",
    "DEFAULT_VARIANT",
    "Launch",
    "SweepResults",
    "TUNE",
    "CompileError",
    "PtxasReport",
    "Variant",
    "compile_offline",
    "families",
    "get_variant",
    "grouped_matmul",
    "matmul",
    "prepare",
    "reverse",
    "source",
    "stencil3x3",
    "sum",
    "sweep",
    "transpose",
    "tune",
    "variants",
    "__version__",
]


def __getattr__(name: str) -> object:
    """``sweep``, ``tune`` and ``SweepResults`` live with the tools (``xgemm.tools.tuning``,
    which imports the benchmark): imported on first use, so that ``import xgemm`` loads
    none of the tools."""
    if name in ("sweep", "tune", "SweepResults"):
        from .tools import tuning

        return getattr(tuning, name)
    raise AttributeError(f"module 'xgemm' has no attribute {name!r}")
