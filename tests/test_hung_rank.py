"""A hung CP rank is named: `failed_rank` is the rank that hung, whether the case's deadline ends it or
the other ranks' collective timeout does first (`longca_runner.cp.hung`: where each rank is, not who spoke
first). Rank 1 of fault-cp-hang sleeps in the strategy's attention; rank 0 waits for it in a transfer."""
from __future__ import annotations

import json
import textwrap
import time

import pytest
from typer.testing import CliRunner

from longca.plugins import get_registry
from longca_cli.main import app

from . import faults

pytestmark = pytest.mark.slow  # spawns rank groups and waits out a timeout

SPEC = """
    [sweep]
    kernels = ["reference"]
    strategies = ["fault-cp-hang"]
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
    measure_peak = false
    timeout = {collective}
    case_timeout = {case}
"""


@pytest.fixture
def fault_plugins(tmp_path, monkeypatch):
    for entry in faults.install(tmp_path / "site", faults.STRATEGIES):
        monkeypatch.syspath_prepend(entry)
    get_registry(reload=True)
    yield
    monkeypatch.undo()
    get_registry(reload=True)


def _row(tmp_path, collective, case):
    spec = tmp_path / "spec.toml"
    spec.write_text(textwrap.dedent(SPEC.format(collective=collective, case=case)))
    started = time.monotonic()
    result = CliRunner().invoke(app, ["sweep", str(spec), "--output", str(tmp_path / "out")])
    seconds = time.monotonic() - started
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    (line,) = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    return json.loads(line), seconds


@pytest.mark.parametrize("collective, case", [(600, 6), (4, 120)], ids=["case deadline", "collective timeout"])
def test_the_rank_that_hung_is_named(tmp_path, fault_plugins, collective, case):
    row, seconds = _row(tmp_path, collective, case)
    assert seconds < 90, seconds
    assert (row["status"], row["failed_rank"], row["phase"]) == ("timeout", 1, "first call"), row
    assert "rank 1 hung in strategies.py" in row["reason"] and "in attention" in row["reason"]
    assert "rank 0 waited in" in row["reason"] or "collectives timed out" in row["reason"]
