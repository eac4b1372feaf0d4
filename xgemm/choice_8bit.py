"""``auto``'s rules for 8-bit operands (FP8, int8): rung 20 for few rows or columns over a
long K, rung 19 before Hopper and for small int8 products, rung 25 for few tiles over a long
K, else rung 18 (``xgemm.choice`` asks them in its order of rules).
"""

from __future__ import annotations

from .asked import Asked, Pick
from .registry import get_variant

#: K from which an 8-bit product with scale vectors keeps rung 18's 128 x 256 tiles.
SCALED_LONG_K = 1024
#: Rows (or columns) of C up to which an 8-bit product takes rung 20, where K is as
#: many times the other side.
SKINNY_EIGHT_BIT = 16
#: K from which an 8-bit product of few tiles (128 x 128 tiles for at most half the SMs)
#: takes rung 25, its tiles cut along K: 48 of rung 18's 128-deep phases.
CUT_TILES_K = 48 * 128
#: Rungs 18 and 25 where 64 x 128 tiles still fit in a round (rung 25: half of one): one
#: m64 warpgroup a tile, six stages. Fitted on the int8 and FP8 (row and column scales)
#: seeds 10 and 11 (evidence/eight_bit_narrow_104e9a1.txt, eight_bit_narrow_fp8_c31e3d3.txt):
#: int8's 22 products moved at 0.851x their time, FP8's 43 at 0.887x; a long K over few
#: tiles 0.80-0.84x (84 x 384 x 12960: 21.7 -> 18.2 us in int8), few rows 0.76-0.86x
#: (3 x 6368 x 4672: 28.0 -> 22.5); where they fill more than a round, slower
#: (10690 x 16 x 3104: 30.4 against 26.0).
NARROW_8BIT = {"BM": 64, "CONSUMERS": 1, "STAGES": 6}


def eight_bit_small(q: Asked) -> Pick | None:
    """8-bit products that rung 18's TMA ring does not suit: int8 before Hopper, few
    rows or columns over a long K, small int8 products."""
    m, n, k, dtype, cc, sms, batch = q.m, q.n, q.k, q.dtype, q.cc, q.sms, q.batch
    tiles = q.tiles
    eight_bit = get_variant("wgmma_8bit")
    if dtype == "int8" and not eight_bit.runs_on(cc):  # int8 before Hopper: rung 19, 64 x 64
        params = dict(get_variant("mma_int8").defaults)  # tiles where its own leave SMs idle
        if tiles(params["BM"], params["BN"]) < sms:      # (as for mma; not measured)
            params.update(BM=64, BN=64, WM=32, WN=32)
        return "mma_int8", params
    few = min(m, n)
    if (dtype in eight_bit.dtypes and 0 < few <= SKINNY_EIGHT_BIT
            and max(m, n) * SKINNY_EIGHT_BIT <= k and batch == 1):
        # few rows or columns, and K long beside the other side: rung 20 splits K 16
        # ways where rung 18 walks it in one block a tile (150 x 16 x 6816 and 153 x 16 x
        # 13424: FP8 20.6 and 31.5 us against 22.0 and 38.4, int8 14.7 and 19.7 against
        # 22.4 and 38.7; it reads wider operands at a third of the copy bandwidth, so
        # loses elsewhere: evidence/eight_bit_points_*.txt)
        return "skinny", {**get_variant("skinny").defaults, "BM": 1 << (few - 1).bit_length(),
                          "SPLITS": 16, "FEW_COLUMNS": int(n < m)}
    if dtype == "int8" and m * n * batch <= 1 << 18 and k <= 1024:
        # a small int8 product: rung 19's 64 x 64 tiles, 4 stages, start and finish sooner
        # than rung 18's (a TMA ring of 160 KB): 4.9-6.5 us against 6.8-7.7 where
        # torch._int_mm takes 5.2-6.3 (evidence/eight_bit_points_int8.txt, the random suite's
        # int8 seeds 10 and 11; longer K or larger C ran faster on rung 18)
        return "mma_int8", {**get_variant("mma_int8").defaults, "BM": 64, "BN": 64,
                            "WM": 32, "WN": 32, "STAGES": 4}
    return None


def eight_bit_hopper(q: Asked) -> Pick | None:
    """The other 8-bit products: rung 25 for few tiles over a long K, else rung 18."""
    k, dtype, sms, batch, scale_vectors = q.k, q.dtype, q.sms, q.batch, q.scale_vectors
    tiles = q.tiles
    eight_bit = get_variant("wgmma_8bit")
    if (dtype in eight_bit.dtypes and tiles(128, 128) <= sms // 2 and k >= CUT_TILES_K
            and batch == 1):
        # few tiles, long K: rung 25 cuts each tile's K into pieces, so every SM streams
        # (128 x 128, 4 stages): int8 84 x 384 x 12960 21.9 us against 39.9 for rung 18 and
        # 31.2 for torch._int_mm, 2767 x 208 x 13616 44.4 against 54.5 and 78.3; 0.55-0.94x
        # rung 18's time on the seven such shapes of the int8 seeds 10 and 11
        # (evidence/eight_bit_points_int8_44adea6.txt); shorter K or more tiles ran slower.
        # FP8 with row and column scales, fitted on seed 10 (0.55-0.95x rung 18 on its five
        # such shapes, evidence/eight_bit_points_float8_f22cc55.json) and checked on seed
        # 11: 29 x 96 x 6592 16.2 us against 21.8, 2767 x 208 x 13616 43.3 against 52.6
        # (evidence/eight_bit_points_float8_seed11_164d90c.txt)
        cut = get_variant("wgmma_8bit_last_round")
        params = {**cut.defaults, "BN": 128, "STAGES": 4}
        if tiles(64, 128) <= sms // 2:
            params.update(NARROW_8BIT)
        return cut.name, params
    if dtype in eight_bit.dtypes:  # the 8-bit rung on sm_90 (for FP8 elsewhere the plan
        # refuses it, naming what runs there); 128 x 256 tiles, 128 x 128 with 4 stages
        # where those leave SMs idle (at 4096^3, FP8: 0.95x torch._scaled_mm against 0.77x
        # with 3; evidence/wgmma_8bit.txt). With scale vectors (staged beside C at 256
        # columns), 128 x 128 with 4 stages for K < 1024 too, where C's stores are most of
        # the work: 1.002x the best of six points on seeds 10, 11 and 19 and at 4096^3 and
        # 8192^3 (1.03-1.04x torch._scaled_mm; evidence/eight_bit_points_float8_33f38bb.txt)
        params = dict(eight_bit.defaults)
        if (tiles(params["BM"], params["BN"]) < sms
                or scale_vectors and k < SCALED_LONG_K):
            params.update(BN=128, STAGES=4)
            if tiles(64, 128) <= sms:
                params.update(NARROW_8BIT)
        return eight_bit.name, params
    return None
