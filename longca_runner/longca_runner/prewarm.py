"""Compile a sweep's cases before the sweep, in parallel processes: compilation is serial per
process, so a sweep of compiled kernels (torch.compile, Triton: `KernelSpec.compiles`) over many
masks and lengths spends most of its wall time compiling, one case after another.

Each case runs once (no timing, one mask sample) in a pool of worker processes, which fills
inductor's and Triton's caches on disk; the sweep that follows loads the compiled kernels. It
changes no measurement: every number comes from the sweep itself. `benchmarks/prewarm.py` runs
it over any spec; `longca bench` runs it first on CUDA for the kernels that declare `compiles`.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from longca.plugins import Registry, get_registry
from longca.problem import Problem
from longca.results import ResultsWriter, case_id
from longca_runner.outdir import RESULTS_FILE
from longca_runner.sweep import SweepSpec, problems

WORKERS = 8  # at most this many processes (and no more than the machine's cores)
MAX_MINUTES = 5.0  # then stop waiting: the sweep compiles what is left
COMPILE_THREADS = "2"  # inductor's compile threads per worker while warming (restored afterwards)


def _worker(items: list[Problem]) -> list[str]:
    """In a worker process: run each case once; one line per case (status, seconds)."""
    from longca_runner import warnlog
    from longca_runner.measure import RunOptions, run_problem

    warnlog.from_env()  # library warnings go where the parent's go (longca bench: its log)
    lines = []
    for problem in items:
        t0 = time.time()
        status: str
        try:
            status = run_problem(problem, RunOptions(warmup=0, repeat=1, samples=1)).status
        except Exception as exc:  # noqa: BLE001 - the sweep measures the case again and reports it
            status = f"{type(exc).__name__}: {str(exc)[:160]}"
        lines.append(f"{problem.kernel} {problem.mask} {problem.seqlen} {problem.direction}: {status} "
                     f"({time.time() - t0:.1f} s)")
    return lines


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
         say: Callable[[str], None] = print, detail: Callable[[str], None] | None = None) -> bool:
    """Run every case once in `workers` spawned processes; False when stopped after `max_minutes`.
    `say` gets the summary, `detail` (default: `say`) a line per case."""
    if not todo:
        say("prewarm: 0 cases")
        return True
    workers = max(1, min(workers, len(todo)))
    start = time.time()
    finished = True
    with _compile_threads():
        pool = mp.get_context("spawn").Pool(workers)
        pending = pool.map_async(_worker, [todo[i::workers] for i in range(workers)])
        try:
            for lines in pending.get(timeout=60 * max_minutes):
                for line in lines:
                    (detail or say)(line)
            pool.close()
        except mp.TimeoutError:
            say(f"prewarm: stopped after {max_minutes:g} min")
            finished = False
            pool.terminate()
        pool.join()
    say(f"prewarm: {len(todo)} cases, {time.time() - start:.0f} s")
    return finished


def before_bench(spec: SweepSpec, folders: list[Path], registry: Registry | None = None, enabled: bool = True,
                 resume: bool = False, say: Callable[[str], None] = print, log: Path | None = None,
                 cases: list[Problem] | None = None) -> int | None:
    """`longca bench`'s warm-up: on CUDA, the cases of compiling kernels that the run (each repeat
    folder) still needs; returns how many were warmed, None when skipped (CPU, `--no-prewarm`).
    A line per case goes to `log` (the run's longca.log) where given, else to `say`."""
    if not enabled or not spec.device.startswith("cuda"):
        return None
    registry = registry or get_registry()
    todo = select(spec, registry, done=done_in_all(folders) if resume else set(), compiling_only=True, cases=cases)
    if todo:
        workers = min(WORKERS, os.cpu_count() or 1)
        say(f"prewarm: compiling {len(todo)} cases of {', '.join(dict.fromkeys(p.kernel for p in todo))} in "
            f"{min(workers, len(todo))} processes first (a cache warm-up; --no-prewarm skips it)")
        warm(todo, workers, say=say, detail=_appender(log) if log else None)
    return len(todo)


def _appender(path: Path) -> Callable[[str], None]:
    def append(line: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(f"prewarm: {line}\n")

    return append
