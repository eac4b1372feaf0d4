"""README.md's generated parts (``xgemm report``): rendered from result files, no GPU.

The last test checks the real README.md against bench/results/h100/: when a result file,
a variant's declaration or README changes without the other, CI fails here; run
``xgemm report --write`` to render README.md again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import xgemm
from xgemm.tools import ladder_table, report
from xgemm.tools.cli import main

REPO = Path(__file__).resolve().parents[1]


def _record(variant: str, size: int, tflops: float | None, vs: float | None = None, *,
            dtype: str = "float32", layout: str = "NN", params: dict | None = None,
            ok: bool = True, status: str = "ok") -> dict:
    if params is None:
        params = {} if variant == "cublas" else dict(xgemm.get_variant(variant).defaults)
    return {"variant": variant, "params": params, "m": size, "n": size, "k": size, "batch": 1,
            "dtype": dtype, "layout": layout, "tflops": tflops, "vs_cublas": vs, "ok": ok,
            "status": status}


MACHINE = {"gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "sm_count": 132,
           "max_sm_clock_mhz": 1980.0, "driver": "580.1", "cuda_runtime": 13020,
           "cupy": "14.2.0", "python": "3.12.3", "fp32_peak_tflops": 66.9,
           "copy_bandwidth_gbs": 2960.0, "commit": "abc1234"}


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    """A small results directory: float32 (two rungs, one wrong), tf32 (NT), call cost."""
    directory = tmp_path / "results"
    directory.mkdir()
    float32 = [_record("cublas", 4096, 51.1, 1.0), _record("naive", 4096, 1.94, 0.038),
               _record("tiled", 4096, None, ok=False, status="wrong result"),
               _record("cublas", 8192, 51.4, 1.0), _record("naive", 8192, 1.91, 0.037),
               _record("naive", 1024, 1.5, 0.04)]
    tf32 = [_record("cublas", 4096, 392.2, 1.0, layout="NT"),
            _record("wgmma_tf32", 4096, 385.1, 0.98, layout="NT", params={"STAGES": 9})]
    (directory / "a.json").write_text(json.dumps({"machine": MACHINE, "results": float32}))
    (directory / "b.json").write_text(json.dumps({"machine": MACHINE, "results": tf32}))
    (directory / "cost.json").write_text(json.dumps({"machine": MACHINE, "host_us": [
        {"dtype": "float32", "out": False, "shape": "64x64x64", "xgemm_cupy_us": 20.71,
         "cupy.matmul_us": None}], "queued_ms": [
        {"dtype": "float16", "shape": "16x4096x4096", "variant": "wgmma", "kernel_ms": 0.01876,
         "xgemm_ms": 0.0264, "x_cupy": 1.742}]}))
    (directory / "decoder.json").write_text(json.dumps({"machine": MACHINE, "torch_suite": [
        {"part": "decode", "dtype": "bfloat16", "case": "decode 1 x 2048", "pytorch_ms": 2.3,
         "xgemm_ms": 2.5, "x": 0.92}]}))
    tf32x3 = {"variant": "wgmma_tf32x3_parts", "tflops": 112.0, "sgemm_ms": 2.2,
              "tf32x3_ms": 1.0, "sgemm_error": 1e-6, "tf32x3_error": 3e-7, "tf32_error": 8e-4}
    (directory / "tf32x3.json").write_text(json.dumps({"machine": MACHINE, "tf32x3_suite": [
        {**tf32x3, "case": "called", "cublas_call_ms": 2.3, "auto_call_ms": 1.15},
        {**tf32x3, "case": "launched", "sgemm_call_ms": 2.3, "tf32x3_call_ms": 1.0}]}))
    (directory / "float32.png").write_bytes(b"")
    (directory / "sweeps").mkdir()  # not read
    (directory / "sweeps" / "x.json").write_text("[]")
    return directory


def test_rungs_follow_template_numbers():
    numbers = ladder_table.rungs()
    assert list(numbers) == xgemm.variants()
    for name, rung in numbers.items():
        template = Path(xgemm.get_variant(name).template).name
        assert rung.rstrip("'") == str(int(template.split("_")[0]))
    assert numbers["naive"] == "1" and numbers["transposed_b"] == "7"
    assert numbers["mma_tf32"] == numbers["mma"] + "'"
    assert numbers["wgmma_tf32"] == numbers["wgmma"] + "'"


def test_columns_come_from_content_not_names(results_dir: Path):
    results = report.load(results_dir)
    assert [run.column for run in results.runs] == ["float32", "tf32"]
    assert results.columns() == ["float32", "tf32"]
    assert results.call_cost is not None
    assert [p.name for p in results.figures] == ["float32.png"]


def test_ladder_table_rows(results_dir: Path):
    table = report.ladder_table(report.load(results_dir))
    lines = table.splitlines()
    assert lines[0] == "| rung | variant | what it adds | defaults | float32 | tf32 (NT) |"
    assert lines[2].startswith("|  | cuBLAS |") and lines[2].endswith(
        "| 51.1 / 51.4 | 392.2 / – |")
    rows = {line.split(" | ")[1]: line for line in lines if line.startswith("| ")}
    assert rows["`naive`"] == (f"| 1 | `naive` | {xgemm.get_variant('naive').adds} | block=8 "
                               "| 1.9 (0.04x) / 1.9 (0.04x) |  |")
    assert "| wrong result / – |" in rows["`tiled`"]
    assert rows["`coarse1d`"].endswith("|  |  |")  # not measured: empty
    wgmma_tf32 = rows["`wgmma_tf32`"]
    assert wgmma_tf32.endswith("|  | 385.1 (0.98x)† / – |")
    assert "as `wgmma`, but" in wgmma_tf32
    assert any(line.startswith("† `wgmma_tf32` measured at STAGES=9") for line in lines)
    assert [line for line in lines if line.startswith("| ")][3:] == [
        rows[f"`{n}`"] for n in xgemm.variants()]  # ladder order, after cuBLAS


def test_machine_figures_call_cost_and_decoder(results_dir: Path):
    results = report.load(results_dir)
    line = report.machine_line(results, results_dir.parent)
    assert line.startswith("Measured on an NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 1980 MHz")
    assert "CUDA runtime 13.2, CuPy 14.2.0" in line and "commit abc1234" in line
    assert "`results/`" in line
    assert report.figures(results, results_dir.parent) == (
        "![float32: TFLOP/s against size, every rung and cuBLAS](results/float32.png)")
    cost = report.call_cost_tables(results)
    assert "| float32 | no | 64x64x64 | 20.7 | - |" in cost
    assert report.torch_suite_table(results).splitlines()[2] == (
        "| bfloat16 | decode 1 x 2048 | 2.300 | 2.500 | 0.92x | NVIDIA H100 80GB HBM3 | abc1234 |")
    assert "| float16 | 16x4096x4096 | `wgmma` | 0.0188 | 0.0264 | 1.74 |" in cost


def test_an_own_suite_file_renders_its_table(results_dir: Path):
    """A suite of its own cases is found by its key and drawn by its module's table: the
    tf32x3 suite's call column where its file timed whole calls, "-" where it timed a
    prepared launch."""
    rows = report.own_suite_table(report.load(results_dir), "tf32x3").splitlines()
    assert rows[2].startswith("| called | wgmma_tf32x3_parts | 112 | 2.20x | 2.00x |")
    assert rows[3].startswith("| launched | wgmma_tf32x3_parts | 112 | 2.20x | - |")
    assert rows[-1] == "NVIDIA H100 80GB HBM3, commit abc1234."


def test_check_and_write(results_dir: Path, tmp_path: Path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- xgemm report: ladder -->\nstale\n<!-- end -->\n\ntext\n"
                      "<!-- xgemm report: call_cost -->\n<!-- end -->\n")
    assert report.check(readme, results_dir).count("\n-stale") == 1
    assert main(["report", "--check", "--readme", str(readme), "--results",
                 str(results_dir)]) == 1
    assert "+| 1 | `naive` |" in capsys.readouterr().out
    assert report.write(readme, results_dir)
    assert report.check(readme, results_dir) == ""
    assert main(["report", "--check", "--readme", str(readme), "--results",
                 str(results_dir)]) == 0
    assert readme.read_text().startswith("# x\n\n<!-- xgemm report: ladder -->\n| rung |")
    assert "\ntext\n" in readme.read_text()
    with pytest.raises(ValueError, match="unknown region"):
        report.update("<!-- xgemm report: nope -->\n<!-- end -->", {"ladder": ""})
    with pytest.raises(ValueError, match="no '<!-- xgemm report"):
        report.update("no regions", {"ladder": ""})


def test_imports_without_cupy():
    code = "import sys; sys.modules['cupy'] = None; import xgemm.tools.report; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO)
    assert out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("page, gpu", [("README.md", "h100"), ("docs/h200.md", "h200")])
def test_published_page_agrees_with_its_results(page, gpu):
    diff = report.check(REPO / page, REPO / "bench" / "results" / gpu)
    assert diff == "", f"{page} differs from bench/results/{gpu}: run `xgemm report " \
                       f"--results bench/results/{gpu} --readme {page} --write`\n{diff}"


def test_the_published_gpu_comparison_is_what_the_script_prints():
    """bench/compare_gpus.py over both GPUs' files prints the evidence file under its
    header line, so a result measured again shows where the comparison is stale."""
    evidence = REPO / "bench" / "results" / "h200" / "evidence" / "h100_vs_h200.txt"
    out = subprocess.run([sys.executable, "bench/compare_gpus.py", "bench/results/h100",
                          "bench/results/h200", "--under", "0.6"], capture_output=True,
                         text=True, cwd=REPO, check=True)
    assert evidence.read_text().split("\n", 1)[1] == out.stdout


def test_suite_table_per_case_and_geometric_mean(tmp_path: Path):
    def row(part, case, x_kernel, x_call, status="ok"):
        return {"part": part, "case": case, "variant": "dmma", "baseline": "cupy.matmul",
                "auto_ms": 2.0, "cublas_ms": 2.0 * x_kernel, "x_kernel": x_kernel,
                "x_call": x_call, "status": status}

    (tmp_path / "suite_float64.json").write_text(json.dumps({"machine": MACHINE, "suite": [
        row("float64", "4096x4096x4096", 0.5, 0.25), row("float64", "8192x8192x8192", 2.0, 4.0),
        {"part": "float64", "case": "1x1x1", "status": "wrong result: error 1 against x"}]}))
    (tmp_path / "suite_tf32.json").write_text(json.dumps({"machine": MACHINE, "suite": [
        row("tf32", "4096x4096x4096:TN", 1.1, 1.2)]}))
    lines = report.suite_table(report.load(tmp_path)).splitlines()
    assert lines[2].startswith("| tf32 | 4096x4096x4096:TN | `dmma` | 2.0000 / 2.2000 | 1.10 |")
    assert "| float64 | 8192x8192x8192 | `dmma` | 2.0000 / 4.0000 | 2.00 | 4.00 |" in lines[5]
    assert lines[6] == "| float64 | 1x1x1 | - | - | - | - | wrong result: error 1 against x |"
    # the failed case counts in no mean: (0.5 * 2)^(1/2) and (0.25 * 4)^(1/2)
    assert lines[7] == "| float64 | **geometric mean** | | | **1.00** | **1.00** | |"
    assert lines[-1] == "Commit abc1234, on the machine above."


def test_generalisation_summaries_render_one_row_per_file(tmp_path: Path):
    summary = {"seed": 9, "cases": 3, "ok": 2, "geomean_call_x": 0.5, "geomean_kernel_x": 0.75,
               "min_call_x": 0.125, "geomean_regret": 1.0625, "max_regret": 1.5}
    (tmp_path / "random_float16_seed9.json").write_text(json.dumps(
        {"machine": {"commit": "abc1234"}, "suite": "random", "part": "float16",
         "summary": summary, "rows": []}))
    results = report.load(tmp_path)
    assert not results.suite and not results.runs  # not taken for the other kinds
    table = report.generalisation_table(results).splitlines()
    assert table[2] == ("| random | float16 | 9 | 2 of 3 | 0.50 | 0.75 | 0.12 | 1.06 | 1.50 |"
                        " abc1234 |")
