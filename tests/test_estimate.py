"""A case that cannot finish is refused up front (`longca_runner.estimate`: its FLOPs over this machine's
measured matmul rate), and the default per-case deadline follows from the same estimate."""
from __future__ import annotations

import json
import re
import time

import pytest
from typer.testing import CliRunner

from longca.problem import Problem
from longca_cli.main import app
from longca_runner import estimate, procs
from longca_runner.measure import Phases, RunOptions, run_problem
from longca_runner.supervisor import Supervisor

SMALL = dict(kernel="reference", mask="causal", seqlen=256, heads_q=2, heads_kv=2, head_dim=16, dtype="float32",
             direction="fwd", device="cpu")


@pytest.mark.parametrize("kernel", ["sdpa", "reference"])
def test_a_case_that_cannot_finish_is_refused_before_inputs_are_made(kernel):
    started = time.monotonic()
    result = CliRunner().invoke(app, ["run", "--kernel", kernel, "--seqlen", "10M", "--heads", "1:1",
                                      "--head-dim", "16", "--dtype", "float32", "--device", "cpu", "-f", "json"])
    seconds = time.monotonic() - started
    row = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.exit_code == 0 and seconds < 60, (seconds, result.output)
    assert row["status"] == "unsupported" and row["ms_median"] is None
    if kernel == "sdpa":  # the reference refuses itself first (flops.reference_refusal)
        assert "cannot finish here" in row["reason"] and "measured matmul rate" in row["reason"]
        # hours or days, with this machine's matmul rate (41 h at 142 GFLOP/s on an idle 2-core machine): past the 1 h
        assert re.search(r"need at least [0-9.]+ (h|days) ", row["reason"]), row["reason"]


def test_the_refusal_and_deadline_rules():
    problem = Problem(**SMALL)
    options = RunOptions(warmup=3, repeat=5, samples=1)
    found = estimate.estimate(problem, area=1e6, options=options, samples=1, rate=1e9)
    flops = 4 * 1e6 * 2 * 16
    assert (found.calls, found.flops) == (10, flops)
    assert found.fastest_s == pytest.approx(10 * flops / (estimate.FASTEST * 1e9))
    assert found.deadline_s == pytest.approx(estimate.BASE_S + estimate.SLACK * found.fastest_s)
    assert estimate.refusal(found) is None
    huge = estimate.estimate(problem, area=1e16, options=options, samples=1, rate=1e9)
    assert huge.fastest_s > estimate.MAX_CASE_S and "cannot finish here" in estimate.refusal(huge)
    checked = estimate.estimate(problem, area=1e6, options=RunOptions(warmup=3, repeat=5, check=True), samples=1,
                                rate=1e9)
    assert checked.deadline_s > found.deadline_s  # the check's calls are allowed for


def test_the_measured_rate_is_a_real_matmul_rate():
    rate = estimate.matmul_rate("cpu", "float32")
    assert 1e7 < rate < 1e14  # FLOP/s of a CPU
    assert estimate.matmul_rate("cpu", "float32") == rate  # measured once per process


def test_run_problem_tells_its_deadline_from_the_estimate():
    heard: list[float] = []
    problem = Problem(**SMALL)
    options = RunOptions(warmup=1, repeat=2)
    row = run_problem(problem, options, phases=Phases(on_estimate=heard.append))
    assert row.status == "ok"
    expected = estimate.estimate(problem, row.area, options, 1).deadline_s
    assert heard == [pytest.approx(expected)]


def _sleeper() -> None:
    time.sleep(60)


def test_the_supervisor_takes_the_deadline_the_worker_estimated():
    """The worker's ("deadline", s) message replaces the initial allowance (here 1 s instead of minutes)."""
    supervisor = Supervisor()
    ctx = procs.context()
    ours, theirs = ctx.Pipe()
    supervisor._conn, supervisor._process = ours, ctx.Process(target=_sleeper, daemon=True)
    procs.start(supervisor._process)
    theirs.send(("phase", "estimate"))
    theirs.send(("deadline", 1.0))
    started = time.monotonic()
    row = supervisor.run(Problem(**SMALL), RunOptions())
    assert time.monotonic() - started < 20
    assert row.status == "timeout" and row.reason.startswith("no answer after 1 s (phase: estimate)")
    supervisor.close()
