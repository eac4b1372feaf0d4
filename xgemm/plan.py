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
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from . import gpu, tunefile
from .checks import (
    AUTO,
    INT_MAX,
    TUNE,
    Layout,
    Meta,
    Scales,
    Shapes,
    check_arch,
    check_bias,
    check_device_limits,
    check_factor,
    check_operands,
    check_precision,
    check_scalar,
    check_scales,
    check_target,
    check_workspace,
    dtype_name,
    extent,
    layout_of,
    meta,
    native,
    one_device,
    output_dtype,
    overlaps,
    parse_activation,
    torch_formats,
)
from .compile import PAD_THREADS, PAD_UNROLL, get_kernel, pad_kernel
from .frameworks import framework, pointer, to_cupy
from .launch import geometry, packed
from .operands import ready_operand, tma_padded, tma_ready
from .ranking import contenders_to_time, pick, transposable
from .registry import (
    DTYPES,
    EIGHT_BIT,
    FAMILY_DEFAULTS,
    MAX_GRID,
    ExtraArg,
    Source,
    Spec,
    Variant,
    cdiv,
    check_eight_bit_spec,
    default_output,
    get_variant,
    numpy_dtype,
)

if TYPE_CHECKING:
    import cupy

#: Plans kept (least recently used dropped first).
PLAN_CACHE_SIZE = 2048


def transpose_launch(v: Variant, p: dict[str, int], ptr: int, rows: int, cols: int, ld: int,
                     dtype: str, device: int) -> tuple[Spec, tuple[int, ...], tuple[int, ...]]:
    """The specialisation, grid and block of transpose variant ``v`` at ``p`` for a
    ``rows`` x ``cols`` row-major input at ``ptr`` with leading dimension ``ld``: it is
    ``aligned`` where every group of four lies whole at a 4-element boundary."""
    flags = {}
    if "aligned" in v.flags:
        flags["aligned"] = (ptr % (4 * DTYPES[dtype].itemsize) == 0
                            and ld % 4 == 0 and rows % 4 == 0 and cols % 4 == 0)
    grid, block = v.launch(p, rows, cols, gpu.multiprocessors(device))
    return Spec(dtype, flags=tuple(sorted(flags.items()))), grid, block


# -- a plan --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fresh:
    """An array a call writes afresh (its output, a transposed copy) as planning sees it:
    C-ordered, at an address aligned to ``FRESH_ALIGNMENT`` (which ``xgemm.launch``
    checks per call). Nothing is allocated to plan it."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        strides, step = [], self.itemsize
        for size in reversed(self.shape):
            strides.append(step)
            step *= max(size, 1)
        return tuple(reversed(strides))

    def data_ptr(self) -> int:
        return 0  # aligned to every boundary a kernel asks for


@dataclass(frozen=True)
class Transpose:
    """The transpose kernel that copies an operand into the layout its GEMM kernel reads
    fastest (``Variant.transpose_first``), launched by each call before the product: it
    reads the operand's rows (a row-major A, or the rows of a column-major B's transpose)
    and writes a C-ordered ``shape`` array."""

    launch: tuple                   # its function, grid, block (``xgemm.launch.geometry``)
    shape: tuple[int, int]          # (cols, rows) of what it reads
    dtype: Any                      # NumPy's
    sizes: tuple                    # rows, cols, leading dimension: packed once
    recent_args: dict = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Pad:
    """How a call copies an operand whose rows TMA cannot read into rows padded to 16
    bytes: ``height`` lines of ``width`` bytes, ``src_pitch`` apart in the operand,
    ``dst_pitch`` apart in a fresh array of ``elements`` values (a batch whose matrices
    follow one another is one run of lines; a broadcast one is padded once), in
    ``chunks`` 16-byte chunks. The plan's :class:`PadLaunch` copies it."""

    height: int
    width: int
    src_pitch: int
    dst_pitch: int
    elements: int
    chunks: int


def padding(height: int, width: int, src_pitch: int, dst_pitch: int, elements: int
            ) -> Pad | None:
    """The pad kernel's copy of ``height`` lines of ``width`` bytes, ``src_pitch`` apart,
    into lines ``dst_pitch`` apart (a multiple of 16); None where its 16-byte chunks are
    too many for the kernel's 32-bit count (2^31: 32 GiB).

    >>> padding(3, 10, 10, 16, 24).chunks
    3
    """
    chunks = cdiv(width, 16) * height
    if chunks >= 2**31 or dst_pitch % 16:
        return None
    return Pad(height, width, src_pitch, dst_pitch, elements, chunks)


@dataclass(frozen=True)
class PadLaunch:
    """One launch of the pad kernel (``kernels/copy/pad_rows.cu.j2``) that copies one
    operand's or both operands' ``pads`` (``xgemm.launch.pad_rows``)."""

    pads: tuple[Pad, ...]
    launch: tuple                   # the kernel, grid, block (``xgemm.launch.geometry``)
    sizes: tuple                    # pitches, widths, chunks, the first's blocks: packed once
    recent_args: dict = field(default_factory=dict, compare=False, repr=False)


def plan_pad_launch(pads: tuple[Pad, ...], device: int) -> PadLaunch:
    """The launch that copies ``pads`` (one or two) on GPU ``device``: each gets blocks
    for its chunks, at most four an SM.

    >>> one = padding(3, 10, 10, 16, 24)
    >>> plan_pad_launch((one, one), device=0).launch[1]  # doctest: +SKIP
    2
    """
    if not 1 <= len(pads) <= 2:
        raise ValueError(f"the pad kernel copies one or two operands, not {len(pads)}")
    blocks = [max(1, min(cdiv(p.chunks, PAD_THREADS * PAD_UNROLL),
                         4 * gpu.multiprocessors(device))) for p in pads]
    first, second = pads[0], pads[-1]  # one operand: the second's arguments go unread
    return PadLaunch(pads, geometry(pad_kernel(device).kernel, (sum(blocks),),
                                    (PAD_THREADS,), 0),
                     packed("qqqqiiIII", (first.src_pitch, first.dst_pitch,
                                          second.src_pitch, second.dst_pitch, first.width,
                                          second.width, first.chunks, second.chunks,
                                          blocks[0])))


@dataclass(frozen=True)
class OperandPlan:
    """How the kernel reads operand A or B: in place (its own address, in ``layout``), or
    from a copy this call makes (``copied``; ``padded`` rows for TMA)."""

    name: str
    variant: str
    vector: str | None              # "row" (1-D a) or "col" (1-D b): the dimension added
    full_shape: tuple[int, ...]     # (*batch, rows, cols)
    layouts: tuple[str, ...]        # what the variant reads
    layout: Layout                  # what the kernel is told
    copied: bool
    padded: bool
    transpose: Transpose | None = None  # how a call copies it into its fast layout (auto)
    pad: Pad | None = None          # how a call pads it for TMA, where the kernel can
    relayout: bool = False          # a layout the variant does not read is copied, not refused
    folded: tuple[int, int] | None = None  # a batch read as one matrix: its strides, elements

    def matrices(self, x: cupy.ndarray) -> cupy.ndarray:
        """A 1-D operand with its dimension back: a (1, K) row, or a (K, 1) column; a
        batch the plan read as one matrix (``_folded``) as that matrix: A's rows of every
        product, or the one B they all share."""
        if self.vector is not None:
            return x[None, :] if self.vector == "row" else x[:, None]
        if self.folded is None or x.ndim == 2:
            return x
        from cupy.lib.stride_tricks import as_strided

        first = x[(0,) * (x.ndim - 2)]  # its address, where the folded matrix starts
        return as_strided(first, self.full_shape, tuple(s * x.itemsize for s in self.folded))


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
    # (xgemm.launch)
    counters: dict = field(default_factory=dict, repr=False)
    captured: list = field(default_factory=list, repr=False)
    acc_code: str = "f"             # the accumulators' C type, as ``struct`` writes it:
    #                                 alpha and beta are passed so
    unit: tuple = ()                # alpha = 1, beta = 0 in that type (matmul's), packed
    c_dtype_np: Any = None          # the output's dtype, NumPy's
    # A new PyTorch result (PyTorch's allocator, in its stream order): empty_like of one
    # element of its dtype on the plan's GPU expanded to its shape, which takes less host
    # time than torch.empty parsing a shape, a dtype and a device
    new_torch_result: Callable[[], Any] | None = field(default=None, repr=False)
    scaled: bool = False            # its kernel takes scale_a and scale_b (8-bit)
    _function: Any = field(default=None, repr=False)
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

    def kernel(self):
        """The compiled ``cupy.RawKernel`` (compiled now unless the cache has it)."""
        import cupy

        with cupy.cuda.Device(self.device):
            return get_kernel(self.variant.name, self.params, self.spec, self.device)

    def function(self):
        """The kernel's function on this plan's GPU, loaded once."""
        if self._function is None:
            import cupy

            with cupy.cuda.Device(self.device):
                self._function = get_kernel(self.variant.name, self.params, self.spec,
                                            self.device).kernel
        return self._function


# -- the plan cache --------------------------------------------------------------------------
class PlanCache:
    """Plans by signature: bounded (least recently used go first) and thread-safe."""

    def __init__(self, size: int = PLAN_CACHE_SIZE) -> None:
        self.size = size
        self._plans: OrderedDict[tuple, Plan] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple) -> Plan | None:
        # No lock: every call looks up, and each dictionary operation is atomic under the
        # GIL; a plan another thread drops meanwhile is simply not moved.
        plan = self._plans.get(key)
        if plan is None:
            self.misses += 1
            return None
        self.hits += 1
        try:  # not contextlib.suppress: a context manager costs more than the move
            self._plans.move_to_end(key)
        except KeyError:  # dropped by another thread meanwhile
            return plan
        return plan

    def put(self, key: tuple, plan: Plan) -> None:
        with self._lock:
            self._plans[key] = plan
            if len(self._plans) > self.size:
                self._plans.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)


#: The process's plans. ``PLANS.clear()`` forgets them (the tuning file's writes do).
PLANS = PlanCache()
tunefile.on_change(PLANS.clear)


def array_key(x: Any) -> tuple | None:
    """What of ``x`` decides a plan: shape, strides, dtype, the alignment of its address
    (the largest power of two up to 64 that divides it: every alignment rule of the
    kernels reads only this), its GPU (and by its dtype object, its framework); None for
    an array of neither CuPy nor PyTorch, which a call converts first."""
    return _keyed(x)[0]


def _keyed(x: Any) -> tuple[tuple | None, int]:
    """:func:`array_key` of ``x`` and its address (0 with no key)."""
    kind = framework(type(x))
    if kind == "torch":
        address = x.data_ptr()
        capped = address | 64
        return (x.shape, x.stride(), x.dtype, capped & -capped, x.get_device()), address
    if kind == "cupy":
        data = x.data
        address = data.ptr
        capped = address | 64
        return (x.shape, x.strides, x.dtype, capped & -capped, data.device_id), address
    return None, 0


@functools.lru_cache(maxsize=1024)
def _reach(key: tuple) -> tuple[int, int]:
    """The bytes an array of :func:`array_key` ``key`` spans, from its first element's
    address to one past its last (``xgemm.checks.extent``): cached, as a loop's calls
    repeat a few shapes and strides (PyTorch's strides are in elements, CuPy's in bytes,
    and a key's dtype object says which)."""
    shape, strides, dtype = key[:3]
    itemsize = dtype.itemsize
    if isinstance(dtype, np.dtype):
        return extent(0, shape, strides, itemsize)
    return extent(0, shape, tuple(s * itemsize for s in strides), itemsize)


def call_key(a: Any, b: Any, target: Any, target_name: str, bias: Any, variant: str,
             params: dict[str, int], activation: str | None, precision: str | None,
             out_dtype: str | None, read_c: bool, formats: Any = None,
             scales: Scales | None = None) -> tuple | None:
    """The signature of a call, or None if an array is of neither CuPy nor PyTorch."""
    (key_a, address_a), (key_b, address_b) = _keyed(a), _keyed(b)
    if key_a is None or key_b is None:
        return None
    key = (key_a, key_b, variant, tuple(sorted(params.items())) if params else (),
           activation, precision, out_dtype)
    if formats is not None or scales is not None:  # 8-bit products
        if not (formats is None or isinstance(formats, str) or (
                isinstance(formats, (tuple, list))
                and all(f is None or isinstance(f, str) for f in formats))):
            return None  # not a format's name: the checks say so
        key_sa = key_sb = None
        if scales is not None:
            if scales.a is not None and (key_sa := array_key(scales.a)) is None:
                return None
            if scales.b is not None and (key_sb := array_key(scales.b)) is None:
                return None
        key += (tuple(formats) if isinstance(formats, list) else formats, (key_sa, key_sb))
    if target is not None:
        target_key, start = _keyed(target)
        if target_key is None:
            return None
        bias_key, address_bias = (None, 0) if bias is None else _keyed(bias)
        if bias is not None and bias_key is None:
            return None
        # Whether the target shares a byte with an input (it is then written through a
        # temporary): from each array's address and its cached reach
        low, high = _reach(target_key)
        low, high = start + low, start + high
        first, end = _reach(key_a)
        shared = low < address_a + end and address_a + first < high
        if not shared:
            first, end = _reach(key_b)
            shared = low < address_b + end and address_b + first < high
        if bias is not None and not shared:
            first, end = _reach(bias_key)
            shared = low < address_bias + end and address_bias + first < high
        key += (target_name, target_key, read_c, shared)
        return key if bias is None else key + (bias_key,)
    if bias is not None:
        bias_key = array_key(bias)
        if bias_key is None:
            return None
        key += (bias_key,)
    return key


# -- building a plan ---------------------------------------------------------------------
def build(a: Any, b: Any, variant: str, target: Any, target_name: str, bias: Any,
          activation: str | None, precision: str | None, out_dtype: str | None,
          alpha: Any, beta: Any, params: dict[str, int], formats: Any = None,
          scales: Scales | None = None, *, choice: tuple[Variant, dict] | None = None,
          contenders: int = 0) -> tuple[Plan, tuple]:
    """Check a call completely and plan it; returns the plan and the call's arrays as a
    launch takes them (CuPy arrays or PyTorch tensors; the GPU scales last). Every error
    is raised here, before anything is compiled or launched.

    For ``auto`` (and ``tune``), two more: ``choice``, a (variant, parameters) to plan in
    place of auto's own pick, as auto plans it (copies into the fast layout included);
    ``contenders``, how many of the cost model's cheapest candidates besides the rules'
    pick the plan lists (``Plan.contenders``) for autotuning to time."""
    if variant in (AUTO, TUNE):
        if params:
            raise ValueError(
                f"variant={variant!r} picks its own parameters, so {sorted(params)} cannot be "
                "given; name a variant to set them (xgemm.variants() lists the names)"
            )
        v = None
    else:
        v = get_variant(variant)
    act = parse_activation(activation)
    check_precision(precision)
    alpha = check_scalar("alpha", alpha)
    beta = check_scalar("beta", beta)

    metas = (meta(a, "a"), meta(b, "b"))
    # Checked before any conversion where the arrays say what they are without one
    # (DLPack objects such as PyTorch tensors: after it)
    checked = check_operands(*metas, v, params, formats) if None not in metas else None
    a, b = native(a), native(b)
    ca, cb = to_cupy(a), to_cupy(b)
    if checked is None:  # PyTorch's float8 tensors come as bytes: their dtype names the format
        formats = torch_formats(a, b, formats)
    dtype, b_dtype, shapes = checked or check_operands(
        Meta(ca.shape, ca.dtype), Meta(cb.shape, cb.dtype), v, params, formats)
    if precision == "tf32" and dtype != "float32":
        raise ValueError(f"precision='tf32' lets float32 inputs run as TF32; a and b are {dtype}:"
                         " leave precision out")
    c_dtype = output_dtype(dtype, out_dtype, target, target_name)
    scales = scales or Scales(1.0, None, None, given=False)
    check_factor(dtype, c_dtype, alpha, scales)
    sa = sb = None
    if dtype in EIGHT_BIT:
        sa, sb, scalings = check_scales(scales, shapes)
    else:
        scalings = ("none", "none")
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

    folded = None if dtype in EIGHT_BIT else _folded(ca, cb, ctarget, shapes)
    if folded is not None:  # a batch of rows times one matrix: one product of all the rows
        ca, cb, ctarget, shapes = folded
    # Planned on the operands' GPU, whichever is current: a launch on one GPU with
    # pointers into another's memory is an illegal address that breaks the CUDA context.
    here = cupy.cuda.runtime.getDevice() == device
    with contextlib.nullcontext() if here else cupy.cuda.Device(device):
        plan = _lay_out(ca, cb, v, params, shapes, dtype, c_dtype, device, act, precision,
                        ctarget, cbias, read_c, framework(type(a)) or "cupy", spec_extras,
                        choice, contenders, folded=folded is not None)
    return plan, (a, b, target, bias, sa, sb)


def _lay_out(a: cupy.ndarray, b: cupy.ndarray, v: Variant | None, params: dict[str, int],
             shapes: Shapes, dtype: str, c_dtype: str, device: int, act: str,
             precision: str | None, target: cupy.ndarray | None, bias: cupy.ndarray | None,
             read_c: bool, kind: str, spec_extras: dict,
             choice: tuple[Variant, dict] | None = None, contenders: int = 0,
             folded: bool = False) -> Plan:
    """The plan, on the current device (the operands'). Where an operand must be copied
    or padded, the copy is made here once, to learn its layout: each call makes its own.
    ``choice`` and ``contenders``: ``build``'s; ``folded``: a and b are a batch's rows
    and its shared matrix as 2-D views (``_folded``)."""
    import cupy

    vectors = ("row" if shapes.a_vector else None, "col" if shapes.b_vector else None)
    mats = tuple(x[None, :] if vec == "row" else x[:, None] if vec == "col" else x
                 for x, vec in zip((a, b), vectors, strict=True))
    auto, listed = v is None, ()
    if auto:
        layouts = [layout_of(x.shape, x.strides, x.itemsize) for x in mats]
        v, p = choice or pick(mats, layouts, shapes, dtype, device, precision,
                                 "vector" in (spec_extras["scale_a"], spec_extras["scale_b"]))
        if contenders:
            listed = contenders_to_time(mats, layouts, shapes, dtype, device, precision, contenders)
    else:
        p = v.resolve(params, dtype)
        check_arch(v, dtype, device)

    # 8-bit operands, which only K-major rungs multiply: any other layout is copied
    relayout = dtype in EIGHT_BIT
    readable = v.layouts(dtype)
    operands = []
    for name, x, vec, rows, cols, layouts in (
            ("a", mats[0], vectors[0], shapes.m, shapes.k, readable[0]),
            ("b", mats[1], vectors[1], shapes.k, shapes.n, readable[1])):
        full_shape = (*shapes.batch, rows, cols)
        into = None  # the layout auto copies this operand into first (transpose_first)
        if auto and transposable(shapes, vec is not None):
            into = v.transposed_into(name, p, shapes.m, shapes.n, shapes.k,
                                     gpu.multiprocessors(device))
        found = layout_of(x.shape, x.strides, x.itemsize) if into is not None else None
        transpose, copied, padded, pad = None, False, False, None
        if found is not None and found.col != (into == "col"):
            full, layout, transpose = _transposed(x, found, device)
        else:
            full, layout, copied = ready_operand(x, full_shape, layouts, name, v.name, relayout)
            padded = bool(v.tma and shapes.k > 0 and not tma_ready(full.data.ptr, layout,
                                                                   full.itemsize))
            if padded:  # TMA reads 16-byte aligned rows: pad the rows of one that has none
                source = layout
                full, layout = tma_padded(full, layout)
                pad = None if copied else _pad_of(full_shape, source, layout, full.itemsize)
        operands.append((OperandPlan(name, v.name, vec, full_shape, layouts, layout,
                                     copied or padded or transpose is not None, padded,
                                     transpose, pad, relayout,
                                     tuple(s // x.itemsize for s in x.strides) if folded
                                     else None), full))
    (plan_a, full_a), (plan_b, full_b) = operands

    # The output, viewed as (*batch, M, N): written in place when its rows have unit
    # stride and it shares no memory with a or b, else through a staging array.
    if target is None:
        full_c, output = Fresh(shapes.full, np.dtype(numpy_dtype(c_dtype))), "new"
    else:
        view = target
        if shapes.b_vector:
            view = view[..., None]
        if shapes.a_vector:
            view = view[..., None, :]
        full_c, output = view, "in_place"
        writable = layout_of(view.shape, view.strides, view.itemsize, ("row",), write=True)
        span = extent(target.data.ptr, target.shape, target.strides, target.itemsize)
        if writable is None or any(overlaps(span, extent(x.data.ptr, x.shape, x.strides,
                                                         x.itemsize))
                                   for x in (a, b, bias) if x is not None):
            full_c, output = cupy.empty(shapes.full, view.dtype), "staging"
    layout_c = layout_of(full_c.shape, full_c.strides, full_c.itemsize, ("row",), write=True)
    staged = (c_dtype in v.staged_c if v.staged_c  # a C whose values it can stage
              else full_c.itemsize == DTYPES[dtype].itemsize)
    if p.get("TMA_STORE") and (read_c or not staged):
        p = {**p, "TMA_STORE": 0}  # C is read, or not staged: from registers
    elif p.get("TMA_STORE") and not tma_ready(pointer(full_c), layout_c, full_c.itemsize):
        # Rows TMA cannot write: staged a 16-byte line wider a row and sent by bulk copies
        # (TMA_STORE = 2). Where that staging does not fit, a stage fewer; where even two
        # stages leave no room, C leaves from registers.
        p = {**p, "TMA_STORE": 2}
        room = gpu.properties(device).max_dynamic_smem
        while v.shared_memory(p, dtype) > room and p["STAGES"] > 2:
            p = {**p, "STAGES": p["STAGES"] - 1}
        if v.shared_memory(p, dtype) > room:
            p = {**p, "TMA_STORE": 0}

    spec = Spec(dtype, plan_a.layout.col, plan_b.layout.col, bias is not None, act, read_c,
                _flags(v, (full_a, full_b, full_c), (plan_a.layout, plan_b.layout, layout_c),
                       shapes),
                out_dtype=None if c_dtype == default_output(dtype) else c_dtype, **spec_extras)
    pads = tuple(x.pad for x in (plan_a, plan_b) if x.pad is not None)
    plan = Plan(v, p, spec, device, kind, shapes, plan_a, plan_b, layout_c, output, read_c,
                copy_bias=bias is not None and bias.strides[0] != bias.itemsize
                and bias.size > 1, pad_launch=plan_pad_launch(pads, device) if pads else None,
                contenders=listed)
    plan.c_dtype_np = full_c.dtype
    plan.scaled = "scale_a" in v.extra_args
    if kind == "torch":
        import torch

        model = torch.empty((), dtype=getattr(torch, c_dtype),
                            device=torch.device("cuda", device)).expand(shapes.out)
        plan.new_torch_result = functools.partial(torch.empty_like, model,
                                                  memory_format=torch.contiguous_format)
    if shapes.m == 0 or shapes.n == 0 or shapes.count == 0:
        return plan  # nothing to compute: no chunks

    smem = check_device_limits(v, p, dtype, device)
    plan.shared_mem = smem if v.dynamic_smem else 0
    plan.splits = splits = v.splits_of(p)
    per_launch = MAX_GRID[2] // splits  # products per launch: z is product x split
    grid, plan.block = v.launch(p, shapes.m, shapes.n, gpu.multiprocessors(device),
                                min(shapes.count, per_launch))
    plan.acc_code, acc_size = ("d", 8) if DTYPES[dtype].acc == "double" else ("f", 4)
    item, c_item = a.itemsize, full_c.itemsize
    sums = v.partial_sums_of(p, shapes.m, shapes.n, gpu.multiprocessors(device),
                             min(shapes.count, per_launch))
    workspace = sums * shapes.count * acc_size
    check_workspace(v, p, workspace, shapes)
    counters = 0  # split-K's, per product: per tile of C (not per block)
    if sums:
        tile_rows, tile_cols, _ = v.tile(p, dtype)
        counters = cdiv(shapes.m, tile_rows) * cdiv(shapes.n, tile_cols) * v.counters_of(p)
        plan.partials_bytes = workspace
        plan.arrivals = shapes.count * counters
    la, lb = plan_a.layout, plan_b.layout
    fixed = packed("iiiiiiqqq" + plan.acc_code * 2, (
        shapes.m, shapes.n, shapes.k, la.ld, lb.ld, layout_c.ld,
        la.batch_stride, lb.batch_stride, layout_c.batch_stride, 1.0, 0.0))
    plan.sizes, plan.unit = fixed[:9], fixed[9:]
    chunks = []
    for first in range(0, shapes.count, per_launch):
        count = min(per_launch, shapes.count - first)
        offsets = (first * la.batch_stride * item, first * lb.batch_stride * item,
                   first * layout_c.batch_stride * c_item)
        extra = tuple(_extra_arg(arg, v, p, shapes, (full_a, full_b, full_c),
                                 (la, lb, layout_c), offsets, first, count,
                                 (sums * acc_size, counters * 4))
                      for arg in v.extra_args)
        chunks.append(Chunk((*grid[:2], count * splits), offsets, extra))
    plan.chunks = tuple(chunks)
    return plan


@functools.lru_cache(maxsize=64)
def _transpose_variant(dtype: str, device: int) -> tuple[Variant, dict[str, int]]:
    """The transpose that copies operands (``FAMILY_DEFAULTS``), resolved for ``dtype``
    and checked against GPU ``device``'s limits (once: planning is per shape)."""
    v = get_variant(FAMILY_DEFAULTS["transpose"], "transpose")
    p = v.resolve({}, dtype)
    check_device_limits(v, p, dtype, device)
    return v, p


@functools.lru_cache(maxsize=64)
def _transpose_function(spec: Spec, device: int) -> Any:
    """The function of that transpose at ``spec`` on GPU ``device``."""
    v, p = _transpose_variant(spec.dtype, device)
    return get_kernel(v.name, p, spec, device, v.family).kernel


def _folded(a: cupy.ndarray, b: cupy.ndarray, target: cupy.ndarray | None, shapes: Shapes
            ) -> tuple[cupy.ndarray, cupy.ndarray, cupy.ndarray | None, Shapes] | None:
    """A batch of products that all share B, whose rows of A (and of C) follow one
    another at one stride, as one product of all their rows: (count x M) x K times
    K x N, as ``torch.matmul`` folds ``x @ w.T`` for a 3-D ``x``. B is read once, not once
    a product, and a decode step's (batch, 1, hidden) activations make one product of
    ``batch`` rows rather than ``batch`` products of one row. None where it does not
    apply (one product, 1-D operands, a batched B, rows at uneven strides); A, B and C as
    2-D views and the folded shapes otherwise.

    >>> import cupy as cp  # doctest: +SKIP
    >>> x, w = cp.ones((8, 1, 64)), cp.ones((32, 64))  # doctest: +SKIP
    >>> from xgemm.checks import matmul_shapes  # doctest: +SKIP
    >>> _folded(x, w.T, None, matmul_shapes(x.shape, w.T.shape))[3].m  # doctest: +SKIP
    8
    """
    from cupy.lib.stride_tricks import as_strided

    count, m, n, k = shapes.count, shapes.m, shapes.n, shapes.k
    if (count < 2 or shapes.a_vector or shapes.b_vector or math.prod(a.shape[:-2]) != count
            or any(size > 1 and stride for size, stride in zip(b.shape[:-2], b.strides[:-2],
                                                               strict=True))
            or count * m > INT_MAX):
        return None

    def rows(x: cupy.ndarray, width: int, write: bool) -> int | None:
        """The stride, in elements, between consecutive rows of all x's matrices."""
        layout = layout_of(x.shape, x.strides, x.itemsize, ("row",), write=write)
        if layout is None:
            return None
        stride = layout.ld if m > 1 else layout.batch_stride
        return stride if stride >= width and (m == 1 or layout.batch_stride == m * stride) \
            else None

    lda = rows(a, k, False)
    ldc = None if target is None else rows(target, n, True)
    if lda is None or (target is not None and ldc is None):
        return None
    a2 = as_strided(a, (count * m, k), (lda * a.itemsize, a.itemsize))
    c2 = None if target is None else as_strided(target, (count * m, n),
                                                (ldc * target.itemsize, target.itemsize))
    return a2, b[(0,) * (b.ndim - 2)], c2, Shapes((), count * m, n, k, shapes.out, False, False)


def _transposed(x: cupy.ndarray, layout: Layout, device: int
                ) -> tuple[Fresh, Layout, Transpose]:
    """A 2-D operand copied into its other layout by the transpose kernel: the copy as
    planning sees it (each call makes its own), its layout, and the transpose."""
    rows, cols = x.shape[::-1] if layout.col else x.shape  # what is read: unit stride along
    dtype = dtype_name(x.dtype)
    v, p = _transpose_variant(dtype, device)
    spec, grid, block = transpose_launch(v, p, x.data.ptr, rows, cols, layout.ld, dtype, device)
    function = _transpose_function(spec, device)
    return Fresh((cols, rows), x.dtype), Layout(not layout.col, rows, 0), Transpose(
        geometry(function, grid, block, 0), (cols, rows), x.dtype,
        packed("iii", (rows, cols, layout.ld)))


def _pad_of(full_shape: tuple[int, ...], source: Layout, padded: Layout, itemsize: int
            ) -> Pad | None:
    """The pad kernel's copy of an operand of ``full_shape`` read in place in ``source``
    into ``padded`` (``tma_padded``'s layout), or None where its batch is neither
    broadcast nor one run of evenly spaced lines (each call then pads through CuPy)."""
    *batch, rows, cols = full_shape
    inner, outer = (rows, cols) if source.col else (cols, rows)
    count = int(np.prod(batch)) if batch and source.batch_stride else 1
    if source.ld < inner or count > 1 and source.batch_stride != source.ld * outer:
        return None
    return padding(count * outer, inner * itemsize, source.ld * itemsize,
                   padded.ld * itemsize, count * outer * padded.ld)


def _extra_arg(arg: str, v: Variant, p: dict[str, int], shapes: Shapes, arrays: tuple,
               layouts: tuple, offsets: tuple, first: int, count: int,
               workspace_bytes: tuple[int, int]) -> ExtraArg:
    """One of ``v``'s extra arguments for the chunk of ``count`` products from ``first``
    (``xgemm.launch`` turns it into a pointer or a tensor map).
    ``workspace_bytes``: split-K's partials and counters per product."""
    if arg == "partials":
        return ExtraArg(Source.PARTIALS, first * workspace_bytes[0], None)
    if arg == "arrivals":
        return ExtraArg(Source.ARRIVALS, first * workspace_bytes[1], None)
    if arg in ("scale_a", "scale_b"):  # shared by the whole batch
        return ExtraArg(Source.SCALE_A if arg == "scale_a" else Source.SCALE_B, 0, None)
    operand = arg.removeprefix("tensor_map_")
    index = "abc".index(operand)
    box = v.tma_box(operand, p)
    if box == 0 or (operand != "c" and shapes.k == 0):
        return ExtraArg(Source.NONE, 0, None)  # a map the kernel does not read
    x, layout = arrays[index], layouts[index]
    rows, cols = ((shapes.m, shapes.k), (shapes.k, shapes.n), (shapes.m, shapes.n))[index]
    k_contiguous = (not layout.col, layout.col, True)[index]
    item, row = x.itemsize, 128 // x.itemsize  # row: values in a 128-byte swizzled row
    inner, outer = (rows, cols) if layout.col else (cols, rows)
    batched = layout.batch_stride != 0
    stride = layout.batch_stride if batched else layout.ld * outer
    return ExtraArg(Source(index), offsets[index], (
        x.dtype.name, (inner, outer, count if batched else 1),
        (layout.ld * item, stride * item), (row, box if k_contiguous else row, 1)))


def _flags(v: Variant, arrays: tuple, layouts: tuple, shapes: Shapes
           ) -> tuple[tuple[str, bool], ...]:
    """The variant's boolean specialisations for these operands: ``aligned``, in each of
    A, B and C every group of four elements along a contiguous dimension starts at a
    4-element boundary and lies wholly inside the matrix; ``aligned16``, the same for
    groups of 16 bytes (C may be wider than A and B: each counts in its own elements)."""
    extents = (shapes.m if layouts[0].col else shapes.k,
               shapes.k if layouts[1].col else shapes.n, shapes.n)  # along each one's rows
    # Per array, its address and sizes in bytes, ORed: a power of two divides them all
    # where it divides this (itemsizes and groups are powers of two)
    bits = [(pointer(x) | (size | layout.ld | layout.batch_stride) * x.itemsize, x.itemsize)
            for x, layout, size in zip(arrays, layouts, extents, strict=True)]
    flags = {}
    for flag in v.flags:
        if flag not in ("aligned", "aligned16"):
            raise ValueError(f"variant {v.name!r} declares the unknown flag {flag!r}")
        flags[flag] = all(
            together % (item * (4 if flag == "aligned" else max(1, 16 // item))) == 0
            for together, item in bits)
    return tuple(sorted(flags.items()))
