"""``auto`` for one call: the rules' pick (the tuning file, else ``choice.heuristic``)
where it runs here and reads the operands as they are, then the cost model's candidates
(``xgemm.cost``) priced with the copies this call's plan would make, and the margin a
candidate must clear to replace the rules' pick. Planning asks here once per signature.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from . import cost, gpu, tunefile
from .checks import MAX_WORKSPACE_BYTES, Layout, Shapes, check_arch, layout_of, whole_boxes
from .choice import TMA_PADDING_PAYS, choose, heuristic
from .expressions import MAX_GRID, cdiv
from .operands import tma_reads, transposable
from .parts import reads_parts
from .registry import Variant, get_variant
from .specs import DTYPES, EIGHT_BIT
from .tma import ALIGNMENT as TMA_ALIGNMENT
from .tma import BOX_BYTES as TMA_BOX_BYTES

#: Columns of C (rows, for B) up to which a TMA rung does not pad A (B) for a product of
#: any size: the operand is then nearly all the bytes the product moves, and its padded copy
#: reads and writes it once more (rung 36 on 14977 x 22 x 4942:NT and 15921 x 8 x 9797:NT,
#: A padded: 0.60x and 0.78x cuBLAS, where rung 34 and 22 read it in place at 0.86x and 1.37x;
#: evidence/few_columns_b961ba1.txt). Nor does the cost model weigh tiles of four times as
#: many rows over so few: on the H200's published products with every candidate timed,
#: 128-row tiles over at most 32 rows ran 2.2x the best candidate's time and were fastest
#: on none of 2,244, yet the model priced some at DRAM's time; left out, the 112 products
#: of four strata whose pick moved ran 0.91x the kernel time, 0.87x a call (seed 504's 22,
#: drawn after: 0.90, 0.80; evidence/few_rows_tall_tiles.txt). Columns keep theirs: a
#: call cuts their width to fill the SMs (``filled``), and left out they ran 1.03x.
FEW_LINES = 32
#: How much faster the cost model must price its pick than the rules' pick to replace it,
#: for one product: 10%. With the padded copies priced as the driver makes them, 10% and
#: none picked alike on the calibration's sample and on seeds it was not fitted to, and
#: 30% lost 2-7% of regret geomean there (docs/notes.md).
MODEL_MARGIN = 0.1
#: ... for a batch: 30%, about the model's own error on one candidate (RMS log error
#: 0.2-0.3), as it was fitted on single products and the rules were measured on batches
#: (the developers' suite's attention products).
BATCH_MODEL_MARGIN = 0.3
#: K from which rungs 14's and 28's tiles are cut to fill the SMs' last round even where C could
#: leave by whole TMA boxes (:func:`filled`). A guess, not measured between 1024 and 3584:
#: the products measured with C's store changed by the cut had K of 3584-18944.
FILLING_MIN_K = 1024


def ruled(mats: tuple, layouts: list, shapes: Shapes, dtype: str, device: int,
          precision: str | None) -> tuple[Variant, dict[str, int], bool, list, list]:
    """The tuned or heuristic choice, if it runs here at this precision and reads both
    operands, in place or from the copy its ``transpose_first`` makes; else the heuristic
    without TMA, then without TF32. Returns it, whether the tuning file named it, and how
    A and B are read ("row" or "col") and whether each may be copied into its other
    layout first."""
    cc = gpu.compute_capability(device)
    sms = gpu.multiprocessors(device)
    m, n, k, count = shapes.m, shapes.n, shapes.k, shapes.count
    read = ["col" if layout is not None and layout.col else "row" for layout in layouts]
    copyable = [layout is not None and transposable(shapes, vector)
                for layout, vector in zip(layouts, (shapes.a_vector, shapes.b_vector),
                                          strict=True)]

    def fits(v: Variant, p: dict[str, int]) -> bool:
        if not (v.runs_on(cc) and v.precision in (None, precision)):
            return False
        for i, (name, readable) in enumerate((("a", v.a_layouts), ("b", v.b_layouts))):
            into = v.transposed_into(name, p, m, n, k, sms) if copyable[i] else None
            if (into or read[i]) not in readable:
                return False
            if i == 1 and not whole_boxes(v, p, mats[1].itemsize, (into or read[1]) == "col"):
                return False  # a tuned width in 16s, stored for a column-major B
            if not v.tma or reads_parts(v):  # rung 33's split writes TMA's lines itself
                continue
            if into not in (None, read[i]):  # TMA reads the copy: rows of K values
                if k * mats[i].itemsize % TMA_ALIGNMENT:
                    return False
            elif (not tma_reads(v, name, mats[i].data.ptr, layouts[i], mats[i].itemsize)
                  and (m * n * k < TMA_PADDING_PAYS  # larger: the plan pads a copy,
                       or (n, m)[i] <= FEW_LINES)):  # unless the operand is all the product
                return False
        return True

    picks: list[Callable[[], tuple[str, dict]]] = [
        lambda: choose(m, n, k, dtype, device, precision, count),
        lambda: heuristic(m, n, k, dtype, cc, precision, sms, count,
                          a_row_major=read[0] == "row" or copyable[0],
                          b_col_major=read[1] == "col"),
        lambda: heuristic(m, n, k, dtype, min(cc, 89), precision, sms, count),  # no TMA
        lambda: heuristic(m, n, k, dtype, min(cc, 89), None, sms, count)]  # no TMA or TF32
    for first, pick in enumerate(picks):  # noqa: B007  (first is read after the loop)
        name, p = pick()
        v = get_variant(name)
        if fits(v, p):
            break
    tuned = first == 0 and tunefile.tune_cache().lookup(gpu.gpu_name(device), dtype,
                                                        m, n, k) is not None
    return v, v.resolve(p, dtype), tuned, read, copyable


def pick(mats: tuple, layouts: list, shapes: Shapes, dtype: str, device: int,
         precision: str | None, scale_vectors: bool = False
         ) -> tuple[Variant, dict[str, int]]:
    """``auto``: the rules' pick (``ruled``). Unless the tuning file answered, the cost
    model (``xgemm.cost``) then prices every candidate's call (the longer of its GPU time
    and the host's), and the cheapest candidate whose call should be faster than the
    rules' pick's by more than ``MODEL_MARGIN`` (a batch: ``BATCH_MODEL_MARGIN``), or as
    fast and its kernel faster by that much, replaces it: the rules' picks were measured
    on the shapes they were written for, and the model is what knows the shapes the
    rules' thresholds were never fitted to (few rows, tiny K, small products, operands TMA
    cannot read). The choice then runs as :func:`split_to_fill` and :func:`filled` say (K
    split to fill the SMs, tiles cut to fill the last round). 8-bit products take the
    rule alone, told whether a scale comes per row or column (``scale_vectors``)."""
    if dtype in EIGHT_BIT:  # one rung multiplies them, copying what is not K-major
        cc, sms = gpu.compute_capability(device), gpu.multiprocessors(device)
        name, p = heuristic(shapes.m, shapes.n, shapes.k, dtype, cc, precision, sms,
                            shapes.count, scale_vectors=scale_vectors)
        v = get_variant(name)
        check_arch(v, dtype, device, auto=True)
        return v, v.resolve(p, dtype)
    v, p, tuned, read, copyable = ruled(mats, layouts, shapes, dtype, device, precision)
    if tuned or 0 in (shapes.m, shapes.n, shapes.count):
        return v, p
    sms = gpu.multiprocessors(device)
    rule = priced_copies(v, p, mats, layouts, read, copyable, shapes, sms)
    ruled_gpu = cost.estimate_near(v, p, dtype, rule, sms, precision)
    if math.isinf(ruled_gpu):  # a rung no calibration timed (the 3xTF32 ones): the model
        return v, p             # cannot weigh it against the others, so the rule stands
    modelled = ranked(mats, layouts, read, copyable, shapes, dtype, device, precision)
    if modelled:
        ruled_call = cost.call_time(ruled_gpu, rule)
        margin = MODEL_MARGIN if shapes.count == 1 else BATCH_MODEL_MARGIN
        # The cheapest candidate that clears the margin: faster a call, or as fast (the
        # host bounds both) and faster on the GPU. Not only the cheapest one: a candidate
        # priced a little below the rules' pick would otherwise hide one priced as fast
        # a call and far faster on the GPU.
        for call, t, best, best_p in modelled:
            if call > ruled_call:
                break  # (ranked by call: none further can clear it)
            if call * (1 + margin) < ruled_call or t * (1 + margin) < ruled_gpu:
                v, p, ruled_gpu = best, best.resolve(best_p, dtype), t
                break
    v, p = split_to_fill(v, p, ruled_gpu, mats, layouts, read, copyable, shapes, dtype, sms)
    return filled(v, p, shapes, read, dtype, sms)


#: Rung 35's tile where it takes rung 16's pick (:func:`split_to_fill`), and the fewest
#: splits it takes it for. 64 x 128 tiles, one consumer warpgroup, six stages: the
#: fastest of rung 35's 64 x 128, 128 x 64 and 128 x 128 tiles (each split to fill the
#: SMs) on 4 of 14 products of 8-56 such tiles over K of 3584-18944, within 3% of it on
#: seven, 9-20% slower on three (128 x 128 tiles over 256 and 512 rows). Four splits or
#: more: at three (34-44 tiles) rung 35 ran 1.00-1.12x rung 16's kernel time on three
#: products of a sample never run before, where four and more ran 0.77-1.02x on fourteen
#: (bench/results/h200/evidence/splits_to_fill.txt).
SPLIT_TILE = {"BM": 64, "BN": 128, "CONSUMERS": 1, "STAGES": 6}
MIN_FILLING_SPLITS = 4
#: How many times the host's time for a call of two launches or more (the calibration's) the
#: pick's GPU time must be for rung 35 to take it: a host twice as slow as calibrated
#: still leaves the call GPU-bound, so the sum pass's launch (4 us more a call, measured)
#: does not lengthen it. Measured: PyTorch calls on one lent H200 took 1.8x another's
#: host time, and where such a host bounded the call, rung 35's faster kernel made it
#: up to 1.77x slower (evidence/splits_to_fill.txt).
HOST_MARGIN = 2.0


def split_to_fill(v: Variant, p: dict[str, int], gpu_time: float, mats: tuple,
                  layouts: list, read: list, copyable: list, shapes: Shapes, dtype: str,
                  sms: int) -> tuple[Variant, dict[str, int]]:
    """The pick of a rung that declares ``splits_to_fill`` (rung 16) for one product, handed
    to that rung (35) with K split as many ways as its tiles (:data:`SPLIT_TILE`) leave
    SMs for, where that is :data:`MIN_FILLING_SPLITS` or more: rung 16 splits K in 2 or 4
    whatever the tiles, and over a few dozen tiles leaves most SMs idle (1047 x 97 x
    14458: 17 tiles of 64 x 128 in 7 splits, 0.72x rung 16's kernel time). Not where
    the pick's GPU time (``gpu_time``, the model's) is under :data:`HOST_MARGIN` times the
    host's for a call of two launches: the sum pass's launch would then lengthen every
    call queued behind it. The rung handed to reads the operands as the declaring one
    does (rung 35 is rung 16's kernel with a sum pass), so it copies nothing more.

    >>> h200 = {"gpu": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}
    >>> with gpu.standing_in(h200):
    ...     v, p = auto_choice(1047, 97, 14458, "bfloat16")
    >>> v.name, p["BM"], p["BN"], p["SPLITS"]
    ('wgmma_splitk_sum', 64, 128, 7)
    """
    if not v.splits_to_fill or shapes.count != 1:
        return v, p
    tiles = cdiv(shapes.m, SPLIT_TILE["BM"]) * cdiv(shapes.n, SPLIT_TILE["BN"])
    splits = min(sms // tiles, 64)
    if splits < MIN_FILLING_SPLITS:
        return v, p
    to = get_variant(v.splits_to_fill)
    q = to.resolve({**SPLIT_TILE, "SPLITS": splits}, dtype)
    shape = priced_copies(to, q, mats, layouts, read, copyable, shapes, sms)
    if gpu_time < HOST_MARGIN * cost.calibration().host(shape):
        return v, p
    return to, q


def filled(v: Variant, p: dict[str, int], shapes: Shapes, read: list[str], dtype: str,
           sms: int) -> tuple[Variant, dict[str, int]]:
    """The pick of a rung that declares ``fills_last_round`` (14 and 28) for one product
    (``read``: how A and B are read), its tiles cut to the width that fills the SMs'
    last round (:func:`filling_width`): in 16s where B lies K-major, in whole boxes (64
    columns in 16 bits) where it lies row-major; any other pick as it is. The
    cost model priced the widths in 64s it was calibrated on: the cut keeps their rounds
    and shortens each.
    Below ``FILLING_MIN_K``, only where C's rows are not whole 16-byte lines: a tile of
    part boxes leaves a row at a time (``TMA_STORE`` 2), where C of whole lines leaves
    by TMA boxes, and that row-wise store ran 1.6x slower where it is most of the time
    (4864 x 15712 x 16, measured before); over short K the cut was measured only on C
    leaving row-wise both ways (578 x 6175 x 190:NT, 0.97x; K of 8-48, within noise).

    >>> from xgemm.checks import matmul_shapes
    >>> wgmma, shapes = get_variant("wgmma"), matmul_shapes((128, 3584), (3584, 18944))
    >>> p = wgmma.resolve({}, "bfloat16")
    >>> filled(wgmma, p, shapes, ["row", "col"], "bfloat16", 132)[1]["BN"]
    144
    >>> filled(wgmma, p, shapes, ["row", "row"], "bfloat16", 132)[1]["BN"]  # B's boxes
    192
    >>> pingpong, shapes = get_variant("wgmma_pingpong"), matmul_shapes((512, 18944), (18944, 3584))
    >>> filled(pingpong, pingpong.resolve({}, "bfloat16"), shapes, ["row", "col"], "bfloat16",
    ...        132)[1]["BN"]
    112
    """
    if not v.fills_last_round or shapes.count != 1:
        return v, p
    item = DTYPES[dtype].itemsize
    if shapes.k < FILLING_MIN_K and not cost.ragged_rows(shapes.n, item):
        return v, p
    # B K-major: one box of BN rows, any width in 16s; row-major: whole boxes of columns
    step = 16 if read[1] == "col" else TMA_BOX_BYTES // item
    width = filling_width(shapes.m, shapes.n, p["BM"], p["BN"], sms, step)
    return v, p if width == p["BN"] else v.resolve({**p, "BN": width}, dtype)


@dataclass(frozen=True)
class _Address:
    ptr: int


@dataclass(frozen=True)
class _Standin:
    """What ``auto`` reads of an operand it is not given: its item size and address (one
    that TMA can read)."""

    itemsize: int
    data: _Address = _Address(1 << 20)


def auto_choice(m: int, n: int, k: int, dtype: str, layout: str = "NN", batch: int = 1,
                precision: str | None = None, device: int = 0
                ) -> tuple[Variant, dict[str, int]]:
    """The variant and parameters ``auto`` picks for ``batch`` x (M x K) @ (K x N) of
    fresh contiguous operands, A and B read as ``layout`` says ("N": row-major, "T": a
    transposed view; B shared by the batch), on GPU ``device``, asking only its properties
    (``gpu.properties``): what a suite row's operands were, without the operands. The
    tuning file answers first, as in a call.

    >>> auto_choice(8192, 8192, 8, "bfloat16", layout="TN")[0].name  # doctest: +SKIP
    'wgmma'
    """
    item = DTYPES[dtype].itemsize
    lead = (batch,) if batch > 1 else ()

    def read_as(rows: int, cols: int, transposed: bool, lead: tuple[int, ...] = ()) -> Layout:
        """The layout a call finds such an operand in (layout_of: a line is read along it)."""
        strides = (*(rows * cols * item for _ in lead), *((item, rows * item) if transposed
                                                          else (cols * item, item)))
        found = layout_of((*lead, rows, cols), strides, item)
        assert found is not None, "fresh operands are read in place"
        return found

    a = read_as(m, k, layout[0] == "T", lead)
    b = read_as(k, n, layout[1] == "T")  # B shared by the batch
    shapes = Shapes(lead, m, n, k, (*lead, m, n), False, False)
    return pick((_Standin(item), _Standin(item)), [a, b], shapes, dtype, device, precision)


def contenders_to_time(mats: tuple, layouts: list, shapes: Shapes, dtype: str,
                       device: int, precision: str | None, count: int
                       ) -> tuple[tuple[Variant, dict], ...]:
    """What autotuning times on a first call: the rules' pick and the cost model's
    ``count`` cheapest other candidates; none where there is nothing to choose (8-bit
    products, empty ones, K = 0) or the tuning file holds this very shape already."""
    m, n, k = shapes.m, shapes.n, shapes.k
    if dtype in EIGHT_BIT or 0 in (m, n, k, shapes.count):
        return ()
    found = tunefile.tune_cache().lookup(gpu.gpu_name(device), dtype, m, n, k, exact=True)
    if found is not None and get_variant(found[0]).precision in (None, precision):
        return ()
    v, p, _, read, copyable = ruled(mats, layouts, shapes, dtype, device, precision)
    # the rules' pick, and its tiles cut or its K split as auto's call could run them (the
    # split timed whatever the host's time, which decides whether a call takes it)
    chosen = [(v, p)]
    sms = gpu.multiprocessors(device)
    split = split_to_fill(v, p, math.inf, mats, layouts, read, copyable, shapes, dtype, sms)
    cut = filled(*split, shapes, read, dtype, sms)
    if cut != (v, p):
        chosen.append(cut)
    for _, _, other, q in ranked(mats, layouts, read, copyable, shapes, dtype, device,
                                  precision):
        q = other.resolve(q, dtype)
        if len(chosen) > count:
            break
        if (other, q) not in chosen:
            chosen.append((other, q))
    return tuple(chosen)


def priced_copies(v: Variant, p: dict[str, int], mats: tuple, layouts: list, read: list,
                  copyable: list, shapes: Shapes, sms: int) -> cost.Shape:
    """The product as the cost model prices ``v`` at ``p`` on it: how it reads A and B
    ("NN".."TT"), the bytes (and lines) it pads and the bytes it transposes, as its plan
    would (for a rung that reads the operands at all)."""
    m, n, k, count = shapes.m, shapes.n, shapes.k, shapes.count
    item = mats[0].itemsize
    sizes = (count * m * k * item, k * n * item)
    padded, lines, transposed, letters = [], [], [], ""
    extents = [n]  # along each array's rows as read, and leading dimensions: C's
    for i, name in enumerate("ab"):
        into = v.transposed_into(name, p, m, n, k, sms) if copyable[i] else None
        letters += "T" if (into or read[i]) == "col" else "N"
        along = ((m, k), (k, n))[i][(into or read[i]) == "row"]  # contiguous extent
        ld = getattr(layouts[i], "ld", along)
        extents += [along] if into not in (None, read[i]) else [along, ld]
        if into not in (None, read[i]):
            transposed.append(sizes[i])
        elif v.tma and k > 0 and not tma_reads(v, name, mats[i].data.ptr, layouts[i], item):
            padded.append(sizes[i])
            lines.append((count * (m if read[0] == "row" else k), k if read[1] == "row" else n)[i])
    return cost.Shape(m, n, k, count, letters, padded=tuple(padded),
                      padded_lines=tuple(lines), transposed=tuple(transposed),
                      ragged_c=cost.ragged_rows(n, item),  # C in the operands' dtype
                      row_bytes=cost.row_bytes(*extents, item=item),
                      passes=int(v.sum_pass))


def ranked(mats: tuple, layouts: list, read: list, copyable: list, shapes: Shapes,
           dtype: str, device: int, precision: str | None
           ) -> list[tuple[float, float, Variant, dict[str, int]]]:
    """(call time, GPU time, variant, parameters) of every candidate the cost model can
    price here, cheapest first, each read as its plan would: in place, transposed first
    where its ``transpose_first`` says so, padded where TMA cannot read a row."""
    cc, sms, props = (gpu.compute_capability(device), gpu.multiprocessors(device),
                      gpu.properties(device))
    m, n, k, count = shapes.m, shapes.n, shapes.k, shapes.count
    acc_bytes = 8 if DTYPES[dtype].acc == "double" else 4  # split-K's partials

    def priced(v: Variant, p: dict[str, int]) -> cost.Shape | None:
        if (v.threads_per_block(p) > props.max_threads_per_block
                or v.shared_memory(p, dtype) > (props.max_dynamic_smem if v.dynamic_smem
                                                else props.max_static_smem)
                or v.partial_sums_of(p, m, n, sms, min(count, MAX_GRID[2])) * count * acc_bytes
                > MAX_WORKSPACE_BYTES):
            return None
        if m <= FEW_LINES and v.tile(p, dtype)[0] >= 4 * FEW_LINES:
            return None  # tiles of 128 rows over a few: see FEW_LINES
        shape = priced_copies(v, p, mats, layouts, read, copyable, shapes, sms)
        if v.auto_aligned and cost.narrow_path(v, shape, mats[0].itemsize):
            return None  # its narrow path, which a later rung runs faster
        readable = (v.a_layouts, v.b_layouts)
        if any(("col" if x == "T" else "row") not in r for x, r in zip(shape.layout, readable,
                                                                        strict=True)):
            return None
        if (shape.transposed and v.tma and not reads_parts(v)
                and k * mats[0].itemsize % TMA_ALIGNMENT):
            return None  # TMA reads the copy's rows of K (rung 33's split widens them)
        return shape

    return cost.ranked(((v, p, shape) for v, p in cost.candidates(dtype, precision, cc)
                        if (shape := priced(v, p)) is not None), dtype, sms, precision)


def filling_width(m: int, n: int, bm: int, bn: int, sms: int, step: int = 16) -> int:
    """The width of tiles of ``bm`` rows that fills the SMs' last round: the narrowest
    multiple of ``step`` (16 over a K-major B; a row-major B's boxes, 64 in 16 bits) whose
    tiles take no more rounds (each SM its share of the tiles,
    walked one after another) than ``bn``-wide ones, and at least one 64-wide box and half
    of ``bn``. The rounds stay as many and each takes less time. cuBLAS cuts its tiles so
    too (144 x 128 on 128 x 18944 x 3584:NT, where 128 x 256 tiles fill 74 of the 132 SMs:
    132 tiles of 144; 112 x 128 on 512 x 3584 x 18944:NT, where 128 x 128 fill 112).
    Measured on the H200 (bench/results/h200/evidence/filling_width*.txt): rung 14 cut
    from 256 and 192, 0.87-0.98x the kernel time on ten of the twelve products it moved,
    as before on the two that stream a weight of 0.47-1.09 GB over 128 rows; rungs 14 and
    28 cut from 128 (and rung 28 from 256): 0.97x in the geometric mean over 26 products,
    0.82-0.95x where the rounds multiply, as before (noise of +-9% at 7-12 us) where K is
    a few dozen and C's store is the time, 1.02x and 1.07x where a weight streams over
    128 rows (128 x 14336 x 4096:NT) or a tile of 128 x 128 was cut to 80; over a
    row-major B in whole boxes, 0.93x over 25 products (0.88-1.03x). ``bn`` kept
    where C fills at most half a tile's rows (1 x 12624 x 1776:NT ran 1.10x slower cut
    192 -> 128; 65-127 rows compute whole tiles as 128 do, and are cut, unmeasured).

    >>> filling_width(128, 18944, 128, 256, 132), filling_width(512, 28672, 128, 256, 132)
    (144, 224)
    >>> filling_width(8192, 8192, 128, 256, 132), filling_width(1024, 1024, 128, 256, 132)
    (256, 128)
    >>> filling_width(1, 12624, 128, 192, 132), filling_width(512, 3584, 128, 128, 132)
    (192, 112)
    >>> filling_width(128, 18944, 128, 256, 132, step=64)
    192
    """
    rows = cdiv(m, bm)
    rounds = cdiv(rows * cdiv(n, bn), sms)
    per_row = rounds * sms // rows  # tiles a row of them may take in those rounds
    if 2 * m <= bm or per_row == 0:
        return bn
    return min(bn, max(step * cdiv(n, step * per_row), 64, step * cdiv(bn // 2, step)))
