"""Compile a sweep's cases before the sweep, in parallel processes: compilation is serial per
process, so a sweep of compiled kernels (torch.compile, Triton: `KernelSpec.compiles`) over many
masks and lengths spends most of its wall time compiling, one case after another.

Each case runs once (no timing, one mask sample) in one of several supervised worker processes
(`longca_runner.supervisor`: each case bounded, a stuck one killed and named), which fills inductor's and
Triton's caches on disk. The cases of one group (the same problem but for the kernel and the
direction: `group_key`) are warmed one after the other by one worker; where the caller keeps the workers
(`WarmPool`, as `longca bench` does), the sweep measures each group in the worker that compiled it,
one case at a time as before: a fresh process would load every compiled graph from the disk cache
again (on the H200, about 2 s a flex case and 12 s for flash-attn-4's first), and the group's
float32 reference is made once. It changes no measurement: every number comes from the sweep's own
calls. `benchmarks/prewarm.py` runs it over any spec; `longca bench` runs it first on CUDA for the
kernels that declare `compiles`.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from longca.plugins import Registry, get_registry
from longca.problem import Problem
from longca.results import ResultsWriter, case_id
from longca_runner.measure.phases import PhaseClock
from longca_runner.outdir import RESULTS_FILE
from longca_runner.sweep import SweepSpec, problems

WORKERS = 14  # at most this many processes (and no more than the machine's cores less two)
MAX_MINUTES = 5.0  # then stop: the sweep compiles what is left
CASE_SECONDS = 150.0  # one case's bound; a case that takes longer is left to the sweep, named
# inductor's compile threads per worker while warming (restored afterwards): one, so that a worker
# compiles in its own process and starts no pool of compile processes of its own (14 workers did
# the parallel work already)
COMPILE_THREADS = "1"


def group_key(problem: Problem) -> str:
    """What the cases of one group share: the whole problem but its kernel and direction. A sweep runs
    kernels innermost, directions next, so a group's cases follow each other (each direction's share
    one float32 reference); a backward's compile reuses what the forward's left in that process
    (flash-attn-4's forward kernel, the BlockMask's graph)."""
    return json.dumps({k: v for k, v in asdict(problem).items() if k not in ("kernel", "direction")},
                      sort_keys=True, default=str)


class WarmPool:
    """The prewarm's worker processes, kept for the sweep: `for_case` gives the supervisor whose
    worker warmed that case's group (None where none did), `adopt` gives them the sweep's clock and
    crash policy, `close` ends them. The supervisor restarts a worker that a case killed or that
    timed out, as it does for any sweep."""

    def __init__(self) -> None:
        self.supervisors: list[Any] = []
        self.by_group: dict[str, Any] = {}
        self._lock = threading.Lock()

    def keep(self, supervisor: Any, problems: Iterable[Problem]) -> None:
        with self._lock:
            if supervisor not in self.supervisors:
                self.supervisors.append(supervisor)
            for problem in problems:
                self.by_group[group_key(problem)] = supervisor

    def for_case(self, problem: Problem) -> Any:
        return self.by_group.get(group_key(problem))

    def adopt(self, clock: PhaseClock | None, isolate: bool) -> None:
        for supervisor in self.supervisors:
            supervisor.clock, supervisor.isolate = clock, isolate

    def close(self) -> None:
        for supervisor in self.supervisors:
            supervisor.close()
        self.supervisors.clear()
        self.by_group.clear()

    def __enter__(self) -> WarmPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _line(problem: Problem, outcome: str, seconds: float) -> str:
    return f"{problem.kernel} {problem.mask} {problem.seqlen} {problem.direction}: {outcome} ({seconds:.1f} s)"


def select(spec: SweepSpec, registry: Registry | None = None, kernels: Iterable[str] | None = None,
           done: frozenset[str] | set[str] = frozenset(), compiling_only: bool = False,
           cases: list[Problem] | None = None) -> list[Problem]:
    """The single-GPU cases of the spec to warm (`cases`: the grid already expanded): of `kernels`
    (None: all), not in `done` (case ids), and with `compiling_only` only those of kernels whose
    spec declares `compiles`."""
    registry = registry or get_registry()
    wanted = set(kernels) if kernels is not None else None
    grid = problems(spec, registry) if cases is None else cases
    return [p for p in grid if not p.strategy and (wanted is None or p.kernel in wanted)
            and case_id(p) not in done and (not compiling_only or registry.kernel(p.kernel).compiles)]


def done_in_all(folders: Iterable[Path]) -> set[str]:
    """Case ids that every folder has a row for (a case any repeat still needs is warmed)."""
    sets = [ResultsWriter(Path(f) / RESULTS_FILE).done_ids() for f in folders]
    return set.intersection(*sets) if sets else set()


@contextlib.contextmanager
def _compile_threads() -> Iterator[None]:
    before = os.environ.get("TORCHINDUCTOR_COMPILE_THREADS")
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", COMPILE_THREADS)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TORCHINDUCTOR_COMPILE_THREADS", None)


def groups_of(todo: list[Problem]) -> list[list[Problem]]:
    """The cases grouped by `group_key`, in the order the groups first appear."""
    groups: dict[str, list[Problem]] = {}
    for problem in todo:
        groups.setdefault(group_key(problem), []).append(problem)
    return list(groups.values())


def longest_first(groups: list[list[Problem]]) -> list[list[Problem]]:
    """The groups, longest sequences first (grid order among equals): a group's compile and first calls
    grow with its length, and 36 groups over 14 workers end sooner when the long ones do not come last."""
    return sorted(groups, key=lambda group: -group[0].seqlen)


def warm(todo: list[Problem], workers: int = WORKERS, max_minutes: float = MAX_MINUTES,
         say: Callable[[str], None] = print, detail: Callable[[str], None] | None = None,
         case_seconds: float = CASE_SECONDS, pool: WarmPool | None = None) -> bool:
    """Run every case once in `workers` supervised worker processes (`longca_runner.supervisor`), a
    group's cases (`groups_of`) one after the other in one worker, the longest sequences' groups first,
    each case bounded by `case_seconds` and all of them by `max_minutes`; False when some case did not
    finish (each is named: timed out, or not started in time). `say` gets the summary, `detail`
    (default: `say`) a line per case. `pool`: where the workers are kept, each with the groups it
    warmed (else they end here)."""
    if not todo:
        say("prewarm: 0 cases")
        return True
    from longca_runner.measure import RunOptions
    from longca_runner.supervisor import Supervisor

    tell = detail or say
    # one call: compilation only, nothing measured; the cached GPU memory given back after each case,
    # so that workers kept for the sweep hold none while another measures
    warm_options = RunOptions(warmup=0, repeat=1, samples=1, release_memory=True)
    start = time.monotonic()
    deadline = start + 60 * max_minutes
    queue = longest_first(groups_of(todo))
    lock = threading.Lock()
    unfinished: list[str] = []

    def run_one(supervisor: Supervisor, problem: Problem) -> None:
        left = deadline - time.monotonic()
        if left < 1:
            with lock:
                unfinished.append(_line(problem, "not started, prewarm out of time", 0.0))
            return
        t0 = time.monotonic()
        try:
            row = supervisor.run(problem, warm_options, min(case_seconds, left))
            outcome = row.status if row.status != "timeout" else f"timeout in phase {row.phase}"
        except Exception as exc:  # noqa: BLE001 - the sweep measures the case again and reports it
            outcome = f"{type(exc).__name__}: {str(exc)[:160]}"
        line = _line(problem, outcome, time.monotonic() - t0)
        with lock:
            tell(line)
            if outcome.startswith("timeout"):
                unfinished.append(line)

    def serve() -> None:
        supervisor = Supervisor(isolate=True)
        try:
            while True:
                with lock:
                    group = queue.pop(0) if queue else None
                if group is None:
                    return
                for problem in group:
                    run_one(supervisor, problem)
                if pool is not None:
                    pool.keep(supervisor, group)
        finally:
            if pool is None:
                supervisor.close()

    with _compile_threads():
        threads = [threading.Thread(target=serve, daemon=True) for _ in range(max(1, min(workers, len(queue))))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for line in unfinished:
        tell(f"not finished: {line}")
    names = "; ".join(u.split(":")[0] for u in unfinished[:6]) + (" ..." if len(unfinished) > 6 else "")
    say(f"prewarm: {len(todo) - len(unfinished)} of {len(todo)} cases in {time.monotonic() - start:.0f} s"
        + (f"; not finished (the sweep compiles them): {names}" if unfinished else ""))
    return not unfinished


def before_bench(spec: SweepSpec, folders: list[Path], registry: Registry | None = None, enabled: bool = True,
                 resume: bool = False, say: Callable[[str], None] = print, log: Path | None = None,
                 cases: list[Problem] | None = None, clock: PhaseClock | None = None,
                 pool: WarmPool | None = None) -> int | None:
    """`longca bench`'s warm-up: on CUDA, the cases of compiling kernels that the run (each repeat
    folder) still needs; returns how many were warmed, None when skipped (CPU, `--no-prewarm`).
    A line per case goes to `log` (the run's longca.log) where given, else to `say`; its seconds count
    as `clock`'s compilation. `pool`: where the workers are kept for the sweep (`WarmPool`)."""
    if not enabled or not spec.device.startswith("cuda"):
        return None
    registry = registry or get_registry()
    todo = select(spec, registry, done=done_in_all(folders) if resume else set(), compiling_only=True, cases=cases)
    if todo:
        workers = min(WORKERS, max(1, (os.cpu_count() or 1) - 2))
        say(f"prewarm: compiling {len(todo)} cases of {', '.join(dict.fromkeys(p.kernel for p in todo))} in "
            f"{min(workers, len(groups_of(todo)))} processes first (a cache warm-up; --no-prewarm skips it)")
        started = time.monotonic()
        warm(todo, workers, say=say, detail=_appender(log) if log else None, pool=pool)
        if clock:
            clock.add("compile", time.monotonic() - started)
    return len(todo)


def _appender(path: Path) -> Callable[[str], None]:
    def append(line: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(f"prewarm: {line}\n")

    return append
