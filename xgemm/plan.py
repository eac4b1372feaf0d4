"""Planning a product: from a call's signature to everything its launches need, once.

The first call with a signature (the operands' shapes, strides, dtypes and the alignment
of their addresses, the GPU, the variant and its parameters, the epilogue, the precision,
the output's presence, layout and overlap with the inputs) checks everything and builds a
:class:`Plan`: the variant and parameters (``auto``'s choice included), the specialisation
and its compiled kernel, the grid, block and shared memory, which operands must be copied
or padded, how the output is written, the split-K workspace's size, the TMA boxes. Later
calls with the same signature find it with one dictionary lookup (:data:`PLANS`) and only
launch (``xgemm.launch``). A plan holds nothing a call writes: copies, outputs, staging
arrays and workspaces are made per call.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from . import gpu, tunefile
from .checks import (
    AUTO,
    TUNE,
    Layout,
    Meta,
    Scales,
    Shapes,
    check_arch,
    check_bias,
    check_box_width,
    check_device_limits,
    check_factor,
    check_operands,
    check_params_named,
    check_precision,
    check_precision_for,
    check_scalar,
    check_scales,
    check_target,
    check_workspace,
    layout_of,
    meta,
    native,
    one_device,
    output_dtype,
    parse_activation,
    torch_formats,
)
from .compile import get_kernel
from .expressions import MAX_GRID, cdiv
from .extras import extra_arg
from .frameworks import framework, pointer, to_cupy
from .kernel_args import ExtraArg, packed
from .operands import (
    OperandPlan,
    PadLaunch,
    alignment_flags,
    folded_rows,
    plan_operand,
    plan_output,
    plan_pad_launch,
    tma_ready,
)
from .parts import Parts, plan_split, reads_parts
from .ranking import contenders_to_time, pick
from .registry import Variant, get_variant
from .render import SUM_THREADS
from .signature import Call
from .specs import DTYPES, EIGHT_BIT, Spec, check_eight_bit_spec, default_output
from .tma import BOX_BYTES

if TYPE_CHECKING:
    import cupy

#: Plans kept (when full, one not looked up lately is dropped: ``PlanCache``).
PLAN_CACHE_SIZE = 2048


# -- a plan --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Chunk:
    """One launch: up to 65535 products of the batch (grid z), from product ``first``."""

    grid: tuple[int, ...]
    offsets: tuple[int, int, int]   # bytes into A, B and C of product ``first``
    extra: tuple[ExtraArg, ...]  # the variant's extra arguments, in its order


@dataclass
class Plan:
    """Everything about a product that depends only on its signature."""

    variant: Variant
    params: dict[str, int]
    spec: Spec
    device: int
    framework: str                  # "cupy" or "torch": what the result is, whose stream
    shapes: Shapes
    a: OperandPlan
    b: OperandPlan
    layout_c: Layout
    output: str                     # "new", "in_place" or "staging"
    read_c: bool
    copy_bias: bool
    # the one launch that pads A, B or both for TMA (their ``pad``), where either has one
    pad_launch: PadLaunch | None = None
    # A's and B's splits into TF32 parts before the product, for a rung that reads them
    # (its extra arguments name the small parts' maps), or none
    parts: tuple[Parts, Parts] | None = None
    contenders: tuple = ()          # auto's (variant, parameters) for autotuning to time
    block: tuple[int, ...] = ()
    shared_mem: int = 0
    chunks: tuple[Chunk, ...] = ()
    sizes: tuple = ()               # M, N, K, the leading dimensions and batch strides,
    #                                 packed once as by-value kernel arguments
    splits: int = 1
    partials_bytes: int = 0         # split-K's workspace: bytes of partial sums, and
    arrivals: int = 0               # its arrival counters
    # split-K's counters (``arrivals`` of them) per CUDA stream and thread, zeroed once,
    # with the partials they share, and what calls captured in CUDA graphs made
    counters: dict = field(default_factory=dict, repr=False)
    captured: list = field(default_factory=list, repr=False)
    acc_code: str = "f"             # the accumulators' C type (``struct``'s): alpha's, beta's
    unit: tuple = ()                # alpha = 1, beta = 0 in that type (matmul's), packed
    c_dtype_np: Any = None          # the output's dtype, NumPy's
    # A new PyTorch result (PyTorch's allocator, in its stream order), its arguments bound
    # once. It holds no tensor between calls: one made while torch.compile's CUDA graphs
    # warm up would keep a block of their pool, which they refuse
    new_torch_result: Callable[[], Any] | None = field(default=None, repr=False)
    scaled: bool = False            # its kernel takes scale_a and scale_b (8-bit)
    # a split-K sum pass (``Variant.sum_pass``): its blocks a product (grid z: the
    # chunk's products) and its M, N, ldc and C's batch stride, packed once
    sum_blocks: int = 0
    sum_sizes: tuple = ()
    _functions: dict = field(default_factory=dict, repr=False)   # by entry, loaded once
    # Recent calls' launches' arguments, by their addresses and scalars: a call with the
    # same ones reuses them (``xgemm.launch``); each dict operation is atomic, so threads
    # may share it.
    recent_args: dict = field(default_factory=dict, repr=False)

    @property
    def copies(self) -> tuple[str, ...]:
        """The operands each call copies (or pads), by name."""
        return tuple(x.name for x in (self.a, self.b) if x.copied)

    @functools.cached_property
    def per_call_cupy(self) -> bool:
        """Whether a call makes CuPy arrays besides its output (copies, staging): for
        PyTorch inputs, those go on PyTorch's stream (split-K's workspace sees to its
        own; a transposed copy is PyTorch's). Read by calls only, once the plan is
        complete."""
        return bool(any(x.copied and x.transpose is None and x.pad is None
                        for x in (self.a, self.b))
                    or self.output == "staging" or self.copy_bias)

    @functools.cached_property
    def plain(self) -> bool:
        """Whether a call only launches kernels: the product on its arrays as they lie
        (split-K's workspace, 8-bit scales at most), as most do, or on copies the pad
        kernel makes of them first: ``xgemm.launch``'s short path."""
        return (all(x.pad is not None for x in (self.a, self.b) if x.copied)
                and self.parts is None and self.output != "staging" and not self.copy_bias
                and bool(self.chunks))

    def kernel(self):
        """The compiled ``cupy.RawKernel`` (compiled now unless the cache has it)."""
        import cupy

        with cupy.cuda.Device(self.device):
            return get_kernel(self.variant.name, self.params, self.spec, self.device)

    def function(self, entry: str = ""):
        """The kernel's function on this plan's GPU, loaded once; with ``entry``, its
        source's kernel of that name after the variant's (``"_sum"``: the sum pass,
        ``Variant.sum_pass``)."""
        found = self._functions.get(entry)
        if found is None:
            import cupy

            with cupy.cuda.Device(self.device):
                found = get_kernel(self.variant.name, self.params, self.spec, self.device,
                                   entry=entry).kernel
            self._functions[entry] = found
        return found


# -- the plan cache --------------------------------------------------------------------------
class PlanCache:
    """Plans by signature, bounded and thread-safe: when full, the oldest plan not looked
    up since it was last passed over goes (second chance, approximately least recently
    used); a hit only marks its entry, where a move would hash the signature again."""

    def __init__(self, size: int = PLAN_CACHE_SIZE) -> None:
        self.size = size
        self._plans: OrderedDict[tuple, list] = OrderedDict()  # [plan, looked up since]
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple) -> Plan | None:
        # No lock: every call looks up, and each operation here is atomic under the GIL
        entry = self._plans.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        entry[1] = True
        return entry[0]

    def put(self, key: tuple, plan: Plan) -> None:
        with self._lock:
            chances = self.size  # more only where other threads mark plans meanwhile
            while key not in self._plans and len(self._plans) >= self.size:
                oldest, entry = next(iter(self._plans.items()))
                if entry[1] and chances:  # looked up since passed over: kept, newest
                    entry[1], chances = False, chances - 1
                    self._plans.move_to_end(oldest)
                else:
                    del self._plans[oldest]
            self._plans[key] = [plan, False]

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)


#: The process's plans. ``PLANS.clear()`` forgets them (the tuning file's writes do).
PLANS = PlanCache()
tunefile.on_change(PLANS.clear)


# -- building a plan ---------------------------------------------------------------------
class _Checked(NamedTuple):
    """What :func:`build` established of a call, from which :func:`_make_plan` plans it."""

    variant: Variant | None    # None: auto picks
    params: dict[str, int]     # a named variant's, as given
    shapes: Shapes
    dtype: str                 # A's
    c_dtype: str               # the output's
    device: int                # the operands' GPU
    activation: str
    precision: str | None
    target: cupy.ndarray | None  # out= or C, as CuPy sees it
    bias: cupy.ndarray | None
    read_c: bool               # beta != 0: C is read as well as written
    kind: str                  # the operands' framework, "cupy" or "torch"
    spec_extras: dict          # B's dtype and the scales' kinds, for the Spec
    folded: bool               # a batch's rows folded into one product


def build(a: Any, b: Any, call: Call, *, choice: tuple[Variant, dict] | None = None,
          contenders: int = 0) -> tuple[Plan, tuple]:
    """Check a call completely and plan it; returns the plan and the call's arrays as a
    launch takes them (CuPy arrays or PyTorch tensors; the GPU scales last). Every error
    is raised here, before anything is compiled or launched.

    >>> import cupy as cp  # doctest: +SKIP
    >>> a = cp.ones((64, 32), cp.float32)  # doctest: +SKIP
    >>> plan, arrays = build(a, a.T, Call("auto"))  # doctest: +SKIP
    >>> plan.shapes.m, plan.shapes.n  # doctest: +SKIP
    (64, 64)

    For ``auto`` (and ``tune``), two more: ``choice``, a (variant, parameters) to plan in
    place of auto's own pick, as auto plans it (copies into the fast layout included);
    ``contenders``, how many of the cost model's cheapest candidates besides the rules'
    pick the plan lists (``Plan.contenders``) for autotuning to time."""
    v = _named(call.variant, call.params)
    act = parse_activation(call.activation)
    check_precision(call.precision)
    alpha = check_scalar("alpha", call.alpha)
    beta = check_scalar("beta", call.beta)
    a, b, ca, cb, dtype, b_dtype, shapes = _operands(a, b, v, call.params, call.formats,
                                                     call.precision)
    target, target_name, bias = call.target, call.target_name, call.bias
    c_dtype = output_dtype(dtype, call.out_dtype, target, target_name)
    scales = call.scales or Scales(1.0, None, None, given=False)
    check_factor(dtype, c_dtype, alpha, scales)
    sa, sb, scalings = (check_scales(scales, shapes) if dtype in EIGHT_BIT
                        else (None, None, ("none", "none")))
    ctarget = None
    if target is not None:
        ctarget = check_target(target_name, target, shapes.out, c_dtype)
    cbias = None
    if bias is not None:
        meta(bias, "bias")  # a host array: TypeError, before any conversion
        bias = native(bias)
        cbias = check_bias(bias, shapes.n, c_dtype)
    device = one_device(a=ca, b=cb, **{target_name: ctarget}, bias=cbias,
                        scale_a=None if sa is None else to_cupy(sa),
                        scale_b=None if sb is None else to_cupy(sb))
    read_c = target_name == "c" and beta != 0.0
    spec_extras = dict(b_dtype=b_dtype, scale_a=scalings[0], scale_b=scalings[1])
    if dtype in EIGHT_BIT:  # an int32 C with an epilogue: refused now, not at compile time
        check_eight_bit_spec(Spec(dtype, bias=cbias is not None, activation=act, read_c=read_c,
                                  out_dtype=c_dtype, **spec_extras))

    import cupy

    folded = None if dtype in EIGHT_BIT else folded_rows(ca, cb, ctarget, shapes)
    if folded is not None:  # a batch of rows times one matrix: one product of all the rows
        ca, cb, ctarget, shapes = folded
    checked = _Checked(v, call.params, shapes, dtype, c_dtype, device, act, call.precision,
                       ctarget, cbias, read_c, framework(type(a)) or "cupy", spec_extras,
                       folded is not None)
    # Planned on the operands' GPU, whichever is current: a launch on one GPU with
    # pointers into another's memory is an illegal address that breaks the CUDA context.
    here = cupy.cuda.runtime.getDevice() == device
    with contextlib.nullcontext() if here else cupy.cuda.Device(device):
        plan = _make_plan(ca, cb, checked, choice, contenders)
    return plan, (a, b, target, bias, sa, sb)


def _named(variant: str, params: dict[str, int]) -> Variant | None:
    """The variant named (None for ``auto`` and ``tune``, which take no parameters)."""
    check_params_named(variant, params)
    if variant in (AUTO, TUNE):
        return None
    return get_variant(variant)


def _operands(a: Any, b: Any, v: Variant | None, params: dict[str, int], formats: Any,
              precision: str | None) -> tuple[Any, Any, Any, Any, str, str | None, Shapes]:
    """a and b checked (``checks.check_operands``): each as the call's framework holds it
    and as a CuPy view, the product's dtype, B's where it differs (8-bit), its shapes."""
    metas = (meta(a, "a"), meta(b, "b"))
    # Checked before any conversion where the arrays say what they are (DLPack: after)
    checked = check_operands(*metas, v, params, formats) if None not in metas else None
    if checked is not None:
        check_precision_for(precision, checked[0])
    a, b = native(a), native(b)
    ca, cb = to_cupy(a), to_cupy(b)
    if checked is None:  # PyTorch's float8 tensors come as bytes: their dtype names the format
        formats = torch_formats(a, b, formats)
    dtype, b_dtype, shapes = checked or check_operands(
        Meta(ca.shape, ca.dtype), Meta(cb.shape, cb.dtype), v, params, formats)
    if checked is None:  # checked above where the arrays told their dtype
        check_precision_for(precision, dtype)
    return a, b, ca, cb, dtype, b_dtype, shapes


def _make_plan(a: cupy.ndarray, b: cupy.ndarray, checked: _Checked,
               choice: tuple[Variant, dict] | None = None, contenders: int = 0) -> Plan:
    """The plan, on the current device (the operands'), in steps: the variant and its
    parameters, each operand (``operands.plan_operand``), the output
    (``operands.plan_output``), how C is stored, then the launches (:func:`_chunks`).
    ``a`` and ``b``: CuPy views of the operands (a batch's rows and its shared matrix
    as 2-D views where ``checked.folded``); ``choice`` and ``contenders``: ``build``'s."""
    (v, params, shapes, dtype, c_dtype, device, act, precision, target, bias, read_c, kind,
     spec_extras, folded) = checked
    vectors = ("row" if shapes.a_vector else None, "col" if shapes.b_vector else None)
    mats = tuple(x[None, :] if vec == "row" else x[:, None] if vec == "col" else x
                 for x, vec in zip((a, b), vectors, strict=True))
    auto, listed = v is None, ()
    if auto:
        layouts = [layout_of(x.shape, x.strides, x.itemsize) for x in mats]
        v, p = choice or pick(mats, layouts, shapes, dtype, device, precision,
                              "vector" in (spec_extras["scale_a"], spec_extras["scale_b"]))
        if contenders:
            listed = contenders_to_time(mats, layouts, shapes, dtype, device, precision,
                                        contenders)
    else:
        p = v.resolve(params, dtype)
        check_arch(v, dtype, device)

    relayout = dtype in EIGHT_BIT  # only K-major rungs multiply them: others are copied
    readable = v.layouts(dtype)
    (plan_a, full_a), (plan_b, full_b) = (
        plan_operand(name, x, vec, rows, cols, layouts, v, p, shapes, device, auto,
                     relayout, folded)
        for name, x, vec, rows, cols, layouts in (
            ("a", mats[0], vectors[0], shapes.m, shapes.k, readable[0]),
            ("b", mats[1], vectors[1], shapes.k, shapes.n, readable[1])))
    plan_a, plan_b, parts = _split_first(v, plan_a, plan_b, mats, shapes, device)
    check_box_width(v, p, mats[1].itemsize, plan_b.layout.col)  # a row-major B: whole boxes
    full_c, output, layout_c = plan_output(target, shapes, c_dtype, (a, b, bias))
    p = _store(v, p, dtype, c_dtype, read_c, full_c, layout_c, device)

    spec = Spec(dtype, plan_a.layout.col, plan_b.layout.col, bias is not None, act, read_c,
                alignment_flags(v, (full_a, full_b, full_c),
                                (plan_a.layout, plan_b.layout, layout_c), shapes),
                out_dtype=None if c_dtype == default_output(dtype) else c_dtype, **spec_extras)
    pads = tuple(x.pad for x in (plan_a, plan_b) if x.pad is not None)
    plan = Plan(v, p, spec, device, kind, shapes, plan_a, plan_b, layout_c, output, read_c,
                copy_bias=bias is not None and bias.strides[0] != bias.itemsize
                and bias.size > 1, pad_launch=plan_pad_launch(pads, device) if pads else None,
                contenders=listed)
    plan.c_dtype_np = full_c.dtype
    plan.scaled = "scale_a" in v.extra_args
    plan.parts = parts
    if kind == "torch":
        import torch

        # empty_strided with its arguments bound: 0.4 us a call less than an empty
        # model's new_empty (timeit, CPU tensors), which parses its shape's arguments
        plan.new_torch_result = functools.partial(
            torch.empty_strided, shapes.out, torch.empty(shapes.out, device="meta").stride(),
            dtype=getattr(torch, c_dtype), device=torch.device("cuda", device))
    if shapes.m and shapes.n and shapes.count:  # else nothing to compute: no chunks
        _chunks(plan, (full_a, full_b, full_c), a.itemsize)
    return plan


def _split_first(v: Variant, plan_a: OperandPlan, plan_b: OperandPlan, mats: tuple,
                 shapes: Shapes, device: int
                 ) -> tuple[OperandPlan, OperandPlan, tuple[Parts, Parts] | None]:
    """For a rung that reads A's and B's TF32 parts (its extra arguments name the small
    parts' maps): the operands as the split reads them and the two splits
    (``xgemm.parts``); for any other, the operands as planned and None."""
    if not reads_parts(v) or 0 in (shapes.m, shapes.n, shapes.k, shapes.count):
        return plan_a, plan_b, None
    (plan_a, split_a), (plan_b, split_b) = (
        plan_split(op, x, rows, cols, shapes.count, device) for op, x, rows, cols in
        ((plan_a, mats[0], shapes.m, shapes.k), (plan_b, mats[1], shapes.k, shapes.n)))
    return plan_a, plan_b, (split_a, split_b)


def _store(v: Variant, p: dict[str, int], dtype: str, c_dtype: str, read_c: bool,
           full_c: Any, layout_c: Layout, device: int) -> dict[str, int]:
    """``p`` with how C leaves the kernel where the rung can store it by TMA: not where
    C is read or its values cannot be staged (from registers); where TMA cannot write its
    rows, or a tile's rows end inside a box (rungs 14's and 28's widths in 16s), staged a 16-byte
    line wider a row and sent by bulk copies (``TMA_STORE`` = 2),
    a stage fewer where that staging does not fit, from registers where even two stages
    leave no room."""
    staged = (c_dtype in v.staged_c if v.staged_c  # a C whose values it can stage
              else full_c.itemsize == DTYPES[dtype].itemsize)
    if p.get("TMA_STORE") and (read_c or not staged):
        return {**p, "TMA_STORE": 0}
    part_boxes = p.get("BN", 0) * full_c.itemsize % BOX_BYTES  # a tile ends inside a box
    if p.get("TMA_STORE") and (part_boxes or not tma_ready(pointer(full_c), layout_c,
                                                           full_c.itemsize)):
        p = {**p, "TMA_STORE": 2}
        room = gpu.properties(device).max_dynamic_smem
        while v.shared_memory(p, dtype) > room and p["STAGES"] > 2:
            p = {**p, "STAGES": p["STAGES"] - 1}
        if v.shared_memory(p, dtype) > room:
            p = {**p, "TMA_STORE": 0}
    return p


def _chunks(plan: Plan, arrays: tuple, item: int) -> None:
    """The plan's launches: shared memory, grid and block, split-K's workspace and
    counters, the sizes packed once, and one :class:`Chunk` per 65535 products of the
    batch with its extra arguments. ``arrays``: A, B and C as the kernel reads them;
    ``item``: A's and B's bytes a value."""
    v, p, shapes, device, dtype = plan.variant, plan.params, plan.shapes, plan.device, \
        plan.spec.dtype
    smem = check_device_limits(v, p, dtype, device)
    plan.shared_mem = smem if v.dynamic_smem else 0
    plan.splits = splits = v.splits_of(p)
    per_launch = MAX_GRID[2] // splits  # products per launch: z is product x split
    sms = gpu.multiprocessors(device)
    grid, plan.block = v.launch(p, shapes.m, shapes.n, sms, min(shapes.count, per_launch))
    plan.acc_code, acc_size = ("d", 8) if DTYPES[dtype].acc == "double" else ("f", 4)
    sums = v.partial_sums_of(p, shapes.m, shapes.n, sms, min(shapes.count, per_launch))
    workspace = sums * shapes.count * acc_size
    check_workspace(v, p, workspace, shapes)
    counters = 0  # split-K's, per product: per tile of C (not per block)
    if sums:
        tile_rows, tile_cols, _ = v.tile(p, dtype)
        counters = cdiv(shapes.m, tile_rows) * cdiv(shapes.n, tile_cols) * v.counters_of(p)
        plan.partials_bytes = workspace
        plan.arrivals = shapes.count * counters
    la, lb, lc = plan.a.layout, plan.b.layout, plan.layout_c
    fixed = packed("iiiiiiqqq" + plan.acc_code * 2, (
        shapes.m, shapes.n, shapes.k, la.ld, lb.ld, lc.ld,
        la.batch_stride, lb.batch_stride, lc.batch_stride, 1.0, 0.0))
    plan.sizes, plan.unit = fixed[:9], fixed[9:]
    if v.sum_pass:  # a thread a pair of C's columns in a row
        plan.sum_blocks = cdiv(shapes.m * cdiv(shapes.n, 2), SUM_THREADS)
        plan.sum_sizes = packed("iiiq", (shapes.m, shapes.n, lc.ld, lc.batch_stride))
    c_item = arrays[2].itemsize
    # bytes from A's and B's big TF32 parts to their small ones (rung 33's pre-pass)
    small = tuple(x.span * item for x in plan.parts) if plan.parts else (0, 0)
    chunks = []
    for first in range(0, shapes.count, per_launch):
        count = min(per_launch, shapes.count - first)
        offsets = (first * la.batch_stride * item, first * lb.batch_stride * item,
                   first * lc.batch_stride * c_item)
        extra = tuple(extra_arg(arg, v, p, shapes, arrays, (la, lb, lc), offsets, first,
                                count, (sums * acc_size, counters * 4), small)
                      for arg in v.extra_args)
        chunks.append(Chunk((*grid[:2], count * splits), offsets, extra))
    plan.chunks = tuple(chunks)

