"""A launch's extra kernel arguments as a plan fixes them (``Variant.extra_args``): where
each starts (split-K's workspace, an 8-bit product's scales, an operand) and, for a TMA
tensor map, its geometry; ``xgemm.launch`` adds each call's addresses.
"""

from __future__ import annotations

from .checks import Shapes
from .kernel_args import ExtraArg, Source
from .registry import Variant
from .tma import eighth_maps, l2_promotion


def extra_arg(arg: str, v: Variant, p: dict[str, int], shapes: Shapes, arrays: tuple,
              layouts: tuple, offsets: tuple, first: int, count: int,
              workspace_bytes: tuple[int, int], small: tuple[int, int]) -> ExtraArg:
    """One of ``v``'s extra arguments for the chunk of ``count`` products from ``first``
    (``xgemm.launch`` turns it into a pointer or a tensor map).
    ``workspace_bytes``: split-K's partials and counters per product; ``small``: bytes
    from A's and B's big TF32 parts to their small parts (the maps of those)."""
    if arg == "partials":  # the chunk's share of the workspace
        return ExtraArg(Source.PARTIALS, first * workspace_bytes[0], None)
    if arg == "arrivals":
        return ExtraArg(Source.ARRIVALS, first * workspace_bytes[1], None)
    if arg in ("scale_a", "scale_b"):  # shared by the whole batch
        return ExtraArg(Source(arg), 0, None)
    if arg.startswith("tensor_maps_"):
        return _eighth_maps(arg, v, p, shapes, arrays, layouts, offsets, count)
    operand = arg.removeprefix("tensor_map_").removesuffix("_small")
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
    past = small[index] if arg.endswith("_small") else 0  # the small parts' map
    # A and B K-major: each box line's next 128 bytes are the next phase's (l2_promotion)
    promote = l2_promotion(k_major=k_contiguous and operand != "c")
    return ExtraArg(Source(operand), offsets[index] + past, (
        x.dtype.name, (inner, outer, count if batched else 1),
        (layout.ld * item, stride * item), (row, box if k_contiguous else row, 1), True,
        promote))


def _eighth_maps(arg: str, v: Variant, p: dict[str, int], shapes: Shapes, arrays: tuple,
                 layouts: tuple, offsets: tuple, count: int) -> ExtraArg:
    """Rung 34's eight maps of A or B (``tensor_maps_a``, ``tensor_maps_b``,
    ``tma.eighth_maps``); each call places them at its operand's address."""
    operand = arg.removeprefix("tensor_maps_")
    index = "ab".index(operand)
    if shapes.k == 0:
        return ExtraArg(Source.NONE, 0, None)
    x, layout = arrays[index], layouts[index]
    rows, cols = ((shapes.m, shapes.k), (shapes.k, shapes.n))[index]
    inner, lines = (rows, cols) if layout.col else (cols, rows)
    k_major = layout.col == (operand == "b")
    # a box: an eighth of the tile's rows (K-major) of SPAN phases and 8 values more, or
    # 72 values (a BOX-wide box and 8 more) of SPAN phases of k rows
    span = p["SPAN"]
    box = ((64 * span + 8, v.tma_box(operand, p) // 8) if k_major else (72, 8 * span))
    return ExtraArg(Source(operand), offsets[index], eighth_maps(
        x.dtype.name, x.itemsize, inner, lines, layout.ld, layout.batch_stride, count, box))
