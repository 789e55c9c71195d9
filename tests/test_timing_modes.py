"""Timing modes: events (default), cuda_graph and profiler, chosen per spec or `longca run --timing`,
recorded in every row; cuda_graph refused on a CPU with one line; a step that cannot be captured is
an unsupported row with the reason; the profiler's device time leaves the flush out; the benchmark
script writes rows.jsonl and table.md."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from longca.errors import LongcaError, UnsupportedError
from longca.problem import Problem
from longca_runner import timing
from longca_runner.measure import RunOptions, run_problem
from longca_runner.sweep import SweepSpec, run_sweep

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(kernel="sdpa", mask="causal", seqlen=256, heads_q=2, heads_kv=1, head_dim=32, dtype="float32",
             direction="fwd", device="cpu")


def test_bad_modes_are_one_line_errors():
    with pytest.raises(LongcaError, match="timing 'fast': use one of events, cuda_graph, profiler"):
        timing.check_timing("fast", "cpu")
    with pytest.raises(LongcaError, match="timing cuda_graph needs a CUDA device"):
        timing.check_timing("cuda_graph", "cpu")
    with pytest.raises(LongcaError, match="timing 'x'"):
        RunOptions(timing="x")
    spec = SweepSpec(kernels=["sdpa"], masks=["causal"], seqlens=[256], device="cpu", timing="cuda_graph")
    with pytest.raises(LongcaError, match="cuda_graph needs a CUDA device"):
        run_sweep(spec, Path("/nonexistent/never-written"))


def test_rows_record_their_mode_and_profiler_runs_on_cpu():
    events = run_problem(Problem(**SMALL), RunOptions(warmup=1, repeat=2, samples=1))
    profiled = run_problem(Problem(**SMALL), RunOptions(warmup=1, repeat=2, samples=1, timing="profiler"))
    assert (events.status, events.timing) == ("ok", "events")
    assert (profiled.status, profiled.timing) == ("ok", "profiler") and profiled.ms_median > 0


def test_profiler_device_time_counts_only_device_kernels():
    from torch.autograd import DeviceType

    def event(kind, us, parent=None):
        return types.SimpleNamespace(device_type=kind, time_range=types.SimpleNamespace(elapsed_us=lambda: us),
                                     cpu_time_total=us, cpu_parent=parent)

    host = event(DeviceType.CPU, 900.0)
    events = [host, event(DeviceType.CUDA, 250.0), event(DeviceType.CUDA, 150.0), event(DeviceType.CPU, 50.0, host)]
    assert timing.device_ms(events, cuda=True) == pytest.approx(0.4)  # the host op is not device time
    assert timing.device_ms(events, cuda=False) == pytest.approx(0.9)  # top-level ops only, children inside


def test_a_step_that_cannot_be_captured_is_unsupported(monkeypatch):
    class Graph:
        pass

    @contextlib.contextmanager
    def refusing(graph):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")
        yield

    fake = types.SimpleNamespace(synchronize=lambda d=None: None, CUDAGraph=Graph, graph=refusing,
                                 Stream=lambda d: types.SimpleNamespace(wait_stream=lambda s: None),
                                 current_stream=lambda d: types.SimpleNamespace(wait_stream=lambda s: None),
                                 stream=lambda s: contextlib.nullcontext())
    monkeypatch.setattr(timing.torch, "cuda", fake)
    with pytest.raises(UnsupportedError, match="cannot be captured in a CUDA graph: RuntimeError: operation not "
                                               "permitted when stream is capturing$"):
        timing.time_graph_ms(lambda: None, torch.device("cuda"), warmup=1, repeat=2)


def test_benchmark_script_on_cpu(tmp_path):
    out = tmp_path / "modes"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "timing_modes.py"), "--kernels", "sdpa,reference",
           "--seqlens", "256", "--heads", "2:1", "--head-dim", "32", "--dtype", "float32", "--device", "cpu",
           "--modes", "events,profiler", "--warmup", "1", "--repeat", "2", "--output", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert sorted((r["kernel"], r["timing"], r["status"]) for r in rows) == [
        ("reference", "events", "ok"), ("reference", "profiler", "ok"), ("sdpa", "events", "ok"),
        ("sdpa", "profiler", "ok")]
    table = (out / "table.md").read_text()
    assert "| kernel | seqlen | events (ms) | profiler (ms) | profiler / events |" in table
    assert "| sdpa | 256 |" in table
    refused = subprocess.run(cmd[:-2] + ["--modes", "events,cuda_graph", "--output", str(out)], capture_output=True,
                             text=True, timeout=600)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].startswith(
        "error: timing cuda_graph needs a CUDA device")
