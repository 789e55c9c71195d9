"""The fault suite: throwaway plugins that raise, hang, crash, exit, or return wrong shapes or NaNs
(tests/fixtures/fault_plugins); each case's row and the command's exit code. docs/reliability.md
lists every class with its test here."""
from __future__ import annotations

import json
import os
import textwrap

import pytest
from typer.testing import CliRunner

from longca.plugins import get_registry
from longca_cli.main import app

from . import faults

SPEC = """
    [sweep]
    kernels = {kernels}
    masks = ["causal"]
    seqlens = [128]
    heads = ["2:2"]
    head_dims = [16]
    dtypes = ["float32"]
    directions = ["fwd"]
    device = "cpu"
    warmup = 0
    repeat = 1
    measure_peak = false
    isolate = {isolate}
    case_timeout = {timeout}
"""


@pytest.fixture
def fault_plugins(tmp_path, monkeypatch):
    for entry in faults.install(tmp_path / "site", {**faults.KERNELS, **faults.STRATEGIES}):
        monkeypatch.syspath_prepend(entry)  # workers and ranks get the parent's sys.path
    get_registry(reload=True)
    yield
    monkeypatch.undo()
    get_registry(reload=True)


def sweep(tmp_path, kernels, isolate=True, timeout=6, *args):
    spec = tmp_path / "spec.toml"
    spec.write_text(textwrap.dedent(SPEC.format(kernels=json.dumps(kernels), isolate=str(isolate).lower(),
                                                timeout=timeout)))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["sweep", str(spec), "--output", str(out), *args])
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()] \
        if (out / "results.jsonl").exists() else []
    return result, rows


EXPECTED = {  # kernel -> (status, phase, words in the reason)
    "fault-raise-run": ("error", "first call", "ValueError: injected fault on S=128"),
    "fault-hang-run": ("timeout", "first call", "no answer after 6 s (phase: first call)"),
    "fault-segv-run": ("error", "first call", "killed its worker process (signal SIGSEGV"),
    "fault-abort-run": ("error", "first call", "killed its worker process (signal SIGABRT"),
    "fault-exit-run": ("error", "first call", "SystemExit: 3"),
    "fault-osexit-run": ("error", "first call", "killed its worker process (exit code 3"),
    "fault-memory-run": ("oom", "first call", "MemoryError"),
    "fault-cudaoom-run": ("oom", "first call", "RuntimeError: CUDA out of memory. Tried to allocate 1 TiB"),
    "fault-shape-run": ("error", "first call", "wrong output layout: the output has shape (1, 127, 2, 16) float32 "
                                               "on cpu, expected shape (1, 128, 2, 16) float32 on cpu"),
    "fault-dtype-run": ("error", "first call", "has shape (1, 128, 2, 16) float64"),
    "fault-nan-run": ("error", "first call", "non-finite output: the output has 4096 NaN/Inf of 4096 values"),
    "fault-raise-supports": ("error", "supports", "supports() raised ValueError"),
    "fault-exit-supports": ("error", "supports", "supports() raised SystemExit: 3"),
    "fault-raise-prepare": ("error", "prepare", "ValueError: injected fault"),
    "fault-hang-prepare": ("timeout", "prepare", "(phase: prepare)"),
}


def test_every_kernel_fault_is_a_row_and_the_isolated_sweep_goes_on(tmp_path, fault_plugins):
    kernels = ["reference", *EXPECTED, "sdpa"]
    result, rows = sweep(tmp_path, kernels)
    assert result.exit_code == 0, result.output
    assert [r["kernel"] for r in rows] == kernels  # every case exactly once, in order
    by_kernel = {r["kernel"]: r for r in rows}
    assert by_kernel["reference"]["status"] == by_kernel["sdpa"]["status"] == "ok"
    for kernel, (status, phase, words) in EXPECTED.items():
        row = by_kernel[kernel]
        assert (row["status"], row["phase"]) == (status, phase), row
        assert words in row["reason"], row["reason"]


def test_without_isolation_a_crash_ends_the_sweep_with_one_line_naming_the_case(tmp_path, fault_plugins):
    result, rows = sweep(tmp_path, ["reference", "fault-exit-run", "fault-segv-run", "sdpa"], isolate=False)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in result.output
    assert "fault-segv-run causal S=128" in lines[0] and "signal SIGSEGV" in lines[0] and "isolate = true" in lines[0]
    assert [(r["kernel"], r["status"]) for r in rows] == [("reference", "ok"), ("fault-exit-run", "error")]


def test_run_raising_backward_and_timeout(tmp_path, fault_plugins):
    base = ["run", "--mask", "causal", "--seqlen", "128", "--heads", "2:2", "--head-dim", "16", "--dtype", "float32",
            "--device", "cpu", "--warmup", "0", "--repeat", "1", "-f", "json"]
    done = CliRunner().invoke(app, [*base, "--kernel", "fault-raise-backward", "--direction", "bwd"])
    row = json.loads(done.stdout)
    assert done.exit_code == 1 and (row["status"], row["phase"]) == ("error", "backward")
    assert "RuntimeError: injected fault in backward" in row["reason"]
    done = CliRunner().invoke(app, [*base, "--kernel", "fault-hang-run", "--timeout", "3"])
    row = json.loads(done.stdout)
    assert done.exit_code == 1 and row["status"] == "timeout" and "after 3 s" in row["reason"]


CP_SPEC = """
    [sweep]
    kernels = ["reference"]
    strategies = ["ring-p2p", "fault-cp-hang", "fault-cp-raise", "ulysses", "fault-cp-segv", "ring-allgather"]
    world_sizes = [2]
    masks = ["causal"]
    seqlens = ["256"]
    heads = ["2:2"]
    head_dims = [16]
    dtypes = ["float32"]
    directions = ["fwd"]
    device = "cpu"
    warmup = 0
    repeat = 1
    check = true
    measure_peak = false
    case_timeout = 8
"""


def test_cp_batch_with_hanging_raising_and_crashing_cases_keeps_every_good_row(tmp_path, fault_plugins):
    """One batch at world size 2 (gloo): the bad cases are timeout / error naming rank 1, the rest ok."""
    spec = tmp_path / "cp.toml"
    spec.write_text(textwrap.dedent(CP_SPEC))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["sweep", str(spec), "--output", str(out)])
    assert result.exit_code == 0, result.output
    rows = {r["strategy"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert len(rows) == 6
    for good in ("ring-p2p", "ulysses", "ring-allgather"):
        assert rows[good]["status"] == "ok" and rows[good]["checked"] == "full", rows[good]
    hang, raised, crashed = rows["fault-cp-hang"], rows["fault-cp-raise"], rows["fault-cp-segv"]
    assert hang["status"] == "timeout" and "rank 1: first call" in hang["reason"]
    assert (raised["status"], raised["failed_rank"], raised["phase"]) == ("error", 1, "first call")
    assert raised["reason"].startswith("rank 1: ValueError: injected fault on rank 1")
    assert crashed["status"] == "error" and crashed["failed_rank"] == 1
    assert "rank 1: the rank's process died (signal SIGSEGV)" in crashed["reason"]
