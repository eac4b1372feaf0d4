"""The cost model auto picks with (xgemm.cost) and the generalisation suites' arithmetic
(xgemm.tools.generalisation): no GPU needed."""

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import xgemm
from xgemm import calibrate, cost, ranking
from xgemm.choice import heuristic
from xgemm.cost import Shape
from xgemm.tools import generalisation
from xgemm.tools.results import load_json

SIXTEEN = ("float16", "bfloat16")


def cheapest(m, n, k, dtype="float16", precision=None, layout="NN", batch=1, cc=90):
    """The candidate the model prices cheapest for a shape read in place: (its call's
    time, the variant, its parameters)."""
    ranked = cost.ranked(((v, p, Shape(m, n, k, batch, layout))
                          for v, p in cost.candidates(dtype, precision, cc)), dtype,
                         precision=precision)
    call, _, v, p = ranked[0]
    return call, v, p


#: Candidates a GPU's calibration does not price (added after it was fitted and not timed
#: there since, or timed and left unpriced): auto does not weigh them on that GPU
#: (cost.estimate prices them at inf).
UNMEASURED = {"h100.json": {
    f"skinny_ring:{side}{point}" for side in ("", "FEW_COLUMNS=1,") for point in (
        "STAGES=2", "SPLITS=4,STAGES=2", "SPLITS=8,STAGES=2", "SPLITS=4,STAGES=2,WARPS=2")}
    | {f"skinny_ring:BM=16,{side}{point}" for side in ("", "FEW_COLUMNS=1,")
       for point in ("STAGES=2", "SPLITS=4,STAGES=2")}}
#: rung 36's points: timed on the H200's stratum of few columns, priced on neither GPU (auto
#: runs rung 36 by its rule: evidence/few_columns_rule_7361c2f.txt)
UNMEASURED["h100.json"] |= {f"wgmma_columns:{point}" for point in (
    "BN=64", "", "SPLITS=4", "BM=32", "BN=64,SPLITS=4", "BN=64,SPLITS=1", "SPLITS=1",
    "BM=32,SPLITS=1")}
UNMEASURED["h200.json"] = UNMEASURED["h100.json"] - {
    p for p in UNMEASURED["h100.json"] if p.startswith("skinny_ring")}
#: rung 16's 128 x 128 in four splits: timed on the H200's calibration files only
UNMEASURED["h100.json"] |= {"wgmma_splitk:BM=128,BN=128,CONSUMERS=2,SPLITS=4"}


@pytest.mark.parametrize("path", sorted(cost.CALIBRATION_DIR.glob("*.json")),
                         ids=lambda p: p.name)
def test_every_candidate_is_a_valid_point_with_constants_and_every_constant_a_candidate(path):
    """Each shipped calibration prices every point auto weighs (but those its GPU has not
    timed since they were added, listed above) and nothing else."""
    cal = cost.Calibration.from_json(json.loads(path.read_text()))
    for dtype, precision, key in (("float16", None, "16-bit"), ("float32", None, "float32"),
                                  ("float64", None, "float64"), ("float32", "tf32", "tf32")):
        points = cost.candidates(dtype, precision, 90)
        assert points
        weighed = {cost.point_key(v.name, p) for v, p in points}
        for table in (cal.points[key], cal.blocks[key]):
            assert set(table) <= weighed, set(table) - weighed
        if precision is None:  # TF32's mma_tf32 had too few samples (NT shapes) to fit
            assert all(v.resolve(p, dtype) == p for v, p in points)
            missing = weighed - set(cal.points[key])
            assert missing == (UNMEASURED.get(path.name, set()) if key == "16-bit" else set())
    assert "wgmma_tf32:" in cal.points["tf32"]


def test_the_h200_calibration_is_the_h100s_with_the_points_it_lacks():
    """h200.json extends h100.json (``xgemm calibrate --add-to``): every constant the
    H100's file has is the same there, and it adds exactly the points the H100 never timed;
    a refit of one without the other fails here."""
    h100, h200 = (json.loads((cost.CALIBRATION_DIR / f"{g}.json").read_text())
                  for g in ("h100", "h200"))
    for table in ("points", "blocks"):
        for key, entries in h100[table].items():
            assert {p: c for p, c in h200[table][key].items() if p in entries} == entries
    added = {p for key in h200["points"] for p in h200["points"][key]} - {
        p for key in h100["points"] for p in h100["points"][key]}
    assert added == UNMEASURED["h100.json"] - UNMEASURED["h200.json"]
    assert {k: h200[k] for k in ("bandwidth", "copy_launch", "call_host", "copy_host")} == {
        k: h100[k] for k in ("bandwidth", "copy_launch", "call_host", "copy_host")}


def test_calibrate_add_to_keeps_its_files_copy_and_host_constants(capsys):
    """--add-to fits the new points with the extended file's constants, so options that
    would set others are refused before anything is fitted."""
    from xgemm.tools import cli

    with pytest.raises(SystemExit):
        cli.main(["calibrate", "x.json", "--add-to", "h100.json", "--host", "host.json",
                  "--out", "out.json"])
    assert "--add-to keeps its file's bandwidth, copies and host costs" in capsys.readouterr().err


@pytest.mark.parametrize("m, n, k, layout", [(3762, 10, 6802, "TN"), (4778, 1, 4791, "NN")])
def test_auto_leaves_out_rung_21_where_its_rows_are_not_whole_16_byte_groups(
        monkeypatch, tmp_path, m, n, k, layout):
    """skinny_mma declares auto_aligned: on its narrow path (eight 2-byte loads a fragment)
    auto weighs it no more; these shapes took it before, at 1.32 and 1.47 regret."""
    from xgemm import gpu

    monkeypatch.setenv("XGEMM_TUNE_CACHE", str(tmp_path / "tuned.json"))
    monkeypatch.delenv("XGEMM_CALIBRATION", raising=False)
    found = gpu.stand_in({"gpu": "NVIDIA H100 80GB HBM3"})
    monkeypatch.setattr(gpu, "properties", lambda device: found)
    rung_21 = xgemm.get_variant("skinny_mma")
    assert rung_21.auto_aligned
    rows = cost.row_bytes(m, n, k, item=2)
    assert cost.narrow_path(rung_21, Shape(m, n, k, layout=layout, row_bytes=rows), 2)
    assert ranking.auto_choice(m, n, k, "bfloat16", layout)[0].name != "skinny_mma"


def test_auto_weighs_no_128_row_tiles_over_a_few_rows(monkeypatch, tmp_path):
    """Over at most 32 rows the cost model leaves out tiles of 128 rows and more (priced at
    DRAM's rate, they ran 2.2x the best candidate's time there); 33 rows weigh them."""
    from xgemm import gpu

    monkeypatch.setenv("XGEMM_TUNE_CACHE", str(tmp_path / "tuned.json"))
    monkeypatch.delenv("XGEMM_CALIBRATION", raising=False)
    found = gpu.stand_in({"gpu": "NVIDIA H100 80GB HBM3"})
    monkeypatch.setattr(gpu, "properties", lambda device: found)
    weighed, real = [], cost.ranked

    def spy(shapes, *args, **kwargs):
        shapes = list(shapes)
        weighed.append([v.tile(p, "bfloat16")[0] for v, p, _ in shapes])
        return real(iter(shapes), *args, **kwargs)

    monkeypatch.setattr(cost, "ranked", spy)
    tallest = []
    for m in (32, 33):
        weighed.clear()
        ranking.auto_choice(m, 6784, 6464, "bfloat16")
        tallest.append(max(weighed[0]))
    assert tallest == [64, 128]


@pytest.mark.parametrize("name, shipped", [("NVIDIA H200", "NVIDIA H200"),
                                            ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
                                            ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3")])
def test_the_calibration_in_use_is_the_one_fitted_on_the_gpus_model(monkeypatch, name, shipped):
    """auto prices with the calibration shipped for the GPU in use, else the H100's; and
    $XGEMM_CALIBRATION overrides both."""
    from xgemm import gpu

    monkeypatch.delenv("XGEMM_CALIBRATION", raising=False)
    found = gpu.stand_in({"gpu": name})
    monkeypatch.setattr(gpu, "properties", lambda device: found)
    assert cost.calibration().gpu == shipped
    monkeypatch.setenv("XGEMM_CALIBRATION", str(cost.CALIBRATION_DIR / "h100.json"))
    assert cost.calibration().gpu == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_estimates_grow_with_each_dimension(dtype, axis):
    for v, p in cost.candidates(dtype, None, 90):
        times = []
        for size in (64, 512, 4096, 16384):
            dims = [1024, 1024, 1024]
            dims[axis] = size
            times.append(cost.estimate(v, p, dtype, Shape(*dims)))
        assert times == sorted(times), (v.name, p, times)


def test_a_copy_costs_time_by_its_bytes_and_lines():
    v = xgemm.get_variant("wgmma")
    plain = cost.estimate(v, v.defaults, "float16", Shape(4095, 4095, 4095))
    padded = cost.estimate(v, v.defaults, "float16", Shape(4095, 4095, 4095, padded=(2**25,)))
    assert padded > plain
    cal = dataclasses.replace(cost.calibration(), copy_line=1e-9)
    times = [cal.copies(Shape(4095, 4095, 4095, padded=(2**25,), padded_lines=lines))
             for lines in ((), (4095,), (2**24,))]
    assert times == sorted(times) and len(set(times)) == 3


def test_fit_copies_recovers_its_constants_and_needs_three_copies():
    launch, bandwidth, line = 5e-6, 1e12, 1e-9
    samples = [(b, n, launch + b / bandwidth + n * line)
               for b, n in ((2**12, 2**10), (2**20, 2**4), (2**26, 2**12), (2**16, 2**16))]
    found = calibrate.fit_copies(samples)
    assert found == pytest.approx((launch, bandwidth, line), rel=1e-6)
    with pytest.raises(ValueError, match="needs 3"):
        calibrate.fit_copies(samples[:2])


@pytest.mark.parametrize("dtype", SIXTEEN)
def test_large_16_bit_products_keep_wgmma_with_large_tiles(dtype):
    """At 8192^3 no candidate is priced cheaper than rung 14's 128 x 256 tiles (the rules'
    pick) by the margin that would replace them."""
    call, _, _ = cheapest(8192, 8192, 8192, dtype)
    v = xgemm.get_variant("wgmma")
    assert heuristic(8192, 8192, 8192, dtype, 90, sms=132) == ("wgmma", v.defaults)
    assert v.defaults["BM"] * v.defaults["BN"] == 128 * 256
    large = cost.estimate(v, v.defaults, dtype, Shape(8192, 8192, 8192))
    assert large < call * (1 + ranking.MODEL_MARGIN)


def test_few_rows_and_long_k_split_k_or_take_rows_as_n():
    _, v, _ = cheapest(4, 4096, 8192)
    assert v.name in ("wgmma_rows", "wgmma_splitk")


def test_float32_at_scale_takes_a_warp_tiled_rung_and_long_k_split_k(monkeypatch, tmp_path):
    """auto's picks, the H100's properties stood in. At 8192^3 the model alone prices rung
    10's 64 x 128 tiles at 4 splits 7% under `pipelined` (measured 11% over it:
    evidence/float32_at_scale_splitk_8dd7a9a.txt); the rules' pick holds, as the model
    must be 10% cheaper to overrule it."""
    from xgemm import gpu, ranking

    h100 = gpu.stand_in(json.loads((RESULTS / "suite_float32.json").read_text())["machine"])
    monkeypatch.setattr(gpu, "properties", lambda device: h100)
    monkeypatch.setenv("XGEMM_TUNE_CACHE", str(tmp_path / "tuned.json"))
    monkeypatch.delenv("XGEMM_CALIBRATION", raising=False)
    assert ranking.auto_choice(8192, 8192, 8192, "float32")[0].name in ("warptile", "pipelined")
    assert cheapest(128, 128, 65536, "float32")[1].name == "splitk"


def test_no_tensor_core_rung_before_sm_80_nor_wgmma_off_hopper():
    assert not any(v.min_cc >= 80 for v, _ in cost.candidates("float16", None, 75))
    assert not any(v.name.startswith("wgmma") for v, _ in cost.candidates("float16", None, 80))
    # rung 12 or rung 26 (rung 12 with C staged): both priced within the model's error
    assert cheapest(8192, 8192, 8192, cc=80)[1].name in ("mma", "mma_staged_c")


def test_a_rung_is_weighed_only_for_the_dtypes_auto_takes_it_for():
    skinny = xgemm.get_variant("skinny")
    assert "float16" in skinny.dtypes and skinny.candidate_points("float16") == []
    assert not any(v is skinny for v, _ in cost.candidates("bfloat16", None, 90))
    assert any(v is skinny for v, _ in cost.candidates("float32", None, 90))


def test_tf32_rungs_only_when_asked():
    assert not any(v.precision for v, _ in cost.candidates("float32", None, 90))
    assert cheapest(8192, 8192, 8192, "float32", "tf32", "NT")[1].name == "wgmma_tf32"


def test_ragged_rows_of_c_cost_their_bytes_and_the_copy_engine_lifts_the_store_bound():
    v = xgemm.get_variant("wgmma")
    c = cost.Constants(4e-6, 1e-6, 2e-8, 1e-7, store_bandwidth=1e12, ragged_store=1e-13)
    cal = cost.calibration()

    def priced(params, k, ragged):
        shape = Shape(8192, 8192, k, ragged_c=ragged)
        return cost.predict(c, cost.work(v, params, "float16", shape, 132), shape, cal)

    c_bytes = 8192 * 8192 * 2
    assert priced(v.defaults, 4096, True) - priced(v.defaults, 4096, False) == pytest.approx(
        c_bytes * 1e-13)
    assert cost.ragged_rows(8191, 2) and not cost.ragged_rows(8192, 2)
    # tiny K: C from registers cannot leave faster than store_bandwidth; through the copy
    # engine (TMA's boxes, or bulk copies a row where rows are ragged) it can
    registers = {**v.defaults, "TMA_STORE": 0}
    assert priced(registers, 8, False) >= c_bytes / 1e12
    assert priced(v.defaults, 8, False) < c_bytes / 1e12
    assert priced(v.defaults, 8, True) < priced(registers, 8, True)


@pytest.mark.parametrize("dtype", SIXTEEN)
@pytest.mark.parametrize("m, n", [(8192, 8192), (4096, 14336), (128256, 4096)])
def test_weight_gradients_of_few_tokens_go_to_a_rung_whose_c_tma_writes(dtype, m, n):
    """dW = dY.T @ X at 8 tokens: K = 8, C of whole lines, store-bound: TMA writes it
    (rung 14, or rung 28, whose other warpgroup multiplies meanwhile)."""
    _, v, p = cheapest(m, n, 8, dtype, layout="TN")
    assert v.name in ("wgmma", "wgmma_pingpong") and p["TMA_STORE"] == 1


def test_a_ragged_last_wave_runs_fewer_blocks_an_sm():
    v = xgemm.get_variant("splitk")
    params = {**v.defaults, "SPLITS": 4}
    c = cost.Constants(0.0, 0.0, 1e-6, 1e-9)
    cal = cost.calibration()
    shape = Shape(8192, 64, 8192)  # 512 blocks
    w = cost.work(v, params, "float32", shape, 132, per_sm=3)  # over 396 slots
    assert (w.rounds, w.sharing, w.last_sharing) == (2, 3, 1)
    one_round = w.steps * 3 * 1e-6
    assert one_round < cost.predict(c, w, shape, cal) < 2 * one_round


def test_a_sum_pass_is_priced_after_the_product():
    """A rung whose partials a second kernel sums (rung 35) reads them and writes C after
    the product, not beside it: the product's bytes hold one pass over the partials and
    no C, the pass's bytes add their time at DRAM's bandwidth, and no bound of C's stores
    from registers applies to the product. Rung 16, whose last warp of each tile sums
    them, counts both passes and C in the product's, and its C leaves from registers."""
    m, n, k, splits = 92, 280, 16064, 16
    shape, partials, c_bytes = Shape(m, n, k), splits * m * n * 4, m * n * 2
    operands = (m + n) * k * 2
    summed = xgemm.get_variant("wgmma_splitk_sum")
    w = cost.work(summed, {**summed.defaults, "SPLITS": splits}, "bfloat16", shape, 132,
                  per_sm=1)
    assert (w.dram_bytes, w.pass_bytes) == (operands + partials, partials + c_bytes)
    handed_in = xgemm.get_variant("wgmma_splitk")
    w16 = cost.work(handed_in, {**handed_in.defaults, "SPLITS": splits}, "bfloat16", shape,
                    132, per_sm=1)
    assert (w16.dram_bytes, w16.pass_bytes) == (operands + 2 * partials + c_bytes, 0)
    c, cal = cost.Constants(5e-6, 1e-6, 1e-7, 1e-7), cost.calibration()
    alone = cost.predict(c, dataclasses.replace(w, pass_bytes=0), shape, cal)
    assert cost.predict(c, w, shape, cal) - alone == pytest.approx(w.pass_bytes / cal.bandwidth)
    assert not w.own_store and w16.own_store
    slow_stores = dataclasses.replace(c, store_bandwidth=1e6)  # C's bytes take seconds
    assert cost.predict(slow_stores, w, shape, cal) == cost.predict(c, w, shape, cal)
    assert cost.predict(slow_stores, w16, shape, cal) > 0.05


def test_a_point_without_constants_is_priced_as_its_dearest_nearest_neighbour():
    v = xgemm.get_variant("splitk")
    shape, point = Shape(926, 58, 9006), {**v.defaults, "SPLITS": 24}
    assert cost.constants("splitk", point, "float32") is None
    neighbours = [cost.constants("splitk", {**v.defaults, "SPLITS": s}, "float32")
                  for s in (4, 8, 16, 32, 64)]  # one parameter away each
    times = [cost.estimate(v, point, "float32", shape, c=c) for c in neighbours]
    assert len(set(times)) == len(times)
    assert cost.estimate_near(v, point, "float32", shape) == max(times)


def test_a_batch_counts_all_its_tiles():
    v = xgemm.get_variant("mma")
    one = cost.work(v, v.defaults, "float16", Shape(1024, 1024, 64), 132)
    many = cost.work(v, v.defaults, "float16", Shape(1024, 1024, 64, batch=64), 132)
    assert many.tiles == 64 * one.tiles and many.rounds > one.rounds


def test_point_keys_name_what_differs_from_the_defaults():
    v = xgemm.get_variant("splitk")
    assert cost.point_key("splitk", {**v.defaults, "SPLITS": 4}) == "splitk:SPLITS=4"
    assert cost.point_key("tiled", {"tile": 16}) == "tiled:"


def test_the_fit_recovers_constants_it_made_up():
    v = xgemm.get_variant("mma")
    truth = cost.Constants(4e-6, 1e-6, 2e-8, 1e-7, fill=3e-7, ragged_store=1.5e-12)
    cal = cost.calibration()
    samples = []
    for m, n, k in ((64, 64, 64), (4096, 4096, 4096), (100, 5000, 300), (7000, 30, 9000),
                    (2048, 2048, 128), (16, 16, 16000), (3000, 3000, 3000), (512, 8192, 1024),
                    (4095, 4095, 8), (1000, 3001, 40), (8192, 2049, 2), (333, 7777, 20)):
        shape = Shape(m, n, k, ragged_c=cost.ragged_rows(n, 2))
        w = cost.work(v, v.defaults, "float16", shape, 132)
        samples.append((w, shape, cost.predict(truth, w, shape, cal)))
    fitted, error = calibrate.fit_point(samples, cal)
    assert error < 0.1  # the grid's steps are 33% apart
    for w, shape, t in samples:
        assert cost.predict(fitted, w, shape, cal) == pytest.approx(t, rel=0.2)


def test_a_faster_copy_since_the_samples_changes_only_the_copy_constants(monkeypatch):
    """Rows timed with one copy (a launch an operand) and fitted for a faster one: the
    candidates' constants and the copy penalty are fitted as the rows' copy costs, the
    copy is priced as it is now."""
    sample = RESULTS / "calibration" / "random_bfloat16_seed1.json.gz"
    rows = load_json(sample)["rows"][:20]
    monkeypatch.setattr(calibrate, "occupancies", lambda rows: {})  # no offline builds
    then, now = (4e-6, 7e11, 4e-10), (3e-6, 2e12, 1e-11)
    before, _ = calibrate.fit(rows, "H100", 132, 3e12, copies=then, rows_share_pad_launch=False)
    after, _ = calibrate.fit(rows, "H100", 132, 3e12, copies=now, sampled_copies=then)
    assert after.points == before.points and after.copy_penalty == before.copy_penalty
    assert (after.copy_launch, after.copy_bandwidth, after.copy_line) == now
    with pytest.raises(ValueError, match="pass copies too"):
        calibrate.fit(rows, "H100", 132, 3e12, sampled_copies=then)


def test_a_seed_makes_the_same_sample():
    assert generalisation.random_cases(5) == generalisation.random_cases(5)
    assert generalisation.random_cases(5) != generalisation.random_cases(6)
    for case in generalisation.random_cases(3, 200):
        assert generalisation.FLOP_FLOOR <= case.flops <= generalisation.FLOP_CAP
        assert case.layout in generalisation.RANDOM_LAYOUTS
        assert min(case.m, case.n, case.k) >= 1 and max(case.m, case.n, case.k) <= 16384


def test_the_models_suite_has_each_layers_three_products_once():
    cases = generalisation.model_cases()
    keys = [(c.m, c.n, c.k, c.layout, c.lead) for c in cases]
    assert len(keys) == len(set(keys))
    llama = generalisation.MODELS[0]
    assert generalisation.Product(1, 14336, 4096, "NT", (1,)).label in {
        c.label for c in cases}  # one token through gate_proj
    assert llama.linears()["k_proj, v_proj"] == (1024, 4096)
    assert {c.m for c in cases if c.layout != "TN"} == set(generalisation.TOKENS)


def test_the_summary_is_geometric_means_and_extremes():
    rows = [{"status": "ok", "x_call": 0.5, "x_kernel": 2.0, "regret": 1.0},
            {"status": "ok", "x_call": 2.0, "x_kernel": 0.5, "regret": 1.44},
            {"status": "error: broken"}]
    s = generalisation.summary(rows, seed=4)
    assert s["seed"] == 4 and s["cases"] == 3 and s["ok"] == 2
    assert s["geomean_call_x"] == pytest.approx(1.0)
    assert s["geomean_kernel_x"] == pytest.approx(1.0)
    assert s["min_call_x"] == 0.5
    assert s["geomean_regret"] == pytest.approx(math.sqrt(1.44))
    assert s["max_regret"] == 1.44
    assert generalisation.summary([])["geomean_regret"] is None


REPO = Path(__file__).resolve().parent.parent
RESULTS_ROOT = REPO / "bench" / "results"
RESULTS = RESULTS_ROOT / "h100"


@pytest.mark.parametrize("results", sorted({p.parent for p in RESULTS_ROOT.glob(
    "*/random_*_seed*.json*")}), ids=lambda p: p.name)
def test_published_rows_whose_pick_moved_are_listed(results):
    """Each published random row's pick is the one auto makes now (no GPU: the GPU the
    file ran on stood in), or the GPU's evidence lists the row as measured on an earlier
    pick: a change to auto measures the files again or says which figures it leaves
    behind."""
    listed = results / "evidence" / "picks_changed.txt"
    env = {k: v for k, v in os.environ.items() if k != "XGEMM_CALIBRATION"}
    out = subprocess.run([sys.executable, "bench/picks_changed.py", str(results)],
                         capture_output=True, text=True, cwd=REPO, env=env, check=True)

    def rows(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("#")]

    assert rows(out.stdout) == (rows(listed.read_text()) if listed.exists() else [])


def test_a_call_is_priced_at_the_longer_of_its_gpu_and_host_time(monkeypatch):
    """A call queued behind others takes the longer of its GPU time and the host's, which
    each copy launch lengthens (one launch pads both operands), and a sum pass's launch
    after the product; where the host bounds every candidate, the faster kernel ranks
    first."""
    cal = dataclasses.replace(cost.calibration(), call_host=20e-6, copy_host=7e-6)
    monkeypatch.setattr(cost, "calibration", lambda: cal)
    both = Shape(747, 3426, 75, layout="NT", padded=(112050, 513900), padded_lines=(747, 3426))
    assert cost.call_time(1e-6, both) == pytest.approx(27e-6)
    assert cost.call_time(1e-3, both) == 1e-3
    assert cost.call_time(1e-6, Shape(99, 99, 99, transposed=(9,))) == pytest.approx(27e-6)
    assert cost.call_time(1e-6, Shape(99, 99, 99, passes=1)) == pytest.approx(27e-6)
    monkeypatch.setattr(cost, "calibration", lambda: dataclasses.replace(cal, call_host=1.0))
    ranked = cost.ranked(((v, p, Shape(64, 64, 64)) for v, p in cost.candidates(
        "float16", None, 90)), "float16")
    assert len(ranked) > 3 and {call for call, *_ in ranked} == {1.0}
    assert [t for _, t, _, _ in ranked] == sorted(t for _, t, _, _ in ranked)
