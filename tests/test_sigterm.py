"""SIGTERM to a worker or rank ends it without a BrokenPipeError anywhere: a supervisor whose worker
(or rank group whose rank) was ended between cases starts a fresh one for the next case, and a worker
whose supervisor is gone ends quietly at its next message (`procs.tell`)."""
from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from longca.problem import Problem
from longca_runner import procs
from longca_runner.measure import RunOptions
from longca_runner.supervisor import Supervisor

CASE = dict(kernel="reference", mask="causal", seqlen=128, heads_q=2, heads_kv=2, head_dim=16, dtype="float32",
            direction="fwd", device="cpu")
RUN = RunOptions(warmup=0, repeat=1)


def _ended(process, seconds: float = 20) -> bool:
    process.join(seconds)
    return not process.is_alive()


def test_a_worker_ended_by_sigterm_between_cases_is_replaced():
    with Supervisor() as supervisor:
        assert supervisor.run(Problem(**CASE), RUN, 60).status == "ok"
        worker = supervisor._process
        os.kill(worker.pid, signal.SIGTERM)
        assert _ended(worker)
        assert supervisor.run(Problem(**CASE), RUN, 60).status == "ok"
        assert supervisor._process.pid != worker.pid


@pytest.mark.slow  # two rank groups
def test_a_rank_ended_by_sigterm_between_cases_gives_a_fresh_group():
    from longca_runner.cp.group import RankGroup
    from longca_runner.cp.measure import resolve

    problem = Problem(**CASE).with_(strategy="ring-p2p", world_size=2)
    options = resolve(problem, {})
    with RankGroup(2, "gloo", "cpu", 60) as group:
        assert group.run(problem, RUN, 60, options).status == "ok"
        rank1 = group._ranks[1]
        os.kill(rank1.pid, signal.SIGTERM)
        assert _ended(rank1)
        time.sleep(0.5)
        assert group.run(problem, RUN, 60, options).status == "ok"  # before: BrokenPipeError from the send


def _orphan(conn) -> None:
    procs.tell(conn, ("phase", "first call"))
    os._exit(3)  # not reached: the send fails and tell ends the process with 0


def test_a_worker_whose_supervisor_is_gone_ends_quietly(capfd):
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    ours.close()  # the supervisor is gone
    child = ctx.Process(target=_orphan, args=(theirs,))
    child.start()
    theirs.close()
    assert _ended(child, 60) and child.exitcode == 0
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err
