"""Single-GPU cases measured in a worker process that a supervisor (this process) bounds in time.

The worker runs `measure.run_problem` case after case (torch and JIT caches stay warm) and tells
the supervisor each phase it enters. The supervisor alone enforces the deadline: a case that does
not answer in time has its worker killed and gets a `timeout` row naming the phase; the next case
starts a fresh worker. A case that kills its worker (segfault, abort, `os._exit`) becomes an
`error` row when `isolate` is set; otherwise the sweep stops with `WorkerCrashed`, one line naming
the case, since without isolation a crash may come from an earlier case's damage.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from longca.errors import LongcaError
from longca.flops import SLOW_RATE, problem_flops
from longca.problem import Problem
from longca.results import ResultRow, new_row
from longca_runner import procs, warnlog
from longca_runner.measure import RunOptions
from longca_runner.measure.phases import PhaseClock
from longca_runner.timing import MAX_REPEAT

log = logging.getLogger(__name__)

BASE_TIMEOUT_S = 120.0  # start-up, JIT compilation, autotuning
RATE = SLOW_RATE


class WorkerCrashed(LongcaError):
    """A case killed the measuring process and cases are not isolated: the sweep stops here."""


def describe(problem: Problem) -> str:
    cp = f"{problem.strategy} x{problem.world_size} " if problem.strategy else ""
    return (f"{cp}{problem.kernel} {problem.mask} S={problem.seqlen} heads {problem.heads_q}:{problem.heads_kv} "
            f"d{problem.head_dim} {problem.dtype} {problem.direction} on {problem.device}")


def check_timeout(value: float | None) -> None:
    if value is not None and not (isinstance(value, (int, float)) and 0 < value < 1e9):
        raise LongcaError(f"timeout must be a positive number of seconds, got {value!r}")


def default_timeout(problem: Problem, options: RunOptions) -> float:
    """Seconds a case may take until its estimate is known (`longca_runner.estimate`: single-GPU cases send it
    once their mask is drawn; CP cases keep this): a fixed allowance plus its calls at a slow kernel's speed.

    The FLOPs are those of the full S x S problem (no mask: an upper bound); calls are warm-up,
    timed, the first and peak-memory calls, and the reference check counted as three more."""
    flops = problem_flops(problem, float(problem.seqlen) ** 2) / max(1, problem.world_size)
    calls = (options.warmup + (options.repeat or MAX_REPEAT) + 2 + (3 if options.check else 0)) * options.samples
    return BASE_TIMEOUT_S + calls * flops / RATE.get(problem.device_type, RATE["cpu"])


def _serve(conn, parent_pid: int, environ: dict[str, str]) -> None:
    """Worker: answer each ("case", problem fields, options) with ("row", row) or ("input", message)."""
    procs.become_worker(parent_pid, environ)
    warnlog.from_env()  # library warnings to the run's log file, where the parent asked for one
    for _, fields, options in procs.requests(conn):
        try:
            asked = RunOptions(**options)
            row = measure_case(Problem(**fields), asked, lambda name: procs.tell(conn, ("phase", name)),
                               on_estimate=lambda seconds: procs.tell(conn, ("deadline", seconds)))
            if asked.release_memory:
                release_cached_memory()
            procs.tell(conn, ("row", row.model_dump()))
        except LongcaError as exc:
            procs.tell(conn, ("input", str(exc)))


def release_cached_memory() -> None:
    """torch's cached GPU memory back to the driver (where torch is loaded and has a GPU)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def measure_case(problem: Problem, options: RunOptions, on_phase: Callable[[str], None] = lambda name: None,
                 registry: Any = None, on_estimate: Callable[[float], None] | None = None) -> ResultRow:
    """One case in this process as a worker measures it: the row, the GPU's state around its timed
    calls (`longca_runner.gpustate`) and, where it ran, the kernel's caveat."""
    from longca_runner import gpustate, integrity
    from longca_runner.measure import Phases, run_problem

    recorder = gpustate.Recorder(problem.device)

    def heard(name: str) -> None:
        recorder.on_phase(name)
        on_phase(name)

    row = recorder.finish(run_problem(problem, options, registry, Phases(heard, on_estimate)))
    if row.backend:  # it ran: what its number must be read with
        row.caveat = integrity.caveat_of(problem, registry)
    return row


class Supervisor:
    """`run(problem, options, timeout_s) -> row`, each case in a worker process this object supervises."""

    def __init__(self, isolate: bool = True, clock: PhaseClock | None = None) -> None:
        self.isolate = isolate
        self.clock = clock  # hears every phase of every case (where a run's minutes go)
        self._process: Any = None
        self._conn: Any = None

    def _start(self) -> None:
        ctx = procs.context()
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child, os.getpid(), dict(os.environ)), daemon=True)
        procs.start(self._process)
        child.close()

    def _stop(self) -> None:
        if self._process is not None:
            procs.kill_tree(self._process)
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None

    def run(self, problem: Problem, options: RunOptions, timeout_s: float | None = None) -> ResultRow:
        started = time.monotonic()
        try:
            return self._run(problem, options, timeout_s)
        finally:
            if self.clock:
                self.clock.enter(None)
                self.clock.case(problem.kernel, time.monotonic() - started)

    def _run(self, problem: Problem, options: RunOptions, timeout_s: float | None) -> ResultRow:
        check_timeout(timeout_s)
        deadline_s = timeout_s or default_timeout(problem, options)
        case = ("case", asdict(problem), asdict(options))
        if self._process is None or not self._process.is_alive() or not procs.send_case(self._conn, case):
            self._stop()  # none yet, or ended between cases (SIGTERM, a kill): a fresh worker
            self._start()
            self._conn.send(case)
        started = time.monotonic()
        phase = "start"
        while True:
            left = deadline_s - (time.monotonic() - started)
            try:
                ready = left > 0 and self._conn.poll(min(left, 600.0))
                if not ready and left > 600.0:
                    continue
                message = self._conn.recv() if ready else None
            except (EOFError, OSError):
                return self._crashed(problem, phase)
            if message is None:
                self._stop()
                log.warning("case %s timed out in phase %s", describe(problem), phase)
                return new_row(problem, status="timeout", phase=phase,
                               reason=f"no answer after {deadline_s:.0f} s (phase: {phase}); the worker was "
                                      f"stopped and a fresh one runs the next case")
            kind, payload = message
            if kind == "phase":
                phase = payload
                if self.clock:
                    self.clock.enter(phase, problem.kernel)
            elif kind == "deadline":  # the case's estimate (longca_runner.estimate) sets the default deadline
                deadline_s = timeout_s or payload
            elif kind == "input":
                raise LongcaError(payload)
            else:
                return ResultRow.model_validate(payload)

    def _crashed(self, problem: Problem, phase: str) -> ResultRow:
        self._process.join(timeout=10)
        how = procs.exit_description(self._process.exitcode)
        self._stop()
        if not self.isolate:
            raise WorkerCrashed(f"case {describe(problem)} killed the measuring process ({how}, phase: {phase}); "
                                f"rows written so far are kept. Set isolate = true in the spec to record "
                                f"such a crash as an error row and go on")
        log.warning("case %s killed its worker (%s)", describe(problem), how)
        return new_row(problem, status="error", phase=phase,
                       reason=f"the case killed its worker process ({how}, phase: {phase}); "
                              f"a fresh worker runs the next case")

    def close(self) -> None:
        if self._process is not None and self._process.is_alive():
            try:
                self._conn.send(None)
                self._process.join(timeout=10)
            except (OSError, BrokenPipeError):
                pass
        self._stop()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
