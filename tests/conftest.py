"""Shared test helpers. GPU tests carry the `gpu` marker and skip, with the reason,
where no CUDA device can be used; everything else runs anywhere."""

from __future__ import annotations

import numpy as np
import pytest

from xgemm.gpu import gpu_unavailable


def pytest_collection_modifyitems(config, items):
    reason = gpu_unavailable()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    reason = gpu_unavailable()
    if reason:
        return f"xgemm: GPU tests will be skipped: {reason}"
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    return f"xgemm: GPU tests run on {name}"


@pytest.fixture(autouse=True)
def private_tuning_file(tmp_path, monkeypatch):
    """No test reads or writes the user's tuning file."""
    monkeypatch.setenv("XGEMM_TUNE_CACHE", str(tmp_path / "tuned.json"))


class Rng:
    """Fresh random inputs for every test; the seed is kept so a failure can be replayed."""

    def __init__(self) -> None:
        self.seed = int(np.random.SeedSequence().entropy % 2**63)
        self._gen = None

    def matrix(self, rows: int, cols: int, order: str = "C"):
        import cupy

        if self._gen is None:
            self._gen = cupy.random.default_rng(self.seed)
        x = self._gen.standard_normal((rows, cols), dtype=cupy.float32)
        return cupy.asfortranarray(x) if order == "F" else x


@pytest.fixture
def rng() -> Rng:
    return Rng()


def relative_error(c, a, b) -> float:
    """||c - a @ b||_F / ||a @ b||_F with the reference in float64 (absolute if it is 0).
    NaN anywhere in c gives NaN, which fails every `<` comparison."""
    import cupy

    ref = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
    diff = float(cupy.linalg.norm(c.astype(cupy.float64) - ref))
    scale = float(cupy.linalg.norm(ref))
    return diff / scale if scale > 0 else diff


def poisoned(rows: int, cols: int):
    """An output buffer full of NaN, so an element the kernel never writes shows up."""
    import cupy

    return cupy.full((rows, cols), cupy.nan, dtype=cupy.float32)
