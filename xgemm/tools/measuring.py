"""Measuring one product: ``auto``'s pick against cuBLAS on fresh random operands, its
kernel and its whole call, and (with regret) every candidate ``auto`` weighs. The suites
only choose the products: the practitioner's cases (``suite``), a seeded random sample
and public models' linears (``generalisation``); every row of every suite is made here.

- **operands**: normal values drawn on the GPU by PyTorch, in the product's layout ("T": a
  transposed view), C given as ``out=`` (NaN before each checked launch). ``framework``
  says what xgemm is given: the tensors (the random and models suites), or CuPy arrays
  over the same memory (the practitioner's suite, for CuPy users' calls).
- **kernel**: CUDA events around single launches, the GPU held busy while the host makes
  each (``timing.time_launches``), the L2 scrubbed before each where the operands and C
  would stay in it (``timing.scrub_pays``); the median. For ``auto``, its prepared plan,
  copies included.
- **baseline**: cuBLAS through ``torch.matmul`` or ``cupy.matmul`` (``F.linear`` too for a
  forward, x @ w.T with x 3-D), whichever ran the kernel faster; it is also the result
  checked against. For the call, the baseline whose call was fastest
  (``call_baseline``: CuPy's call costs the host about twice PyTorch's).
- **call**: each contender queued back to back between two CUDA events, taking turns
  round after round (``overhead.call_against_baselines``): what a loop of such products
  costs, host and GPU together.
- **regret**: ``auto``'s kernel time over the fastest kernel among the candidates, every
  point a rung declares for ``auto`` (``Variant.candidates``), timed on the same operands
  read as they lie. A regret of 1 means ``auto`` picked the best it had.
- **8-bit** (:func:`measure_eight_bit`): FP8 against ``torch._scaled_mm`` (bfloat16 out,
  the same scales) and int8 against ``torch._int_mm`` (int32 out), B a weight's
  transposed view; the rows also time xgemm's bfloat16 ``wgmma`` on the same values
  (``x_bf16``: what 8 bits buy over 16), and check against a float64 product.

Example:
    >>> Product(8, 4096, 4096, "NT", (1,)).label
    '1x8x4096x4096:NT'
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .. import cost
from ..specs import numpy_dtype
from .tolerances import TOLERANCE

#: What each part multiplies: (dtype, precision), as the calibration reads the files
#: (tf32x3: measured against exact SGEMM, not calibrated).
PARTS = {**cost.PARTS, "tf32x3": ("float32", "tf32x3")}
#: The 8-bit parts and their results' dtype, which keys their tolerance against the
#: float64 product of the dequantised inputs (``tolerances.TOLERANCE["8-bit"]``).
EIGHT_BIT_OUTPUT = {"float8": "bfloat16", "int8": "int32"}
#: Candidates slower than this many times the fastest so far are timed once, not more.
ABANDON = 4.0
#: Microseconds the GPU is held busy before each timed launch: a call whose plan pads
#: operands for TMA spends up to a few hundred microseconds of host time (CuPy's copies,
#: DLPack, tensor maps), over ``timing.HOLD_US``, and the GPU would wait for it in the
#: timed window.
HOLD_US = 1000.0


@dataclass(frozen=True)
class Product:
    """One product (M x K) @ (K x N): ``layout`` says how A and B lie ("T": a transposed
    view), ``lead`` gives A's leading dimensions (x of shape (*lead, M, K) as a model
    passes it), ``b_lead`` B's (a stack of B matrices, one a product: attention's keys per
    head; none: one B for the batch, a weight), ``name`` what it is (a model's layer),
    where it is one."""

    m: int
    n: int
    k: int
    layout: str = "NN"
    lead: tuple[int, ...] = ()
    name: str = ""
    b_lead: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        """``MxNxK[:LAYOUT]`` with A's leading dimensions before it, as in the tables."""
        lead = "".join(f"{d}x" for d in self.lead)
        return f"{lead}{self.m}x{self.n}x{self.k}" + (
            f":{self.layout}" if self.layout != "NN" else "")

    @property
    def flops(self) -> int:
        return 2 * math.prod(self.lead) * self.m * self.n * self.k


def operands(case: Product, dtype: str, seed: int) -> tuple[Any, Any, Any]:
    """Fresh normal PyTorch operands of ``case`` on the GPU in its layout, and ``out``.

    >>> a, b, out = operands(Product(8, 4096, 4096, "NT", (1,)), "bfloat16", 0)  # doctest: +SKIP
    >>> a.shape, b.shape, out.shape  # doctest: +SKIP
    (torch.Size([1, 8, 4096]), torch.Size([4096, 4096]), torch.Size([1, 8, 4096]))
    """
    import torch

    generator = torch.Generator("cuda").manual_seed(seed)
    kind = getattr(torch, dtype)

    def operand(lead: tuple[int, ...], rows: int, cols: int, transposed: bool) -> Any:
        shape = (*lead, cols, rows) if transposed else (*lead, rows, cols)
        x = torch.randn(shape, device="cuda", generator=generator).to(kind)
        return x.transpose(-1, -2) if transposed else x

    a = operand(case.lead, case.m, case.k, case.layout[0] == "T")
    b = operand(case.b_lead, case.k, case.n, case.layout[1] == "T")
    return a, b, torch.empty((*case.lead, case.m, case.n), device="cuda", dtype=kind)


def _baselines(a: Any, b: Any, c: Any, linear: bool) -> dict[str, Any]:
    """cuBLAS through PyTorch and CuPy (those that take the case), writing ``c``; with
    ``linear``, also ``F.linear`` on the weight that ``b`` is the transposed view of."""
    import cupy
    import torch

    found = {"torch.matmul": lambda: torch.matmul(a, b, out=c)}
    ca, cb, cc = (cupy.from_dlpack(x) for x in (a, b, c))
    try:
        cupy.matmul(ca, cb, out=cc)
        found["cupy.matmul"] = lambda: cupy.matmul(ca, cb, out=cc)
    except (TypeError, ValueError):  # CuPy has no batched bfloat16
        pass
    if linear:
        weight = b.T
        found["F.linear"] = lambda: torch.nn.functional.linear(a, weight)
    return found


def _kernel_ms(launch: Any, repeat: int, flush_l2: bool) -> float:
    from .. import timing

    return statistics.median(timing.time_launches(launch, warmup=2, repeat=repeat,
                                                  max_seconds=1.0, flush_l2=flush_l2,
                                                  hold_us=HOLD_US))


def measure(part: str, case: Product, *, regret: bool = True, repeat: int = 10,
            rounds: int = 9, seed: int = 0, framework: str = "torch") -> dict[str, Any]:
    """One row: auto's pick, kernel and whole-call milliseconds against cuBLAS's and, with
    ``regret``, every candidate's kernel milliseconds on the same operands. ``framework``:
    the arrays xgemm is given, PyTorch's tensors or CuPy views of them ("cupy"; no regret).

    >>> measure("float16", Product(64, 64, 64), regret=False)["status"]  # doctest: +SKIP
    'ok'
    """
    if framework not in ("torch", "cupy") or framework == "cupy" and regret:
        raise ValueError(f"framework {framework!r}: 'torch', or 'cupy' without regret")
    import torch

    import xgemm

    from .. import timing
    from . import overhead

    dtype, precision = PARTS[part]
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    a, b, c = operands(case, dtype, seed)
    row: dict[str, Any] = _fields(part, case)
    flush = timing.scrub_pays((a.numel() + b.numel() + c.numel()) * a.element_size(),
                              a.device.index)
    baselines = _baselines(a, b, c, linear=case.layout == "NT" and bool(case.lead))
    timed = {name: _kernel_ms(fn, repeat, flush) for name, fn in baselines.items()}
    baseline = min(timed, key=timed.__getitem__)
    expected = baselines["torch.matmul"]().clone()
    tolerance = TOLERANCE["cuBLAS"]["tf32" if precision == "tf32" else dtype]

    def checked(launch: Any) -> float:
        c.fill_(float("nan"))
        launch()
        return _error(c, expected)

    # what xgemm is given: the tensors, or CuPy arrays over the same memory
    xa, xb, xc = (a, b, c) if framework == "torch" else _as_cupy(a, b, c)
    launch = xgemm.prepare(xa, xb, out=xc, precision=precision)
    error = checked(launch)
    row.update(variant=launch.variant.name, params=dict(launch.params),
               copies=list(launch.copies), baseline=baseline, error=error)
    if not error < tolerance:
        row["status"] = f"wrong result: error {error:.3g} against cuBLAS"
        return row
    auto_ms = _kernel_ms(launch, repeat, flush)
    row.update(cublas_ms=timed[baseline], auto_ms=auto_ms)
    if regret:
        row["candidates"] = _candidates(a, b, c, dtype, precision, checked, tolerance,
                                        auto_ms, repeat, flush)
        auto_ms = _settle_auto(row)
    call = overhead.call_against_baselines(
        baselines, lambda: xgemm.matmul(xa, xb, out=xc, precision=precision),
        overhead.calls_per_round(timed[baseline]), rounds)
    row.update(call, status="ok", x_kernel=timed[baseline] / auto_ms,
               x_call=call["cublas_call_ms"] / call["auto_call_ms"])
    return row


def measure_eight_bit(part: str, case: Product, *, repeat: int = 10, rounds: int = 9,
                      b_format: str = "float8_e4m3fn", scales: str = "tensor"
                      ) -> dict[str, Any]:
    """One row of an 8-bit part: ``auto`` (``wgmma_8bit``) against cuBLASLt through
    PyTorch, kernel and call, and against xgemm's bfloat16 ``wgmma`` on the same values
    (kernel times with the L2 scrubbed before each launch where the operands and C fit
    four times in it, ``timing.scrub_pays``, as the other parts decide). A shape cuBLASLt
    refuses gets the status "no baseline: ..." and no times. ``case`` is NT (B a weight's
    transposed view); ``b_format``: B's FP8 format; ``scales``: FP8's, one an operand
    ("tensor") or per row of A and column of B ("vector").

    >>> measure_eight_bit("int8", Product(64, 64, 64, "NT"))["status"]  # doctest: +SKIP
    'ok'
    """
    import torch

    import xgemm

    from .. import timing
    from . import overhead

    generator = torch.Generator("cuda").manual_seed(case.m * 7 + case.n * 3 + case.k)
    m, n, k = case.m, case.n, case.k
    out_bytes = numpy_dtype(EIGHT_BIT_OUTPUT[part]).itemsize  # int32 sums, or bfloat16
    flush_l2 = timing.scrub_pays(m * k + k * n + out_bytes * m * n, torch.cuda.current_device())

    def draw(rows: int, cols: int, fmt: str) -> Any:
        if fmt == "int8":
            return torch.randint(-127, 128, (rows, cols), device="cuda", dtype=torch.int8,
                                 generator=generator)
        values = torch.randn((rows, cols), device="cuda", generator=generator)
        return values.to(getattr(torch, fmt))

    fmt_a, fmt_b = ("int8", "int8") if part == "int8" else ("float8_e4m3fn", b_format)
    a, w = draw(m, k, fmt_a), draw(n, k, fmt_b)
    b = w.T  # K-major B: a weight stored N x K
    if part == "int8":
        scale_a = scale_b = None
        baseline_name = "torch._int_mm"

        def baseline() -> Any:
            return torch._int_mm(a, b)
    else:
        shapes = ((m, 1), (1, n)) if scales == "vector" else ((), ())
        scale_a, scale_b = (torch.rand(shape, device="cuda", generator=generator) + 0.5
                            for shape in shapes)
        baseline_name = "torch._scaled_mm"

        def baseline() -> Any:
            return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)

    def auto() -> Any:
        return xgemm.matmul(a, b, scale_a=scale_a, scale_b=scale_b)

    def kernel_ms(fn) -> float:
        return statistics.median(timing.time_launches(fn, repeat=repeat, flush_l2=flush_l2))

    launch = xgemm.prepare(a, b, scale_a=scale_a, scale_b=scale_b)
    expected = a.double() @ b.double()
    if scale_a is not None:
        expected = scale_a.double() * expected * scale_b.double()
    error = _error(launch(), expected)
    row: dict[str, Any] = {**_fields(part, case), "variant": launch.variant.name,
                           "params": dict(launch.params), "copies": list(launch.copies),
                           "baseline": baseline_name, "error": error}
    try:
        row["baseline_error"] = _error(baseline(), expected)
    except RuntimeError as exc:  # a shape cuBLASLt's 8-bit product does not take
        row["status"] = f"no baseline: {baseline_name} refused it ({exc})"
        return row
    if not error <= TOLERANCE["8-bit"][EIGHT_BIT_OUTPUT[part]]:
        row["status"] = f"wrong result: error {error:.3g} against float64"
        return row
    # the same values in bfloat16 (exact: FP8 and int8 values up to 256 are bfloat16's)
    wide_a, wide_b = a.to(torch.bfloat16), b.to(torch.bfloat16)
    kernel = {"cublas_ms": kernel_ms(baseline), "auto_ms": kernel_ms(launch),
              "bf16_ms": kernel_ms(lambda: xgemm.matmul(wide_a, wide_b, variant="wgmma"))}
    calls = overhead.calls_per_round(kernel["cublas_ms"], 30, 50)
    call = overhead.queued_ms_in_turns({"cublas_call_ms": baseline, "auto_call_ms": auto},
                                       calls, rounds)
    row.update(kernel, **call, status="ok",
               x_kernel=kernel["cublas_ms"] / kernel["auto_ms"],
               x_call=call["cublas_call_ms"] / call["auto_call_ms"],
               x_bf16=kernel["bf16_ms"] / kernel["auto_ms"])
    return row


def _fields(part: str, case: Product) -> dict[str, Any]:
    """A row's description of its product, before any measurement."""
    return {"part": part, "case": case.label, "name": case.name, "m": case.m, "n": case.n,
            "k": case.k, "layout": case.layout, "lead": list(case.lead),
            "b_lead": list(case.b_lead), "flops": case.flops}


def _as_cupy(*tensors: Any) -> tuple[Any, ...]:
    """CuPy arrays over the tensors' memory (no copy), strides and all."""
    import cupy

    return tuple(cupy.from_dlpack(t) for t in tensors)

def _candidates(a: Any, b: Any, c: Any, dtype: str, precision: str | None, checked: Any,
                tolerance: float, best: float, repeat: int, flush: bool,
                names: Collection[str] | None = None,
                skip: Collection[tuple[str, tuple]] = ()) -> list[dict[str, Any]]:
    """Each candidate's kernel time on these operands, read as they lie (a variant named
    in a call copies only what it cannot read: operands TMA cannot read are padded);
    only the rungs ``names`` where given; none of ``skip`` (:func:`point_of` each)."""
    import xgemm

    from .. import gpu, timing

    found: list[dict[str, Any]] = []
    launches = []
    for v, params in cost.candidates(dtype, precision, gpu.compute_capability(a.device.index)):
        if names is not None and v.name not in names or point_of(v.name, params) in skip:
            continue
        entry: dict[str, Any] = {"variant": v.name, "params": params}
        try:
            launches.append((entry, xgemm.prepare(a, b, v.name, out=c, **params)))
        except (ValueError, TypeError) as exc:  # a layout it cannot read, a grid too large
            found.append({**entry, "status": f"refused: {exc}"})
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:  # NVRTC runs outside the GIL
        list(pool.map(lambda item: item[1].kernel(), launches))
    for entry, launch in launches:
        try:
            error = checked(launch)
        except RuntimeError as exc:  # e.g. more shared memory than this GPU has
            found.append({**entry, "status": f"error: {exc}"})
            continue
        if not error < tolerance:
            found.append({**entry, "status": f"wrong result: error {error:.3g}"})
            continue
        first = timing.time_launches(launch, warmup=1, repeat=1, flush_l2=flush,
                                     hold_us=HOLD_US)[0]
        slow = first > ABANDON * best
        ms = first if slow else _kernel_ms(launch, repeat, flush)
        best = min(best, ms)
        found.append({**entry, "planned": dict(launch.params), "copies": list(launch.copies),
                      "ms": ms, "status": "ok", "timed": "once" if slow else "median"})
    return found


def point_of(variant: str, params: Mapping[str, int]) -> tuple[str, tuple]:
    """A candidate as a key: its rung and its parameters, in order.

    >>> point_of("wgmma", {"BN": 128, "BM": 64})
    ('wgmma', (('BM', 64), ('BN', 128)))
    """
    return variant, tuple(sorted(params.items()))


def add_candidates(rows: Sequence[dict[str, Any]], names: Collection[str], *,
                   repeat: int = 10, progress: Callable[[], None] | None = None,
                   new_points_only: bool = False) -> None:
    """Time the candidates of the rungs ``names`` on each row of a ``--suite random`` run
    (regret on), on the operands that run drew (the row's index seeds them), and put them
    in the row's candidates in place of any earlier timing of those rungs: a new rung's
    points join a calibration sample without timing the others again. With
    ``new_points_only``, only points the row has no timing of: a rung's new point then
    moves no other point's constants in a refit. Rows not measured ok stay as they are.

    Example (on a GPU; a file ``xgemm bench --suite random --json`` wrote):
        >>> data = json.load(open(path))  # doctest: +SKIP
        >>> add_candidates(data["rows"], {"skinny"})  # doctest: +SKIP
    """
    import torch

    from .. import timing

    for i, row in enumerate(rows):
        if row.get("status") != "ok" or "candidates" not in row:
            if progress is not None:
                progress()
            continue
        dtype, precision = PARTS[row["part"]]
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        case = Product(row["m"], row["n"], row["k"], row["layout"], tuple(row["lead"]))
        a, b, c = operands(case, dtype, i)
        expected = torch.matmul(a, b)
        flush = timing.scrub_pays((a.numel() + b.numel() + c.numel()) * a.element_size(),
                                  a.device.index)

        def checked(launch: Any, c: Any = c, expected: Any = expected) -> float:
            c.fill_(float("nan"))
            launch()
            return _error(c, expected)

        before = ({point_of(x["variant"], x["params"]) for x in row["candidates"]}
                  if new_points_only else set())
        timed = _candidates(a, b, c, dtype, precision, checked,
                            TOLERANCE["cuBLAS"]["tf32" if precision == "tf32" else dtype],
                            row["best_ms"], repeat, flush, names, before)
        row["candidates"] = [x for x in row["candidates"]
                             if x["variant"] not in names or new_points_only] + timed
        _settle_auto(row)  # the best over every candidate now (a dropped one may have been it)
        if progress is not None:
            progress()


def _settle_auto(row: dict[str, Any]) -> float:
    """Auto's time in a row with candidates, set with the row's best and regret; returned.

    A candidate that is auto's very launch (variant, parameters as planned, copies) timed
    it again, and auto's time is the faster of the two, as the best is the fastest of all
    (copies per call vary run to run). Auto's own first timing stays in
    ``auto_ms_first`` where a twin beat it, so that a later retiming of the candidates
    (:func:`add_candidates`) starts from it and not from a twin since dropped."""
    first = row.get("auto_ms_first", row["auto_ms"])
    ok = [x for x in row["candidates"] if x["status"] == "ok"]
    twins = [x["ms"] for x in ok if (x["variant"], x.get("planned"), x.get("copies"))
             == (row["variant"], row["params"], row["copies"])]
    auto_ms = row["auto_ms"] = min([first, *twins])
    if auto_ms < first:
        row["auto_ms_first"] = first
    else:
        row.pop("auto_ms_first", None)
    row["best_ms"] = min([auto_ms, *(x["ms"] for x in ok)])
    row["regret"] = auto_ms / row["best_ms"]
    return auto_ms


def _error(c: Any, expected: Any, step: int = 1 << 26) -> float:
    """Relative Frobenius error of a PyTorch result against another (both contiguous), in
    float64, ``step`` elements at a time (a 16384 x 152064 output is 20 GB in float64)."""
    c, expected = c.reshape(-1), expected.reshape(-1)
    diff = scale = 0.0
    for i in range(0, c.numel(), step):
        x, y = c[i:i + step].double(), expected[i:i + step].double()
        diff += float((x - y).square().sum())
        scale += float(y.square().sum())
    return math.sqrt(diff) / (math.sqrt(scale) if scale > 0 else 1.0)


def median_ms_in_turns(launches: dict[str, Callable[[], object]], rounds: int = 10,
                       flush_l2: bool = False) -> dict[str, float]:
    """Each of ``launches``' median milliseconds over ``rounds`` timed calls
    (``timing.time_launches``, three untimed calls each first), the contenders taking turns
    one call each, round after round, so that a GPU that slows as it heats slows them
    all alike (timed one after another, the later ones of a large product read up to 15%
    slow).

    >>> median_ms_in_turns({"cuBLAS": lambda: a @ b, "xgemm": launch})  # doctest: +SKIP
    {'cuBLAS': 0.181, 'xgemm': 0.184}
    """
    from .. import timing

    times: dict[str, list[float]] = {name: [] for name in launches}
    for turn in range(rounds):
        for name, launch in launches.items():
            times[name] += timing.time_launches(launch, warmup=3 if turn == 0 else 0,
                                                repeat=1, flush_l2=flush_l2)
    return {name: statistics.median(t) for name, t in times.items()}
