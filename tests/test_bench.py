"""The benchmark's own logic, no GPU needed: arithmetic, table, JSON, CSV, plots, CLI."""

import csv
import json

import pytest

from xgemm.tools import bench, cli, machine
from xgemm.tools.bench import Result
from xgemm.tools.tolerances import TOLERANCE

MACHINE = {"gpu": "Test GPU", "fp32_peak_tflops": 60.0, "copy_bandwidth_gbs": 3000.0}


def results():
    return [
        Result("cublas", {}, 1024, 1024, 1024, ms=0.05, tflops=42.9, vs_cublas=1.0, ok=True),
        Result("tiled", {"tile": 16}, 1024, 1024, 1024, ms=0.5, tflops=4.29, vs_cublas=0.1,
               ok=True),
        Result("vectorized", {"BM": 128}, 1024, 1024, 1024, ms=0.1, tflops=21.5, vs_cublas=0.5,
               ok=True),
        Result("naive", {"block": 32}, 1024, 1024, 1024, error="wrong result: error 0.5"),
        Result("cublas", {}, 4097, 31, 1025, ms=0.02, tflops=13.0, vs_cublas=1.0, ok=True),
        Result("tiled", {"tile": 16}, 4097, 31, 1025, ms=0.04, tflops=6.5, vs_cublas=0.5,
               ok=True),
    ]


def test_arithmetic():
    assert bench.flops(2, 3, 4) == 48
    assert bench.flops(2, 3, 4, batch=5) == 240
    assert bench.min_bytes(2, 3, 4) == 4 * (8 + 12 + 6)
    assert bench.intensity(4096, 4096, 4096) == pytest.approx(4096 / 6)
    assert bench.intensity(0, 0, 0) == 0.0
    # the H100 SXM figure the project quotes: 132 SMs x 128 lanes x 2 x 1.98 GHz
    assert machine.fp32_peak_tflops(132, 1980) == pytest.approx(66.9, abs=0.05)


def test_best_per_shape_ignores_cublas_and_failures():
    rs = results()
    assert bench.best_per_shape(rs) == {2, 5}


def test_table_marks_best_and_failures():
    text = bench.table(results(), MACHINE)
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["variant", "params", "shape", "ms"]
    vectorized = next(line for line in lines if line.startswith("vectorized"))
    assert vectorized.rstrip().endswith("*") and "0.50" in vectorized
    assert "0.36" in vectorized  # 21.5 / 60 of peak
    naive = next(line for line in lines if line.startswith("naive"))
    assert "FAILED: wrong result" in naive and "*" not in naive
    assert "170.7" in vectorized  # FLOP/B of 1024^3


def test_json_schema_round_trip(tmp_path):
    path = tmp_path / "r.json"
    bench.write_json(str(path), results(), MACHINE)
    data = json.loads(path.read_text())
    assert set(data) == {"machine", "results"}
    assert data["machine"]["gpu"] == "Test GPU"
    required = {"variant", "params", "m", "n", "k", "batch", "dtype", "ms", "tflops",
                "vs_cublas", "ok", "error"}
    for record in data["results"]:
        assert required <= set(record)
    assert data["results"][0]["variant"] == "cublas"
    machine, back = bench.read_json(str(path))
    assert machine == MACHINE and back == results()


def test_csv(tmp_path):
    path = tmp_path / "r.csv"
    bench.write_csv(str(path), results(), MACHINE)
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 6
    assert rows[2]["params"] == "BM=128" and rows[2]["best"] == "True"
    assert rows[3]["ok"] == "False" and "wrong result" in rows[3]["error"]


def test_plots(tmp_path):
    pytest.importorskip("matplotlib")
    from xgemm.tools import plots

    plots.plot_tflops(results(), MACHINE, str(tmp_path / "a.png"))
    plots.plot_roofline(results(), MACHINE, str(tmp_path / "b.png"))
    for name in ("a.png", "b.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_plot_from_json(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "r.json"
    bench.write_json(str(path), results(), MACHINE)
    assert cli.main(["plot", str(path), "--plot", str(tmp_path / "p.png"),
                     "--csv", str(tmp_path / "r.csv")]) == 0
    assert (tmp_path / "p.png").exists() and (tmp_path / "r.csv").exists()
    assert "vectorized" in capsys.readouterr().out


def test_cli_without_gpu_is_one_clear_line(monkeypatch, capsys):
    monkeypatch.setattr("xgemm.gpu.gpu_unavailable", lambda: "no CUDA device (test)")
    assert cli.main(["bench", "--sizes", "128"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "xgemm bench: no CUDA device (test); it needs a CUDA GPU"


def test_cli_rejects_bad_arguments(capsys):
    assert cli.main(["bench", "--variants", "tild"]) == 2
    assert "did you mean 'tiled'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["bench", "--shapes", "12x34"])
    assert "is not MxNxK" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["sweep", "tiled", "--shape", "12x34"])
    assert "xgemm sweep: '12x34' is not MxNxK" in capsys.readouterr().err
    assert cli.main(["sweep", "warp", "--family", "sum", "--shape", "100"]) == 2
    assert "unknown sum variant 'warp': did you mean 'warp_shuffle'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["bench", "--family", "sum", "--sizes", "128"])
    assert "--family takes its cases from --shapes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["bench", "--suite", "float16", "--sizes", "128"])
    assert "--suite measures its own cases" in capsys.readouterr().err
    for args, said in ((["--dtype", "float64"], "runs in bfloat16 or float16, not float64"),
                       (["--sizes", "128"], "--suite torch measures its own model")):
        with pytest.raises(SystemExit):
            cli.main(["bench", "--suite", "torch", *args])
        assert said in capsys.readouterr().err
    for args in (["--suite", "models", "--dtype", "float8"],
                 ["--suite", "random", "--dtype", "int8", "--max-k", "16"]):
        with pytest.raises(SystemExit):
            cli.main(["bench", *args])
        assert "runs --suite random only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["bench", "--dtype", "int8", "--sizes", "128"])
    assert "--dtype int8 is for --suite random" in capsys.readouterr().err
    for flag, said in (("--multiple", "--multiple 0: give a positive multiple"),
                       ("--max-m", "--max-m 0: give a count of rows from --min-dim up"),
                       ("--max-n", "--max-n 0: give a count of columns from --min-dim up"),
                       ("--min-m", "--min-m 0: give a count of rows from --min-dim to 16384")):
        with pytest.raises(SystemExit):
            cli.main(["bench", "--suite", "random", flag, "0"])
        assert said in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["bench", "--suite", "random", "--min-m", "1024", "--max-m", "64"])
    assert "--min-m and --max-m: give one" in capsys.readouterr().err


def test_random_suite_saves_how_its_sample_was_drawn(tmp_path, monkeypatch):
    # a stratum's file names its draw, so that the same cases can be drawn again
    from xgemm.tools import commands, generalisation

    monkeypatch.setattr(commands, "need_gpu", lambda command: True)
    monkeypatch.setattr(commands, "machine_info", lambda measure: {})
    drawn = []

    def run(part, cases, *, regret, repeat, rows, progress):
        drawn.extend(cases)
        rows.append({"status": "ok", "case": cases[0].label, "x_call": 1.0, "x_kernel": 1.0})
        progress()
        return rows

    monkeypatch.setattr(generalisation, "run", run)
    path = tmp_path / "r.json"
    cli.main(["bench", "--suite", "random", "--dtype", "bfloat16", "--seed", "3", "--count", "5",
              "--min-dim", "32", "--max-m", "300", "--max-n", "300", "--min-k", "4096",
              "--no-regret", "--json", str(path)])
    draw = json.loads(path.read_text())["draw"]
    assert draw["max_n"] == 300 and draw["min_k"] == 4096
    assert generalisation.random_cases(**draw) == drawn


@pytest.mark.gpu
def test_bench_on_the_gpu(tmp_path, capsys):
    path = tmp_path / "r.json"
    code = cli.main(["bench", "--variants", "tiled,vectorized,transposed_b", "--sizes", "256",
                     "--shapes", "257x31x65", "--repeat", "5", "--json", str(path)])
    assert code == 0
    machine, rs = bench.read_json(str(path))
    assert machine["sm_count"] > 0 and machine["copy_bandwidth_gbs"] > 0
    assert [r.variant for r in rs] == ["cublas", "tiled", "vectorized", "transposed_b"] * 2
    for r in rs:
        assert r.ok and r.ms > 0 and r.tflops > 0 and r.runs == 5
        assert r.variant == "cublas" or r.error_vs_cublas < TOLERANCE["cuBLAS"]["float32"]
    assert "vectorized" in capsys.readouterr().out


@pytest.mark.gpu
def test_l2_scrub_drops_only_its_own_lines():
    """The scrub drops its own buffer's lines from the L2 unwritten, and no other: values
    written just before it, of arrays allocated after its buffer, read back whole."""
    import cupy

    from xgemm import timing

    timing.scrub_l2()  # its buffer allocated first
    rng = cupy.random.default_rng(7)
    arrays = [cupy.empty(size, cupy.float32) for size in (1, 4097, 2**20 + 3)]
    expected = []
    for x in arrays:
        x[...] = rng.standard_normal(x.size, dtype=cupy.float32)
        expected.append(x.get())
    timing.scrub_l2()
    for x, want in zip(arrays, expected, strict=True):
        assert (x.get() == want).all()


@pytest.mark.gpu
def test_bench_reports_a_failing_variant():
    problem = bench.Problem(64, 64, 64)
    r = bench.bench_variant(problem, "coarse2d", {"TM": 3})
    assert not r.ok and "BM % TM == 0" in r.error and r.ms is None


def test_parse_case():
    assert bench.parse_case("4097x31x1025") == (4097, 31, 1025, 1, "NN")
    assert bench.parse_case("64x512x512x64:nt") == (512, 512, 64, 64, "NT")
    for bad in ("12x34", "0x4x4", "4x4x4:NX", "4x4x4:N"):
        with pytest.raises(ValueError, match="NT|MxNxK"):
            bench.parse_case(bad)
    r = bench.Result("tiled", {}, 512, 512, 64, batch=64, layout="TT")
    assert r.shape == "64x512x512x64:TT"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_bench_batched_and_transposed_cases(dtype):
    shapes = [(33, 17, 9, 5, "NN"), (40, 24, 16, 1, "TT"), (40, 24, 16, 3, "NT")]
    rs = bench.run(["tiled", "transposed_b", "auto"], shapes, dtype=dtype, repeat=3, warmup=1)
    assert len(rs) == 12
    for r in rs:
        # CuPy has no batched bfloat16 matmul: there the cuBLAS row says so
        assert r.ok or r.variant == "cublas" and "cupy.matmul" in r.error, (r.shape, r.error)
        assert r.dtype == dtype and r.batch in (1, 3, 5)
    # transposed_b reads B column-major: in the NN case it is handed B stored that way
    assert [r.extra.get("read_as") for r in rs if r.variant == "transposed_b"] == \
        ["NT", None, None]
    assert "(reads NT)" in bench.table(rs)


@pytest.mark.parametrize("baselines", [{}, {"auto": print}], ids=["none", "named auto"])
def test_call_against_baselines_refuses_a_bad_field(baselines):
    from xgemm.tools import overhead

    with pytest.raises(ValueError, match="one baseline or more"):
        overhead.call_against_baselines(baselines, print)


@pytest.mark.gpu
def test_call_against_baselines_takes_the_fastest_call():
    """The same kernel behind two calls, one of them slowed on the host: the call
    baseline is the fast one, whichever kernel time ran faster."""
    import time

    import cupy

    from xgemm.tools import overhead

    a = cupy.random.standard_normal((64, 64), dtype=cupy.float32)

    def slow():
        time.sleep(200e-6)
        return a @ a

    found = overhead.call_against_baselines({"slow": slow, "fast": lambda: a @ a},
                                            lambda: a @ a, calls=20, rounds=3)
    assert found["call_baseline"] == "fast"
    assert found["cublas_call_ms"] < 0.2  # a 200 us sleep would show in every call


@pytest.mark.parametrize("kernel_ms, work_ms, most, calls",
                         [(0.5, 20.0, 200, 40), (0.001, 20.0, 200, 200), (50.0, 20.0, 200, 3),
                          (0.001, 30.0, 50, 50)])
def test_calls_per_round_fills_the_round_within_its_bounds(kernel_ms, work_ms, most, calls):
    from xgemm.tools import overhead

    assert overhead.calls_per_round(kernel_ms, work_ms, most) == calls


def test_train_gpt_figure_is_redrawn_from_its_numbers(tmp_path):
    """examples/train_gpt.py --figure draws a saved run's figure without a GPU."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("torch")
    import subprocess
    import sys
    from pathlib import Path

    run = {"steps": 3, "batch": 2, "mode": "eager", "machine": MACHINE,
           **{name: {"losses": [3.1, 2.5, 2.2], "step_ms": 4.0} for name in ("PyTorch", "xgemm")}}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    script = Path(__file__).resolve().parents[1] / "examples" / "train_gpt.py"
    subprocess.run([sys.executable, str(script), "--figure", str(path)], check=True)
    assert (tmp_path / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("new_points_only", [False, True])
def test_add_candidates_keeps_the_other_points_times_when_asked(monkeypatch, new_points_only):
    """add_candidates times a rung's candidates again, or with new_points_only only the
    points a row has no time for, keeping the rung's other times (here on the CPU, the
    operands and the timing stood in for)."""
    torch = pytest.importorskip("torch")
    from xgemm.tools import measuring

    old = {"variant": "wgmma_splitk", "params": {"BM": 64}, "ms": 0.5, "status": "ok",
           "planned": {"BM": 64}, "copies": []}
    other = {"variant": "wgmma", "params": {"BM": 128}, "ms": 0.4, "status": "ok",
             "planned": {"BM": 128}, "copies": []}
    row = {"status": "ok", "part": "float16", "m": 8, "n": 8, "k": 8, "layout": "NN",
           "lead": [], "variant": "wgmma", "params": {"BM": 128}, "copies": [],
           "auto_ms": 0.4, "best_ms": 0.4, "candidates": [old, other]}
    asked = {}

    def timed(*args):  # the rung's points it is asked for, each timed at 0.3 ms
        asked["skipped"] = args[-1]
        points = [{"BM": 64}, {"BM": 128}]
        return [{"variant": "wgmma_splitk", "params": p, "ms": 0.3, "status": "ok",
                 "planned": p, "copies": []} for p in points
                if measuring.point_of("wgmma_splitk", p) not in args[-1]]

    monkeypatch.setattr(measuring, "operands",
                        lambda case, dtype, seed: (torch.randn(8, 8), torch.randn(8, 8),
                                                   torch.empty(8, 8)))
    monkeypatch.setattr(measuring, "_candidates", timed)
    monkeypatch.setattr("xgemm.timing.scrub_pays", lambda nbytes, device: False)
    measuring.add_candidates([row], {"wgmma_splitk"}, new_points_only=new_points_only)
    splitk = [x for x in row["candidates"] if x["variant"] == "wgmma_splitk"]
    assert other in row["candidates"]
    if new_points_only:  # the old point's 0.5 ms kept, only BM=128 timed
        assert splitk == [old, {**old, "params": {"BM": 128}, "planned": {"BM": 128},
                                "ms": 0.3}]
    else:
        assert [x["ms"] for x in splitk] == [0.3, 0.3]
    assert row["best_ms"] == 0.3 and row["regret"] == pytest.approx(0.4 / 0.3)


def test_add_candidates_drops_a_twins_time_with_the_twin(monkeypatch):
    """A candidate that is auto's very launch, timed faster than auto was, stands as
    auto's time; retimed slower, auto's time goes back to its own first timing, not to the
    dropped twin's (on the CPU, the operands and the timing stood in for)."""
    torch = pytest.importorskip("torch")
    from xgemm.tools import measuring

    twin = {"variant": "wgmma", "params": {"BM": 128}, "planned": {"BM": 128}, "copies": []}
    row = {"status": "ok", "part": "float16", "m": 8, "n": 8, "k": 8, "layout": "NN",
           "lead": [], "variant": "wgmma", "params": {"BM": 128}, "copies": [],
           "auto_ms": 0.5, "best_ms": 0.5, "candidates": []}
    monkeypatch.setattr(measuring, "operands",
                        lambda case, dtype, seed: (torch.randn(8, 8), torch.randn(8, 8),
                                                   torch.empty(8, 8)))
    monkeypatch.setattr("xgemm.timing.scrub_pays", lambda nbytes, device: False)
    for ms, auto in ((0.3, 0.3), (0.45, 0.45), (0.7, 0.5)):  # twin faster, then slower
        monkeypatch.setattr(measuring, "_candidates",
                            lambda *args, ms=ms: [{**twin, "ms": ms, "status": "ok"}])
        measuring.add_candidates([row], {"wgmma"})
        assert row["auto_ms"] == auto, (ms, row)
        assert row["regret"] == pytest.approx(auto / min(auto, ms))


def test_cupy_arrays_are_measured_without_regret():
    """Regret's candidates run on PyTorch tensors: asked on CuPy arrays, a clear refusal
    before anything is drawn."""
    from xgemm.tools import measuring

    with pytest.raises(ValueError, match="'cupy' without regret"):
        measuring.measure("float16", measuring.Product(64, 64, 64), framework="cupy")


@pytest.mark.gpu
@pytest.mark.parametrize("part, case", [
    ("float16", "64x96x80:NT"), ("bfloat16", "3x64x48x40"), ("tf32", "96x64x80:TT")])
def test_every_suite_row_is_measured_one_way(part, case):
    """The practitioner's suite's rows (CuPy arrays; a batch of B matrices where the case
    is batched) and the random suite's (PyTorch tensors, with regret) come from the one
    routine, xgemm.tools.measuring: both check auto's result and time both contenders."""
    from xgemm.tools import measuring, suite

    *batch, m, n, k = (int(x) for x in case.split(":")[0].split("x"))
    layout = case.split(":")[1] if ":" in case else "NN"
    canonical = suite.measure(part, suite.Case(m, n, k, batch=batch[0] if batch else 1,
                                               layout=layout), repeat=3, rounds=1)
    sampled = measuring.measure(part, measuring.Product(m, n, k, layout), repeat=3, rounds=1)
    for row in (canonical, sampled):
        assert row["status"] == "ok", row
        assert row["cublas_ms"] > 0 and row["auto_ms"] > 0 and row["auto_call_ms"] > 0
    assert canonical["case"] == case and canonical["b_lead"] == batch
    assert any(x["status"] == "ok" for x in sampled["candidates"])
