"""xgemm.grouped_matmul: its checks (no GPU) and rung 29's products against a float64 loop
over the groups (GPU)."""

from __future__ import annotations

import pytest
from conftest import TOLERANCE

import xgemm
from xgemm.checks.grouped import Operand, check_grouped


def op(shape, strides, dtype="bfloat16", ptr=0):
    return Operand(tuple(shape), tuple(strides), dtype, ptr)


def contiguous(shape, dtype="bfloat16"):
    item = 4 if dtype == "int32" else 2
    strides, step = [], item
    for extent in reversed(shape):
        strides.insert(0, step)
        step *= extent
    return op(shape, strides, dtype)


# -- no GPU needed ----------------------------------------------------------------------------
@pytest.mark.parametrize("a, b, ends, error, match", [
    (contiguous((64, 32)), contiguous((32, 16)), contiguous((1,), "int32"), ValueError,
     r"2-D A \(tokens x K\) by a 3-D B"),
    (contiguous((64, 32), "float16"), contiguous((4, 32, 16)), contiguous((4,), "int32"),
     TypeError, "of one dtype; got A float16 and B bfloat16"),
    (contiguous((64, 32), "float32"), contiguous((4, 32, 16), "float32"),
     contiguous((4,), "int32"), TypeError, "float16 or bfloat16"),
    (contiguous((64, 32)), contiguous((4, 32, 16)), contiguous((4,), "int64"), TypeError,
     "1-D int32 array"),
    (contiguous((64, 32)), contiguous((4, 40, 16)), contiguous((4,), "int32"), ValueError,
     "K = 32 values and B's matrices K = 40"),
    (contiguous((64, 32)), contiguous((4, 32, 16)), contiguous((3,), "int32"), ValueError,
     "4 matrices .* and offs 3 ends"),
    (contiguous((64, 36)), contiguous((4, 36, 16)), contiguous((4,), "int32"), ValueError,
     "16-byte boundaries: A's rows are 36 bfloat16 values apart"),
    (contiguous((64, 32)), op((4, 32, 12), (0, 24, 2)), contiguous((4,), "int32"), ValueError,
     "16-byte boundaries: B's rows"),
    (contiguous((64, 32)), op((4, 32, 16), (0, 32, 2)), contiguous((4,), "int32"), ValueError,
     "share one matrix"),
    (op((64, 32), (64, 4)), contiguous((4, 32, 16)), contiguous((4,), "int32"), ValueError,
     "neither row- nor column-major"),
])
def test_bad_grouped_operands_are_refused_with_the_fix(a, b, ends, error, match):
    with pytest.raises(error, match=match):
        check_grouped(a, b, ends)


def test_grouped_layouts_and_misaligned_start():
    """A transposed A and a K-major B are read in place; an address off a 16-byte
    boundary is refused."""
    shapes = check_grouped(op((64, 32), (2, 128)), op((4, 32, 16), (1024, 2, 64)),
                           contiguous((4,), "int32"))
    assert shapes.a.col and shapes.b.col and shapes.b.batch_stride == 512
    with pytest.raises(ValueError, match="starts 8 bytes past a boundary"):
        check_grouped(op((64, 32), (64, 2), ptr=8), contiguous((4, 32, 16)),
                      contiguous((4,), "int32"))


@pytest.mark.parametrize("kwargs, match", [
    ({"bias": object()}, "no bias or out_dtype yet"),
    ({"out_dtype": "float32"}, "no bias or out_dtype yet"),
])
def test_grouped_refuses_what_it_does_not_do_yet(kwargs, match):
    with pytest.raises(ValueError, match=match):
        xgemm.grouped_matmul(object(), object(), object(), **kwargs)


def test_grouped_along_k_is_not_yet_supported():
    torch = pytest.importorskip("torch")
    with pytest.raises(NotImplementedError, match="groups along K"):
        xgemm.grouped_matmul(torch.ones(8, 16), torch.ones(16, 4),
                             offs=torch.tensor([16], dtype=torch.int32))


def test_grouped_needs_gpu_arrays():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="a is not a GPU array"):
        xgemm.grouped_matmul(torch.ones(8, 16), torch.ones(2, 16, 8),
                             offs=torch.tensor([3, 8], dtype=torch.int32))


# -- on the GPU -------------------------------------------------------------------------------
def _hopper():
    from xgemm import gpu

    if gpu.compute_capability(0) != 90:
        pytest.skip("rung 29 runs on Hopper (sm_90a) only")


def _reference(x, w, counts):
    """The float64 loop over the groups a user would write, rows past the last group zero."""
    import torch

    out = torch.zeros(x.shape[0], w.shape[-1], dtype=torch.float64, device=x.device)
    start = 0
    for g, rows in enumerate(counts):
        out[start:start + rows] = x[start:start + rows].double() @ w[g].double()
        start += rows
    return out


def _error(c, ref):
    import torch

    return float(torch.linalg.norm(c.double() - ref) / max(torch.linalg.norm(ref), 1e-30))


GROUP_CASES = {
    "empty groups": ([300, 0, 212, 1024, 7, 501, 0, 50], 2048, 768),
    "one-row groups": ([1, 1, 1, 129, 1], 512, 256),
    "all in one group": ([0, 0, 1000, 0], 256, 384),
    "one group": ([517], 1024, 200),
    "rows past the last end": ([100, 60], 256, 136),
    "256 groups": ([(g * 37) % 53 for g in range(256)], 512, 128),
}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("b_k_major", [False, True], ids=["B_row", "B_col"])
@pytest.mark.parametrize("case", list(GROUP_CASES), ids=list(GROUP_CASES))
def test_grouped_matches_a_float64_loop(case, b_k_major, dtype):
    """Every group's rows against a float64 loop, the result's memory poisoned with NaN
    first (the caching allocator hands the freed block back), so a row never written or
    written twice by the wrong group shows."""
    torch = pytest.importorskip("torch")
    _hopper()
    counts, k, n = GROUP_CASES[case]
    extra = 40 if case == "rows past the last end" else 0
    rows = sum(counts) + extra
    dt = getattr(torch, dtype)
    gen = torch.Generator("cuda").manual_seed(7)
    x = torch.randn(rows, k, device="cuda", dtype=dt, generator=gen)
    if b_k_major:
        w = torch.randn(len(counts), n, k, device="cuda", dtype=dt, generator=gen).transpose(1, 2)
    else:
        w = torch.randn(len(counts), k, n, device="cuda", dtype=dt, generator=gen)
    ends = torch.tensor(counts, device="cuda").cumsum(0).int()
    poison = torch.full((rows, n), float("nan"), device="cuda", dtype=dt)
    del poison
    got = xgemm.grouped_matmul(x, w, offs=ends)
    assert got.shape == (rows, n) and got.dtype == dt
    assert _error(got, _reference(x, w, counts)) < TOLERANCE[dtype]
    if extra:
        assert not got[sum(counts):].any()


@pytest.mark.gpu
def test_grouped_on_cupy_arrays_and_a_transposed_a():
    """CuPy arrays in, a CuPy array out; A read column-major (a transposed view)."""
    cupy = pytest.importorskip("cupy")
    _hopper()
    rng = cupy.random.default_rng(3)
    counts = [70, 0, 130, 56]
    x = rng.standard_normal((256, 512), dtype=cupy.float32).astype(cupy.float16)
    x_t = cupy.asfortranarray(x)  # the same values, column-major
    w = rng.standard_normal((4, 512, 192), dtype=cupy.float32).astype(cupy.float16)
    ends = cupy.asarray(counts, dtype=cupy.int32).cumsum().astype(cupy.int32)
    ref = cupy.zeros((256, 192))
    start = 0
    for g, r in enumerate(counts):
        ref[start:start + r] = x[start:start + r].astype(cupy.float64) @ w[g].astype(cupy.float64)
        start += r
    for a in (x, x_t):
        got = xgemm.grouped_matmul(a, w, offs=ends)
        assert isinstance(got, cupy.ndarray)
        error = float(cupy.linalg.norm(got.astype(cupy.float64) - ref) / cupy.linalg.norm(ref))
        assert error < TOLERANCE["float16"]


@pytest.mark.gpu
def test_grouped_graph_replays_with_other_group_sizes():
    """One CUDA graph of the call, replayed after the ends changed on the GPU: each replay
    multiplies the groups the ends say then."""
    torch = pytest.importorskip("torch")
    _hopper()
    gen = torch.Generator("cuda").manual_seed(11)
    x = torch.randn(1024, 256, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(8, 256, 320, device="cuda", dtype=torch.bfloat16, generator=gen)
    ends = torch.empty(8, device="cuda", dtype=torch.int32)
    first, second = [128] * 8, [0, 1000, 0, 3, 0, 0, 21, 0]
    ends.copy_(torch.tensor(first).cumsum(0).int())
    xgemm.grouped_matmul(x, w, offs=ends)  # planned and compiled outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = xgemm.grouped_matmul(x, w, offs=ends)
    for counts in (first, second, first):
        ends.copy_(torch.tensor(counts).cumsum(0).int())
        graph.replay()
        torch.cuda.synchronize()
        assert _error(out, _reference(x, w, counts)) < TOLERANCE["bfloat16"]


@pytest.mark.gpu
def test_grouped_without_offs_is_the_batched_product():
    torch = pytest.importorskip("torch")
    gen = torch.Generator("cuda").manual_seed(5)
    a = torch.randn(3, 100, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(3, 64, 48, device="cuda", dtype=torch.bfloat16, generator=gen)
    got = xgemm.grouped_matmul(a, b)
    assert _error(got, a.double() @ b.double()) < TOLERANCE["bfloat16"]
