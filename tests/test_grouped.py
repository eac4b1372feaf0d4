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


def _spans(ends, rows):
    """Each group's rows as the kernel takes them: from the largest end so far (clamped to
    A's rows) to its own end, none where its end lies before; then the rows past them."""
    spans, start = [], 0
    for end in ends:
        stop = min(max(end, start), rows)
        spans.append((start, stop))
        start = stop
    return spans


def _check(got, x, w, ends, tolerance):
    """Every group's rows against its own float64 product (a group's error is not hidden
    in the others'), and the rows past the last group exactly zero."""
    import torch

    assert not torch.isnan(got).any()
    spans = _spans(ends, x.shape[0])
    for g, (start, stop) in enumerate(spans):
        if stop > start:
            ref = x[start:stop].double() @ w[g].double()
            part = got[start:stop].double()
            error = float(torch.linalg.norm(part - ref) / max(float(torch.linalg.norm(ref)),
                                                              1e-30))
            assert error < tolerance, (g, start, stop, error)
    assert not got[spans[-1][1] if spans else 0:].any()


# (group sizes, or ends where "ends" is in the name; K; N; extra rows past the last end;
# whether B may be row-major: its rows of N values must be whole 16-byte lines)
GROUP_CASES = {
    "empty groups": ([300, 0, 212, 1024, 7, 501, 0, 50], 2048, 768, 0, True),
    "one-row groups": ([1, 1, 1, 129, 1], 512, 256, 0, True),
    "all in one group": ([0, 0, 1000, 0], 256, 384, 0, True),
    "one group": ([517], 1024, 200, 0, True),
    "rows past the last end": ([100, 60], 256, 136, 40, True),
    "256 groups": ([(g * 37) % 53 for g in range(256)], 512, 128, 0, True),
    "K tail, odd N": ([90, 300, 0, 45], 200, 203, 0, False),
    "many tiles a block": ([700, 1300, 9, 2200, 0, 1500, 2000, 333], 320, 1024, 50, True),
    "unsorted ends": ("ends", [100, 50, 400, 380, 9999], 128, 64, 0, True),
}


def _case(name):
    case = GROUP_CASES[name]
    if case[0] == "ends":
        ends, k, n, _, b_row = case[1:]
        return ends, 450, k, n, b_row  # A's rows: the ends past them clamp to 450
    counts, k, n, extra, b_row = case
    ends = [sum(counts[:g + 1]) for g in range(len(counts))]
    return ends, sum(counts) + extra, k, n, b_row


def _operands(torch, rows, k, n, groups, dtype, b_k_major, a_col=False, seed=7):
    gen = torch.Generator("cuda").manual_seed(seed)
    dt = getattr(torch, dtype)
    if a_col:
        x = torch.randn(k, rows, device="cuda", dtype=dt, generator=gen).t()
    else:
        x = torch.randn(rows, k, device="cuda", dtype=dt, generator=gen)
    if b_k_major:
        w = torch.randn(groups, n, k, device="cuda", dtype=dt, generator=gen).transpose(1, 2)
    else:
        w = torch.randn(groups, k, n, device="cuda", dtype=dt, generator=gen)
    return x, w


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("b_k_major", [False, True], ids=["B_row", "B_col"])
@pytest.mark.parametrize("case", list(GROUP_CASES), ids=list(GROUP_CASES))
def test_grouped_matches_a_float64_loop(case, b_k_major, dtype):
    """Every group against its float64 product, the result's memory poisoned with NaN
    first (the caching allocator hands the freed block back), so a row never written or
    written by the wrong group shows."""
    torch = pytest.importorskip("torch")
    _hopper()
    ends, rows, k, n, b_row = _case(case)
    if not (b_k_major or b_row):
        pytest.skip("B's rows of N values are not whole 16-byte lines: TMA cannot read them")
    x, w = _operands(torch, rows, k, n, len(ends), dtype, b_k_major)
    offs = torch.tensor(ends, device="cuda", dtype=torch.int32)
    poison = torch.full((rows, n), float("nan"), device="cuda", dtype=x.dtype)
    del poison
    got = xgemm.grouped_matmul(x, w, offs=offs)
    assert got.shape == (rows, n) and got.dtype == x.dtype
    _check(got, x, w, ends, TOLERANCE[dtype])


@pytest.mark.gpu
@pytest.mark.parametrize("params", [{}, {"TMA_STORE": 0}, {"BM": 64, "CONSUMERS": 1,
                                                          "STAGES": 6}],
                         ids=["defaults", "C_from_registers", "BM64"])
@pytest.mark.parametrize("a_col", [False, True], ids=["A_row", "A_col"])
def test_grouped_points_and_a_column_major_a(params, a_col):
    """Other points of the rung (C stored from registers, 64-row tiles of one consumer)
    and A read column-major (a transposed view), with K-major B, on tiles enough that each
    block walks several groups."""
    torch = pytest.importorskip("torch")
    _hopper()
    ends, rows, k, n, _ = _case("many tiles a block")
    x, w = _operands(torch, rows, k, n, len(ends), "bfloat16", True, a_col=a_col)
    got = xgemm.grouped_matmul(x, w, offs=torch.tensor(ends, device="cuda",
                                                        dtype=torch.int32), params=params)
    _check(got, x, w, ends, TOLERANCE["bfloat16"])


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
        _check(out, x, w, [sum(counts[:g + 1]) for g in range(8)], TOLERANCE["bfloat16"])


@pytest.mark.gpu
def test_grouped_without_offs_is_the_batched_product():
    torch = pytest.importorskip("torch")
    gen = torch.Generator("cuda").manual_seed(5)
    a = torch.randn(3, 100, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(3, 64, 48, device="cuda", dtype=torch.bfloat16, generator=gen)
    got = xgemm.grouped_matmul(a, b)
    ref = a.double() @ b.double()
    assert float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref)) < \
        TOLERANCE["bfloat16"]
