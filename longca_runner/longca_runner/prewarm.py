"""Compile a sweep's cases before the sweep, in parallel processes: compilation is serial per
process, so a sweep of compiled kernels (torch.compile, Triton: `KernelSpec.compiles`) over many
masks and lengths spends most of its wall time compiling, one case after another.

Each case runs once (no timing, one mask sample) in one of several supervised worker processes
(`longca_runner.supervisor`: each case bounded, a stuck one killed and named), which fills inductor's and
Triton's caches on disk; the sweep that follows loads the compiled kernels. It
changes no measurement: every number comes from the sweep itself. `benchmarks/prewarm.py` runs
it over any spec; `longca bench` runs it first on CUDA for the kernels that declare `compiles`.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from longca.plugins import Registry, get_registry
from longca.problem import Problem
from longca.results import ResultsWriter, case_id
from longca_runner.measure.phases import PhaseClock
from longca_runner.outdir import RESULTS_FILE
from longca_runner.sweep import SweepSpec, problems

WORKERS = 12  # at most this many processes (and no more than the machine's cores)
MAX_MINUTES = 5.0  # then stop: the sweep compiles what is left
CASE_SECONDS = 150.0  # one case's bound; a case that takes longer is left to the sweep, named
COMPILE_THREADS = "2"  # inductor's compile threads per worker while warming (restored afterwards)


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


def warm(todo: list[Problem], workers: int = WORKERS, max_minutes: float = MAX_MINUTES,
         say: Callable[[str], None] = print, detail: Callable[[str], None] | None = None,
         case_seconds: float = CASE_SECONDS) -> bool:
    """Run every case once in `workers` supervised worker processes (`longca_runner.supervisor`), each case
    bounded by `case_seconds` and all of them by `max_minutes`; False when some case did not finish
    (each is named: timed out, or not started in time). `say` gets the summary, `detail` (default:
    `say`) a line per case."""
    if not todo:
        say("prewarm: 0 cases")
        return True
    from longca_runner.measure import RunOptions
    from longca_runner.supervisor import Supervisor

    tell = detail or say
    warm_options = RunOptions(warmup=0, repeat=1, samples=1)  # one call: compilation only, nothing measured
    start = time.monotonic()
    deadline = start + 60 * max_minutes
    queue: list[Problem] = list(todo)
    lock = threading.Lock()
    unfinished: list[str] = []

    def serve() -> None:
        with Supervisor(isolate=True) as supervisor:
            while True:
                with lock:
                    problem = queue.pop(0) if queue else None
                if problem is None:
                    return
                left = deadline - time.monotonic()
                if left < 1:
                    with lock:
                        unfinished.append(_line(problem, "not started, prewarm out of time", 0.0))
                    continue
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

    with _compile_threads():
        threads = [threading.Thread(target=serve, daemon=True) for _ in range(max(1, min(workers, len(todo))))]
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
                 cases: list[Problem] | None = None, clock: PhaseClock | None = None) -> int | None:
    """`longca bench`'s warm-up: on CUDA, the cases of compiling kernels that the run (each repeat
    folder) still needs; returns how many were warmed, None when skipped (CPU, `--no-prewarm`).
    A line per case goes to `log` (the run's longca.log) where given, else to `say`; its seconds count
    as `clock`'s compilation."""
    if not enabled or not spec.device.startswith("cuda"):
        return None
    registry = registry or get_registry()
    todo = select(spec, registry, done=done_in_all(folders) if resume else set(), compiling_only=True, cases=cases)
    if todo:
        workers = min(WORKERS, os.cpu_count() or 1)
        say(f"prewarm: compiling {len(todo)} cases of {', '.join(dict.fromkeys(p.kernel for p in todo))} in "
            f"{min(workers, len(todo))} processes first (a cache warm-up; --no-prewarm skips it)")
        started = time.monotonic()
        warm(todo, workers, say=say, detail=_appender(log) if log else None)
        if clock:
            clock.add("compile", time.monotonic() - started)
    return len(todo)


def _appender(path: Path) -> Callable[[str], None]:
    def append(line: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(f"prewarm: {line}\n")

    return append
