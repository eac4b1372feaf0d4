"""Shared test helpers. GPU tests carry the `gpu` marker and skip, with the reason,
where no CUDA device can be used; everything else runs anywhere."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from xgemm.gpu import gpu_unavailable
from xgemm.tools import tolerances


class FakeGpuArray:
    """Looks like a GPU array to xgemm's checks (the CUDA array interface), pointing at no
    memory at all: for the checks that must refuse bad input before any GPU work."""

    def __init__(self, shape, typestr="<f4"):
        self.shape = shape
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (0, False), "strides": None, "version": 3,
        }


@pytest.fixture
def no_cupy(monkeypatch):
    """``import cupy`` fails during the test, as where CuPy is not installed: a check that
    must refuse bad input before any GPU work shows that it needs no CuPy either."""
    monkeypatch.setitem(sys.modules, "cupy", None)


def gpu_count() -> int:
    """How many CUDA GPUs CuPy sees here (0 without CuPy or a driver)."""
    if gpu_unavailable() is not None:
        return 0
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def pytest_collection_modifyitems(config, items):
    reason = gpu_unavailable()
    count = gpu_count()
    skip_gpu = pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}")
    skip_two = pytest.mark.skip(reason=f"needs two CUDA GPUs: this machine has {count}")
    for item in items:
        if "gpu" in item.keywords and reason is not None:
            item.add_marker(skip_gpu)
        elif "multigpu" in item.keywords and count < 2:
            item.add_marker(skip_two)


def pytest_report_header(config):
    reason = gpu_unavailable()
    if reason:
        return f"xgemm: GPU tests will be skipped: {reason}"
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    return f"xgemm: GPU tests run on {name}"


@pytest.fixture(autouse=True)
def private_tuning_file(tmp_path, monkeypatch):
    """No test reads or writes the user's tuning file; what a test tuned (and the plans
    ``auto`` made from it) does not outlive it."""
    path = tmp_path / "tuned.json"
    monkeypatch.setenv("XGEMM_TUNE_CACHE", str(path))
    yield
    if path.exists():
        forget_plans()


def forget_plans() -> None:
    """Drop every plan (the grouped product's too) and every cached choice of ``auto``."""
    from xgemm import choice, grouped, plan

    plan.PLANS.clear()
    grouped.GROUPED_PLANS.clear()
    choice.forget()


@pytest.fixture
def fresh_plans():
    """For a test that changes what the GPU answers (monkeypatched): it plans afresh, and
    its plans do not outlive it."""
    forget_plans()
    yield
    forget_plans()


DTYPES = ("float64", "float32", "float16", "bfloat16")
#: Relative Frobenius error allowed per dtype, against float64 of the (rounded) inputs:
#: the "float64" row of xgemm.tools.tolerances.TOLERANCE, the one table of them.
REFERENCE_TOLERANCE = {dtype: tolerances.TOLERANCE["float64"][dtype] for dtype in DTYPES}
#: ... and for a variant that rounds float32 inputs to TF32 (10-bit mantissas).
TF32_TOLERANCE = tolerances.TOLERANCE["float64"]["tf32"]


def tolerance(name: str, dtype: str) -> float:
    """The error allowed variant ``name`` in ``dtype``: the dtype's, or TF32's for a rung
    that runs float32 as TF32."""
    import xgemm

    if xgemm.get_variant(name).precision == "tf32":
        return TF32_TOLERANCE
    return REFERENCE_TOLERANCE[dtype]


def cupy_dtype(name: str):
    """The dtype object for ``name`` (bfloat16 is ml_dtypes')."""
    from xgemm.specs import numpy_dtype

    return numpy_dtype(name)


class Rng:
    """Fresh random inputs for every test; the seed is kept so a failure can be replayed."""

    def __init__(self) -> None:
        self.seed = int(np.random.SeedSequence().entropy % 2**63)
        self._gen = None

    def array(self, shape, dtype: str = "float32"):
        """Standard normal values in ``dtype`` (drawn in float32, then rounded)."""
        import cupy

        if self._gen is None:
            self._gen = cupy.random.default_rng(self.seed)
        x = self._gen.standard_normal(shape, dtype=cupy.float32)
        return x.astype(cupy_dtype(dtype))

    def matrix(self, rows: int, cols: int, order: str = "C", dtype: str = "float32"):
        """A (rows, cols) matrix: C-ordered, or with order="F" a transposed view of a
        C-ordered (cols, rows) one, so column-major."""
        if order == "F":
            return self.array((cols, rows), dtype).T
        return self.array((rows, cols), dtype)


@pytest.fixture
def rng() -> Rng:
    return Rng()


def f64(x):
    import cupy

    return cupy.asarray(x).astype(cupy.float64)


def frobenius_error(c, ref) -> float:
    """||c - ref||_F / ||ref||_F in float64 (absolute if ref is 0). NaN anywhere in c gives
    NaN, which fails every `<` comparison."""
    import cupy

    diff = float(cupy.linalg.norm((f64(c) - f64(ref)).ravel()))
    scale = float(cupy.linalg.norm(f64(ref).ravel()))
    return diff / scale if scale > 0 else diff


def relative_error(c, a, b) -> float:
    """The error of c against a @ b, the reference computed in float64 from the inputs
    as they are (already rounded to their dtype)."""
    import cupy

    return frobenius_error(c, cupy.matmul(f64(a), f64(b)))


def poisoned(*shape, dtype: str = "float32"):
    """An output buffer full of NaN, so an element the kernel never writes shows up (an
    integer one: its most negative value, which no sum in the tests reaches)."""
    import cupy

    kind = cupy_dtype(dtype)
    if kind.kind == "i":
        return cupy.full(shape, np.iinfo(kind).min, dtype=kind)
    return cupy.full(shape, cupy.nan, dtype=cupy.float32).astype(kind)


def home_dtype(name: str) -> str:
    """The dtype a test that is not about dtypes runs variant ``name`` in: float32 where
    it takes float32 (the tensor-core rungs take 16-bit types only)."""
    import xgemm

    dtypes = xgemm.get_variant(name).dtypes
    return "float32" if "float32" in dtypes else dtypes[0]


def b_order(name: str) -> str:
    """B's order for variant ``name`` where a test's layout leaves it free: column-major
    ("F") where the variant reads no row-major B, else row-major ("C")."""
    import xgemm

    return "C" if "row" in xgemm.get_variant(name).b_layouts else "F"


def float_variants() -> list[str]:
    """The GEMM variants that multiply float32, float64, float16 or bfloat16: every rung but
    the 8-bit one, whose inputs name their format and whose results have another dtype
    (tests/test_eight_bit.py walks it)."""
    import xgemm

    return [name for name in xgemm.variants() if set(xgemm.get_variant(name).dtypes) & set(DTYPES)]


def variant_dtypes(dtypes=DTYPES) -> list[tuple[str, str]]:
    """(variant, dtype) for every GEMM variant and each of ``dtypes`` it multiplies: what a
    test over variants and dtypes runs. A dtype a variant lacks is refused before any GPU
    work (tests/test_validation.py checks that, once)."""
    import xgemm

    return [(name, dtype) for name in xgemm.variants() for dtype in dtypes
            if dtype in xgemm.get_variant(name).dtypes]


def tma_pads(v, name: str, x) -> bool:
    """Whether TMA rung ``v`` reads operand ``name`` (``x``) from a padded copy: where its
    start, leading dimension or batch stride is not a multiple of 16 bytes. Rung 34 reads
    any start and leading dimension; its batch stride too must be whole 16 bytes."""
    from xgemm.checks import layout_of

    layout = layout_of(x.shape, x.strides, x.itemsize)
    if layout is None:  # no unit stride: copied anyway
        return True
    if f"tensor_maps_{name}" in v.extra_args:
        return layout.batch_stride * x.itemsize % 16 != 0
    return x.data.ptr % 16 != 0 or any(s * x.itemsize % 16
                                       for s in (layout.ld, layout.batch_stride))


def tma_copies(name, a, b) -> tuple[str, ...]:
    """The operands a TMA rung must copy (with padded rows): those whose rows it cannot
    read (:func:`tma_pads`). Every other rung reads every operand here in place, and
    rung 33's split writes the lines TMA reads itself."""
    import xgemm
    from xgemm.parts import reads_parts

    v = xgemm.get_variant(name)
    if not v.tma or reads_parts(v) or a.shape[-1] == 0:
        return ()
    return tuple(label for label, x in (("a", a), ("b", b))
                 if tma_pads(v, label, x))


def auto_copies(launch, a, b) -> tuple[str, ...]:
    """The operands of a single product that auto's pick must copy: those its
    ``transpose_first`` moves into the other layout, and, for a TMA rung, those read in
    place whose rows TMA cannot read (padded), unless its split writes them."""
    import xgemm.gpu
    from xgemm.checks import layout_of
    from xgemm.parts import reads_parts

    v, p = launch.variant, launch.params
    m, k = a.shape[-2:]
    n = b.shape[-1]
    copies = []
    for name, x in (("a", a), ("b", b)):
        layout = layout_of(x.shape, x.strides, x.itemsize)
        read = "col" if layout.col else "row"
        into = v.transposed_into(name, p, m, n, k, xgemm.gpu.multiprocessors(0))
        pads = v.tma and not reads_parts(v) and k > 0
        if into not in (None, read) or (into is None and pads
                                        and tma_pads(v, name, x)):
            copies.append(name)
    return tuple(copies)
