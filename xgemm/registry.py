"""What a kernel variant is, and the registry that names them.

A variant is declared once, as data (see ``xgemm/declarations/``): its template, default
parameters, the space a sweep walks, the constraints its parameters must meet and its
launch geometry. The constraints and geometry are Python expressions over the same
names the template uses (``BM``, ``TM``, ``tile``...), so a reader sees in one place what
can vary and what must hold, and an error can quote the rule it broke.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from .expressions import (
    MAX_DYNAMIC_SMEM_BYTES,
    MAX_GRID,
    MAX_STATIC_SMEM_BYTES,
    MAX_THREADS_PER_BLOCK,
    evaluate,
    holds,
)
from .kernel_args import EXTRA_ARGS
from .render import render
from .specs import (
    ACTIVATIONS,
    C_TYPES,
    DTYPES,
    EIGHT_BIT,
    EIGHT_BIT_OUTPUTS,
    FLOAT_DTYPES,
    SCALINGS,
    SIXTEEN_BIT,
    UNROUNDED_OUTPUT,
    Spec,
    check_spec,
)

Params = dict[str, int]


@dataclass(frozen=True)
class Variant:
    """One rung of the ladder: a template and everything needed to launch it.

    Example:
        >>> import xgemm
        >>> v = xgemm.get_variant("coarse2d")
        >>> v.threads_per_block(v.defaults)
        256
    """

    name: str
    #: Template path under ``kernels/``.
    template: str
    #: One line: what this rung adds over the one before.
    adds: str
    defaults: Mapping[str, int]
    #: The values a sweep walks, per parameter.
    space: Mapping[str, Sequence[int]]
    #: Expressions over the parameters (and THREADS, the threads per block) that must hold.
    constraints: Sequence[str]
    #: Block shape, as expressions over the parameters.
    block: tuple[str, ...]
    #: Grid shape, as expressions over the parameters, M, N and SMS (the GPU's
    #: multiprocessors, for a persistent grid).
    grid: tuple[str, ...]
    #: Bytes of shared memory a block uses (``BYTES``: the size of one element).
    smem_bytes: str = "0"
    #: Whether that memory is dynamic (``extern __shared__``, sized at launch: up to
    #: MAX_DYNAMIC_SMEM_BYTES, opted in per kernel) rather than static (up to 48 KiB).
    dynamic_smem: bool = False
    #: The layouts the kernel reads A and B in: "row" (element (r, c) at r * ld + c)
    #: and/or "col" (at c * ld + r, e.g. a transposed view).
    a_layouts: tuple[str, ...] = ("row", "col")
    b_layouts: tuple[str, ...] = ("row", "col")
    dtypes: tuple[str, ...] = FLOAT_DTYPES
    #: Blocks per tile of C, an expression (split-K). Above 1 its kernel takes the extra
    #: arguments "partials" (SPLITS partial products) and "arrivals" (``counters`` per
    #: tile of C, ``tile_shape``'s): 1 where a block counts itself in, one a warp where
    #: each warp does (an expression).
    splits: str = "1"
    counters: str = "1"
    #: Partial sums per product a kernel that shares tiles between blocks keeps, in
    #: accumulators: an expression over the parameters, M, N, SMS and BATCH (the products
    #: a launch takes; rung 25's: two tiles a block). Its kernel takes "partials" and
    #: "arrivals" as split-K's does.
    #: Empty: SPLITS x M x N where SPLITS is above 1, else none.
    partial_sums: str = ""
    #: Whether its template's ``<kernel_name>_sum`` sums the partials into C after it.
    sum_pass: bool = False
    #: Boolean specialisations picked per call from the operands: "aligned" (groups of
    #: four elements), "aligned16" (groups of 16 bytes); see ``xgemm.plan``.
    flags: tuple[str, ...] = ()
    #: Whether ``auto`` weighs it only where the rows make its flags hold (``ranking.ranked``).
    auto_aligned: bool = False
    #: The oldest GPU it runs on, as compute capability x 10 (80: sm_80, Ampere).
    min_cc: int = 0
    #: The one NVRTC target it must be built for ("sm_90a": wgmma and setmaxnreg exist only
    #: there), or None: built for the GPU it runs on (and checked offline for sm_80, sm_90).
    target: str | None = None
    #: "tf32": it rounds float32 inputs to TF32 on the tensor cores; "tf32x3": three TF32
    #: products. Naming it asks for that; ``auto`` takes it only with that ``precision``.
    precision: str | None = None
    #: Its TMA boxes, where A, B (and C) reach it through tensor maps: per operand ("a",
    #: "b", "c"), an expression for the rows (K-major A, B) or columns (MN-major) one copy
    #: moves beside its 128-byte row along the contiguous dimension; for "c", the rows of C
    #: one store moves, 0 where C does not leave through TMA. TMA needs 16-byte aligned
    #: rows: ``xgemm.plan`` pads the rows of an operand that has none.
    tma_boxes: Mapping[str, str] = field(default_factory=dict)
    #: The arguments its kernel takes after the common ones (A, B, C, sizes, leading
    #: dimensions, batch strides, bias, alpha, beta), in order: "tensor_map_a", "_b", "_c"
    #: (128-byte TMA maps, by value), "partials" and "arrivals" (split-K's workspace, made
    #: per call, and its counters per tile of C, zeroed once per stream and left at zero),
    #: "scale_a" and "scale_b" (an 8-bit product's scales: float32, null where none).
    extra_args: tuple[str, ...] = ()
    #: The dtypes of C its TMA store stages (``smem_bytes`` sized the area for them); empty:
    #: any C as wide as A and B. Any other C leaves from registers (the plan: TMA_STORE 0).
    staged_c: tuple[str, ...] = ()
    #: Where ``auto`` first copies an operand into the layout this kernel reads fastest:
    #: per operand ("a", "b"), that layout and an expression over the parameters, M, N, K
    #: and SMS saying when the copy pays for itself. Only an unbatched 2-D operand in the
    #: other layout is copied, by xgemm's transpose kernel, each call (``prepare(...).copies``
    #: names it); a variant named in the call reads it in place.
    transpose_first: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: Whether ``auto`` cuts BN to fill the SMs' last round (``ranking.filled``; 14, 28)
    fills_last_round: bool = False
    #: Where ``auto`` hands this one's pick over few tiles (``ranking.split_to_fill``; 16)
    splits_to_fill: str = ""
    #: Its family: "gemm" (the ladder), "grouped" (``xgemm.grouped_matmul``'s rungs), or one
    #: of ``xgemm.memory_bound``'s, whose expressions use M and N for its input's rows, columns.
    family: str = "gemm"
    #: The points ``auto`` weighs for this rung (``xgemm.cost``), each as changes to the
    #: defaults: a handful around them, for the regimes the rung serves. Empty: auto never
    #: picks it (a rung that a later one of its kind always beats, kept for the ladder).
    candidates: Sequence[Mapping[str, int]] = ()
    #: The dtypes ``auto`` weighs those points for; empty: every dtype the rung takes. A
    #: rung that a later one beats on some dtypes leaves them out, so that its estimate
    #: (as uncertain as any) is never taken over the better rung's by chance.
    auto_dtypes: tuple[str, ...] = ()
    #: The tile of C one block computes and the K it takes a step: rows, columns, depth,
    #: as expressions over the parameters and BYTES (the cost model's unit of work).
    tile_shape: tuple[str, str, str] = ("BM", "BN", "BK")
    kernel_name: str = field(init=False)
    _resolved: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        prefix = "xgemm" if self.family == "gemm" else f"xgemm_{self.family}"
        object.__setattr__(self, "kernel_name", f"{prefix}_{self.name}")
        unknown = set(self.extra_args) - set(EXTRA_ARGS)
        if unknown:
            raise ValueError(f"variant {self.name!r}: unknown extra arguments {sorted(unknown)}; "
                             f"a variant takes {', '.join(EXTRA_ARGS)}")
        for operand, (into, _) in self.transpose_first.items():
            if operand not in ("a", "b") or into not in ("row", "col"):
                raise ValueError(f"variant {self.name!r}: transpose_first takes 'a' or 'b' into "
                                 f"'row' or 'col', not {operand!r} into {into!r}")

    @property
    def tma(self) -> bool:
        """Whether A and B reach it through TMA tensor maps."""
        return bool(self.tma_boxes)

    def tma_box(self, operand: str, params: Mapping[str, int]) -> int:
        """The rows (or columns) of ``operand`` one TMA copy moves at ``params``; 0: none."""
        return evaluate(self.tma_boxes[operand], params) if operand in self.tma_boxes else 0

    # -- parameters ------------------------------------------------------------------
    def resolve(self, params: Mapping[str, object] | None = None,
                dtype: str = "float32") -> Params:
        """Fill in defaults and check ``params`` for ``dtype``; raise ValueError naming any
        broken rule (TypeError if the variant does not support ``dtype``).

        >>> import xgemm
        >>> xgemm.get_variant("tiled").resolve({"tile": 32})
        {'tile': 32}
        """
        params = dict(params or {})
        self.check_dtype(dtype)
        try:
            key = (dtype, *sorted(params.items()))
            return dict(self._resolved[key])  # matmul resolves on every call: check once
        except (KeyError, TypeError):
            pass
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            hints = []
            for name in unknown:
                close = [d for d in self.defaults if d.lower() == name.lower()]
                close = close or difflib.get_close_matches(name, list(self.defaults), n=1)
                hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ValueError(
                f"variant {self.name!r} has no parameter {', '.join(hints)}; "
                f"its parameters are {', '.join(self.defaults)}"
            )
        resolved: Params = {}
        for name, default in self.defaults.items():
            value = params.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int) or (
                    value <= 0 and value not in self.space[name]):  # 0 where it is a switch
                raise ValueError(
                    f"variant {self.name!r}: parameter {name} must be a positive int, got {value!r}"
                )
            resolved[name] = int(value)
        broken = self.broken_rules(resolved, dtype)
        if broken:
            values = ", ".join(f"{k}={v}" for k, v in resolved.items())
            raise ValueError(
                f"variant {self.name!r} with {values} for {dtype} breaks: " + "; ".join(broken)
                + f". The defaults ({', '.join(f'{k}={v}' for k, v in self.defaults.items())})"
                " meet every rule."
            )
        self._resolved[key] = dict(resolved)
        return resolved

    def layouts(self, dtype: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The layouts this variant reads A and B in for ``dtype``: 8-bit operands K-major
        only (A row-major, B column-major: what their instructions and loads take), the
        host copying any other first.

        >>> import xgemm
        >>> xgemm.get_variant("skinny").layouts("int8")
        (('row',), ('col',))
        """
        if dtype in EIGHT_BIT:
            return (tuple(x for x in self.a_layouts if x == "row"),
                    tuple(x for x in self.b_layouts if x == "col"))
        return self.a_layouts, self.b_layouts

    def check_dtype(self, dtype: str) -> None:
        """TypeError unless this variant multiplies ``dtype``."""
        if dtype not in self.dtypes:
            able = [v.name for v in _REGISTRY[self.family].values() if dtype in v.dtypes]
            raise TypeError(
                f"variant {self.name!r} supports {', '.join(self.dtypes)}, not {dtype}"
                + (f"; for {dtype} use one of {', '.join(able)}" if able else "")
            )

    def broken_rules(self, params: Mapping[str, int], dtype: str = "float32") -> list[str]:
        """The rules ``params`` breaks for ``dtype``, each as text with the values it saw
        (empty if none)."""
        threads = self.threads_per_block(params)
        names = {**params, "THREADS": threads, "BYTES": DTYPES[dtype].itemsize}
        broken = [rule for rule in self.constraints if not holds(rule, names)]
        if threads > MAX_THREADS_PER_BLOCK:
            broken.append(f"threads per block {threads} <= {MAX_THREADS_PER_BLOCK}")
        smem = self.shared_memory(params, dtype)
        limit = MAX_DYNAMIC_SMEM_BYTES if self.dynamic_smem else MAX_STATIC_SMEM_BYTES
        if smem > limit:
            broken.append(f"shared memory {smem} bytes <= {limit}")
        return broken

    def points(self, dtype: str = "float32") -> Iterator[Params]:
        """Every point of the sweep space that meets the constraints for ``dtype``."""
        names = list(self.space)
        for values in itertools.product(*(self.space[n] for n in names)):
            point = dict(zip(names, values, strict=True))
            if not self.broken_rules(point, dtype):
                yield point

    def corners(self, dtype: str = "float32") -> list[Params]:
        """The valid points whose every parameter sits at its smallest or largest value,
        plus the defaults: the points the GPU tests run."""
        extremes = {n: {min(vs), max(vs)} for n, vs in self.space.items()}
        found = [p for p in self.points(dtype) if all(p[n] in extremes[n] for n in p)]
        defaults = dict(self.defaults)
        return [defaults] + [p for p in found if p != defaults]

    def flag_values(self) -> Iterator[dict[str, bool]]:
        """Every combination of this variant's boolean specialisations."""
        for values in itertools.product((True, False), repeat=len(self.flags)):
            yield dict(zip(self.flags, values, strict=True))

    def specs(self, dtype: str = "float32") -> Iterator[Spec]:
        """The specialisations the compile check builds for ``dtype``: every layout pair
        and flag combination with the plain epilogue, then each epilogue option on its own
        (the options are independent lines of the shared store code), and for 16-bit
        inputs a float32 C. A memory-bound family's have the dtype and flags only."""
        a_layouts, b_layouts = self.layouts(dtype)
        if self.family == "grouped":  # no epilogue: layouts, a float32 C, FP8's scalings
            first = dict(a_col=a_layouts[0] == "col", b_col=b_layouts[0] == "col")
            yield from (Spec(dtype, a == "col", b == "col")
                        for a, b in itertools.product(a_layouts, b_layouts))
            yield Spec(dtype, **first, out_dtype=UNROUNDED_OUTPUT)
            yield from (Spec(dtype, **first, scale_a=x, scale_b=x)
                        for x in SCALINGS[1:] if dtype in EIGHT_BIT)
            return
        if self.family != "gemm":
            for flags in self.flag_values():
                yield Spec(dtype, flags=tuple(sorted(flags.items())))
            return
        for a_layout, b_layout, flags in itertools.product(
                a_layouts, b_layouts, list(self.flag_values())):
            yield Spec(dtype, a_layout == "col", b_layout == "col",
                       flags=tuple(sorted(flags.items())))
        base = dict(dtype=dtype, a_col=a_layouts[0] == "col",
                    b_col=b_layouts[0] == "col",
                    flags=tuple(sorted(next(self.flag_values()).items())),
                    # int8's epilogue dequantises into floats: int32 C takes none
                    out_dtype="float32" if dtype == "int8" else None)
        yield Spec(**base, bias=True)
        yield Spec(**base, read_c=True)
        for activation in ACTIVATIONS[1:]:
            yield Spec(**base, activation=activation)
        if dtype in SIXTEEN_BIT:  # float32 C, bias and beta * C
            yield Spec(**{**base, "bias": True, "read_c": True, "out_dtype": UNROUNDED_OUTPUT})
        if dtype in EIGHT_BIT:  # every other output dtype, the scalings, mixed FP8
            for out in EIGHT_BIT_OUTPUTS[dtype][1:]:
                if out != base["out_dtype"]:
                    yield Spec(**{**base, "out_dtype": out})
            for scaling in SCALINGS[1:]:
                yield Spec(**base, scale_a=scaling, scale_b=scaling)
            if dtype != "int8":  # the other FP8 format for B
                yield Spec(**base, b_dtype=next(f for f in EIGHT_BIT if f not in (dtype, "int8")))

    # -- launch geometry -------------------------------------------------------------
    def threads_per_block(self, params: Mapping[str, int]) -> int:
        total = 1
        for expr in self.block:
            total *= evaluate(expr, params)
        return total

    def runs_on(self, cc: int) -> bool:
        """Whether it runs on a GPU of compute capability ``cc`` x 10: from ``min_cc`` on,
        and only on that one architecture when built for an arch-specific target such as
        sm_90a (wgmma does not exist after Hopper)."""
        if self.target and self.target.endswith("a"):
            return cc == int(self.target[3:-1])
        return cc >= self.min_cc

    @property
    def archs(self) -> tuple[str, ...]:
        """The targets the offline compile check builds it for."""
        return (self.target,) if self.target else ("sm_80", "sm_90")

    def launch(
        self, params: Mapping[str, int], m: int, n: int, sms: int = 132, batch: int = 1
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(grid, block) for ``batch`` M x N outputs (grid z walks them) on a GPU of ``sms``
        multiprocessors (``SMS`` and ``BATCH`` in a persistent grid's expression);
        ValueError if the grid is too large."""
        grid, block = evaluate(f"(({', '.join(self.grid)},), ({', '.join(self.block)},))",
                            {**params, "M": m, "N": n, "SMS": sms, "BATCH": batch})
        for axis, (size, limit) in enumerate(zip(grid, MAX_GRID, strict=False)):
            if size > limit:
                raise ValueError(
                    f"variant {self.name!r}: an {m} x {n} output needs {size} blocks along grid "
                    f"axis {'xyz'[axis]}, over the limit of {limit}; choose larger tiles or "
                    "another variant"
                )
        return grid, block

    def transposed_into(self, operand: str, params: Mapping[str, int], m: int, n: int, k: int,
                        sms: int = 132) -> str | None:
        """The layout ``auto`` copies ``operand`` ("a" or "b") into before an (M, K) @ (K, N)
        product where it lies in the other one (``transpose_first``); None: read in place.

        >>> import xgemm
        >>> v = xgemm.get_variant("pipelined")
        >>> [v.transposed_into("b", v.defaults, m, 4096, 4096) for m in (4096, 64)]
        ['row', None]
        """
        if operand not in self.transpose_first:
            return None
        into, rule = self.transpose_first[operand]
        return into if evaluate(rule, {**params, "M": m, "N": n, "K": k, "SMS": sms}) else None

    def candidate_points(self, dtype: str) -> list[Params]:
        """The resolved points of ``candidates`` that are valid for ``dtype``, in order
        (none for a dtype ``auto_dtypes`` leaves out).

        >>> import xgemm
        >>> points = xgemm.get_variant("splitk").candidate_points("float32")
        >>> [(p["BM"], p["BN"], p["SPLITS"]) for p in points][-4:]
        [(32, 64, 8), (32, 64, 16), (64, 32, 8), (64, 32, 16)]
        """
        if dtype not in self.dtypes or self.auto_dtypes and dtype not in self.auto_dtypes:
            return []
        points = []
        for change in self.candidates:
            point = {**self.defaults, **change}
            if not self.broken_rules(point, dtype):
                points.append(point)
        return points

    def tile(self, params: Mapping[str, int], dtype: str = "float32") -> tuple[int, int, int]:
        """(rows, columns, K step) of the tile of C one block computes (``tile_shape``)."""
        names = {**params, "BYTES": DTYPES[dtype].itemsize}
        rows, cols, step = (evaluate(expr, names) for expr in self.tile_shape)
        return rows, cols, step

    def splits_of(self, params: Mapping[str, int]) -> int:
        return evaluate(self.splits, params)

    def partial_sums_of(self, params: Mapping[str, int], m: int, n: int, sms: int,
                        batch: int = 1) -> int:
        """Accumulators of partial sums a product of M x N takes (``partial_sums``), in a
        launch of ``batch`` of them.

        >>> import xgemm
        >>> xgemm.get_variant("wgmma_splitk").partial_sums_of({"SPLITS": 2}, 64, 128, 132)
        16384
        """
        if self.partial_sums:
            return evaluate(self.partial_sums, {**params, "M": m, "N": n, "SMS": sms,
                                             "BATCH": batch})
        splits = self.splits_of(params)
        return splits * m * n if splits > 1 else 0

    def counters_of(self, params: Mapping[str, int]) -> int:
        """Split-K's arrival counters per tile of C (``counters``)."""
        return evaluate(self.counters, params)

    def shared_memory(self, params: Mapping[str, int], dtype: str = "float32") -> int:
        return evaluate(self.smem_bytes, {**params, "BYTES": DTYPES[dtype].itemsize})

    # -- source ----------------------------------------------------------------------
    def source(self, params: Mapping[str, int], spec: Spec = Spec()) -> str:  # noqa: B008
        """The rendered CUDA C for ``params`` (already resolved) and ``spec``."""
        self.check_dtype(spec.dtype)
        for operand, col, layouts in zip("AB", (spec.a_col, spec.b_col),
                                         self.layouts(spec.dtype), strict=True):
            if ("col" if col else "row") not in layouts:
                raise ValueError(f"variant {self.name!r} reads {operand} "
                                 f"{' or '.join(layouts)}-major only")
        check_spec(spec)
        flags = dict(spec.flags)
        if set(flags) != set(self.flags):
            raise ValueError(f"variant {self.name!r} takes the flags {list(self.flags)}, "
                             f"got {sorted(flags)}")
        b_dtype = spec.b_dtype or spec.dtype
        dtype = DTYPES[spec.dtype]
        return render(self.template, kernel_name=self.kernel_name, dtype=dtype.cuda,
                      b_type=DTYPES[b_dtype].cuda, out_type=C_TYPES[spec.c_dtype],
                      acc=dtype.acc, a_col=spec.a_col, b_col=spec.b_col, bias=spec.bias,
                      activation=spec.activation, read_c=spec.read_c,
                      scale_a=spec.scale_a, scale_b=spec.scale_b, **params, **flags)


_REGISTRY: dict[str, dict[str, Variant]] = {"gemm": {}}  # family -> name -> variant
PRODUCT_FAMILIES = ("gemm", "grouped")  # the families that multiply A by B, as rungs


def register(variant: Variant) -> Variant:
    """Add ``variant`` to the registry (in ladder order: the order of registration)."""
    family = _REGISTRY.setdefault(variant.family, {})
    if variant.name in family:
        raise ValueError(f"variant {variant.name!r} is registered twice")
    for name, default in variant.defaults.items():
        if name not in variant.space:
            raise ValueError(f"variant {variant.name!r}: parameter {name} has no sweep space")
        if default not in variant.space[name]:
            raise ValueError(f"variant {variant.name!r}: default {name}={default} not in its space")
    if variant.auto_aligned and not variant.flags:
        raise ValueError(f"variant {variant.name!r}: auto_aligned names no alignment flags")
    family[variant.name] = variant
    return variant


def families() -> list[str]:
    """The kernel families: "gemm" first, then the memory-bound ones.

    >>> import xgemm
    >>> xgemm.families()[0]
    'gemm'
    """
    return list(_REGISTRY)


def variants(family: str = "gemm") -> list[str]:
    """The names of every variant of ``family``, in ladder order.

    >>> import xgemm
    >>> xgemm.variants()[:3]
    ['naive', 'coalesced', 'tiled']
    """
    if family not in _REGISTRY:
        raise ValueError(f"unknown family {family!r}: the families are {', '.join(_REGISTRY)}")
    return list(_REGISTRY[family])


def get_variant(name: str, family: str = "gemm") -> Variant:
    """The variant of ``family`` called ``name``; ValueError listing the names (closest
    first) otherwise.

    >>> import xgemm
    >>> xgemm.get_variant("transposed_b").b_layouts
    ('col',)
    """
    try:
        return _REGISTRY[family][name]
    except (KeyError, TypeError):
        names = variants(family)  # an unknown family raises, naming the families
        close = difflib.get_close_matches(str(name), names, n=3, cutoff=0.4)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        what = "variant" if family == "gemm" else f"{family} variant"
        raise ValueError(f"unknown {what} {name!r}: {hint}the variants are "
                         f"{', '.join(names)}") from None
