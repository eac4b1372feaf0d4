"""Suites that measure ``auto`` on shapes nobody tuned for (``xgemm bench --suite random``
and ``--suite models``), and how far its pick is from the best it could have made.

- **random**: a seeded sample of single products, M, N and K drawn log-uniformly from 1 to
  16384, layouts NN, NT and TN (a transposed view), under a cap on the multiply-adds so
  a run fits the GPU's time (:func:`random_cases`).
- **models**: the linear layers of public model configurations (:data:`MODELS`) at 1 to
  16384 tokens, the forward ``x @ W.T`` with x 3-D as a model passes it and both backward
  products, ``dY @ W`` and ``dY.T @ X`` (:func:`model_cases`), shapes shared by several
  models measured once.

Each row is measured on PyTorch tensors (the practitioner's case), with ``out=`` given:
the kernel time of ``auto``'s prepared plan (its copies included) and of the baseline,
cuBLAS through ``torch.matmul`` or ``cupy.matmul`` (``F.linear`` too for a forward),
whichever ran the kernel faster; the whole call queued back to back, auto and every
baseline taking turns, against the baseline whose call was fastest (``call_baseline``:
CuPy's call costs the host about twice PyTorch's); and
**regret**: auto's kernel time over the fastest kernel time among the candidates, every
point that a rung declares for ``auto`` (``Variant.candidates``) timed on the same
operands, read as they lie. A regret of 1 means auto picked the best it had.

Example:
    >>> [c.label for c in random_cases(7, 3)]
    ['431x6043x1858:TN', '2891x2287x94:TN', '134x215x15684:TN']
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .. import cost
from .tolerances import TOLERANCE

#: The largest dimension the random sample draws.
MAX_DIM = 16384
#: The most floating-point operations (2 M N K) of a random case: 2^38, 275 GFLOP.
FLOP_CAP = 2**38
#: The fewest: 2^22, 4 MFLOP. Below it every rung's kernel is its launch (2-4 us on an
#: H100) and the host's time per call is all that tells two choices apart.
FLOP_FLOOR = 2**22
#: The layouts the random sample draws: A and B row-major, B a transposed view (a weight
#: ``w.T``), A a transposed view (a backward product ``dY.T``).
RANDOM_LAYOUTS = ("NN", "NT", "TN")
#: The token counts of the models suite: decode (1-32), prefill and training batches.
TOKENS = (1, 8, 32, 128, 512, 4096, 16384)
#: Candidates slower than this many times the fastest so far are timed once, not more.
ABANDON = 4.0
#: The 8-bit parts of the random suite (``--dtype float8`` or ``int8``): FP8 (e4m3) with a
#: scale per row of A and per column of B against ``torch._scaled_mm``, int8 against
#: ``torch._int_mm`` (``xgemm.tools.suite.measure_eight_bit``'s rows), no regret (auto's 8-bit
#: pick is a rule, not the cost model).
EIGHT_BIT_PARTS = ("float8", "int8")
#: Microseconds the GPU is held busy before each timed launch: a call whose plan pads
#: operands for TMA spends up to a few hundred microseconds of host time (CuPy's copies,
#: DLPack, tensor maps), over ``timing.HOLD_US``, and the GPU would wait for it in the
#: timed window.
HOLD_US = 1000.0


@dataclass(frozen=True)
class Product:
    """One product (M x K) @ (K x N): ``layout`` says how A and B lie ("T": a transposed
    view), ``lead`` gives A's leading dimensions (x of shape (*lead, M, K) as a model
    passes it), ``name`` what it is (a model's layer), where it is one."""

    m: int
    n: int
    k: int
    layout: str = "NN"
    lead: tuple[int, ...] = ()
    name: str = ""

    @property
    def label(self) -> str:
        """``MxNxK[:LAYOUT]`` with A's leading dimensions before it, as in the tables."""
        lead = "".join(f"{d}x" for d in self.lead)
        return f"{lead}{self.m}x{self.n}x{self.k}" + (
            f":{self.layout}" if self.layout != "NN" else "")

    @property
    def flops(self) -> int:
        return 2 * math.prod(self.lead) * self.m * self.n * self.k


def random_cases(seed: int, count: int = 36, cap: int = FLOP_CAP, floor: int = FLOP_FLOOR,
                 max_dim: int = MAX_DIM, min_dim: int = 1, max_k: int | None = None,
                 multiple: int = 1, max_m: int | None = None,
                 min_k: int | None = None) -> list[Product]:
    """``count`` products drawn with ``numpy.random.default_rng(seed)``: M, N and K
    log-uniform over [min_dim, max_dim] (rounded to the nearest integer; K over
    [1, max_k] where ``max_k`` is given: a stratum of tiny-K products for calibration;
    over [min_k, max_k] where ``min_k`` is given too: a stratum of short K),
    then rounded up to a ``multiple`` (16: a stratum of aligned products, as a model's
    are), a layout from RANDOM_LAYOUTS; a draw of more than ``cap`` or fewer than
    ``floor`` floating-point operations is drawn again. Where ``max_m`` is given, M is
    drawn over [1, max_m] and left as drawn (a stratum of few rows: a decode step's
    tokens, against a model's aligned N and K).
    The same seed gives the same sample on every machine.

    >>> random_cases(1, 2) == random_cases(1, 2)
    True
    >>> all(x % 16 == 0 for c in random_cases(1, 4, multiple=16) for x in (c.m, c.n, c.k))
    True
    >>> all(c.m <= 16 and c.n % 64 == 0 for c in random_cases(1, 4, multiple=64, max_m=16))
    True
    >>> all(256 <= c.k <= 1024 for c in random_cases(1, 4, min_k=256, max_k=1024))
    True
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    low, high = math.log(min_dim), math.log(max_dim)
    cases: list[Product] = []
    while len(cases) < count:
        if max_k is None and min_k is None:
            draw = rng.uniform(low, high, 3)
        else:
            k_low = math.log(min_k) if min_k is not None else 0.0
            k_high = math.log(max_k) if max_k is not None else high
            draw = rng.uniform([low, low, k_low], [high, high, k_high])
        if max_m is not None:
            draw[0] = rng.uniform(0.0, math.log(max_m))
        m, n, k = (-(-int(round(math.exp(x))) // multiple) * multiple for x in draw)
        if max_m is not None:
            m = int(round(math.exp(draw[0])))
        layout = RANDOM_LAYOUTS[int(rng.integers(len(RANDOM_LAYOUTS)))]
        if floor <= 2 * m * n * k <= cap:
            cases.append(Product(m, n, k, layout))
    return cases


def eight_bit_cases(seed: int, count: int = 36) -> list[Product]:
    """:func:`random_cases`' draws for an 8-bit part: the same M, N and K rounded up to
    a multiple of 16 (cuBLASLt's 8-bit products take no other), and B a weight's
    transposed view (NT), the layout both cuBLASLt and xgemm's 8-bit rungs read in place.

    >>> [c.label for c in eight_bit_cases(7, 3)]
    ['431x6048x1872:NT', '2891x2288x96:NT', '134x224x15696:NT']
    """
    return [Product(c.m, -(-c.n // 16) * 16, -(-c.k // 16) * 16, "NT")
            for c in random_cases(seed, count)]


@dataclass(frozen=True)
class Model:
    """A decoder's linear layers, from its public configuration."""

    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    def linears(self) -> dict[str, tuple[int, int]]:
        """Each linear layer's weight shape (out features, in features), by name."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return {"q_proj": (q, self.hidden), "k_proj, v_proj": (kv, self.hidden),
                "o_proj": (self.hidden, q), "gate_proj, up_proj": (self.intermediate, self.hidden),
                "down_proj": (self.hidden, self.intermediate), "lm_head": (self.vocab, self.hidden)}


#: The public configurations the models suite takes its layers from (their config.json).
MODELS = (
    Model("Llama-3-8B", 4096, 32, 8, 128, 14336, 128256),
    Model("Llama-3-70B", 8192, 64, 8, 128, 28672, 128256),
    Model("Mistral-7B", 4096, 32, 8, 128, 14336, 32000),
    Model("Qwen2.5-7B", 3584, 28, 4, 128, 18944, 152064),
)


def model_cases(tokens: Iterable[int] = TOKENS, models: Sequence[Model] = MODELS
                ) -> list[Product]:
    """Every distinct product of the models' linears at each token count: the forward
    ``x @ W.T`` (x of shape (1, tokens, in), W (out, in): "NT"), the input's gradient
    ``dY @ W`` (dY (1, tokens, out): "NN") and the weight's ``dY.T @ X`` (over the
    tokens: "TN"). A shape several layers or models share appears once, named after the
    first.

    >>> [c.label for c in model_cases([8], MODELS[:1])][:3]
    ['1x8x4096x4096:NT', '1x8x4096x4096', '4096x4096x8:TN']
    """
    seen: dict[tuple, Product] = {}
    for t in tokens:
        for model in models:
            for layer, (out, inp) in model.linears().items():
                name = f"{model.name} {layer}"
                for product in (Product(t, out, inp, "NT", (1,), f"{name} forward"),
                                Product(t, inp, out, "NN", (1,), f"{name} dX"),
                                Product(out, inp, t, "TN", (), f"{name} dW")):
                    key = (product.m, product.n, product.k, product.layout, product.lead)
                    seen.setdefault(key, product)
    return list(seen.values())


# -- measuring -------------------------------------------------------------------------------
#: What each part multiplies: (dtype, precision), as the calibration reads the files.
PARTS = cost.PARTS


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
    b = operand((), case.k, case.n, case.layout[1] == "T")
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
            rounds: int = 9, seed: int = 0) -> dict[str, Any]:
    """One row: auto's pick, kernel and whole-call milliseconds against cuBLAS's and, with
    ``regret``, every candidate's kernel milliseconds on the same operands."""
    import torch

    import xgemm

    from .. import timing
    from . import overhead

    dtype, precision = PARTS[part]
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    a, b, c = operands(case, dtype, seed)
    row: dict[str, Any] = {"part": part, "case": case.label, "name": case.name,
                           "m": case.m, "n": case.n, "k": case.k, "layout": case.layout,
                           "lead": list(case.lead), "flops": case.flops}
    flush = timing.scrub_pays((a.numel() + b.numel() + c.numel()) * a.element_size(),
                              a.device.index)
    baselines = _baselines(a, b, c, linear=case.layout == "NT" and bool(case.lead))
    timed = {name: _kernel_ms(fn, repeat, flush) for name, fn in baselines.items()}
    baseline = min(timed, key=timed.__getitem__)
    expected = baselines["torch.matmul"]().clone()
    tolerance = TOLERANCE["cuBLAS"]["tf32" if precision else dtype]

    def checked(launch: Any) -> float:
        c.fill_(float("nan"))
        launch()
        return _error(c, expected)

    launch = xgemm.prepare(a, b, out=c, precision=precision)
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
        times = [x["ms"] for x in row["candidates"] if x["status"] == "ok"]
        # a candidate that is auto's very launch (variant, parameters as planned, copies)
        # measured it a second time: auto's time is the faster of the two, as the best
        # is the fastest of all (copies per call vary run to run)
        twins = [x["ms"] for x in row["candidates"] if x["status"] == "ok"
                 and (x["variant"], x["planned"], x["copies"])
                 == (row["variant"], row["params"], row["copies"])]
        if twins and min(twins) < auto_ms:
            row["auto_ms_first"] = auto_ms
            auto_ms = row["auto_ms"] = min(twins)
        best = min([auto_ms, *times])
        row.update(best_ms=best, regret=auto_ms / best)
    call = overhead.call_against_baselines(
        baselines, lambda: xgemm.matmul(a, b, out=c, precision=precision),
        overhead.calls_per_round(timed[baseline]), rounds)
    row.update(call, status="ok", x_kernel=timed[baseline] / auto_ms,
               x_call=call["cublas_call_ms"] / call["auto_call_ms"])
    return row


def measure_eight_bit(part: str, case: Product, *, repeat: int = 10, rounds: int = 9
                      ) -> dict[str, Any]:
    """One row of an 8-bit part (:data:`EIGHT_BIT_PARTS`): ``xgemm.tools.suite``'s 8-bit
    measurement of ``case`` (NT), with row and column scales for FP8, the L2 scrubbed
    before each timed launch where the operands and C fit four times in it, and the
    random suite's fields."""
    from . import suite

    row = suite.measure_eight_bit(
        part, suite.Case(case.m, case.n, case.k, layout="NT",
                         scales="tensor" if part == "int8" else "vector"),
        repeat=repeat, rounds=rounds)
    return {**row, "part": part, "case": case.label, "name": case.name, "m": case.m,
            "n": case.n, "k": case.k, "layout": case.layout, "lead": list(case.lead),
            "flops": case.flops}


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
                            TOLERANCE["cuBLAS"]["tf32" if precision else dtype],
                            row["best_ms"], repeat, flush, names, before)
        row["candidates"] = [x for x in row["candidates"]
                             if x["variant"] not in names or new_points_only] + timed
        # the best over every candidate now in the row (a dropped timing may have been it);
        # a candidate that is auto's very launch counts as auto's time, as measure() has it
        ok = [x for x in row["candidates"] if x["status"] == "ok"]
        twins = [x["ms"] for x in ok if (x["variant"], x.get("planned"), x.get("copies"))
                 == (row["variant"], row["params"], row["copies"])]
        auto_ms = min([row.get("auto_ms_first", row["auto_ms"]), *twins])
        row["auto_ms"] = auto_ms
        row["best_ms"] = min([auto_ms, *(x["ms"] for x in ok)])
        row["regret"] = auto_ms / row["best_ms"]
        if progress is not None:
            progress()


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


def run(part: str, cases: Sequence[Product], *, regret: bool = True, repeat: int = 10,
        rows: list[dict[str, Any]] | None = None, progress: Any = None
        ) -> list[dict[str, Any]]:
    """Every case, in order, appended to ``rows`` (a new list by default); a failure lands
    in its row. ``progress``: called after each row (to save, or update a bar)."""
    rows = [] if rows is None else rows
    for i, case in enumerate(cases):
        try:
            rows.append(measure_eight_bit(part, case, repeat=repeat)
                        if part in EIGHT_BIT_PARTS
                        else measure(part, case, regret=regret, repeat=repeat, seed=i))
        except Exception as exc:  # one broken case must not end the run
            rows.append({"part": part, "case": case.label,
                         "status": f"error: {type(exc).__name__}: {exc}"})
        if progress is not None:
            progress()
    return rows


def summary(rows: Sequence[dict[str, Any]], seed: int | None = None) -> dict[str, Any]:
    """Geometric means and extremes over the rows measured ok.

    >>> s = summary([{"status": "ok", "x_call": 0.5, "x_kernel": 1.0, "regret": 1.0},
    ...              {"status": "ok", "x_call": 2.0, "x_kernel": 1.0, "regret": 1.21}])
    >>> s["geomean_call_x"], s["min_call_x"], round(s["geomean_regret"], 3), s["max_regret"]
    (1.0, 0.5, 1.1, 1.21)
    """
    ok = [r for r in rows if r.get("status") == "ok"]
    regrets = [r["regret"] for r in ok if "regret" in r]
    return {"seed": seed, "cases": len(rows), "ok": len(ok),
            "geomean_call_x": geomean([r["x_call"] for r in ok]),
            "geomean_kernel_x": geomean([r["x_kernel"] for r in ok]),
            "min_call_x": min((r["x_call"] for r in ok), default=None),
            "geomean_regret": geomean(regrets),
            "max_regret": max(regrets, default=None)}


def geomean(values: Sequence[float]) -> float | None:
    """The geometric mean, or None for no values.

    >>> geomean([0.5, 2.0])
    1.0
    """
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None
