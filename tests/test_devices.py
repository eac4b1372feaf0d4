"""Operands on another GPU than the current one: every entry point runs where its arrays
are (the result, copies and workspaces there too, the kernel launched there on that GPU's
current stream), leaves the caller's current device as it was, and refuses arrays on two
GPUs with a ValueError before anything is compiled or launched. These need two GPUs; they
skip with the reason elsewhere (``test_one_device_names_each_gpu`` needs none)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from conftest import (
    REFERENCE_TOLERANCE,
    TF32_TOLERANCE,
    b_order,
    cupy_dtype,
    f64,
    float_variants,
    frobenius_error,
    home_dtype,
    tolerance,
)

import xgemm
from xgemm import memory_bound
from xgemm.checks import one_device
from xgemm.tools import bench

multigpu = pytest.mark.multigpu
#: (where the operands are, the current device): GPU 1 while 0 is current, and the reverse.
PLACES = [(1, 0), (0, 1)]
PLACE_IDS = ["operands_on_1-current_0", "operands_on_0-current_1"]


def on(device: int, shape, dtype: str = "float32", order: str = "C"):
    """Fresh standard normal values in ``dtype`` on GPU ``device`` (order "F": a transposed
    view of a C-ordered array, so column-major)."""
    import cupy

    with cupy.cuda.Device(device):
        gen = cupy.random.default_rng(int(np.random.SeedSequence().entropy % 2**63))
        if order == "F":
            shape = shape[:-2] + shape[:-3:-1]
        x = gen.standard_normal(shape, dtype=cupy.float32).astype(cupy_dtype(dtype))
        return cupy.swapaxes(x, -1, -2) if order == "F" else x


def error(c, expected, device: int) -> float:
    """The relative Frobenius error, computed on ``device`` (where both lie)."""
    import cupy

    with cupy.cuda.Device(device):
        return frobenius_error(c, expected)


def test_one_device_names_each_gpu():
    """No GPU needed: the refusal names every array's GPU and says how to move one."""
    gpu = [SimpleNamespace(device=SimpleNamespace(id=i)) for i in range(2)]
    assert one_device(a=gpu[1], b=gpu[1], out=None) == 1
    with pytest.raises(ValueError, match=r"different GPUs \(a on GPU 0, b on GPU 1, bias on "
                                         r"GPU 0\).*x = x.copy\(\)"):
        one_device(a=gpu[0], b=gpu[1], bias=gpu[0])


@multigpu
@pytest.mark.parametrize("where, current", PLACES, ids=PLACE_IDS)
@pytest.mark.parametrize("name", [*float_variants(), "auto"])
def test_every_variant_runs_where_its_operands_are(where, current, name):
    """Odd shapes (a TMA rung pads A's rows there, on the operands' GPU), every layout the
    variant reads; the result lies beside the operands, the current device is unchanged."""
    import cupy

    dtype = home_dtype(name) if name != "auto" else "float32"
    v = xgemm.get_variant(name if name != "auto" else "tiled")
    if not v.runs_on(int(cupy.cuda.Device(where).compute_capability)):
        pytest.skip(f"{name} does not run on GPU {where}")
    a, b = on(where, (127, 255), dtype), on(where, (255, 129), dtype, b_order(v.name))
    with cupy.cuda.Device(current):
        c = xgemm.matmul(a, b, variant=name)
        assert cupy.cuda.Device().id == current
    assert c.device.id == where
    tol = tolerance(name, dtype) if name != "auto" else REFERENCE_TOLERANCE[dtype]
    with cupy.cuda.Device(where):
        assert frobenius_error(c, f64(a) @ f64(b)) < tol


@multigpu
@pytest.mark.parametrize("where, current", PLACES, ids=PLACE_IDS)
def test_every_part_of_a_call_is_made_on_the_operands_gpu(where, current):
    """What a call allocates, each on the operands' GPU: copies of operands with no unit
    stride, padded rows for TMA, a strided bias's copy, the staging of an out that overlaps
    an input, split-K's workspace; gemm's c read and written there; auto in each dtype and
    with TF32; a Launch prepared under one current device and run under another."""
    import cupy

    def mat(rows, cols, dtype="float32", order="C"):
        return on(where, (rows, cols), dtype, order)

    cases = []  # (what, call, expected); the expected values computed on `where`
    with cupy.cuda.Device(where):  # the test's own arithmetic runs there
        a, b = mat(67, 2 * 45)[:, ::2], mat(45, 33)  # a has no unit stride: copied
        cases.append(("copied a", lambda: xgemm.matmul(a, b, variant="vectorized"),
                      f64(a) @ f64(b)))
        h, g = mat(129, 255, "float16"), mat(255, 130, "float16")  # rows TMA cannot read
        cases.append(("wgmma, padded rows", lambda: xgemm.matmul(h, g, variant="wgmma"),
                      f64(h) @ f64(g)))
        for dtype in ("float32", "float64", "float16", "bfloat16"):
            x, y = mat(300, 200, dtype), mat(200, 260, dtype)
            cases.append((f"auto {dtype}", lambda x=x, y=y: xgemm.matmul(x, y), f64(x) @ f64(y)))
        t, w = mat(256, 128), mat(192, 128)
        cases.append(("tf32", lambda: xgemm.matmul(t, w.T, precision="tf32"), f64(t) @ f64(w.T)))
        long_a, long_b = mat(64, 8192), mat(8192, 48)
        cases.append(("splitk", lambda: xgemm.matmul(long_a, long_b, variant="splitk"),
                      f64(long_a) @ f64(long_b)))
        batch, shared, bias = on(where, (3, 40, 50)), mat(50, 20), on(where, (20,))
        cases.append(("batch and bias", lambda: xgemm.matmul(batch, shared, bias=bias),
                      f64(batch) @ f64(shared) + f64(bias)))
        c, strided_bias = mat(67, 33), on(where, (66,))[::2]  # the bias is copied
        expected_gemm = 2.0 * (f64(a) @ f64(b)) + 0.5 * f64(c) + f64(strided_bias)
        overlap = mat(64, 64)
        expected_overlap = f64(overlap) @ f64(overlap)

    with cupy.cuda.Device(current):
        for what, call, expected in cases:
            got = call()
            assert got.device.id == where, what
            tol = TF32_TOLERANCE if what == "tf32" else REFERENCE_TOLERANCE[got.dtype.name]
            assert error(got, expected, where) < tol, what
        assert xgemm.gemm(a, b, c, alpha=2.0, beta=0.5, bias=strided_bias) is c
        assert error(c, expected_gemm, where) < REFERENCE_TOLERANCE["float32"]
        xgemm.matmul(overlap, overlap, out=overlap)  # through a staging array
        assert error(overlap, expected_overlap, where) < REFERENCE_TOLERANCE["float32"]
        launch = xgemm.prepare(h, g, out_dtype="float32")
        assert launch.device == where
        assert cupy.cuda.Device().id == current
    with cupy.cuda.Device(1 - where):  # run it from the other GPU too
        wide = launch()
    assert wide.device.id == where and wide.dtype == cupy.float32
    with cupy.cuda.Device(where):
        assert frobenius_error(wide, f64(h) @ f64(g)) < 1e-5


@multigpu
@pytest.mark.parametrize("where, current", PLACES, ids=PLACE_IDS)
@pytest.mark.parametrize("family", ["transpose", "reverse", "sum", "stencil"])
def test_memory_families_run_where_x_is(where, current, family):
    """Every variant of each memory-bound family; a stencil's host weights are uploaded to
    x's GPU; an input with no unit stride is copied there."""
    import cupy

    shape = (1001,) if family == "reverse" else (129, 77)
    x = on(where, shape)
    weights = np.random.default_rng().standard_normal((3, 3)).astype(np.float32)
    for name in xgemm.variants(family):
        with cupy.cuda.Device(current):
            args = (x, weights) if family == "stencil" else (x,)
            run = memory_bound.PLANNERS[family](*args, variant=name)
            got = run()
            assert cupy.cuda.Device().id == current
        assert run.device == where and got.device.id == where, name
        with cupy.cuda.Device(where):
            expected = {"transpose": lambda: x.T, "reverse": lambda: x[::-1],
                        "sum": lambda: f64(x).sum(),
                        "stencil": lambda: _correlate(x, cupy.asarray(weights))}[family]()
        assert error(got, expected, where) < 1e-5, name
    with cupy.cuda.Device(current):
        stepped = xgemm.sum(x[..., ::2])
    assert stepped.device.id == where


def _correlate(x, w):
    import cupy

    padded = cupy.pad(f64(x), 1)
    rows, cols = x.shape
    return sum(float(w[i, j]) * padded[i:i + rows, j:j + cols]
               for i in range(3) for j in range(3))


@multigpu
@pytest.mark.parametrize("where, current", PLACES, ids=PLACE_IDS)
def test_pytorch_tensors_on_another_gpu(where, current):
    """PyTorch runs an op on its tensors' GPU whatever the current one is: so does xgemm."""
    torch = pytest.importorskip("torch")
    import cupy

    a = torch.randn(300, 200, device=f"cuda:{where}", dtype=torch.float16)
    w = torch.randn(100, 200, device=f"cuda:{where}", dtype=torch.float16)
    bias = torch.randn(100, device=f"cuda:{where}", dtype=torch.float16)
    with cupy.cuda.Device(current), torch.cuda.device(current):
        c = xgemm.matmul(a, w.T, bias=bias, activation="relu")
    assert isinstance(c, torch.Tensor) and c.device == a.device  # PyTorch in, PyTorch out
    expected = torch.relu(a.double() @ w.double().T + bias.double())
    got = c.double()
    assert float((got - expected).norm() / expected.norm()) < REFERENCE_TOLERANCE["float16"]


@multigpu
def test_arrays_on_two_gpus_are_refused_before_anything_runs(monkeypatch):
    """a and b, out, c, bias (CuPy or PyTorch) and a stencil's weights on another GPU than
    the operands: a ValueError naming each one's GPU, nothing compiled, and CUDA still
    works on both GPUs afterwards."""
    import cupy

    def refuse(*args, **kwargs):
        raise AssertionError("compiled or launched before the devices were checked")

    monkeypatch.setattr("xgemm.plan.get_kernel", refuse)
    monkeypatch.setattr("xgemm.memory_bound.planning.get_kernel", refuse)
    a0, b0, b1 = on(0, (64, 32)), on(0, (32, 48)), on(1, (32, 48))
    out1, bias1, c1 = on(1, (64, 48)), on(1, (48,)), on(1, (64, 48))
    torch = pytest.importorskip("torch")
    calls = [
        ("a on GPU 0, b on GPU 1", lambda: xgemm.matmul(a0, b1)),
        ("a on GPU 0, b on GPU 0, out on GPU 1", lambda: xgemm.matmul(a0, b0, out=out1)),
        ("a on GPU 0, b on GPU 0, c on GPU 1", lambda: xgemm.gemm(a0, b0, c1, beta=1.0)),
        ("a on GPU 0, b on GPU 0, out on GPU 1, bias on GPU 1",
         lambda: xgemm.matmul(a0, b0, out=out1, bias=bias1)),
        ("a on GPU 0, b on GPU 0, bias on GPU 1", lambda: xgemm.prepare(a0, b0, bias=bias1)),
        ("a on GPU 0, b on GPU 0, bias on GPU 1",
         lambda: xgemm.matmul(a0, b0, bias=torch.randn(48, device="cuda:1"))),
        ("x on GPU 0, weights on GPU 1", lambda: xgemm.stencil3x3(a0, on(1, (3, 3)))),
    ]
    for where, call in calls:
        with pytest.raises(ValueError, match=rf"different GPUs \({where}\)"):
            call()
    for device in (0, 1):  # neither context was broken
        with cupy.cuda.Device(device):
            assert float((cupy.ones(4) * 2).sum()) == 8.0


@multigpu
@pytest.mark.parametrize("where, current", PLACES, ids=PLACE_IDS)
def test_sweep_runs_where_its_problem_is(where, current):
    """A sweep handed a problem on another GPU: cuBLAS, every point, the events that time
    them, all there."""
    import cupy

    with cupy.cuda.Device(where):
        problem = bench.Problem(200, 136, 72)
    with cupy.cuda.Device(current):
        results = xgemm.sweep("tiled", 200, 136, 72, problem=problem,
                              space={"tile": [8, 16]}, repeat=3)
        auto = bench.bench_variant(problem, "auto", repeat=3)
    assert [r.status for r in results] == ["ok", "ok"], [r.error for r in results]
    assert auto.ok, auto.error
