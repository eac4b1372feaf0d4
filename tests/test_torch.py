"""xgemm.torch: the PyTorch operator, its fake implementation, its backward, tracing by
torch.compile and the Linear swap. Without a GPU the operator runs on meta tensors (its
fake implementation) and, for the backward's formulas, on a float64 CPU kernel the tests
register (torch.matmul); the GPU tests run xgemm's own kernels."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="xgemm.torch needs PyTorch")
xt = pytest.importorskip("xgemm.torch")

import xgemm  # noqa: E402
from xgemm.tools.tolerances import TOLERANCE  # noqa: E402

# shapes as numpy.matmul takes them: 1-D operands, batches, broadcast batches, K = 0
SHAPES = [((7, 5), (5, 3)), ((5,), (5, 3)), ((7, 5), (5,)), ((5,), (5,)),
          ((2, 7, 5), (5, 3)), ((7, 5), (4, 5, 3)), ((2, 1, 7, 5), (3, 5, 4)), ((7, 0), (0, 3))]
ACTIVATIONS = [None, "relu", "gelu", "silu"]


def _id(shapes) -> str:
    return "@".join("x".join(map(str, s)) for s in shapes)


def test_xgemm_imports_without_pytorch():
    code = ("import sys; sys.modules['torch'] = None; import xgemm; "
            "assert xgemm.variants() and 'xgemm.torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("a_shape, b_shape", SHAPES, ids=[_id(s) for s in SHAPES])
def test_fake_result_is_what_the_kernel_returns(a_shape, b_shape):
    """Shape as torch.matmul's, the inputs' dtype, contiguous: what xgemm.matmul returns."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(a_shape, device="cuda", dtype=torch.bfloat16)
        b = torch.empty(b_shape, device="cuda", dtype=torch.bfloat16)
        c = torch.ops.xgemm.matmul(a, b, None, "none", "auto", None, "")
        expected = torch.matmul(a, b)
    assert c.shape == expected.shape and c.dtype == torch.bfloat16 and c.is_contiguous()


def test_fake_refuses_what_matmul_refuses():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(ValueError, match="last dimension"):
        xt.matmul(torch.empty(3, 4, device="cuda"), torch.empty(5, 2, device="cuda"))


def test_activation_names_are_checked():
    with pytest.raises(ValueError, match="activation 'tanh'"):
        xt.matmul(torch.empty(3, 4, device="meta"), torch.empty(4, 2, device="meta"),
                  activation="tanh")


@pytest.fixture
def cpu_reference():
    """The operator on CPU tensors: torch.matmul and the epilogue, so that gradcheck can
    check the backward's formulas (made of the operator itself) where there is no GPU. As
    xgemm's kernels do, it records nothing (a kernel that recorded would hand autograd
    gradients the operator's own autograd never made), and returns numpy.matmul's shape."""
    import torch.nn.functional as F

    def reference(a, b, bias, activation, variant, precision, tiles):
        with torch.no_grad():
            z = torch.matmul(a, b)
            z = (z + (0 if bias is None else bias)).reshape(z.shape)
            return {"none": z, "relu": torch.relu(z), "silu": F.silu(z),
                    "gelu": F.gelu(z, approximate="tanh")}[activation].contiguous()

    library = torch.library.Library("xgemm", "IMPL")
    for overload in ("matmul", "matmul.exact"):  # its two overloads
        library.impl(overload, reference, "CPU")
    yield
    library._destroy()


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("a_shape, b_shape", SHAPES[:-1], ids=[_id(s) for s in SHAPES[:-1]])
@pytest.mark.parametrize("through", ["matmul", "operator"])
def test_backward_formulas(cpu_reference, a_shape, b_shape, activation, through):
    """gradcheck and gradgradcheck (float64) of a, b and bias: numpy.matmul's
    broadcasting reduced back, 1-D operands, each activation, first and second
    derivatives; through xgemm.torch.matmul (activations after the product) and the
    operator itself (its fused activation's derivative)."""
    generator = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64,
                           requires_grad=True)

    a, b = rand(*a_shape), rand(*b_shape)
    bias = rand(b_shape[-1] if len(b_shape) > 1 else 1)  # a 1-D b's column: one value
    if through == "matmul":
        def f(a, b, bias):
            return xt.matmul(a, b, bias=bias, activation=activation)
    else:
        def f(a, b, bias):
            return torch.ops.xgemm.matmul(a, b, bias, activation or "none", "auto", None, "")
    assert torch.autograd.gradcheck(f, (a, b, bias))
    assert torch.autograd.gradgradcheck(f, (a, b, bias))


@pytest.mark.parametrize("a_shape, b_shape", [((2, 5, 0), (0, 4)), ((2, 5, 3), (3, 0)),
                                              ((2, 0, 3), (3, 4)), ((0,), (0, 4))],
                         ids=["K=0", "N=0", "M=0", "vector K=0"])
@pytest.mark.parametrize("through", ["eager", "compiled"])
def test_gradients_of_empty_products(cpu_reference, a_shape, b_shape, through):
    """A stack times a matrix with an empty dimension: the gradients of a, b and the
    bias are torch.matmul's (zeros, or empty), eager and traced (a reshape to rows
    cannot say how many there are where the row is empty)."""
    generator = torch.Generator().manual_seed(1)
    a, b, bias = (torch.randn(*shape, generator=generator, dtype=torch.float64,
                              requires_grad=True) for shape in (a_shape, b_shape, b_shape[-1:]))

    def loss(a, b, bias):
        return (xt.matmul(a, b, bias=bias) * 2).sum()

    torch._dynamo.reset()
    f = loss if through == "eager" else torch.compile(loss, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(f(a, b, bias), (a, b, bias))
    want = torch.autograd.grad(((a @ b + bias) * 2).sum(), (a, b, bias))
    for g, r in zip(got, want, strict=True):
        assert g.shape == r.shape and torch.equal(g, r)


def test_torch_suite_decoder_prefills_and_decodes():
    """--suite torch's decoder (on the CPU, PyTorch's linears): a prompt's logits, and a
    decode step's, one token each attending to a cache of the prompt's length plus it."""
    from xgemm.tools import torch_suite

    model = torch_suite.Model(width=32, depth=2, heads=4, hidden=48, vocab=50)
    net = torch_suite.decoder(model)
    assert net(torch.zeros(3, 9, dtype=torch.long)).shape == (3, 9, 50)
    caches = [tuple(torch.randn(3, 4, 10, 8) for _ in range(2)) for _ in range(2)]
    before = caches[0][0][:, :, :-1].clone()
    assert net(torch.zeros(3, 1, dtype=torch.long), caches).shape == (3, 1, 50)
    assert torch.equal(caches[0][0][:, :, :-1], before)  # only the last slot written


def test_torch_func_grad(cpu_reference):
    """torch.func.grad through xt.matmul (which needs a Function with a setup_context)
    gives torch.matmul's gradients."""
    generator = torch.Generator().manual_seed(1)
    a, b, bias = (torch.randn(*s, generator=generator, dtype=torch.float64)
                  for s in ((5, 3), (3, 4), (4,)))

    def loss(matmul, a, b, bias):
        return (matmul(a, b, bias) ** 2).sum()

    got = torch.func.grad(lambda *x: loss(lambda a, b, c: xt.matmul(a, b, bias=c), *x),
                          argnums=(0, 1, 2))(a, b, bias)
    want = torch.func.grad(lambda *x: loss(lambda a, b, c: a @ b + c, *x),
                           argnums=(0, 1, 2))(a, b, bias)
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g, w)


@pytest.mark.parametrize("transform", ["grad_of_grad", "vmap"])
def test_torch_func_transforms_compose(cpu_reference, transform):
    """torch.func's grad of a grad through xt.matmul with a fused gelu (its backward
    records its own products) and vmap over it give what the same transforms of
    torch.matmul do: not zeros, not an error."""
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(2)
    a, b, bias = (torch.randn(*s, generator=generator, dtype=torch.float64)
                  for s in ((3, 4), (4, 2), (2,)))

    def ours(a):
        return xt.matmul(a, b, bias=bias, activation="gelu")

    def reference(a):
        return F.gelu(a @ b + bias, approximate="tanh")

    def apply(f):
        if transform == "vmap":
            return torch.func.vmap(f)(a)
        inner = torch.func.grad(lambda x: f(x).sum())
        return torch.func.grad(lambda x: inner(x).sum())(a)

    got, want = apply(ours), apply(reference)
    assert want.abs().sum() > 0 and torch.allclose(got, want)


def test_torch_compile_traces_without_a_graph_break():
    """A block of linears through xgemm.torch and a call of xgemm.matmul, forward and
    backward, compile with fullgraph (meta tensors: the fake implementation)."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(approximate="tanh"),
                                torch.nn.Linear(128, 64)).to("meta")
    xt.swap_linears(model)
    w = torch.empty(32, 64, device="meta", requires_grad=True)

    def step(x):
        return (model(x) @ w.T).sum() + xgemm.matmul(x, w.T, activation="silu").sum()

    x = torch.empty(4, 16, 64, device="meta", requires_grad=True)
    explained = torch._dynamo.explain(step)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    torch._dynamo.reset()
    loss = torch.compile(step, fullgraph=True, backend="aot_eager")(x)
    loss.backward()
    assert x.grad.shape == x.shape and w.grad.shape == w.shape
    assert model[0].weight.grad.shape == model[0].weight.shape


@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                    reason="inductor's CPU code needs a C++ compiler, and this machine has none")
def test_inductor_passes_views_of_its_buffers_not_copies(cpu_reference):
    """Under torch.compile's inductor, an operand that is a view of a buffer the graph
    made (a gradient's transpose, read by a weight's gradient) reaches the operator as
    that view, as ``torch.mm``'s do: the cast that makes it is written once. (With
    inductor's default for custom operators, a second buffer in eager's strides was
    written for the transpose: a kernel more a linear's backward.)"""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()

    def step(grad, w, x):
        g = (grad * 2).to(torch.bfloat16).view(-1, 64)  # a buffer the graph makes
        return (torch.ops.xgemm.matmul(g, w, None, "none", "auto", None, ""),
                torch.ops.xgemm.matmul(g.t(), x, None, "none", "auto", None, ""))

    grad = torch.randn(2, 16, 64)
    w, x = torch.randn(64, 32, dtype=torch.bfloat16), torch.randn(32, 48, dtype=torch.bfloat16)
    with config.patch(force_disable_caches=True):  # lowered here, not recalled from a cache
        got, (code,) = run_and_get_code(torch.compile(step, fullgraph=True), grad, w, x)
    g = (grad * 2).to(torch.bfloat16).view(-1, 64)
    assert torch.equal(got[0], g @ w) and torch.equal(got[1], g.t() @ x)
    buffers = re.findall(r"^\s+buf\d+ = empty_strided_cpu\(", code, re.M)
    assert len(buffers) == 1, code  # the cast's buffer alone (the products make their own)


#: the layouts test's cases: x's and w's shapes, the call, and what inductor hands the
#: operator against eager: its own strides ("own"), eager's ("eager"), or rows ("rows")
_LAYOUT_CASES = {
    "auto, a matrix": ((16, 6), (16, 8), "auto", None, "own"),
    "named, a matrix": ((16, 6), (16, 8), "mma_tf32", None, "eager"),
    "auto, tf32, a matrix": ((16, 6), (16, 8), "auto", "tf32", "eager"),
    "auto, a batch": ((8, 15), (2, 3, 5, 4), "auto", None, "eager"),
    "auto, a stack times a matrix": ((8, 15), (5, 4), "auto", None, "rows"),
    "auto, a sequence-first stack": ((4, 2, 5), (5, 4), "auto", None, "eager"),
}


@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                    reason="inductor's CPU code needs a C++ compiler, and this machine has none")
@pytest.mark.parametrize("case", list(_LAYOUT_CASES))
def test_inductor_keeps_eagers_strides_where_its_own_might_not_be_read(case):
    """The layouts inductor hands the operator, against eager's: its own for auto's
    matrices (here A column-major: the explicit contiguous() dropped); eager's for a
    variant named in the call (mma_tf32 reads A row-major only), for tf32 (whose kernels
    would transpose a column-major A each call) and for a batch of products (an
    attention's heads transposed and made contiguous, which inductor would pass as a view
    no single stride walks, for xgemm to copy each call). A stack of matrices times one
    matrix (a linear's activations) reaches it as one matrix of rows, unless its rows
    are not at one stride and no gradient reads them (a sequence-first stack: read in
    place, not copied to fold it)."""
    from torch._inductor import config

    x_shape, w_shape, variant, precision, expected = _LAYOUT_CASES[case]
    seen = []

    def reference(a, b, bias, activation, variant, precision, tiles):
        seen.append(a.stride())
        with torch.no_grad():
            return (a @ b).contiguous()

    library = torch.library.Library("xgemm", "IMPL")
    for overload in ("matmul", "matmul.exact"):
        library.impl(overload, reference, "CPU")
    try:
        def step(x, w):
            if x.dim() == 3:  # (T, B, K) to (B, T, K)
                a = (x * 2).transpose(0, 1)
            elif x.shape[1] == 15:  # (B, T, H, D) heads to (B, H, T, D)
                a = (x * 2).view(2, 4, 3, 5).transpose(1, 2).contiguous()
            else:
                a = (x.t() * 2).contiguous()
            return xt.matmul(a, w, variant=variant, precision=precision)

        x, w = torch.randn(x_shape), torch.randn(w_shape)
        step(x, w)
        torch._dynamo.reset()
        with config.patch(force_disable_caches=True):
            torch.compile(step, fullgraph=True)(x, w)
    finally:
        library._destroy()
    eager, compiled = seen
    if expected == "rows":
        assert (len(eager), len(compiled)) == (4, 2), (eager, compiled)
    else:
        assert (compiled == eager) == (expected == "eager"), (eager, compiled)


def test_a_stack_of_more_rows_than_32_bits_index_is_traced_as_a_batch():
    """A stack times a matrix whose rows, as one matrix, would be more than 32-bit indices
    reach (xgemm refuses such a matrix) is traced as the batch it is, as eager runs it
    (meta tensors: shapes only)."""
    a, w = torch.empty(2**16, 2**15 + 1, 8, device="meta"), torch.empty(8, 8, device="meta")
    torch._dynamo.reset()
    got = torch.compile(xt.matmul, backend="eager", fullgraph=True)(a, w)
    assert got.shape == xt.matmul(a, w).shape == (2**16, 2**15 + 1, 8)


@pytest.mark.parametrize("case", ["auto, a matrix", "named, a matrix", "auto, a batch",
                                  "auto, a stack times a matrix", "auto, a stack with K=0"])
def test_compiled_gradients_through_either_overload(cpu_reference, case):
    """A compiled graph's products through either overload (auto's matrices and stacks
    times a matrix: ``default``; a named variant's, a batch: ``exact``) record their
    gradients: torch.matmul's."""
    variant = "mma_tf32" if case.startswith("named") else "auto"
    generator = torch.Generator().manual_seed(3)
    a_shape, b_shape = {"auto, a batch": ((2, 5, 3), (2, 3, 4)),
                        "auto, a stack times a matrix": ((2, 5, 3), (3, 4)),
                        "auto, a stack with K=0": ((2, 5, 0), (0, 4))}.get(
                            case, ((5, 3), (3, 4)))
    a, b = (torch.randn(*shape, generator=generator, dtype=torch.float64, requires_grad=True)
            for shape in (a_shape, b_shape))

    def loss(product, a, b):
        return product(a, b).square().sum()

    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: loss(
        lambda a, b: xt.matmul(a, b, variant=variant), a, b), fullgraph=True,
        backend="aot_eager")
    got = torch.autograd.grad(compiled(a, b), (a, b))
    want = torch.autograd.grad(loss(torch.matmul, a, b), (a, b))
    for g, r in zip(got, want, strict=True):
        assert torch.allclose(g, r)


def test_a_decomposed_exported_program_keeps_the_gradients(cpu_reference):
    """torch.export's program lowered to ATen (``run_decompositions``) holds the operator
    below its autograd; run where autograd records, its gradients are eager mode's: the
    operator's autograd is its own kernel, not a fallback that would leave none."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(xt.Linear(3, 4, dtype=torch.float64, activation="gelu"),
                                xt.Linear(4, 2, dtype=torch.float64))
    x = torch.randn(5, 3, dtype=torch.float64)
    lowered = torch.export.export(model, (x,)).run_decompositions().module()
    grads = []
    for run in (model, lowered):
        params = dict(run.named_parameters())
        xr = x.clone().requires_grad_()
        run(xr).square().sum().backward()
        grads.append([xr.grad] + [params[name].grad for name in sorted(params)])
    for got, want in zip(grads[1], grads[0], strict=True):
        assert got is not None and torch.allclose(got, want)


def test_dispatch_keys_that_reach_the_cuda_kernel_directly():
    """The operator's autograd kernel calls the CUDA kernel itself only where the
    dispatcher would call it next: not under a dispatch mode or for a subclass (Python),
    functionalization or a conjugate view, nor for another backend."""
    from xgemm.torch_library import cuda_is_next

    keys = torch._C.DispatchKeySet
    dk = torch._C.DispatchKey
    plain = keys(dk.CUDA) | keys(dk.ADInplaceOrView) | keys(dk.AutogradCUDA)
    assert cuda_is_next(plain)
    for before in (dk.Python, dk.Functionalize, dk.Conjugate):
        assert not cuda_is_next(plain | keys(before)), before
    assert not cuda_is_next(keys(dk.CPU) | keys(dk.ADInplaceOrView) | keys(dk.AutogradCPU))


@pytest.mark.gpu
def test_a_plain_cuda_call_reaches_the_kernel_directly(monkeypatch):
    """The dispatch keys the operator's autograd kernel gets for a call on plain CUDA
    tensors with nothing to record (a compiled graph's calls) make it call the CUDA kernel
    itself; under a dispatch mode they do not."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from xgemm.torch_library import cuda_is_next

    got = []

    def recording(keyset, *args):
        got.append(cuda_is_next(keyset))
        return below(keyset, *args)

    below = xt.matmul_below
    monkeypatch.setattr(xt, "matmul_below", recording)

    class Passing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    a, b = (torch.randn(64, 64, device="cuda") for _ in range(2))
    with torch.no_grad():
        torch.ops.xgemm.matmul(a, b, None, "none", "auto", None, "")
        with Passing():
            torch.ops.xgemm.matmul(a, b, None, "none", "auto", None, "")
    assert got == [True, False]


def test_export_takes_a_dynamic_batch(cpu_reference):
    """torch.export of xgemm Linears with the batch dimension declared dynamic: the
    operator's fake implementation bounds no dimension (torch.export refuses a bound
    below the declared range), and the exported program runs another batch."""
    model = torch.nn.Sequential(xt.Linear(16, 8, dtype=torch.float64), torch.nn.ReLU(),
                                xt.Linear(8, 4, dtype=torch.float64))
    batch = torch.export.Dim("batch")
    exported = torch.export.export(model, (torch.randn(4, 16, dtype=torch.float64),),
                                   dynamic_shapes=({0: batch},))
    x = torch.randn(7, 16, dtype=torch.float64)
    assert torch.allclose(exported.module()(x), model(x))


@pytest.mark.parametrize("through", ["eager", "operator"])
def test_weight_gradient_comes_in_the_weights_layout(cpu_reference, through):
    """x @ w.T: w's gradient reaches w contiguous, as w is, so autograd keeps it rather
    than copying it into w's layout (a hidden copy a step, per weight)."""
    x = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    seen = []
    w.register_hook(lambda grad: seen.append(grad.is_contiguous()))
    if through == "eager":
        y = xt.linear(x, w)
    else:
        y = torch.ops.xgemm.matmul(x, w.T, None, "none", "auto", None, "")
    y.sum().backward()
    assert seen == [True]


def test_xgemm_matmul_records_a_graph_only_where_asked():
    x = torch.empty(3, 8, device="meta", requires_grad=True)
    w = torch.empty(4, 8, device="meta")
    assert xgemm.matmul(x, w.T).grad_fn is not None
    # the direct path: meta tensors are no GPU arrays
    with torch.no_grad(), pytest.raises(ValueError):
        xgemm.matmul(x, w.T)


def test_swap_linears_keeps_the_parameters():
    class Scaled(torch.nn.Linear):  # a subclass may change forward: left as it is
        def forward(self, x):
            return 2 * super().forward(x)

    model = torch.nn.ModuleDict({"up": torch.nn.Linear(8, 16), "down": torch.nn.Linear(16, 8),
                                 "head": torch.nn.Linear(8, 4, bias=False),
                                 "scaled": Scaled(8, 8)})
    before = {name: p for name, p in model.named_parameters()}
    state = model.state_dict()
    xt.swap_linears(model, keep=lambda name, module: name != "head")
    assert type(model["up"]) is xt.Linear and type(model["down"]) is xt.Linear
    assert type(model["head"]) is torch.nn.Linear and type(model["scaled"]) is Scaled
    assert all(p is before[name] for name, p in model.named_parameters())
    assert model.state_dict().keys() == state.keys()


def test_linear_is_an_nn_linear():
    layer = xt.Linear(8, 4, activation="relu", device="meta")
    assert isinstance(layer, torch.nn.Linear) and "activation=relu" in repr(layer)
    assert layer(torch.empty(2, 3, 8, device="meta")).shape == (2, 3, 4)


# -- on the GPU: xgemm's kernels ---------------------------------------------------------
GPU_SHAPES = [((7, 5), (5, 3)), ((2, 7, 5), (5, 3)), ((3, 1, 7, 5), (2, 5, 4)), ((5,), (5, 3))]


def _train_gpt():
    """examples/train_gpt.py as a module: its GPT."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "train_gpt.py"
    spec = importlib.util.spec_from_file_location("train_gpt", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.gpu
def test_gpt_gradients_match_pytorchs():
    """examples/train_gpt.py's GPT (two blocks), one backward under bfloat16 autocast:
    every parameter's gradient on xgemm's linears lies as near float64's as it does on
    PyTorch's linears (twice PyTorch's error at most, or the layers' tolerance): within
    bfloat16's noise."""
    import torch.nn.functional as F

    vocab = 40
    torch.manual_seed(7)
    pytorchs = _train_gpt().GPT(vocab, width=128, depth=2, heads=4, context=64).cuda()
    models = {"PyTorch": pytorchs, "xgemm": xt.swap_linears(copy.deepcopy(pytorchs)),
              "float64": copy.deepcopy(pytorchs).double()}
    idx, target = (torch.randint(0, vocab, (4, 64), device="cuda") for _ in range(2))
    for name, model in models.items():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=name != "float64"):
            logits = model(idx)
        F.cross_entropy(logits.double().view(-1, vocab), target.view(-1)).backward()
    exact = dict(models["float64"].named_parameters())

    def error(model: torch.nn.Module, name: str) -> float:
        grad = dict(model.named_parameters())[name].grad.double()
        return ((grad - exact[name].grad).norm() / exact[name].grad.norm()).item()

    for name in exact:
        ours, theirs = error(models["xgemm"], name), error(models["PyTorch"], name)
        assert ours <= max(2 * theirs, TOLERANCE["layers"]["bfloat16"]), (
            f"{name}: {ours:.3g} against PyTorch's {theirs:.3g}")


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("a_shape, b_shape", GPU_SHAPES, ids=[_id(s) for s in GPU_SHAPES])
def test_gradcheck_on_the_gpu(a_shape, b_shape, activation):
    """gradcheck in float64 of xgemm's own kernels (forward and backward products)."""
    generator = torch.Generator("cuda").manual_seed(1)

    def rand(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64, device="cuda",
                           requires_grad=True)

    a, b, bias = rand(*a_shape), rand(*b_shape), rand(b_shape[-1])
    assert torch.autograd.gradcheck(
        lambda a, b, bias: xt.matmul(a, b, bias=bias, activation=activation), (a, b, bias))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gradients_match_pytorch(dtype):
    """A two-layer MLP's every gradient against PyTorch's, within the dtype's rounding
    (relative Frobenius error against float64 gradients of the same values)."""
    kind = getattr(torch, dtype)
    torch.manual_seed(2)
    reference = torch.nn.Sequential(torch.nn.Linear(96, 200), torch.nn.GELU(approximate="tanh"),
                                    torch.nn.Linear(200, 72)).cuda().double()
    ours = xt.swap_linears(torch.nn.Sequential(torch.nn.Linear(96, 200),
                                               torch.nn.GELU(approximate="tanh"),
                                               torch.nn.Linear(200, 72)).cuda().to(kind))
    ours.load_state_dict({k: v.to(kind) for k, v in reference.state_dict().items()})
    x = torch.randn(3, 37, 96, device="cuda", dtype=kind)
    reference(x.double()).square().mean().backward()
    ours(x).float().square().mean().backward()
    tolerance = TOLERANCE["layers"][dtype]
    for (name, p), q in zip(ours.named_parameters(), reference.parameters(), strict=True):
        error = ((p.grad.double() - q.grad).norm() / q.grad.norm()).item()
        assert error < tolerance, f"{name}: {error:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("mode", ["no_grad", "nothing_requires_grad"])
def test_a_product_nothing_records_takes_no_graph_node(activation, mode):
    """Where autograd records nothing (grad mode off, or no operand requiring grad),
    xgemm.torch.matmul and Linear return the product with the activation fused and no
    graph node: right against float64, as the recorded product is."""
    generator = torch.Generator("cuda").manual_seed(4)
    a, b, bias = (torch.randn(*shape, device="cuda", generator=generator)
                  for shape in ((3, 37, 96), (96, 72), (72,)))
    z = a.double() @ b.double() + bias.double()
    expected = {None: z, "relu": torch.relu(z), "silu": torch.nn.functional.silu(z),
                "gelu": torch.nn.functional.gelu(z, approximate="tanh")}[activation]
    layer = xt.Linear(96, 72, activation=activation, device="cuda")
    with torch.no_grad():
        layer.weight.copy_(b.T)
        layer.bias.copy_(bias)
    if mode == "no_grad":
        with torch.no_grad():
            results = [xt.matmul(a, b, bias=bias, activation=activation), layer(a)]
    else:
        layer.requires_grad_(False)
        results = [xt.matmul(a, b, bias=bias, activation=activation), layer(a)]
    recorded = xt.matmul(a.requires_grad_(), b, bias=bias, activation=activation)
    for result in [*results, recorded.detach()]:
        error = ((result.double() - expected).norm() / expected.norm()).item()
        assert error < TOLERANCE["float64"]["float32"], error
    assert all(r.grad_fn is None for r in results) and recorded.grad_fn is not None


@pytest.mark.gpu
def test_autocast_casts_as_torch_matmul_does():
    a = torch.randn(8, 16, device="cuda")
    b = torch.randn(16, 4, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert xt.matmul(a, b).dtype == torch.matmul(a, b).dtype == torch.bfloat16


@pytest.mark.gpu
def test_compiled_and_graphed_forward_matches():
    """torch.compile(fullgraph) of a block on xgemm linears gives the eager loss; its
    forward captured in a CUDA graph replays with the same result."""
    torch.manual_seed(3)
    model = xt.swap_linears(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                                torch.nn.Linear(64, 64)).cuda())
    x = torch.randn(5, 64, device="cuda")
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)(x)
    assert torch.allclose(compiled, eager, rtol=1e-5, atol=1e-5)
    static = x.clone()
    with torch.no_grad():
        model(static)  # plans and compiles before the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = model(static)
        static.copy_(torch.randn_like(x))
        graph.replay()
        assert torch.allclose(out, model(static), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_reduce_overhead_training_steps_match_eager():
    """torch.compile(mode="reduce-overhead") of a block on xgemm linears: its forward and
    backward, replayed as CUDA graphs, give eager's loss and gradients. Its shapes are
    the test's own, so that xgemm makes their plans while the graphs warm up (a plan that
    kept memory of their pool was refused)."""
    torch.manual_seed(4)
    model = xt.swap_linears(torch.nn.Sequential(
        torch.nn.Linear(88, 56), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(56, 24)
    ).cuda())
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    for step in range(3):  # warm-up, capture, replay
        x = torch.randn(13, 88, device="cuda")
        torch.compiler.cudagraph_mark_step_begin()
        (compiled(x) ** 2).sum().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        (model(x) ** 2).sum().backward()
        for g, want in zip(got, (p.grad for p in model.parameters()), strict=True):
            assert torch.allclose(g, want, rtol=1e-4, atol=1e-4), step
        model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("call", ["xgemm.torch.matmul", "xgemm.matmul", "out", "out, b dual",
                                  "gemm", "xgemm.torch.grouped_mm", "xgemm.grouped_matmul",
                                  "torch.ops.xgemm.matmul", "torch.ops.xgemm.grouped_mm"])
def test_forward_mode_ad_is_refused(cpu_reference, call):
    """A dual tensor's tangent is not dropped in silence: forward-mode AD is refused, by
    every entry point (xgemm.matmul and grouped_matmul route it to the operators; out=
    and gemm refuse it before anything is checked: these are CPU tensors; the operators
    called themselves, by their autograd kernels), whichever operand is dual."""
    from torch.autograd import forward_ad

    a, b = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    assert forward_ad.unpack_dual(xt.matmul(a, b)).tangent is None  # no level: a product
    c = torch.empty(3, 2, dtype=torch.float64)
    experts = torch.randn(2, 4, 2, dtype=torch.float64)  # two groups of a's rows
    ends = torch.tensor([1, 3], dtype=torch.int32)
    run = {"xgemm.torch.matmul": lambda x: xt.matmul(x, b),
           "xgemm.matmul": lambda x: xgemm.matmul(x, b),
           "out": lambda x: xgemm.matmul(x, b, out=c),
           "out, b dual": lambda x: xgemm.matmul(a.numpy()[:2], x.T, out=c[:2]),
           "gemm": lambda x: xgemm.gemm(x, b, c),
           "xgemm.torch.grouped_mm": lambda x: xt.grouped_mm(x, experts, ends),
           "xgemm.grouped_matmul": lambda x: xgemm.grouped_matmul(x, experts, offs=ends),
           "torch.ops.xgemm.matmul": lambda x: torch.ops.xgemm.matmul(
               x, b, None, "none", "auto", None, ""),
           "torch.ops.xgemm.grouped_mm": lambda x: torch.ops.xgemm.grouped_mm(
               x, experts, ends, "")}[call]
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(a, torch.randn_like(a))
        with pytest.raises(NotImplementedError, match="forward-mode"):
            run(dual)


def test_forward_over_reverse_is_refused(cpu_reference, monkeypatch):
    """A dual tensor's tangent in the gradient a backward receives (forward over reverse)
    is refused, not dropped by the kernels the eager backward calls directly (simulated
    by products that keep no tangent, as xgemm's CUDA kernels keep none)."""
    from torch.autograd import forward_ad

    def primal(t):
        return None if t is None else forward_ad.unpack_dual(t).primal

    monkeypatch.setattr(xt, "_direct", lambda a, b, bias, *rest: torch.ops.xgemm.matmul(
        primal(a), primal(b), primal(bias), *rest))
    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 2, dtype=torch.float64)
    with forward_ad.dual_level():
        weights = forward_ad.make_dual(torch.randn(3, 2, dtype=torch.float64),
                                       torch.randn(3, 2, dtype=torch.float64))
        loss = (xt.matmul(a, b) * weights).sum()
        with pytest.raises(NotImplementedError, match="forward-mode"):
            torch.autograd.grad(loss, a)


@pytest.mark.parametrize("call, transform", [("xgemm.torch.matmul", "jvp"),
                                             ("torch.ops.xgemm.matmul", "jvp"),
                                             ("torch.ops.xgemm.matmul", "grad"),
                                             ("xgemm.torch.grouped_mm", "grad")])
def test_what_torch_func_cannot_differentiate_is_refused(cpu_reference, call, transform):
    """torch.func.jvp (functorch's forward mode, not forward_ad's dual level) is refused
    by both (the operator called itself gave a zero tangent), and torch.func.grad by the
    operator called itself and by the grouped product, with an error that says what to
    call instead (xgemm.torch.matmul's gradient is test_torch_func_grad's)."""
    a, b = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    experts = torch.randn(2, 4, 2, dtype=torch.float64)  # two groups of a's rows
    ends = torch.tensor([1, 3], dtype=torch.int32)
    run = {"xgemm.torch.matmul": lambda x: xt.matmul(x, b),
           "torch.ops.xgemm.matmul": lambda x: torch.ops.xgemm.matmul(
               x, b, None, "none", "auto", None, ""),
           "xgemm.torch.grouped_mm": lambda x: xt.grouped_mm(x, experts, ends)}[call]
    refusal = "forward-mode" if transform == "jvp" else "torch.func's gradient transforms"
    with pytest.raises(NotImplementedError, match=refusal):
        if transform == "jvp":
            torch.func.jvp(run, (a,), (torch.randn_like(a),))
        else:
            torch.func.grad(lambda x: run(x).sum())(a)


@pytest.mark.parametrize("call", ["out", "out_dtype", "gemm"])
def test_a_product_that_records_no_gradient_is_refused_on_tensors_that_require_grad(call):
    """out=, out_dtype= and gemm's in-place C take the path outside autograd: on a tensor
    that requires grad they would leave no gradient, so they are refused (before the
    operands are checked: these are CPU tensors), and allowed under no_grad."""
    a = torch.randn(4, 3, requires_grad=True)
    b, c = torch.randn(3, 2), torch.empty(4, 2)
    run = {"out": lambda: xgemm.matmul(a, b, out=c),
           "out_dtype": lambda: xgemm.matmul(a, b, out_dtype="float32"),
           "gemm": lambda: xgemm.gemm(a, b, c)}[call]
    with pytest.raises(ValueError, match="records no gradient"):
        run()
    with torch.no_grad(), pytest.raises(TypeError):  # then the CPU tensors are refused
        run()
