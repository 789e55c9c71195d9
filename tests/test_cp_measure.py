"""Measuring a CP case in this process (a gloo group of one rank)."""
from __future__ import annotations

import pytest
import torch.distributed as dist

from longca.plugins import get_registry
from longca.problem import Problem
from longca_cp import schedule
from longca_runner.cp.measure import measure, resolve
from longca_runner.measure import RunOptions


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("strategy", ["ring-p2p", "ring-allgather"])
def test_a_measured_case_builds_its_schedule_once(one_rank, monkeypatch, strategy):
    """`prepare` builds the plan from the strategy's schedule; the row's balance reuses that one."""
    if strategy not in get_registry().names("strategies"):
        pytest.skip(f"{strategy} is not installed (make install)")
    built: list = []
    note = schedule._note
    monkeypatch.setattr(schedule, "_note", lambda s: (built.append(s), note(s)))
    problem = Problem(kernel="reference", strategy=strategy, mask="causal", seqlen=64, heads_q=2, heads_kv=2,
                      head_dim=16, dtype="float32", direction="bwd", device="cpu")
    row = measure(problem, resolve(problem, {}), RunOptions(warmup=0, repeat=1, samples=1, check=True))
    assert row is not None and row.status == "ok", row and row.reason
    assert row.balance is not None and row.balance["area_mean"] > 0
    assert len(built) == 1
