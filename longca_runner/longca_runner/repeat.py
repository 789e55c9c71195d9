"""A sweep repeated N times, each repeat in its own folder (OUTPUT/run-1 ... run-N), so that the
report can say how far one cell moves from run to run (`analysis.run_variation`).

Each repeat is an ordinary `run_sweep` into its folder (its own lock, run record and matmul
peak); nothing here changes how a case is measured. One run keeps the plain layout (rows in
OUTPUT itself). With `resume`, every repeat folder continues: finished repeats skip all their
cases, a repeat cut short finishes, repeats not started yet start.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from longca.errors import LongcaError
from longca.plugins import Registry
from longca.problem import Problem
from longca.results import ResultRow, ResultsWriter, case_id
from longca_runner.measure.phases import PhaseClock
from longca_runner.outdir import RESULTS_FILE, existing_runs
from longca_runner.sweep import SweepSpec, problems, run_sweep

if TYPE_CHECKING:  # pragma: no cover - prewarm imports the sweep
    from longca_runner.prewarm import WarmPool


def run_folders(output: Path, runs: int) -> list[Path]:
    """Where each repeat writes: OUTPUT for one run, else OUTPUT/run-1 ... OUTPUT/run-N."""
    if runs < 1:
        raise LongcaError(f"--runs {runs}: give at least 1")
    output = Path(output)
    return [output] if runs == 1 else [output / f"run-{i}" for i in range(1, runs + 1)]


def check_layout(output: Path, runs: int) -> None:
    """Refuse to mix the two layouts in one folder: a single run's rows in OUTPUT and repeats in
    OUTPUT/run-K would be reported apart and resumed apart."""
    if runs < 1:
        raise LongcaError(f"--runs {runs}: give at least 1")
    output = Path(output)
    single = (output / RESULTS_FILE).is_file()
    repeats = existing_runs(output)
    if runs > 1 and single:
        raise LongcaError(f"{output} holds a single run ({RESULTS_FILE}); --runs {runs} writes {output}/run-1 ... "
                          f"run-{runs}: choose another --output")
    if runs == 1 and repeats:
        raise LongcaError(f"{output} holds {len(repeats)} repeated runs ({', '.join(p.name for p in repeats)}); "
                          f"continue them with --runs {max(len(repeats), 2)} --resume, or choose another --output")


def run_repeats(spec: SweepSpec, output: Path, runs: int, resume: bool = False,
                on_case: Callable[[Problem, ResultRow | None], None] | None = None,
                registry: Registry | None = None, cases: list[Problem] | None = None,
                clock: PhaseClock | None = None, pool: WarmPool | None = None) -> list[Path]:
    """The whole grid `runs` times, one repeat after the other (`cases`: the grid already
    expanded); returns the results files written. `clock` (the bench's, with its prewarm) times the
    first run measured; each later one gets its own. `pool`: the prewarm's workers, for every repeat."""
    folders = run_folders(output, runs)
    check_layout(output, runs)
    cases = list(problems(spec, registry)) if cases is None else cases
    for folder in folders:
        if resume and finished(folder, cases):  # no new run record, no peak measured again
            for problem in cases:
                if on_case:
                    on_case(problem, None)
            continue
        # a repeat folder with no rows yet starts fresh even under --resume (run_sweep allows both)
        run_sweep(spec, folder, resume, on_case, registry, cases=cases, clock=clock, pool=pool)
        clock = None
    return [folder / RESULTS_FILE for folder in folders]


def finished(folder: Path, cases: list[Problem]) -> bool:
    """Every case has a row in FOLDER (what --resume would skip)."""
    done = ResultsWriter(Path(folder) / RESULTS_FILE).done_ids()
    return bool(cases) and all(case_id(p) in done for p in cases)
