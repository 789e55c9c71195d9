"""Plugin hooks called in the longca process itself are bounded in time (`longca.bounded`): a kernel
whose available() never returns, a mask builder that hangs, a CP strategy whose supports() hangs or
whose supports()/resolve_options() raises. Each command answers within its limit, naming the plugin."""
from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from longca.plugins import get_registry
from longca_cli.main import app

from . import faults


@pytest.fixture
def hanging_plugins(tmp_path, monkeypatch):
    for entry in faults.install(tmp_path / "site", {**faults.HANGS, **faults.STRATEGIES}):
        monkeypatch.syspath_prepend(entry)
    monkeypatch.setenv("LONGCA_HOOK_TIMEOUT", "2")
    get_registry(reload=True)
    yield
    monkeypatch.undo()
    get_registry(reload=True)


def _timed(args):
    started = time.monotonic()
    result = CliRunner().invoke(app, args)
    return result, time.monotonic() - started


def test_listings_name_a_kernel_whose_available_hangs(hanging_plugins):
    for command in ("list-kernels", "doctor"):
        result, seconds = _timed([command, "-f", "json"])
        assert result.exit_code == 0 and seconds < 30, (command, seconds, result.output)
        assert "available() of kernel fault-hang-available (plugin faults-hangs (longca-faults)) did not return " \
               "in 2 s" in result.output
        assert '"reference"' in result.output


def test_show_mask_of_a_hanging_builder_is_one_line(hanging_plugins, tmp_path):
    result, seconds = _timed(["show-mask", "fault-hang-mask", "--output", str(tmp_path / "m.png")])
    assert result.exit_code == 2 and seconds < 30 and "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "mask 'fault-hang-mask' (plugin faults-hangs (longca-faults))" in lines[0]


def test_run_with_a_hanging_mask_builder_is_a_timeout_row_within_its_limit(hanging_plugins):
    result, seconds = _timed(["run", "--kernel", "reference", "--mask", "fault-hang-mask", "--seqlen", "128",
                              "--heads", "1:1", "--head-dim", "16", "--dtype", "float32", "--device", "cpu",
                              "--timeout", "3", "-f", "json"])
    assert result.exit_code == 1 and seconds < 30, result.output
    row = json.loads(result.stdout)
    assert (row["status"], row["phase"]) == ("timeout", "mask")
    assert "plugin faults-hangs" in row["reason"] and "did not return in 3 s" in row["reason"]


@pytest.mark.slow  # spawns a rank group
def test_dist_run_with_hanging_or_raising_checks_gives_their_rows_and_runs_the_rest(hanging_plugins, tmp_path):
    result, seconds = _timed([
        "dist-run", "--strategy", "fault-cp-hang-supports,fault-cp-raise-supports,fault-cp-raise-resolve,ring-p2p",
        "--nproc", "2", "--seqlen", "128", "--heads", "2:2", "--head-dim", "16", "--dtype", "float32",
        "--device", "cpu", "--warmup", "0", "--repeat", "1", "--timeout", "5", "--output", str(tmp_path / "out"),
        "-f", "json"])
    assert result.exit_code == 1 and "Traceback" not in result.output and seconds < 120, result.output
    rows = {r["strategy"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    assert rows["ring-p2p"]["status"] == "ok"
    hung = rows["fault-cp-hang-supports"]
    assert (hung["status"], hung["phase"]) == ("timeout", "supports") and "did not return in 5 s" in hung["reason"]
    assert "longca-faults" in hung["reason"]
    assert rows["fault-cp-raise-supports"]["status"] == "error"
    assert "ValueError: injected fault in supports" in rows["fault-cp-raise-supports"]["reason"]
    assert "RuntimeError: injected fault in resolve_options" in rows["fault-cp-raise-resolve"]["reason"]


def test_dist_run_timeout_bounds_a_hanging_resolve_options_or_supports(hanging_plugins, monkeypatch, tmp_path):
    """--timeout, not only the (here 10-minute) hook limit, bounds the checks made before ranks start."""
    monkeypatch.setenv("LONGCA_HOOK_TIMEOUT", "600")
    result, seconds = _timed([
        "dist-run", "--strategy", "fault-cp-hang-resolve,fault-cp-hang-supports", "--nproc", "2", "--seqlen", "128",
        "--heads", "2:2", "--head-dim", "16", "--dtype", "float32", "--device", "cpu", "--timeout", "3",
        "--output", str(tmp_path / "out"), "-f", "json"])
    assert result.exit_code == 1 and "Traceback" not in result.output and seconds < 60, (seconds, result.output)
    rows = {r["strategy"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    for name in ("fault-cp-hang-resolve", "fault-cp-hang-supports"):
        assert (rows[name]["status"], rows[name]["phase"]) == ("timeout", "supports")
        assert "did not return in 3 s" in rows[name]["reason"] and "longca-faults" in rows[name]["reason"]
