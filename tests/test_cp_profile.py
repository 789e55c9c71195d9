"""benchmarks/cp_profile.py on CPU (gloo, the reference kernel inside): a row per strategy and case with
both timings, refusals as rows with their reason, bad names as one line and a non-zero exit."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "cp_profile.py"


def _run(monkeypatch, tmp_path, port, *extra):
    spec = importlib.util.spec_from_file_location("cp_profile", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setattr(sys, "argv", ["cp_profile", "--device", "cpu", "--heads", "4:2", "--head-dim", "16",
                                      "--dtype", "float32", "--sampler", "uniform", "--warmup", "0", "--repeat", "2",
                                      "--out", str(tmp_path), *extra])
    module.main()
    return [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]


def test_cpu_run_times_every_strategy_against_the_kernel_alone(monkeypatch, tmp_path, free_port):
    rows = _run(monkeypatch, tmp_path, free_port, "--kernels", "reference", "--masks", "causal,causal_document",
                "--seqlens", "128", "--directions", "fwd,bwd")
    assert len(rows) == 2 * 2 * 5
    for row in rows:
        assert row["status"] == "ok", row
        assert row["alone_ms"] > 0 and row["step_ms"] > 0 and row["ratio"] == row["alone_ms"] / row["step_ms"]
    table = (tmp_path / "table.md").read_text().splitlines()
    assert table[0].startswith("| inner | mask |") and len(table) == 2 + 4


def test_a_kernel_without_lse_primitives_is_a_row_with_the_reason(monkeypatch, tmp_path, free_port):
    rows = _run(monkeypatch, tmp_path, free_port, "--kernels", "sdpa,reference", "--strategies", "ulysses",
                "--masks", "causal", "--seqlens", "128")
    by = {r["kernel"]: r for r in rows}
    assert by["sdpa"]["status"] == "unsupported" and "forward_lse" in by["sdpa"]["reason"]
    assert by["reference"]["status"] == "ok"


@pytest.mark.parametrize("flag, value", [("--kernels", "nosuch"), ("--masks", "nosuch"), ("--directions", "nosuch"),
                                         ("--dtype", "nosuch"), ("--seqlens", "nosuch"), ("--repeat", "0")])
def test_a_bad_value_is_one_line_and_a_non_zero_exit(tmp_path, flag, value):
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--kernels", "reference", flag, value,
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.startswith("cp_profile:") and value in done.stderr
    assert not (tmp_path / "out").exists()  # refused before anything is written
    assert len(done.stderr.strip().splitlines()) == 1
