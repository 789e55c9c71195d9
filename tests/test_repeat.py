"""`longca bench --runs N` repeats the grid into OUTPUT/run-1 ... run-N and the report gives each
cell's run-to-run coefficient of variation; `--resume` continues the repeats; `longca report`
over several folders computes the same (`longca_cli.analysis.run_variation`)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from longca.results import ResultsWriter
from longca_cli import analysis, specs
from longca_cli.main import app

TINY = """[sweep]
name = "tiny"
kernels = ["reference"]
masks = ["causal"]
seqlens = [256]
heads = ["2:1"]
head_dims = [16]
dtypes = ["float32"]
directions = ["fwd"]
device = "cpu"
samples = 1
warmup = 0
repeat = 2
check = false
measure_peak = false
"""


@pytest.fixture
def tiny_bench(tmp_path, monkeypatch):
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY)
    monkeypatch.setattr(specs, "default_spec_path", lambda device: spec)
    return tmp_path / "out"


def _bench(out: Path, *args: str):
    return CliRunner().invoke(app, ["bench", "--output", str(out), *args])


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_bench_runs_repeats_the_grid_and_reports_the_variation(tiny_bench):
    done = _bench(tiny_bench, "--runs", "2")
    assert done.exit_code == 0, done.output
    assert [_lines(tiny_bench / f"run-{i}" / "results.jsonl") for i in (1, 2)] == [1, 1]
    assert not (tiny_bench / "results.jsonl").exists()
    report = (tiny_bench / "report.md").read_text()
    assert "## Run-to-run variation" in report and "over 1 cell; no cell of 16k or more" in report
    cells = analysis.run_variation(tiny_bench / "run-1", tiny_bench / "run-2")
    assert len(cells) == 1 and cells[0]["runs"] == 2 and cells[0]["sources"] == ["run-1", "run-2"]
    tf = cells[0]["tflops"]
    assert cells[0]["cv"] == pytest.approx(statistics.stdev(tf) / statistics.fmean(tf))
    assert analysis.run_variation(tiny_bench)[0]["tflops"] == tf  # the folder of repeats stands for each
    assert analysis.load(tiny_bench).replaced == 1  # ... and loads as one table, the last repeat's row kept
    assert "| reference | causal | 256 | fwd | 2:1 | 16 | float32 | 2 of 2 |" in report

    # --resume with more runs: finished repeats are left alone (no new row, no new run record)
    runs_before = _lines(tiny_bench / "run-1" / "runs.jsonl")
    again = _bench(tiny_bench, "--runs", "3", "--resume")
    assert again.exit_code == 0, again.output
    assert [_lines(tiny_bench / f"run-{i}" / "results.jsonl") for i in (1, 2, 3)] == [1, 1, 1]
    assert _lines(tiny_bench / "run-1" / "runs.jsonl") == runs_before
    assert "2 of 3" not in (tiny_bench / "report.md").read_text()
    assert "3 of 3" in (tiny_bench / "report.md").read_text()

    # `longca report` on the folder of repeats reads every repeat and writes beside them
    (tiny_bench / "report.md").unlink()
    shown = CliRunner().invoke(app, ["report", str(tiny_bench), "--no-plots"])
    assert shown.exit_code == 0, shown.output
    assert "## Run-to-run variation" in (tiny_bench / "report.md").read_text()
    assert not (tiny_bench / "run-1" / "report.md").exists()


@pytest.mark.parametrize("first, then, said", [
    ([], ["--runs", "2", "--resume"], "holds a single run"),
    (["--runs", "2"], ["--resume"], "holds 2 repeated runs"),
    (None, ["--runs", "0"], "--runs 0"),
])
def test_mixed_layouts_and_bad_counts_are_one_line(tiny_bench, first, then, said):
    if first is not None:
        assert _bench(tiny_bench, *first).exit_code == 0
    before = sorted(p.name for p in tiny_bench.iterdir()) if tiny_bench.exists() else []
    refused = _bench(tiny_bench, *then)
    assert refused.exit_code == 2 and said in refused.output and "Traceback" not in refused.output
    assert (sorted(p.name for p in tiny_bench.iterdir()) if tiny_bench.exists() else []) == before


def _row(kernel: str, seqlen: int, tflops: float) -> dict:
    return {"kernel": kernel, "mask": "causal", "seqlen": seqlen, "heads_q": 64, "heads_kv": 8, "head_dim": 128,
            "dtype": "bfloat16", "direction": "fwd", "device": "cpu", "status": "ok", "tflops": tflops,
            "case_id": f"{kernel}-{seqlen}"}


def test_report_over_run_folders_gives_cv_and_the_summary(tmp_path):
    measured = {"a": [100.0, 102.0, 98.0], "b": [500.0, 501.0, 499.0], "c": [300.0, 330.0, 270.0]}
    folders = []
    for i in range(3):
        folder = tmp_path / f"r{i}"
        writer = ResultsWriter(folder / "results.jsonl")
        writer.append(_row("k", 4096, measured["a"][i]))
        writer.append(_row("k", 16384, measured["b"][i]))
        writer.append(_row("k", 32768, measured["c"][i]))
        if i == 0:
            writer.append(_row("only-once", 4096, 10.0))  # in one folder: no variation to give
        folders.append(folder)
    cells = analysis.run_variation(*folders)
    by_len = {c["seqlen"]: c for c in cells}
    assert sorted(by_len) == [4096, 16384, 32768]
    assert by_len[4096]["cv"] == pytest.approx(0.02) and by_len[16384]["cv"] == pytest.approx(0.002)
    assert by_len[32768]["cv"] == pytest.approx(0.1)
    summary = analysis.variation_summary(cells)
    assert summary["median_cv"] == pytest.approx(0.02)
    assert (summary["long"], summary["steady_long"], summary["steady_share"]) == (2, 1, 0.5)

    shown = CliRunner().invoke(app, ["report", *map(str, folders), "--output", str(tmp_path / "rep"), "--no-plots"])
    assert shown.exit_code == 0, shown.output
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "Median CV 2.00% over 3 cells; 1 of 2 cells of 16k or more (50%) have a CV of at most 1%" in text
    assert "| k | causal | 4k | fwd | 64:8 | 128 | bfloat16 | 3 of 3 | 100.0 | 2 | 2.00% |" in text
    assert "only-once" not in text.split("## Run-to-run variation")[1]
    json.dumps([{k: v for k, v in c.items() if k != "row"} for c in cells])  # plain values, usable from Python
