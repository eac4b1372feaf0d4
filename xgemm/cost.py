"""How long a rung takes on a shape: the cost model ``auto`` picks with.

Every rung declares the points it offers ``auto`` (``Variant.candidates``) and the tile of
C one block computes and its K step (``Variant.tile_shape``); its launch geometry gives
the blocks. From those the model counts, for an (M x K) @ (K x N) product (a batch of
them, K split SPLITS ways):

- ``tiles``: BM x BN tiles of C (times the batch and the splits), ``blocks`` the grid's,
  ``tiles_per_block`` what each block walks (more than one: a persistent grid);
- ``slots``: blocks the SMs run at once (``SMS`` x blocks per SM, from the threads and
  shared memory a block takes), ``rounds`` = blocks / slots, rounded up; ``sharing``: the
  blocks one SM runs at once in a full round, ``last_sharing`` in the last (a ragged
  wave leaves it part empty);
- ``steps``: K steps per tile.

and prices them with constants measured per GPU, rung, point and dtype (and the layout A
and B are read in, which changes how fast a rung's loads go):

    time = copies + max(launch + max(tiles_per_block x (rounds x tile_time + walk)
                                     + ragged, bytes / bandwidth),
                        C's bytes / store_bandwidth) + pass
    tile_time = tile + min(steps, STAGES) x fill
    walk = steps x ((rounds - 1) x max(sharing x full_step, latency)
                    + max(last_sharing x full_step, latency))
    ragged = C's bytes x ragged_store, where C's rows are not whole groups of the
             rung's widest store (:func:`ragged`)
    pass = pass bytes / bandwidth, a rung whose partials a second kernel sums
           (``Variant.sum_pass``): it reads them and writes C after the product, not
           beside it; its launch is in ``launch``

``full_step`` is a K step's time with the SM's FLOPs or load bandwidth to itself (the
rung's sustained rate), ``latency`` the least a step takes however little it does (the
pipeline's depth: few tiles, long K), ``tile`` what a tile costs besides its steps
(epilogue, the store of C), ``fill`` what each of the first ``STAGES`` steps of a tile
costs besides (its loads, which no earlier step's work hides: a rung with a ring of
stages; a tile of one K step pays it once, not ``STAGES`` times), ``launch`` what the
kernel costs whatever its size, and ``bytes`` what must cross DRAM at least once: A, B
and C, split-K's partials twice.
C's rows decide how it leaves: a rung with ``TMA_STORE`` sends any row through the copy
engine (whole 16-byte lines by TMA's tensor boxes; a ragged row's lines in one bulk copy,
its part lines in narrow pieces); others through wide stores where the rows are whole
groups (a rung that stores groups of four elements needs only whole groups: 8-byte ones
in 16 bits), ragged rows through narrow ones. Ragged rows cost a price per byte the fit
measures (``ragged_store``: on the H100's 16-bit rungs from registers, as long again as
writing C at 540-730 GB/s; a random sample's shapes are almost all ragged, a model's
linears all whole lines). ``store_bandwidth`` bounds a product of
tiny K by the fastest any calibration sample wrote C from its registers; a rung whose C
the copy engine or a sum pass stores has no such bound (DRAM's is its own).
A copy the plan makes costs ``copy_launch`` and its bytes: an operand padded for TMA
(the pad kernel, ``kernels/copy/pad_rows.cu.j2``) at ``copy_bandwidth`` plus ``copy_line``
a line (narrow lines copy slowly), one transposed into the layout a rung reads fastest
(xgemm's transpose kernel) read and written at DRAM's; both padded operands share one
launch. ``auto`` ranks candidates by a call's time (:func:`call_time`): the longer of
that and the host's, ``call_host`` plus ``copy_host`` a launch of a copy or a sum pass,
since calls queued back to back run at the pace of the slower of the two.

The constants come from ``xgemm calibrate`` (``xgemm.calibrate.fit`` on every candidate's time on a
seeded random sample of shapes, ``xgemm.tools.generalisation``); the H100's ship with the
package (``xgemm/calibration/h100.json``), and the H200's (the H100's, with the points
timed only there). A GPU uses the file shipped for its model (:func:`shipped_calibration`)
or the one ``XGEMM_CALIBRATION`` names, else the H100's constants at its SM count.

Example:
    >>> from xgemm.cost import Shape, estimate, constants
    >>> import xgemm
    >>> v = xgemm.get_variant("wgmma")
    >>> big, small = Shape(8192, 8192, 8192), Shape(64, 64, 64)
    >>> estimate(v, v.defaults, "float16", big) > estimate(v, v.defaults, "float16", small)
    True
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import gpu
from .expressions import cdiv
from .registry import Variant, get_variant, variants
from .specs import DTYPES

#: Where the shipped calibrations are: one JSON per GPU (``h100.json``).
CALIBRATION_DIR = Path(__file__).resolve().parent / "calibration"
#: The environment variable naming a calibration file to use instead of the shipped one.
CALIBRATION_ENV = "XGEMM_CALIBRATION"
#: Threads and shared memory an SM holds (sm_80 and sm_90), for blocks per SM.
SM_THREADS, SM_SHARED = 2048, 228 * 1024
#: Blocks an SM holds at most, and its registers.
SM_BLOCKS, SM_REGISTERS = 32, 65536
#: What each part of the random suites multiplies (the ``part`` of a suite file's rows, whose
#: candidates' times a calibration is fitted on): (dtype, precision).
PARTS = {"float16": ("float16", None), "bfloat16": ("bfloat16", None),
         "float32": ("float32", None), "tf32": ("float32", "tf32"),
         "float64": ("float64", None)}
#: Layout keys: how A and B are read, "N" row-major, "T" column-major.
LAYOUTS = ("NN", "NT", "TN", "TT")


@dataclass(frozen=True)
class Shape:
    """A product as the model sees it: ``batch`` x (M x K) @ (K x N), A and B read in
    ``layout`` ("NN", "NT", "TN", "TT"), with the bytes of any copies its plan makes."""

    m: int
    n: int
    k: int
    batch: int = 1
    layout: str = "NN"
    padded: tuple[int, ...] = ()      # bytes of each operand the plan pads for TMA
    padded_lines: tuple[int, ...] = ()  # ... and its lines (rows, or columns if col-major)
    transposed: tuple[int, ...] = ()  # bytes of each operand it transposes first
    #: C's rows are not whole multiples of 16 bytes: no TMA store, narrower stores
    ragged_c: bool = False
    #: the bytes that every row of A, B and C (as read: extent and leading dimension)
    #: holds a whole multiple of, the largest power of two up to 16; 16 where not known.
    #: A rung specialised on alignment (``Variant.flags``) runs its narrow path below its
    #: groups' size.
    row_bytes: int = 16
    #: kernels its plan launches after the product's (a sum pass: ``Variant.sum_pass``)
    passes: int = 0


@dataclass(frozen=True)
class Constants:
    """One rung's constants at one point and dtype, in seconds (see the module's text)."""

    launch: float
    tile: float
    full_step: float
    latency: float
    #: full_step per layout where it differs from the one above (the layouts it was
    #: measured in)
    layout_step: Mapping[str, float] | None = None
    #: bytes/s at which the rung writes C at best (its epilogue's stores: from mma
    #: fragments, 4 bytes a lane, far below DRAM's), the most any sample reached; None:
    #: bounded by DRAM alone
    store_bandwidth: float | None = None
    #: seconds each of a tile's first ``STAGES`` K steps costs besides (a ring's fill)
    fill: float = 0.0
    #: seconds per byte of C written besides, where C's rows are ragged (``Shape.ragged_c``)
    ragged_store: float = 0.0

    def step_for(self, layout: str, narrow: bool = False) -> float:
        """full_step in ``layout``, on the rung's narrow path where ``narrow`` (key
        ``layout + "u"``) if it was measured there."""
        steps = self.layout_step or {}
        if narrow and layout + "u" in steps:
            return steps[layout + "u"]
        return steps.get(layout, self.full_step)


def point_key(name: str, params: Mapping[str, int]) -> str:
    """A candidate's name in a calibration file: ``variant:P=V,...`` over its parameters
    that differ from the defaults.

    >>> import xgemm
    >>> point_key("wgmma", {**xgemm.get_variant("wgmma").defaults, "BN": 128})
    'wgmma:BN=128'
    """
    defaults = get_variant(name).defaults
    changed = ",".join(f"{k}={v}" for k, v in sorted(params.items()) if defaults.get(k) != v)
    return f"{name}:{changed}"


def dtype_key(dtype: str, precision: str | None = None) -> str:
    """The calibration's dtype key: float16 and bfloat16 share theirs (the same kernels at
    the same speed), TF32 is its own."""
    if precision == "tf32":
        return "tf32"
    return "16-bit" if dtype in ("float16", "bfloat16") else dtype


# -- counting ---------------------------------------------------------------------------------
def blocks_per_sm(v: Variant, params: Mapping[str, int], dtype: str,
                  registers: int | None = None) -> int:
    """Blocks of ``v`` an SM runs at once, by threads, shared memory and (where known:
    ``registers`` a thread, else the calibration's record) registers; one for a
    persistent grid (its blocks are as many as the SMs)."""
    if "SMS" in " ".join(v.grid):
        return 1
    if registers is None:
        recorded = calibration().blocks.get(dtype_key(dtype), {}).get(point_key(v.name, params))
        if recorded:
            return recorded
    threads = v.threads_per_block(params)
    smem = v.shared_memory(params, dtype) + 1024  # the runtime's 1 KiB a block
    limit = min(SM_THREADS // threads, SM_SHARED // smem, SM_BLOCKS)
    if registers:  # allocated per warp in units of 256
        per_warp = -(-registers * 32 // 256) * 256
        limit = min(limit, SM_REGISTERS // (per_warp * -(-threads // 32)))
    return max(1, limit)


@dataclass(frozen=True)
class Work:
    """What the model counts of one launch (see the module's text)."""

    tiles: int
    blocks: int
    tiles_per_block: int
    rounds: int
    sharing: int
    last_sharing: int  # ... in the last round, which a ragged wave leaves part full
    steps: int
    fill_steps: int  # of the steps, those that fill the rung's ring of stages (none: no ring)
    dram_bytes: int
    c_bytes: int
    #: the product's epilogue stores C from registers, bounded by ``store_bandwidth``; not
    #: where the bulk copy engine does (TMA_STORE) or a sum pass writes C (``pass_bytes``)
    own_store: bool = True
    #: the rung runs its narrow path here (:func:`ragged`): C costs ``ragged_store`` a byte
    ragged: bool = False
    #: the rung's alignment flags are false here (:func:`narrow_path`): it reads A and B
    #: by narrower loads, its own step (``Constants.step_for``)
    narrow: bool = False
    #: bytes a sum pass reads and writes after the product (``Variant.sum_pass``: every
    #: split's partial, then C); ``dram_bytes`` holds the product's own
    pass_bytes: int = 0


def work(v: Variant, params: Mapping[str, int], dtype: str, shape: Shape, sms: int,
         per_sm: int | None = None) -> Work:
    """Count the tiles, blocks, rounds and K steps of ``v`` at ``params`` on ``shape``
    (``per_sm``: blocks an SM runs at once, where the caller knows; else
    :func:`blocks_per_sm`)."""
    per_sm = per_sm or blocks_per_sm(v, params, dtype)
    bm, bn, bk = v.tile(params, dtype)
    splits = v.splits_of(params)
    per_product = cdiv(shape.m, bm) * cdiv(shape.n, bn)
    tiles = per_product * shape.batch * splits
    grid, _ = v.launch(params, shape.m, shape.n, sms, shape.batch)
    blocks = max(1, grid[0] * grid[1] * shape.batch * splits)
    if "SMS" not in " ".join(v.grid):
        blocks = max(1, tiles)  # one block a tile (grid z: the batch and the splits)
    slots = sms * per_sm
    rounds = cdiv(blocks, slots)
    sharing = min(cdiv(blocks, sms), per_sm)
    last_sharing = min(cdiv(blocks - (rounds - 1) * slots, sms), per_sm)
    steps = cdiv(cdiv(shape.k, splits), bk) if shape.k else 0
    item = DTYPES[dtype].itemsize
    out = shape.batch * shape.m * shape.n
    dram = shape.batch * (shape.m + shape.n) * shape.k * item
    partials = splits * out * (8 if dtype == "float64" else 4) if splits > 1 else 0
    # the partials cross DRAM twice, C once; a sum pass reads them back and writes C
    dram += partials if v.sum_pass else 2 * partials + out * item
    pass_bytes = partials + out * item if v.sum_pass else 0
    return Work(tiles, blocks, cdiv(tiles, blocks), rounds, sharing, last_sharing, steps,
                min(steps, params.get("STAGES", 0)), dram, out * item,
                not (params.get("TMA_STORE") or v.sum_pass), ragged(v, shape, item),
                narrow_path(v, shape, item), pass_bytes)


# -- the constants ----------------------------------------------------------------------------
@dataclass
class Calibration:
    """A GPU's constants: per dtype key and candidate (``point_key``), and the GPU's own
    (DRAM bandwidth in bytes/s, what a copy costs besides its bytes, its SMs)."""

    gpu: str
    sms: int
    bandwidth: float
    copy_launch: float
    copy_bandwidth: float
    points: dict[str, dict[str, Constants]]
    #: blocks per SM per dtype key and candidate, from each one's registers (an offline
    #: build) with its threads and shared memory
    blocks: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    #: Seconds added per copy when choosing (not when fitting), for what the fitted
    #: launch and bandwidth, a copy's typical cost, do not carry. Chosen by ``fit`` as the
    #: value whose picks lose least on the calibration's own rows (the H100's: none).
    copy_penalty: float = 0.0
    #: Seconds a padded copy takes per line it copies, besides its bytes (``fit_copies``)
    copy_line: float = 0.0
    #: The host's seconds a call takes with no copies (a plan-cache hit, PyTorch tensors),
    #: and each launch of a copy (the pad kernel's one for both operands, a transpose's)
    #: adds: a call queued behind others takes the longer of its GPU time and these.
    #: Measured apart (``bench/host_costs.py``); 0: the GPU time alone.
    call_host: float = 0.0
    copy_host: float = 0.0
    #: Whether both padded operands share one launch of the pad kernel, as a call pads
    #: them; False while ``fit`` fits samples timed with a launch an operand (copies by
    #: the driver, then a pad kernel an operand). Not saved: a call's are shared.
    pads_share_launch: bool = True

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Calibration:
        points = {dt: {key: Constants(**c) for key, c in entries.items()}
                  for dt, entries in data["points"].items()}
        return cls(data["gpu"], data["sms"], data["bandwidth"], data["copy_launch"],
                   data["copy_bandwidth"], points, data.get("blocks", {}),
                   data.get("copy_penalty", 0.0), data.get("copy_line", 0.0),
                   data.get("call_host", 0.0), data.get("copy_host", 0.0))

    def copies(self, shape: Shape, choosing: bool = True) -> float:
        """Seconds of the copies ``shape``'s plan makes before its kernel (``choosing``:
        with ``copy_penalty`` each launch)."""
        launch = self.copy_launch + (self.copy_penalty if choosing else 0.0)
        lines = sum(shape.padded_lines) * self.copy_line
        pad_launches = min(len(shape.padded), 1) if self.pads_share_launch else len(shape.padded)
        return (pad_launches * launch + sum(b / self.copy_bandwidth for b in shape.padded)
                + lines + sum(launch + 2 * b / self.bandwidth for b in shape.transposed))

    def host(self, shape: Shape) -> float:
        """The host's seconds for a call of ``shape``'s plan: ``call_host``, and
        ``copy_host`` for each launch of a copy (one pads both operands) or of a pass
        after the product.

        >>> cal = Calibration("gpu", 132, 3e12, 4e-6, 1e12, {}, call_host=15e-6,
        ...                   copy_host=6e-6)
        >>> round(cal.host(Shape(99, 99, 99, padded=(9, 9), transposed=(9,))) * 1e6)
        27
        """
        launches = min(len(shape.padded), 1) + len(shape.transposed) + shape.passes
        return self.call_host + launches * self.copy_host

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "sms": self.sms, "bandwidth": self.bandwidth,
                "copy_launch": self.copy_launch, "copy_bandwidth": self.copy_bandwidth,
                "copy_penalty": self.copy_penalty, "copy_line": self.copy_line,
                "call_host": self.call_host, "copy_host": self.copy_host,
                "blocks": self.blocks,
                "points": {dt: {key: {k: v for k, v in vars(c).items() if v is not None}
                                for key, c in sorted(entries.items())}
                           for dt, entries in sorted(self.points.items())}}


@functools.cache
def _load(path: str) -> Calibration:
    return Calibration.from_json(json.loads(Path(path).read_text()))


@functools.cache
def shipped_calibration(gpu_name: str) -> Path:
    """The shipped calibration file of the GPU named ``gpu_name``: the one named after its
    model where one was fitted there (``h200.json`` for an "NVIDIA H200"), else the H100's.

    >>> shipped_calibration("NVIDIA A10G").name
    'h100.json'
    """
    own = CALIBRATION_DIR / f"{gpu.model(gpu_name).lower() or 'h100'}.json"
    return own if own.exists() else CALIBRATION_DIR / "h100.json"


def calibration() -> Calibration:
    """The calibration in use: ``$XGEMM_CALIBRATION``'s, else :func:`shipped_calibration`'s."""
    return _load(os.environ.get(CALIBRATION_ENV) or str(shipped_calibration(gpu.name_in_use())))


def constants(name: str, params: Mapping[str, int], dtype: str,
              precision: str | None = None) -> Constants | None:
    """The calibrated constants of a candidate, or None where none were measured."""
    return calibration().points.get(dtype_key(dtype, precision), {}).get(point_key(name, params))


# -- the estimate -----------------------------------------------------------------------------
def estimate(v: Variant, params: Mapping[str, int], dtype: str, shape: Shape,
             sms: int | None = None, precision: str | None = None,
             c: Constants | None = None) -> float:
    """Seconds ``v`` at ``params`` should take on ``shape`` (its copies included); inf
    where it has no constants for this dtype or cannot launch the shape."""
    cal = calibration()
    c = c or constants(v.name, params, dtype, precision)
    if c is None:
        return math.inf
    try:
        w = work(v, params, dtype, shape, sms or cal.sms)
    except ValueError:  # a grid over the GPU's limits
        return math.inf
    return predict(c, w, shape, cal)


def estimate_near(v: Variant, params: Mapping[str, int], dtype: str, shape: Shape,
                  sms: int | None = None, precision: str | None = None) -> float:
    """:func:`estimate` at ``params``, or where that point has no constants, with those of
    the rung's nearest candidates that have (the same tile first, then the fewest other
    parameters changed), the dearest where several are as near: a point nobody measured
    is not taken for the fastest of its neighbours. inf where the rung has none."""
    if constants(v.name, params, dtype, precision) is not None:
        return estimate(v, params, dtype, shape, sms, precision)
    tile = ("BM", "BN", "CONSUMERS", "WM", "WN", "tile")
    found = [(sum(10 * (params.get(x) != p.get(x)) for x in tile)
              + sum(params.get(x) != p.get(x) for x in p), c)
             for p in v.candidate_points(dtype)
             if (c := constants(v.name, p, dtype, precision)) is not None]
    if not found:
        return math.inf
    nearest = min(distance for distance, _ in found)
    return max(estimate(v, params, dtype, shape, sms, precision, c=c)
               for distance, c in found if distance == nearest)


def predict(c: Constants, w: Work, shape: Shape, cal: Calibration, choosing: bool = True
            ) -> float:
    """The model's formula (the module's text) for counted work ``w``."""
    full = c.step_for(shape.layout, w.narrow)
    walk = w.tiles_per_block * w.steps * ((w.rounds - 1) * max(w.sharing * full, c.latency)
                                          + max(w.last_sharing * full, c.latency))
    compute = w.rounds * w.tiles_per_block * (c.tile + w.fill_steps * c.fill) + walk
    if w.ragged:
        compute += w.c_bytes * c.ragged_store
    store = w.c_bytes / c.store_bandwidth if c.store_bandwidth and w.own_store else 0.0
    return (cal.copies(shape, choosing) + w.pass_bytes / cal.bandwidth
            + max(c.launch + max(compute, w.dram_bytes / cal.bandwidth), store))


def call_time(gpu_seconds: float, shape: Shape) -> float:
    """A call's seconds, queued behind others: the longer of its GPU time and the host's
    (:meth:`Calibration.host`), which its copies' launches lengthen."""
    return max(gpu_seconds, calibration().host(shape))


def ranked(shapes: Iterable[tuple[Variant, Mapping[str, int], Shape]], dtype: str,
           sms: int | None = None, precision: str | None = None
           ) -> list[tuple[float, float, Variant, dict[str, int]]]:
    """(call time, GPU time, variant, parameters) for each candidate, cheapest first: by
    :func:`call_time`, then by the GPU's time (where the host bounds several, the kernel
    that leaves the GPU freer), then the registry's order."""
    found = []
    for i, (v, p, s) in enumerate(shapes):
        t = estimate(v, p, dtype, s, sms, precision)
        found.append((call_time(t, s), t, i, v, dict(p)))
    found.sort(key=lambda x: x[:3])
    return [(call, t, v, p) for call, t, _, v, p in found if math.isfinite(t)]


def candidates(dtype: str, precision: str | None, cc: int) -> list[tuple[Variant, dict]]:
    """Every rung and point ``auto`` weighs for ``dtype`` at ``precision`` on a GPU of
    compute capability ``cc`` x 10, in the registry's order.

    >>> [v.name for v, _ in candidates("float32", None, 90)][:3]
    ['tiled', 'coarse1d', 'vectorized']
    """
    found = []
    for name in variants():
        v = get_variant(name)
        if v.precision in (None, precision) and v.runs_on(cc):
            found += [(v, p) for p in v.candidate_points(dtype)]
    return found


# -- the shapes' rows ------------------------------------------------------------------------
def ragged_rows(n: int, item: int) -> bool:
    """Whether rows of ``n`` values of ``item`` bytes are not whole multiples of 16 bytes
    (TMA cannot store them; vector stores narrow)."""
    return n * item % 16 != 0


def ragged(v: Variant, shape: Shape, item: int) -> bool:
    """Whether C's rows are not whole groups of the widest store ``v`` writes them with,
    so that C leaves by narrow stores (``ragged_store``): a rung specialised on
    alignment stores groups of four elements ("aligned" in ``Variant.flags``) or of 16
    bytes ("aligned16"); any other rung is judged by whole 16-byte lines, TMA's.

    >>> import xgemm
    >>> vectorized, wgmma = xgemm.get_variant("vectorized"), xgemm.get_variant("wgmma")
    >>> shape = Shape(369, 10796, 28, ragged_c=ragged_rows(10796, 2))  # rows of 21592 bytes
    >>> ragged(vectorized, shape, 2), ragged(wgmma, shape, 2)
    (False, True)
    """
    if "aligned" in v.flags:
        return shape.n % 4 != 0
    if "aligned16" in v.flags:
        return shape.n * item % max(16, item) != 0
    return shape.ragged_c


def narrow_path(v: Variant, shape: Shape, item: int) -> bool:
    """Whether ``v``, specialised on alignment, runs its narrow path on ``shape``: its
    "aligned" flag (groups of four elements) or "aligned16" flag (16 bytes) false.

    >>> import xgemm
    >>> mma = xgemm.get_variant("mma_staged_c")
    >>> narrow_path(mma, Shape(99, 87, 99, row_bytes=2), 2), narrow_path(mma, Shape(99, 88, 99), 2)
    (True, False)
    """
    if "aligned16" in v.flags:
        return shape.row_bytes < 16
    if "aligned" in v.flags:
        return shape.row_bytes < 4 * item
    return False


def row_bytes(*extents: int, item: int) -> int:
    """The largest power of two up to 16 that divides every one of ``extents`` (rows'
    lengths and leading dimensions, in elements) times ``item`` bytes.

    >>> row_bytes(87, 817, item=2), row_bytes(88, 816, item=2)
    (2, 16)
    """
    together = 16
    for extent in extents:
        together = math.gcd(together, extent * item)
    return together
