"""The registry and the declarations: no GPU needed."""

import subprocess
import sys

import pytest

import xgemm
from xgemm.expressions import (
    MAX_DYNAMIC_SMEM_BYTES,
    MAX_STATIC_SMEM_BYTES,
    MAX_THREADS_PER_BLOCK,
    cdiv,
)
from xgemm.registry import Variant, register

ALL = xgemm.variants()


def test_ladder_order():
    assert ALL == ["naive", "coalesced", "tiled", "coarse1d", "coarse2d", "vectorized",
                   "transposed_b", "warptile", "pipelined", "splitk", "wmma", "mma", "mma_tf32",
                   "wgmma_ring", "wgmma", "wgmma_tf32", "dmma", "wgmma_splitk",
                   "wgmma_rows", "wgmma_8bit", "mma_int8", "skinny", "skinny_mma", "skinny_ring",
                   "tiny_k", "wgmma_inplace", "wgmma_last_round",
                   "wgmma_8bit_last_round", "mma_staged_c", "skinny_async", "wgmma_pingpong",
                   "wgmma_tf32x3", "wgmma_tf32x3_rs", "wgmma_tf32x3_parts", "wgmma_any_ld",
                   "wgmma_splitk_sum", "wgmma_columns"]
    assert xgemm.DEFAULT_VARIANT == xgemm.AUTO == "auto"


@pytest.mark.parametrize("family, name", [(f, n) for f in xgemm.families()
                                          for n in xgemm.variants(f)])
def test_declaration_is_consistent(family, name):
    v = xgemm.get_variant(name, family)
    dtype = "float32" if "float32" in v.dtypes else v.dtypes[0]
    assert v.resolve({}, dtype) == dict(v.defaults)  # the defaults meet every rule
    points = list(v.points(dtype))
    assert dict(v.defaults) in points
    assert v.corners(dtype)[0] == dict(v.defaults)
    for point in points:
        assert v.threads_per_block(point) <= MAX_THREADS_PER_BLOCK
        limit = MAX_DYNAMIC_SMEM_BYTES if v.dynamic_smem else MAX_STATIC_SMEM_BYTES
        assert v.shared_memory(point, dtype) <= limit
        assert v.threads_per_block(point) % 32 == 0  # whole warps
    for corner in v.corners(dtype):
        assert corner in points


def test_persistent_grid_has_a_block_per_sm_at_most():
    v = xgemm.get_variant("wgmma")
    assert v.archs == ("sm_90a",) and xgemm.get_variant("mma").archs == ("sm_80", "sm_90")
    assert v.launch(v.defaults, 4096, 4096, sms=132) == ((132, 1), (384,))  # 512 tiles
    assert v.launch(v.defaults, 300, 500, sms=132) == ((6, 1), (384,))      # 3 x 2 tiles
    # a batch (grid z): up to an SM's worth of blocks for each product, or, with SPREAD,
    # the SMs shared among the products
    spread = {**v.defaults, "SPREAD": 1}
    assert v.launch(v.defaults, 4096, 4096, sms=132, batch=64) == ((132, 1), (384,))
    assert v.launch(spread, 4096, 4096, sms=132, batch=64) == ((2, 1), (384,))
    assert v.launch(spread, 4096, 4096, sms=132, batch=1000) == ((1, 1), (384,))
    # split-K: the SMs shared among the splits (grid z is product x split)
    split = xgemm.get_variant("wgmma_splitk")
    assert split.launch(split.defaults, 16, 4096, sms=132) == ((64, 1), (256,))  # 64 tiles
    assert split.launch({**split.defaults, "SPLITS": 4}, 16, 4096, sms=132) == ((33, 1), (256,))


def test_unknown_variant_names_the_closest():
    with pytest.raises(ValueError, match=r"'coarse2': did you mean 'coarse2d'.*are naive, "):
        xgemm.get_variant("coarse2")
    with pytest.raises(ValueError, match="unknown variant"):
        xgemm.get_variant("zzzz")


def test_unknown_parameter_suggests():
    with pytest.raises(ValueError, match=r"no parameter 'bm' .*did you mean 'BM'"):
        xgemm.get_variant("coarse2d").resolve({"bm": 64})
    with pytest.raises(ValueError, match="no parameter 'TN'"):
        xgemm.get_variant("coarse1d").resolve({"TN": 4})


@pytest.mark.parametrize("value", [0, -8, 2.5, "16", True, None])
def test_parameter_must_be_positive_int(value):
    with pytest.raises(ValueError, match="must be a positive int"):
        xgemm.get_variant("tiled").resolve({"tile": value})


@pytest.mark.parametrize(
    "name, params, rule",
    [
        ("coarse2d", {"TM": 3}, "BM % TM == 0"),
        ("coarse2d", {"BN": 96, "TN": 8, "BM": 128, "TM": 8}, "BM * BK % THREADS == 0"),
        ("coarse1d", {"BM": 128, "BN": 128, "TM": 8}, "threads per block 2048 <= 1024"),
        ("coarse1d", {"BM": 128, "BN": 128, "TM": 16, "BK": 8}, "THREADS <= 512"),
        ("vectorized", {"TM": 6, "BM": 96}, "TM % 4 == 0"),
        ("tiled", {"tile": 64}, "threads per block 4096 <= 1024"),
        ("coarse2d", {"BM": 256, "BN": 256, "BK": 32, "TM": 16, "TN": 16},
         "shared memory 65536 bytes <= 49152"),
    ],
)
def test_constraints_reject_with_the_rule(name, params, rule):
    with pytest.raises(ValueError, match="breaks") as info:
        xgemm.get_variant(name).resolve(params)
    assert rule in str(info.value)


def test_split_k_rung_refuses_one_split():
    # rung 16 is split-K; one split is rung 13's kernel. Before its template left the
    # hand-in out at one split, SPLITS 1 read and wrote partials through a null pointer
    # (an illegal address on the GPU); now it is refused with its rule
    with pytest.raises(ValueError, match="SPLITS >= 2"):
        xgemm.get_variant("wgmma_splitk").resolve({"SPLITS": 1}, "bfloat16")


def test_constraints_accept_points_outside_the_sweep_space():
    # the space is what a sweep walks; any point that meets the rules may be used
    assert xgemm.get_variant("coarse2d").resolve({"BM": 32, "TM": 4, "BK": 32})["BM"] == 32


def test_grid_limit_is_reported():
    v = xgemm.get_variant("coalesced")
    with pytest.raises(ValueError, match="over the limit of 65535"):
        v.launch({"block": 8}, 8 * 65536, 8)


def test_register_refuses_bad_declarations():
    base = dict(template="gemm/03_tiled.cu.j2", adds="", constraints=[], block=("tile", "tile"),
                grid=("cdiv(N, tile)", "cdiv(M, tile)"))
    with pytest.raises(ValueError, match="registered twice"):
        register(Variant(name="tiled", defaults={"tile": 8}, space={"tile": [8]}, **base))
    with pytest.raises(ValueError, match="not in its space"):
        register(Variant(name="tiled_x", defaults={"tile": 4}, space={"tile": [8]}, **base))
    with pytest.raises(ValueError, match="no sweep space"):
        register(Variant(name="tiled_y", defaults={"tile": 8}, space={}, **base))
    assert "tiled_x" not in xgemm.variants() and "tiled_y" not in xgemm.variants()


def test_cdiv():
    assert [cdiv(0, 4), cdiv(1, 4), cdiv(4, 4), cdiv(5, 4)] == [0, 1, 1, 2]


def test_import_xgemm_loads_none_of_the_tools():
    """The library core imports no benchmark, suite, report or CLI module; ``xgemm.sweep``
    and ``xgemm.tune`` bring ``xgemm.tools.tuning`` in on first use."""
    code = ("import sys, xgemm\n"
            "assert not [m for m in sys.modules if m.startswith('xgemm.tools')], sys.modules\n"
            "assert xgemm.tune.__module__ == 'xgemm.tools.tuning'\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr
