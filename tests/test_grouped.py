"""xgemm.grouped_matmul: its checks (no GPU) and rung 29's products against a float64 loop
over the groups (GPU)."""

from __future__ import annotations

import pytest
from conftest import REFERENCE_TOLERANCE

import xgemm
from xgemm.checks.grouped import Operand, check_grouped, check_grouped_k


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
     TypeError, "of one dtype here; got A float16 and B bfloat16"),
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
    """A K-major B is read in place; a column-major A (its groups' lines would start off
    TMA's 16-byte boundaries) and an address off a 16-byte boundary are refused."""
    shapes = check_grouped(contiguous((64, 32)), op((4, 32, 16), (1024, 2, 64)),
                           contiguous((4,), "int32"))
    assert not shapes.a.col and shapes.b.col and shapes.b.batch_stride == 512
    with pytest.raises(ValueError, match=r"reads a groups-of-rows A .* pass a.contiguous\(\)"):
        check_grouped(op((64, 32), (2, 128)), contiguous((4, 32, 16)), contiguous((4,), "int32"))
    with pytest.raises(ValueError, match="starts 8 bytes past a boundary"):
        check_grouped(op((64, 32), (64, 2), ptr=8), contiguous((4, 32, 16)),
                      contiguous((4,), "int32"))


def test_fp8_grouped_checks():
    """FP8 groups of rows: A row-major and B K-major only, the scales' shapes, the
    outputs; FP8 along K and scales for 16-bit operands refused."""
    from xgemm.checks.grouped import check_grouped_scales

    e4m3 = "float8_e4m3fn"
    a, b_k = op((96, 64), (64, 1), e4m3), op((4, 64, 32), (2048, 1, 64), e4m3)
    ends = contiguous((4,), "int32")
    shapes = check_grouped(a, b_k, ends)
    with pytest.raises(ValueError, match="FP8 grouped products read B's matrices K-major"):
        check_grouped(a, op((4, 64, 32), (2048, 32, 1), e4m3), ends)
    with pytest.raises(TypeError, match="float16 or bfloat16 operands of one dtype here"):
        check_grouped_k(op((64, 96), (1, 64), e4m3), op((96, 32), (32, 1), e4m3), ends)
    vector = Operand((96,), (4,), "float32", 0)
    per_group = Operand((4,), (4,), "float32", 0)
    assert check_grouped_scales(vector, per_group, shapes) == ("vector", "tensor")
    # B's scales come one a group at least: a lone scalar is refused
    with pytest.raises(ValueError, match=r"scale_b must be .* of shape \(4,\) or \(4, 32\)"):
        check_grouped_scales(None, Operand((), (), "float32", 0), shapes)
    with pytest.raises(ValueError, match="scale_a must be a contiguous float32"):
        check_grouped_scales(Operand((96,), (4,), "float16", 0), None, shapes)
    with pytest.raises(TypeError, match="scales are for FP8 operands"):
        check_grouped_scales(vector, None, check_grouped(
            contiguous((96, 64)), contiguous((4, 64, 32)), ends))


def test_grouped_refuses_a_bias_scales_without_offs_and_other_out_dtypes():
    from xgemm.checks.grouped import check_out_dtype

    with pytest.raises(ValueError, match="no bias yet: add it to the result"):
        xgemm.grouped_matmul(object(), object(), object(), bias=object())
    # without offs, scales are refused, not dropped (the batched product takes none)
    three_d = type("ThreeD", (), {"shape": (2, 8, 8)})()
    with pytest.raises(ValueError, match="scales are applied to groups given by offs"):
        xgemm.grouped_matmul(three_d, three_d, scale_b=object())
    with pytest.raises(ValueError, match="as bfloat16 or float32 .*, not float16"):
        check_out_dtype("float16", "bfloat16")


@pytest.mark.parametrize("a, b, ends, match", [
    (op((64, 96), (192, 2)), contiguous((96, 32)), contiguous((4,), "int32"),
     "reads A column-major and B row-major"),
    (op((64, 96), (2, 128)), op((96, 32), (2, 192)), contiguous((4,), "int32"),
     "reads A column-major and B row-major"),
    (op((64, 96), (2, 128)), contiguous((90, 32)), contiguous((4,), "int32"),
     "A has 96 columns .* and B 90 rows"),
    (op((60, 96), (2, 120)), contiguous((96, 32)), contiguous((4,), "int32"),
     "A's columns are 60 bfloat16 values apart"),
])
def test_bad_operands_along_k_are_refused_with_the_fix(a, b, ends, match):
    with pytest.raises(ValueError, match=match):
        check_grouped_k(a, b, ends)


def test_grouped_needs_gpu_arrays():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="a is not a GPU array"):
        xgemm.grouped_matmul(torch.ones(8, 16), torch.ones(2, 16, 8),
                             offs=torch.tensor([3, 8], dtype=torch.int32))


@pytest.mark.parametrize("scale", ["scale_a", "scale_b"])
def test_grouped_scales_must_be_gpu_arrays_too(scale):
    """A scale on the host would hand the kernel a host address: refused, named, before
    anything runs."""
    import numpy as np
    from conftest import FakeGpuArray

    from xgemm.checks.grouped import check_grouped_arrays

    arrays = (FakeGpuArray((8, 16)), FakeGpuArray((2, 16, 8)), FakeGpuArray((2,), "<i4"))
    with pytest.raises(TypeError, match=f"{scale} is not a GPU array"):
        check_grouped_arrays(*arrays, **{scale: np.ones(2, dtype=np.float32)})


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


def _operands(torch, rows, k, n, groups, dtype, b_k_major, seed=7):
    gen = torch.Generator("cuda").manual_seed(seed)
    dt = getattr(torch, dtype)
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
    _check(got, x, w, ends, REFERENCE_TOLERANCE[dtype])


@pytest.mark.gpu
@pytest.mark.parametrize("params", [{}, {"TMA_STORE": 0}, {"BM": 64, "BN": 128,
                                                          "CONSUMERS": 1, "STAGES": 6}],
                         ids=["defaults", "C_from_registers", "BM64"])
def test_grouped_points(params):
    """Other points of the rung (C stored from registers, 64-row tiles of one consumer),
    with K-major B, on tiles enough that each block walks several groups."""
    torch = pytest.importorskip("torch")
    _hopper()
    ends, rows, k, n, _ = _case("many tiles a block")
    x, w = _operands(torch, rows, k, n, len(ends), "bfloat16", True)
    got = xgemm.grouped_matmul(x, w, offs=torch.tensor(ends, device="cuda",
                                                        dtype=torch.int32), params=params)
    _check(got, x, w, ends, REFERENCE_TOLERANCE["bfloat16"])


@pytest.mark.gpu
def test_a_grouped_signature_is_checked_once(monkeypatch):
    """A later call with the signature of an earlier one (other arrays, other group
    ends) finds its plan and runs with no check repeated; a new signature is checked."""
    torch = pytest.importorskip("torch")
    _hopper()
    from xgemm import grouped

    ends, rows, k, n, _ = _case("empty groups")
    x, w = _operands(torch, rows, k, n, len(ends), "bfloat16", False)
    offs = torch.tensor(ends, device="cuda", dtype=torch.int32)
    xgemm.grouped_matmul(x, w, offs=offs)

    def refused(*args, **kwargs):
        raise AssertionError("a planned signature was checked again")

    monkeypatch.setattr(grouped, "check_grouped_arrays", refused)
    x2, w2 = _operands(torch, rows, k, n, len(ends), "bfloat16", False, seed=8)
    other = sorted((e * 7) % (rows + 1) for e in ends)
    got = xgemm.grouped_matmul(x2, w2, offs=torch.tensor(other, device="cuda",
                                                         dtype=torch.int32))
    _check(got, x2, w2, other, REFERENCE_TOLERANCE["bfloat16"])
    with pytest.raises(AssertionError, match="checked again"):  # a new signature
        xgemm.grouped_matmul(x2[:-1], w2, offs=offs)


@pytest.mark.gpu
def test_grouped_on_cupy_arrays():
    """CuPy arrays in, a CuPy array out."""
    cupy = pytest.importorskip("cupy")
    _hopper()
    rng = cupy.random.default_rng(3)
    counts = [70, 0, 130, 56]
    x = rng.standard_normal((256, 512), dtype=cupy.float32).astype(cupy.float16)
    w = rng.standard_normal((4, 512, 192), dtype=cupy.float32).astype(cupy.float16)
    ends = cupy.asarray(counts, dtype=cupy.int32).cumsum().astype(cupy.int32)
    ref = cupy.zeros((256, 192))
    start = 0
    for g, r in enumerate(counts):
        ref[start:start + r] = x[start:start + r].astype(cupy.float64) @ w[g].astype(cupy.float64)
        start += r
    got = xgemm.grouped_matmul(x, w, offs=ends)
    assert isinstance(got, cupy.ndarray)
    error = float(cupy.linalg.norm(got.astype(cupy.float64) - ref) / cupy.linalg.norm(ref))
    assert error < REFERENCE_TOLERANCE["float16"]


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
        _check(out, x, w, [sum(counts[:g + 1]) for g in range(8)], REFERENCE_TOLERANCE["bfloat16"])


# groups along K: (the groups' ends, tokens, M, N)
ALONG_K_CASES = {
    "empty groups, tails": ([300, 300, 512, 1512, 1519, 2020, 2020, 2070], 2070, 256, 192),
    "one-token groups": ([1, 2, 67, 68, 69], 69, 128, 128),
    "all in one group": ([0, 0, 1000, 1000], 1000, 320, 136),
    "tokens past the last end": ([100, 160, 360], 397, 128, 256),
    "unsorted, past T": ([200, 90, 450, 420, 9999], 700, 192, 64),
    # C's rows not whole 16-byte lines (dY's are: a slice of rows of 104)
    "odd N": ([130, 130, 400], 400, 128, 100),
}


def _along_k_reference(x, dy, ends):
    """Each group's float64 dW over its tokens (as the kernels take them: _spans)."""
    import torch

    out = torch.zeros(len(ends), x.shape[1], dy.shape[1], dtype=torch.float64, device=x.device)
    for g, (start, stop) in enumerate(_spans(ends, x.shape[0])):
        out[g] = x[start:stop].double().t() @ dy[start:stop].double()
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("params", [{}, {"TMA_STORE": 0}, {"TMA_STORE": 2},
                                    {"BM": 64, "CONSUMERS": 1, "STAGES": 6},
                                    {"BN": 64}, {"CONSUMERS": 1}, {"STAGES": 2}],
                         ids=["defaults", "C_from_registers", "C_lined", "BM64", "BN64",
                              "one_consumer", "two_stages"])
@pytest.mark.parametrize("case", list(ALONG_K_CASES), ids=list(ALONG_K_CASES))
def test_grouped_along_k_matches_a_float64_loop(case, params):
    """The weight gradient's products: each group's matrix against its float64 product
    over its own tokens, a group with no tokens exactly zero, the result poisoned with NaN
    first. A group's last slot holds the next group's tokens: the tokens past the last
    end are NaN in x (and, below, in dy), so any of them left unzeroed shows."""
    torch = pytest.importorskip("torch")
    _hopper()
    ends, tokens, m, n = ALONG_K_CASES[case]
    gen = torch.Generator("cuda").manual_seed(13)
    x = torch.randn(tokens, m, device="cuda", dtype=torch.bfloat16, generator=gen)
    dy = torch.randn(tokens, -(-n // 8) * 8, device="cuda", dtype=torch.bfloat16,
                     generator=gen)[:, :n]  # rows on 16 bytes, as TMA reads them
    offs = torch.tensor(ends, device="cuda", dtype=torch.int32)
    ref = _along_k_reference(x, dy, ends)
    last = _spans(ends, tokens)[-1][1]
    for poisoned in (x, dy) if last < tokens else (None,):
        if poisoned is not None:
            poisoned[last:] = float("nan")
        poison = torch.full((len(ends), m, n), float("nan"), device="cuda",
                            dtype=torch.bfloat16)
        del poison
        got = xgemm.grouped_matmul(x.t(), dy, offs=offs, params=params)
        for g in range(len(ends)):
            norm = float(torch.linalg.norm(ref[g]))
            if norm == 0:
                assert not got[g].any(), g
            else:
                error = float(torch.linalg.norm(got[g].double() - ref[g])) / norm
                assert error < REFERENCE_TOLERANCE["bfloat16"], (g, error)
        if poisoned is not None:
            poisoned[last:] = 0.0


@pytest.mark.gpu
@pytest.mark.parametrize("along_k", [False, True], ids=["groups_of_rows", "groups_along_k"])
def test_grouped_float32_results(along_k):
    """out_dtype=float32: the sums unrounded, from registers, for both rungs."""
    torch = pytest.importorskip("torch")
    _hopper()
    counts = [130, 0, 77, 300]
    ends = torch.tensor(counts, device="cuda").cumsum(0).int()
    gen = torch.Generator("cuda").manual_seed(17)
    x = torch.randn(507, 192, device="cuda", dtype=torch.bfloat16, generator=gen)
    if along_k:
        dy = torch.randn(507, 136, device="cuda", dtype=torch.bfloat16, generator=gen)
        got = xgemm.grouped_matmul(x.t(), dy, offs=ends, out_dtype=torch.float32)
        assert got.dtype == torch.float32 and got.shape == (4, 192, 136)
        start = 0
        for g, size in enumerate(counts):
            ref = x[start:start + size].double().t() @ dy[start:start + size].double()
            assert float(torch.linalg.norm(got[g].double() - ref)) <= \
                REFERENCE_TOLERANCE["float32"] * max(float(torch.linalg.norm(ref)), 1.0)
            start += size
    else:
        w = torch.randn(4, 192, 136, device="cuda", dtype=torch.bfloat16, generator=gen)
        got = xgemm.grouped_matmul(x, w, offs=ends, out_dtype=torch.float32)
        assert got.dtype == torch.float32
        _check(got, x, w, ends.tolist(), REFERENCE_TOLERANCE["float32"])


FP8_CASES = {  # scales, output, format, the rung's point
    "row_and_column_scales": ("vector", "bfloat16", "float8_e4m3fn", {}),
    "scales_staged": ("vector", "bfloat16", "float8_e4m3fn", {"BN": 256, "STAGES": 3}),
    "from_registers_float16": ("vector", "float16", "float8_e5m2", {"TMA_STORE": 0}),
    "one_scale_each_float32": ("tensor", "float32", "float8_e4m3fn", {}),
    "no_scales": ("none", "bfloat16", "float8_e5m2", {}),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(FP8_CASES), ids=list(FP8_CASES))
def test_fp8_grouped_matches_its_dequantised_float64_product(case):
    """FP8 groups of rows (rung 29 on rung 18's kernel), each group against the float64
    product of its dequantised operands times the scales, rows past the last end zero:
    each scaling, each output, both formats, the scales staged in shared memory (256
    columns a tile) and read from registers."""
    from xgemm.tools.tolerances import TOLERANCE

    torch = pytest.importorskip("torch")
    _hopper()
    scales, out, fmt, params = FP8_CASES[case]
    counts, extra, k, n = [200, 0, 1, 333, 90], 30, 256, 384
    rows = sum(counts) + extra
    gen = torch.Generator("cuda").manual_seed(19)
    x = torch.randn(rows, k, device="cuda", generator=gen).to(getattr(torch, fmt))
    w = torch.randn(len(counts), n, k, device="cuda", generator=gen).to(
        getattr(torch, fmt)).transpose(1, 2)  # K-major: (G, N, K) stored
    ends = torch.tensor(counts, device="cuda").cumsum(0).int()
    scale_a = scale_b = None
    if scales == "tensor":
        scale_a = torch.tensor(0.5, device="cuda")
        scale_b = torch.rand(len(counts), device="cuda", generator=gen) + 0.5
    elif scales == "vector":
        scale_a = torch.rand(rows, device="cuda", generator=gen) + 0.5
        scale_b = torch.rand(len(counts), n, device="cuda", generator=gen) + 0.5
    got = xgemm.grouped_matmul(x, w, offs=ends, scale_a=scale_a, scale_b=scale_b,
                               out_dtype=getattr(torch, out), params=params)
    assert got.dtype == getattr(torch, out) and got.shape == (rows, n)
    start = 0
    for g, size in enumerate(counts):
        if size:
            part = x[start:start + size].double() @ w[g].double()
            if scale_a is not None:
                part = part * (scale_a.double() if scale_a.dim() == 0
                               else scale_a[start:start + size, None].double())
            if scale_b is not None:
                part = part * scale_b[g].double()
            error = float(torch.linalg.norm(got[start:start + size].double() - part)
                          / torch.linalg.norm(part))
            assert error < TOLERANCE["8-bit"][out], (g, error)
        start += size
    assert not got[start:].any()


@pytest.mark.gpu
@pytest.mark.parametrize("along_k", [False, True], ids=["groups_of_rows", "groups_along_k"])
def test_grouped_gradients_on_the_gpu(along_k):
    """x.grad and w.grad through the operator's backward (the grouped products in the
    layouts it builds) against float64 autograd of the same loop, the ends out of order."""
    torch = pytest.importorskip("torch")
    _hopper()
    ends = [300, 120, 512, 700, 640, 900]  # 960 rows or tokens: 60 past the last group
    offs = torch.tensor(ends, device="cuda", dtype=torch.int32)
    gen = torch.Generator("cuda").manual_seed(23)
    if along_k:  # a = x.t() (M x T), b = dy (T x N): C is G x M x N
        x = torch.randn(960, 192, device="cuda", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(960, 136, device="cuda", dtype=torch.bfloat16, generator=gen)
        a = x.t()
    else:  # a (T x K), b = w.transpose of a (G, N, K) weight
        a = torch.randn(960, 256, device="cuda", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(len(ends), 192, 256, device="cuda", dtype=torch.bfloat16,
                        generator=gen).transpose(1, 2)
    a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
    got = xgemm.grouped_matmul(a, b, offs=offs)
    weight = torch.randn(got.shape, device="cuda", generator=gen)
    (got.float() * weight).sum().backward()
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    spans = _spans(ends, 960)
    if along_k:
        want = torch.stack([a64[:, s:e] @ b64[s:e] for s, e in spans])
    else:
        want = torch.zeros(960, b.shape[-1], dtype=torch.float64, device="cuda")
        want = torch.cat([a64[s:e] @ b64[g] for g, (s, e) in enumerate(spans)]
                         + [want[spans[-1][1]:]])
    (want * weight.double()).sum().backward()
    for grad, ref in ((a.grad, a64.grad), (b.grad, b64.grad)):
        assert grad.shape == ref.shape
        error = float(torch.linalg.norm(grad.double() - ref) / torch.linalg.norm(ref))
        assert error < REFERENCE_TOLERANCE["bfloat16"], error


@pytest.mark.gpu
def test_grouped_without_offs_is_the_batched_product():
    torch = pytest.importorskip("torch")
    gen = torch.Generator("cuda").manual_seed(5)
    a = torch.randn(3, 100, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(3, 64, 48, device="cuda", dtype=torch.bfloat16, generator=gen)
    got = xgemm.grouped_matmul(a, b)
    ref = a.double() @ b.double()
    assert float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref)) < \
        REFERENCE_TOLERANCE["bfloat16"]


# -- the PyTorch operator's backward, on the CPU ------------------------------------------------
@pytest.fixture
def grouped_cpu_reference():
    """The grouped operator on CPU tensors, a loop over the groups as each rung defines
    them (both kinds start a group where the largest end before it lies), so that
    gradcheck can check the backward's formulas (made of the operator itself) where there
    is no GPU."""
    torch = pytest.importorskip("torch")
    import xgemm.torch  # noqa: F401  (registers the operator)

    def reference(a, b, offs, tiles):
        ends = offs.tolist()
        if b.dim() == 3:
            out = a.new_zeros(a.shape[0], b.shape[-1])
            for g, (start, stop) in enumerate(_spans(ends, a.shape[0])):
                out[start:stop] = a[start:stop] @ b[g]
            return out
        out = a.new_zeros(len(ends), a.shape[0], b.shape[1])
        for g, (start, stop) in enumerate(_spans(ends, a.shape[1])):
            out[g] = a[:, start:stop] @ b[start:stop]
        return out

    library = torch.library.Library("xgemm", "IMPL")
    library.impl("grouped_mm", reference, "CPU")
    yield torch
    library._destroy()


def test_grouped_forward_over_reverse_is_refused(grouped_cpu_reference, monkeypatch):
    """A dual tensor's tangent in the gradient the grouped backward receives is refused,
    not dropped by the grouped kernels it calls directly (simulated by products that keep
    no tangent, as xgemm's CUDA kernels keep none)."""
    torch = grouped_cpu_reference
    from torch.autograd import forward_ad

    import xgemm.torch as xt

    def keeping_no_tangent(a, b, offs, tiles):
        return torch.ops.xgemm.grouped_mm(forward_ad.unpack_dual(a).primal,
                                          forward_ad.unpack_dual(b).primal, offs, tiles)

    monkeypatch.setattr(xt, "_grouped_direct", keeping_no_tangent)
    a = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    experts = torch.randn(2, 4, 3, dtype=torch.float64)
    ends = torch.tensor([2, 5], dtype=torch.int32)
    with forward_ad.dual_level():
        weights = forward_ad.make_dual(torch.randn(5, 3, dtype=torch.float64),
                                       torch.randn(5, 3, dtype=torch.float64))
        loss = (xt.grouped_mm(a, experts, ends) * weights).sum()
        with pytest.raises(NotImplementedError, match="forward-mode"):
            torch.autograd.grad(loss, a)


@pytest.mark.parametrize("ends", [[3, 3, 7, 12], [7, 3, 12, 14], [5, -2, 9, 20]],
                         ids=["sorted", "unsorted", "negative_and_past_t"])
@pytest.mark.parametrize("along_k", [False, True], ids=["groups_of_rows", "groups_along_k"])
@pytest.mark.parametrize("through", ["grouped_mm", "operator"])
def test_grouped_backward_formulas(grouped_cpu_reference, along_k, ends, through):
    """gradcheck (float64) of A and B: empty groups, rows past the last end, and ends out
    of order or out of range (the backward's products must take the groups as the
    forward's did), first and second derivatives; through xgemm.torch.grouped_mm (its
    direct autograd Function, as eager training calls it) and the operator itself (its
    registered autograd)."""
    torch = grouped_cpu_reference
    import xgemm.torch as xt

    generator = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64,
                           requires_grad=True)

    ends = torch.tensor(ends, dtype=torch.int32)  # 14 tokens or rows
    if along_k:
        a, b = rand(5, 14), rand(14, 6)
    else:
        a, b = rand(14, 5), rand(4, 5, 6)
    if through == "grouped_mm":
        def f(a, b):
            return xt.grouped_mm(a, b, ends)
        assert type(f(a, b).grad_fn).__name__ == "_GroupedEagerBackward"  # no dispatch
    else:
        def f(a, b):
            return torch.ops.xgemm.grouped_mm(a, b, ends, "")
    assert torch.autograd.gradcheck(f, (a, b))
    assert torch.autograd.gradgradcheck(f, (a, b))  # a second derivative is recorded too


def test_moe_example_layer_routes_each_token_to_its_experts():
    """examples/moe.py's layer on the CPU, its grouped products a loop: the output is each
    token's top-k experts' MLPs weighted by their gates, computed token by token."""
    torch = pytest.importorskip("torch")
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "moe.py"
    spec = importlib.util.spec_from_file_location("moe_example", path)
    moe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(moe)

    def loop(x, w, offs):
        out, start = x.new_zeros(x.shape[0], w.shape[-1]), 0
        for g, end in enumerate(offs.tolist()):
            out[start:end] = x[start:end] @ w[g]
            start = end
        return out

    torch.manual_seed(0)
    layer = moe.MoE(16, 24, experts=5, top_k=2, grouped=loop, dtype=torch.float64,
                    device="cpu")
    x = torch.randn(11, 16, dtype=torch.float64)
    got = layer(x)
    scores, chosen = layer.router(x).topk(2, dim=-1)
    gates = scores.softmax(-1)
    for t in range(11):
        want = sum(gates[t, j] * (torch.nn.functional.silu(x[t] @ layer.up[e].T)
                                  @ layer.down[e].T)
                   for j, e in enumerate(chosen[t].tolist()))
        assert torch.allclose(got[t], want)


def test_grouped_compiles_without_a_graph_break():
    """xgemm.grouped_matmul on tensors that require grad, forward and backward, compile
    with fullgraph (meta tensors: the operator's fake implementation)."""
    torch = pytest.importorskip("torch")
    import xgemm.torch  # noqa: F401  (registers the operator)

    x = torch.empty(96, 64, device="meta", dtype=torch.bfloat16, requires_grad=True)
    w = torch.empty(4, 64, 32, device="meta", dtype=torch.bfloat16, requires_grad=True)
    ends = torch.empty(4, device="meta", dtype=torch.int32)

    def step(x):
        return xgemm.grouped_matmul(x, w, offs=ends).sum()

    explained = torch._dynamo.explain(step)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    torch._dynamo.reset()
    torch.compile(step, fullgraph=True, backend="aot_eager")(x).backward()
    assert x.grad.shape == x.shape and w.grad.shape == w.shape
