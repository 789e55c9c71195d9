"""Energy per call (`--energy`): NVML's counter read around at least a second of back-to-back calls."""
from __future__ import annotations

import torch
from typer.testing import CliRunner

from longca.problem import Problem
from longca_cli.main import app
from longca_runner.measure import RunOptions, run_problem
from longca_runner.measure import energy as energy_module
from longca_runner.measure.energy import energy_per_call

from .test_report import row, write


class FakeCounter:
    """An energy counter that gains 50 mJ per call of the step it watches, read in 20 ms steps."""

    def __init__(self):
        self.mj, self.calls = 1_000.0, 0

    def step(self):
        self.calls += 1
        self.mj += 50.0

    def __call__(self, device):
        return self.mj


def test_joules_per_call_are_the_counters_difference_over_the_calls():
    counter = FakeCounter()
    joules, calls = energy_per_call(counter.step, torch.device("cpu"), seconds=0.05, counter=counter)
    assert calls == counter.calls and calls >= 5 and calls % 5 == 0
    assert abs(joules - 0.05) < 1e-12


def test_no_counter_no_energy():
    assert energy_per_call(lambda: None, torch.device("cpu"), counter=lambda device: None) is None
    assert energy_module.gpustate.energy_mj("cpu") is None  # a CPU has no NVML counter


def test_a_row_asked_for_energy_records_it(monkeypatch):
    import time

    watts = 100.0  # a counter that gains 100 J a second, whatever runs
    monkeypatch.setattr(energy_module, "SECONDS", 0.05)
    monkeypatch.setattr(energy_module.gpustate, "energy_mj", lambda device: 1e3 * watts * time.perf_counter())
    problem = Problem(kernel="reference", mask="causal", seqlen=128, heads_q=2, heads_kv=2, head_dim=16,
                      dtype="float32", device="cpu")
    asked = run_problem(problem, RunOptions(warmup=0, repeat=5, energy=True))
    assert asked.status == "ok" and asked.energy_calls >= 5 and asked.energy_j > 0
    plain = run_problem(problem, RunOptions(warmup=0, repeat=5))
    assert plain.energy_j is None and plain.energy_calls is None


def test_the_report_gives_joules_and_tflop_per_joule(tmp_path):
    rows = [row("fa3", flops=2e12, energy_j=0.5, energy_calls=400), row("fa4", mask="full")]
    folder = write(tmp_path / "run", rows)
    result = CliRunner().invoke(app, ["report", str(folder), "--output", str(tmp_path / "out"), "--no-plots"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## Energy per call" in text and "| fa3 | causal | 8k | fwd | 0.5 | 4 | 400 |" in text
    assert "| fa4 |" not in text.split("## Energy per call")[1]
