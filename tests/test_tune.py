"""Sweeps and tuning: space expansion, the tuning file, shape buckets (no GPU); a small
sweep and a tune that `auto` then follows (GPU)."""

import json
import os
import subprocess
import sys
import warnings

import pytest

import xgemm
from xgemm import choice, gpu, tunefile
from xgemm.tools import cli, tuning
from xgemm.tools.tolerances import TOLERANCE


def test_expand_walks_the_product():
    points = tuning.expand("coarse2d")
    assert len(points) == 2**5
    assert {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8} in points
    assert len({tuple(p.values()) for p in points}) == len(points)


def test_expand_with_a_space_of_ones_own():
    points = tuning.expand("coarse2d", {"BM": [64], "TM": [3, 4]})
    assert len(points) == 2 * 2 * 2 * 2 and {p["BM"] for p in points} == {64}
    assert {p["TM"] for p in points} == {3, 4}
    with pytest.raises(ValueError, match="no parameter bm"):
        tuning.expand("coarse2d", {"bm": [64]})


def test_constraints_filter_the_product():
    v = xgemm.get_variant("coarse1d")
    product = tuning.expand("coarse1d")
    valid = [p for p in product if not v.broken_rules(p)]
    assert valid == list(v.points())
    assert 0 < len(valid) < len(product)


@pytest.mark.parametrize("shape, bucket", [
    ((4096, 4096, 4096), "4096x4096x4096"), ((4095, 4096, 4097), "4096x4096x8192"),
    ((1, 1, 1), "1x1x1"), ((0, 3, 5), "0x4x8"), ((64, 4096, 64), "64x4096x64"),
])
def test_shape_bucket(shape, bucket):
    assert tunefile.shape_bucket(*shape) == bucket


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (64, 4096, 64), (4097, 31, 1025), (2048,) * 3,
                                   (8192,) * 3, (128, 128, 65536)])
def test_heuristic_names_a_valid_point(shape, dtype):
    name, params = choice.heuristic(*shape, dtype)
    assert xgemm.get_variant(name).resolve(params, dtype) == params


def test_heuristic_keeps_the_gpu_busy():
    # 128 x 256 tiles for large outputs; 128 x 128 where those would leave SMs idle
    assert choice.heuristic(8192, 8192, 8192)[1]["BN"] == 256
    assert choice.heuristic(2048, 2048, 2048)[1]["BN"] == 128
    assert choice.heuristic(8192, 8192, 8192, "float16", 90)[1]["BN"] == 256
    assert choice.heuristic(1024, 1024, 1024, "float16", 90)[1]["BN"] == 128


def test_cache_path_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(tunefile.CACHE_ENV, str(tmp_path / "x.json"))
    assert tunefile.cache_path() == tmp_path / "x.json"
    monkeypatch.delenv(tunefile.CACHE_ENV)
    assert tunefile.cache_path().name == "tuned.json" and "xgemm" in str(tunefile.cache_path())


def test_round_trip(tmp_path):
    path = tmp_path / "t.json"
    cache = tunefile.TuneCache(path)
    cache.store("GPU X", "float32", 4096, 4096, 4096, "coarse2d", {"BM": 64, "BN": 64, "BK": 8,
                                                                    "TM": 4, "TN": 4}, 1.5)
    again = tunefile.TuneCache(path)
    assert again.lookup("GPU X", "float32", 4000, 4096, 3000) == (
        "coarse2d", {"BM": 64, "BN": 64, "BK": 8, "TM": 4, "TN": 4})
    assert again.lookup("GPU Y", "float32", 4096, 4096, 4096) is None
    assert again.lookup("GPU X", "float32", 8192, 4096, 4096) is None
    data = json.loads(path.read_text())
    assert data["version"] == tunefile.CACHE_VERSION
    assert data["entries"]["GPU X|float32|4096x4096x4096"]["ms"] == 1.5
    again.clear()
    assert not path.exists() and tunefile.TuneCache(path).entries == {}


def test_a_tuned_shape_keeps_its_own_entry_beside_its_bucket(tmp_path):
    cache = tunefile.TuneCache(tmp_path / "t.json")
    cache.store("GPU", "float32", 4096, 4096, 4096, "tiled", {"tile": 16}, 1.0)
    cache.store("GPU", "float32", 4095, 4095, 4095, "tiled", {"tile": 32}, 1.0)  # same bucket
    assert cache.lookup("GPU", "float32", 4096, 4096, 4096) == ("tiled", {"tile": 16})
    assert cache.lookup("GPU", "float32", 4095, 4095, 4095) == ("tiled", {"tile": 32})
    assert cache.lookup("GPU", "float32", 4000, 4000, 4000) == ("tiled", {"tile": 32})  # latest


def _file(entries) -> str:
    """A tuning file as this xgemm writes it."""
    return json.dumps({"version": tunefile.CACHE_VERSION, "xgemm": xgemm.__version__,
                       "entries": entries})


@pytest.mark.parametrize("text", [
    "{not json", "[]", '{"version": 2, "xgemm": "0.1.0", "entries": []}',
    # written by another xgemm, or in another format: ignored, not misread
    '{"version": 99, "xgemm": "0.1.0", "entries": {}}',
    '{"version": 1, "entries": {"GPU|float32|1x1x1": {"variant": "tiled", "params": {}}}}',
    '{"version": 2, "xgemm": "0.0.9", "entries": {}}',
    '{"version": 2, "xgemm": "9.0.0", "entries": {}}'])
def test_corrupt_file_is_ignored_with_a_warning(tmp_path, text):
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.warns(UserWarning, match="ignoring the xgemm tuning file"):
        cache = tunefile.TuneCache(path)
    assert cache.lookup("GPU", "float32", 1, 1, 1) is None


def test_a_store_keeps_what_another_wrote_since(tmp_path):
    """Two caches on one file, each read before the other wrote (two processes): the
    second store merges with the disk, so the first one's entry stays."""
    path = tmp_path / "t.json"
    first, second = tunefile.TuneCache(path), tunefile.TuneCache(path)
    first.store("GPU", "float32", 64, 64, 64, "tiled", {"tile": 8}, 0.1)
    second.store("GPU", "float16", 64, 64, 64, "tiled", {"tile": 16}, 0.1)
    again = tunefile.TuneCache(path)
    assert again.lookup("GPU", "float32", 64, 64, 64) == ("tiled", {"tile": 8})
    assert again.lookup("GPU", "float16", 64, 64, 64) == ("tiled", {"tile": 16})
    assert second.lookup("GPU", "float32", 64, 64, 64) == ("tiled", {"tile": 8})


STORE_MANY = """
import sys
from pathlib import Path
from xgemm import tunefile
cache = tunefile.TuneCache(Path(sys.argv[1]))
for j in range(int(sys.argv[3])):
    cache.store(f"GPU {sys.argv[2]}", "float32", 2**j, 1, 1, "tiled", {"tile": 8}, 0.1)
"""


def test_processes_storing_at_once_lose_nothing(tmp_path):
    """Four processes store 30 shapes each into one file at the same time: every entry is
    there, the file parses, no temporary file is left."""
    path = tmp_path / "t.json"
    writers, stores = 4, 30
    procs = [subprocess.Popen([sys.executable, "-c", STORE_MANY, str(path), str(w), str(stores)])
             for w in range(writers)]
    assert [p.wait(timeout=300) for p in procs] == [0] * writers
    entries = json.loads(path.read_text())["entries"]
    assert len(entries) == writers * stores * 2  # each shape, and its bucket
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("entry", [
    {"variant": "gone", "params": {}},                       # renamed or removed variant
    {"variant": "tiled", "params": {"tile": 64}},            # now breaks a constraint
    {"variant": "tiled", "params": {"TILE": 16}},            # renamed parameter
    {"variant": "tiled"},                                    # malformed
])
def test_stale_entry_is_ignored_with_a_warning(tmp_path, entry):
    path = tmp_path / "t.json"
    path.write_text(_file({"GPU|float32|64x64x64": entry}))
    cache = tunefile.TuneCache(path)
    with pytest.warns(UserWarning, match="ignoring the stale tuning entry"):
        assert cache.lookup("GPU", "float32", 64, 64, 64) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once, then forgotten
        assert cache.lookup("GPU", "float32", 64, 64, 64) is None


@pytest.fixture
def gpu_x(monkeypatch, fresh_plans):
    """GPU 0 is "GPU X" of 132 SMs, with the compute capability the test sets."""
    monkeypatch.setattr(gpu, "gpu_name", lambda device: "GPU X")
    monkeypatch.setattr(gpu, "multiprocessors", lambda device: 132)

    def capability(cc):
        monkeypatch.setattr(gpu, "compute_capability", lambda device: cc)

    return capability


def test_choose_prefers_the_tuned_entry(gpu_x):
    gpu_x(75)
    assert choice.choose(64, 64, 64, "float32", 0) == choice.heuristic(64, 64, 64)
    # no tensor-core rung below sm_80
    assert choice.choose(4096, 4096, 64, "float16", 0) == ("vectorized", {
        **xgemm.get_variant("vectorized").defaults})
    tunefile.tune_cache().store("GPU X", "float32", 64, 64, 64, "tiled", {"tile": 8}, 0.1)
    assert choice.choose(60, 33, 64, "float32", 0) == ("tiled", {"tile": 8})


def test_a_tuned_exact_entry_does_not_answer_for_tf32(gpu_x):
    gpu_x(90)
    tunefile.tune_cache().store("GPU X", "float32", 4096, 4096, 4096, "pipelined",
                              dict(xgemm.get_variant("pipelined").defaults), 3.0)
    assert choice.choose(4096, 4096, 4096, "float32", 0)[0] == "pipelined"
    assert choice.choose(4096, 4096, 4096, "float32", 0, "tf32")[0] == "wgmma_tf32"
    tunefile.tune_cache().store("GPU X", "float32", 4096, 4096, 4096, "wgmma_tf32",
                              {"BN": 128}, 1.0)
    name, params = choice.choose(4096, 4096, 4096, "float32", 0, "tf32")
    assert name == "wgmma_tf32" and params["BN"] == 128  # the tuned entry this time


def test_auto_takes_no_parameters():
    with pytest.raises(ValueError, match="variant='auto' picks its own parameters"):
        xgemm.matmul(None, None, tile=16)


def test_cli_clear_and_no_gpu(tmp_path, monkeypatch, capsys):
    tunefile.tune_cache().store("GPU", "float32", 1, 1, 1, "tiled", {"tile": 8}, 0.1)
    assert tunefile.cache_path().exists()
    assert cli.main(["tune", "--clear"]) == 0
    assert not tunefile.cache_path().exists()
    monkeypatch.setattr("xgemm.gpu.gpu_unavailable", lambda: "no CUDA device (test)")
    assert cli.main(["sweep", "tiled", "--shape", "64x64x64"]) == 2
    assert cli.main(["tune", "--shapes", "64x64x64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["xgemm sweep: no CUDA device (test); it needs a CUDA GPU",
                   "xgemm tune: no CUDA device (test); it needs a CUDA GPU"]


@pytest.mark.parametrize("variant, tf32", [("tiled", "0"), ("mma_tf32", "1"), ("wgmma_tf32", "1")])
def test_a_tf32_sweep_measures_against_cublas_in_tf32(monkeypatch, variant, tf32):
    monkeypatch.setattr("xgemm.gpu.gpu_unavailable", lambda: "no CUDA device (test)")
    monkeypatch.setenv("CUPY_TF32", "unset")
    assert cli.main(["sweep", variant, "--shape", "64x64x64"]) == 2
    assert os.environ["CUPY_TF32"] == tf32


def test_cli_space_and_names(capsys):
    assert cli.main(["sweep", "tiled", "--shape", "64x64x64", "--space", "tile=8;TILE=4"]) == 2
    assert "no parameter TILE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["sweep", "tiled", "--shape", "64x64x64", "--space", "tile=a"])
    assert "NAME=V1,V2" in capsys.readouterr().err


@pytest.mark.gpu
def test_small_sweep_reports_every_point():
    space = {"BM": [64], "BN": [64], "BK": [8], "TM": [3, 4, 8], "TN": [4, 8]}
    results = xgemm.sweep("coarse2d", 200, 136, 72, space=space)
    assert len(results) == 6
    ok = [r for r in results if r.ok]
    invalid = [r for r in results if r.status == "invalid"]
    assert len(ok) == 4 and len(invalid) == 2
    assert all("BM % TM == 0" in r.error and r.params["TM"] == 3 for r in invalid)
    for r in ok:
        assert r.error_vs_cublas < TOLERANCE["cuBLAS"]["float32"] and r.ms > 0 and r.vs_cublas > 0
        assert r.compile_s is not None
    assert results.best is ok[0] and ok == sorted(ok, key=lambda r: r.ms)
    assert results[-1].status == "invalid"  # failures last


@pytest.mark.gpu
def test_random_sweep_respects_its_budget(tmp_path):
    results = xgemm.sweep("vectorized", 128, 128, 128, strategy="random", max_points=3, seed=1)
    assert sum(r.ok for r in results) == 3
    defaults = dict(xgemm.get_variant("vectorized").defaults)
    assert any(r.ok and r.params == defaults for r in results)  # always among those timed
    results.to_csv(str(tmp_path / "s.csv"))
    assert len((tmp_path / "s.csv").read_text().splitlines()) == len(results) + 1


@pytest.mark.gpu
def test_two_tunes_into_one_file(tmp_path):
    """Two ``xgemm tune`` processes at once, one tuning file: both shapes are in it."""
    path = tmp_path / "shared.json"
    env = {**os.environ, tunefile.CACHE_ENV: str(path)}
    shapes = [(64, 64, 64), (200, 136, 72)]
    procs = [subprocess.Popen([sys.executable, "-m", "xgemm", "tune", "--shapes",
                               "x".join(map(str, shape)), "--variants", "tiled,coalesced"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for shape in shapes]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    entries = json.loads(path.read_text())["entries"]
    name = gpu.gpu_name(0)
    for shape in shapes:
        assert tunefile.TuneCache.key(name, "float32", *shape, exact=True) in entries, outputs


@pytest.mark.gpu
def test_tune_then_auto_follows_it(monkeypatch):
    from conftest import relative_error

    import xgemm.plan

    results = xgemm.tune(96, 80, 48, variants=["tiled", "coalesced"])
    best = results.best
    assert best.variant in ("tiled", "coalesced") and best.ok
    assert all(r.ms >= best.ms for r in results if r.ok)
    seen = []
    real = xgemm.plan.get_kernel
    monkeypatch.setattr(xgemm.plan, "get_kernel",
                        lambda name, params, *rest, **kw: seen.append((name, params))
                        or real(name, params, *rest, **kw))
    import cupy

    a = cupy.random.standard_normal((90, 40), dtype=cupy.float32)
    b = cupy.random.standard_normal((40, 70), dtype=cupy.float32)
    c = xgemm.matmul(a, b)  # same bucket (128x128x64) as the tuned shape
    assert seen == [(best.variant, best.params)]
    assert relative_error(c, a, b) < 1e-5


@pytest.mark.parametrize("variant", ["auto", "tune"])
def test_choosing_variants_take_no_parameters(variant):
    with pytest.raises(ValueError, match=f"variant='{variant}' picks its own parameters"):
        xgemm.matmul(None, None, variant=variant, tile=16)


@pytest.mark.parametrize("value, on", [("", False), ("0", False), ("1", True)])
def test_autotuning_is_opt_in(monkeypatch, value, on):
    from xgemm import autotune

    monkeypatch.setenv(autotune.ENV, value)
    assert autotune.enabled() is on


@pytest.mark.gpu
@pytest.mark.parametrize("framework, setting", [("cupy", "variant"), ("torch", "environment")])
def test_first_call_tunes_once_and_remembers(monkeypatch, rng, fresh_plans, framework,
                                             setting):
    """The first call times auto's contenders on its operands (untouched) and writes its
    output once, correctly; the fastest is in the tuning file; later calls, and a new
    process's auto, run it without timing again."""
    import cupy
    from conftest import poisoned, relative_error

    from xgemm import autotune, plan

    timed = []
    real = autotune.time_launches
    monkeypatch.setattr(autotune, "time_launches",
                        lambda call, **kw: timed.append(call) or real(call, **kw))
    a, b = rng.matrix(1500, 700), rng.matrix(700, 300, order="F")
    a0, b0, out = a.copy(), b.copy(), poisoned(1500, 300)
    kwargs = {"variant": "tune"}
    if setting == "environment":
        monkeypatch.setenv(autotune.ENV, "1")
        kwargs = {}
    if framework == "torch":
        torch = pytest.importorskip("torch")
        a, b, out = (torch.from_dlpack(x) for x in (a, b, out))
    xgemm.matmul(a, b, out=out, **kwargs)
    assert len(timed) >= 2, "fewer than two contenders timed"
    c = cupy.from_dlpack(out) if framework == "torch" else out
    assert relative_error(c, a0, b0) < 1e-5
    assert bool((cupy.from_dlpack(a) == a0).all()) and bool((cupy.from_dlpack(b) == b0).all())
    entry = tunefile.tune_cache().lookup(gpu.gpu_name(0), "float32", 1500, 300, 700, exact=True)
    assert entry is not None
    launch = xgemm.prepare(a, b, out=out, **kwargs)
    assert (launch.variant.name, launch.params) == entry
    count = len(timed)
    xgemm.matmul(a, b, out=out, **kwargs)
    tunefile._caches.clear()  # as a new process: the file read afresh, nothing planned
    plan.PLANS.clear()
    choice.forget()
    assert (xgemm.prepare(a, b).variant.name, xgemm.prepare(a, b).params) == entry
    xgemm.matmul(a, b, variant="tune")
    assert len(timed) == count, "a shape the tuning file holds was timed again"
