"""A supervised process group for CP cases: one case at a time, every rank heard, any failure contained.

The supervisor (this process) starts `world_size` rank processes that form one torch.distributed
group and serve case after case. Each rank reports its phases, then `done` (rank 0 with the row)
or `failed` (its own exception type and message). A case fails when a rank reports a failure or
dies: the other ranks are given a moment to report too, the group is torn down, and the row names
the first failing rank, preferring a rank's own error over a peer's echo of it ("connection reset
by peer"). A case that does not finish by its deadline is `timeout` with every rank's phase. The
next case starts a fresh group, so a bad case costs only itself.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import wait
from typing import Any

from longca.problem import Problem
from longca.results import ResultRow, new_row
from longca_runner import procs
from longca_runner.measure import RunOptions, failure_reason, failure_status

from . import hung

log = logging.getLogger(__name__)

GRACE_S = 3.0  # after a first failure, how long the other ranks may take to report theirs
PRELOAD = (*procs.PRELOAD, "torch.fx.experimental.symbolic_shapes", "longca_runner.cp.check",
           "longca_runner.cp.measure", "longca_cp.hybrid")
ECHOES = ("connection reset", "connection closed", "broken pipe", "peer", "timed out", "timeout")


@dataclass
class RankFailure:
    rank: int
    reason: str
    status: str
    phase: str | None
    at: float
    echo: bool  # looks like a collective failing because a peer failed

    def key(self) -> tuple:
        return (self.echo, self.at)


def _rank_main(rank: int, world: int, store: str, backend: str, device: str, conn, parent_pid: int,
               environ: dict[str, str], threads: int, collective_timeout_s: float) -> None:
    procs.become_worker(parent_pid, environ)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch

    from longca_runner.cp.launch import init_group
    from longca_runner.cp.measure import measure_rank
    from longca_runner.measure import Phases

    hung.watch(hung.where_file(os.path.dirname(store), rank))  # where this rank is, for naming a hung one
    if not device.startswith("cuda"):
        torch.set_num_threads(threads)
    phases = Phases(lambda name: procs.tell(conn, ("phase", name)))
    phases("group start")
    local_device = init_group(backend, device, rank, world, f"file://{store}", collective_timeout_s)
    for _, fields, options, run_fields in procs.requests(conn):
        try:
            row = measure_rank(Problem(**{**fields, "device": local_device}), options, RunOptions(**run_fields),
                               phases=phases)
            procs.tell(conn, ("done", row.model_dump() if row is not None else None))
        except BaseException as exc:  # noqa: BLE001 - the supervisor builds the row from every rank (SIGINT is ignored here)
            procs.tell(conn, ("failed", {"reason": failure_reason(exc), "status": failure_status(exc),
                                         "phase": phases.current, "at": time.time()}))


class RankGroup:
    """`run(problem, run_options, timeout_s) -> row` for CP cases of one world size, backend and device."""

    def __init__(self, world: int, backend: str, device: str, collective_timeout_s: float) -> None:
        self.world, self.backend, self.device = world, backend, device
        self.collective_timeout_s = collective_timeout_s
        self._ranks: list[Any] = []
        self._conns: list[Any] = []
        self._tmp: str | None = None

    def _start(self) -> None:
        ctx = procs.context(PRELOAD)
        self._tmp = tempfile.mkdtemp(prefix="longca-cp-")
        threads = max(1, (os.cpu_count() or 1) // self.world)
        for rank in range(self.world):
            parent, child = ctx.Pipe()
            process = ctx.Process(target=_rank_main, daemon=True, args=(
                rank, self.world, os.path.join(self._tmp, "store"), self.backend, self.device, child, os.getpid(),
                dict(os.environ), threads, self.collective_timeout_s))
            procs.start(process)
            child.close()
            self._ranks.append(process)
            self._conns.append(parent)

    def close(self) -> None:
        """Tear the group down: every rank and what it started is killed."""
        for process in self._ranks:
            procs.kill_tree(process)
        for conn in self._conns:
            conn.close()
        self._ranks, self._conns = [], []
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def run(self, problem: Problem, run: RunOptions, timeout_s: float,
            options: dict | None = None) -> ResultRow:
        """One case; `options` are the resolved strategy options (default: the problem's own)."""
        options = dict(problem.strategy_options if options is None else options)
        message = ("case", asdict(problem), options, asdict(run))
        if not self._ranks or not all(p.is_alive() for p in self._ranks) \
                or not all(procs.send_case(conn, message) for conn in self._conns):
            self.close()  # none yet, or a rank ended between cases (SIGTERM, a kill): a fresh group
            self._start()
            for conn in self._conns:
                conn.send(message)
        started = time.monotonic()
        deadline = started + timeout_s
        phases: dict[int, str] = {r: "start" for r in range(self.world)}
        done: dict[int, dict | None] = {}
        failures: dict[int, RankFailure] = {}
        while len(done) + len(failures) < self.world:
            now = time.monotonic()
            if failures:
                deadline = min(deadline, min(f.at for f in failures.values()) - time.time() + now + GRACE_S)
            if now >= deadline:
                break
            waiting = {self._conns[r]: r for r in range(self.world) if r not in done and r not in failures}
            for ready in wait(list(waiting), timeout=min(deadline - now, 600.0)):
                rank = waiting[ready]
                conn = self._conns[rank]
                try:
                    kind, payload = conn.recv()
                except (EOFError, OSError):
                    self._ranks[rank].join(timeout=5)
                    how = procs.exit_description(self._ranks[rank].exitcode)
                    failures[rank] = RankFailure(rank, f"the rank's process died ({how})", "error", phases[rank],
                                                 time.time(), echo=False)
                    continue
                if kind == "phase":
                    phases[rank] = payload
                elif kind == "done":
                    done[rank] = payload
                else:
                    reason = payload["reason"]
                    failures[rank] = RankFailure(rank, reason, payload["status"], payload["phase"], payload["at"],
                                                 echo=any(word in reason.lower() for word in ECHOES))
        states = self._where([r for r in range(self.world) if r not in done and r not in failures])
        if failures:
            self.close()
            return self._failed_row(problem, failures, states, phases)
        if len(done) < self.world:
            self.close()
            where = ", ".join(f"rank {r}: {p}" for r, p in sorted(phases.items()) if r not in done)
            stuck = hung.hung(states)
            named = f"; {hung.describe(states, stuck)}" if stuck else "; every rank waited on a collective"
            log.warning("CP case %s timed out (%s%s)", problem.strategy, where, named)
            return new_row(problem, status="timeout", phase=phases[stuck[0] if stuck else min(states)],
                           failed_rank=stuck[0] if stuck else None,
                           reason=f"no answer after {timeout_s:.0f} s ({where}){named}; the group was torn down "
                                  f"and a fresh one runs the next case"[:1000])
        return ResultRow.model_validate(done[0])

    def _where(self, ranks: list[int]) -> dict[int, dict]:
        """Where each of `ranks` (those that neither finished nor failed) is now (`longca_runner.cp.hung`)."""
        return {r: hung.read(hung.where_file(self._tmp, r)) for r in ranks} if self._tmp else {}

    def _failed_row(self, problem: Problem, failures: dict[int, RankFailure], states: dict[int, dict],
                    phases: dict[int, str]) -> ResultRow:
        stuck = hung.hung(states)
        if stuck and all(f.echo for f in failures.values()):  # the others' collectives timed out waiting for it
            echoes = "; ".join(f"rank {f.rank}: {f.reason}" for f in sorted(failures.values(), key=lambda f: f.rank))
            reason = (f"rank {stuck[0]} hung (phase: {phases[stuck[0]]}): {hung.describe(states, stuck)}; "
                      f"the others' collectives timed out waiting for it (then {echoes})")
            log.warning("CP case %s: %s", problem.strategy, reason)
            return new_row(problem, status="timeout", phase=phases[stuck[0]], failed_rank=stuck[0],
                           reason=reason[:1000])
        first = min(failures.values(), key=RankFailure.key)
        others = "; ".join(f"rank {f.rank}: {f.reason}" for f in sorted(failures.values(), key=lambda f: f.rank)
                           if f is not first)
        reason = f"rank {first.rank}: {first.reason}" + (f" (then {others})" if others else "")
        log.warning("CP case %s failed: %s", problem.strategy, reason)
        return new_row(problem, status=first.status, phase=first.phase, failed_rank=first.rank, reason=reason[:1000])

    def __enter__(self) -> RankGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
