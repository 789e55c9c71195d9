"""Running a sweep's cases into results.jsonl: each row appended as it finishes, `--resume`
skips what is done, CP cases batched by world size into one process group, a time budget."""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from longca.errors import LongcaError
from longca.plugins import Registry, get_registry
from longca.problem import Problem
from longca.results import ResultRow, ResultsWriter, case_id
from longca_runner import integrity, peaks
from longca_runner.launcher import under_torchrun
from longca_runner.measure import RunOptions, check_device
from longca_runner.measure.phases import PhaseClock
from longca_runner.outdir import RESULTS_FILE, OutputFolder
from longca_runner.runinfo import record_run, record_run_end
from longca_runner.supervisor import Supervisor
from longca_runner.sweep.grid import expand
from longca_runner.sweep.spec import SweepSpec
from longca_runner.timing import check_timing

if TYPE_CHECKING:  # pragma: no cover - prewarm imports the sweep
    from longca_runner.prewarm import WarmPool

CP_BATCH = 8  # CP cases measured per spawned process group (rows are written after each group)
OnCase = Callable[[Problem, ResultRow | None], None]


def measure_matmul_peak(device: str = "cuda", n: int = 8192, warm_seconds: float = 1.0) -> float | None:
    """bf16 n^3 matmul TFLOP/s on this GPU: the ceiling the report compares kernels with.

    The GPU first multiplies for `warm_seconds` (an idle GPU starts at low clocks: with 10 warm-up
    calls, seven runs on one H200 measured 733-800 TFLOP/s), then 100 timed calls; the median."""
    import torch

    from longca_runner.timing import summarize, synchronize, time_ms

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    dev = torch.device(device)
    deadline = time.perf_counter() + warm_seconds
    while time.perf_counter() < deadline:
        for _ in range(8):
            a @ b
        synchronize(dev)
    median, _, _ = summarize(time_ms(lambda: a @ b, dev, warmup=1, repeat=100))
    return 2 * n ** 3 / (median * 1e-3) / 1e12


def run_sweep(spec: SweepSpec, output: Path, resume: bool = False, on_case: OnCase | None = None,
              registry: Registry | None = None, max_seconds: float | None = None,
              cases: list[Problem] | None = None, clock: PhaseClock | None = None,
              pool: WarmPool | None = None) -> list[ResultRow]:
    """Run every case of the grid (`cases`: the grid already expanded, else expanded here),
    appending each row as it finishes; returns the new rows.

    `max_seconds`: start no case (or CP batch) after that many seconds; a case already running
    finishes. The cases left are run by a later call with `resume=True`. `clock`: where the run's
    minutes went (a bench's clock has its prewarm already); recorded at the end as runs.jsonl's
    `wall_s` and `phases_s`. `pool`: the prewarm's workers (`longca_runner.prewarm.WarmPool`): a
    single-GPU case whose group one of them warmed is measured there, the others in this sweep's own."""
    registry = registry or get_registry()
    # under torchrun (one or many nodes) every rank runs the loop: the CP cases of its world size
    # join the launcher's group, single-GPU cases run on rank 0 alone, and only rank 0 writes
    launched = under_torchrun()
    if launched and max_seconds is not None:
        raise LongcaError("--max-minutes does not work under torchrun: every rank must run the same cases")
    check_device(spec.device)
    check_timing(spec.timing, spec.device)
    if spec.strategies and spec.timing != "events":
        raise LongcaError(f"timing {spec.timing!r} is for single-GPU cases; CP sweeps (strategies) time with events")
    todo = _for_this_rank(cases if cases is not None else expand(spec, registry), launched)
    runner = _Runner(spec, resume, on_case, registry, max_seconds, clock or PhaseClock(), pool)
    if launched and os.environ.get("RANK") != "0":  # other ranks read the folder (--resume), never write it
        return runner.run(None, Path(output), todo)
    with OutputFolder(output) as folder:
        return runner.run(folder, folder.path, todo)


def _for_this_rank(cases: list[Problem], launched: bool) -> list[Problem]:
    """Under torchrun: the CP cases of the launcher's world size, and the single-GPU ones on rank 0."""
    if not launched:
        return cases
    world, lead = int(os.environ.get("WORLD_SIZE", "1")), os.environ.get("RANK") == "0"
    todo = [p for p in cases if (p.world_size == world if p.strategy else lead)]
    if not any(p.strategy for p in todo):
        raise LongcaError(f"under torchrun ({world} ranks) a sweep runs its CP cases of world size {world}; "
                          f"the spec has none (world_sizes)")
    return todo


class _Runner:
    """One pass over the cases: skip the done ones, batch CP cases, write rows, stop when out of time."""

    def __init__(self, spec: SweepSpec, resume: bool, on_case: OnCase | None, registry: Registry,
                 max_seconds: float | None, clock: PhaseClock, pool: WarmPool | None = None) -> None:
        self.clock = clock
        self.pool = pool
        self.spec, self.resume, self.on_case, self.registry = spec, resume, on_case, registry
        self.max_seconds = max_seconds
        self.started = time.monotonic()
        # with the prewarm's workers, each gives its cached GPU memory back after a case: the idle ones
        # would otherwise hold what their last case left while another measures (and reads free memory)
        self.options = RunOptions(warmup=spec.warmup, repeat=spec.repeat, samples=spec.samples, check=spec.check,
                                  timing=spec.timing, energy=spec.energy, release_memory=pool is not None)
        self.rows: list[ResultRow] = []
        self.pending: list[Problem] = []  # CP cases of one world size, measured together in one process group
        self.writer: ResultsWriter | None = None
        self.extra: dict[str, Any] = {"spec": spec.model_dump()}  # what this run records (runs.jsonl)
        self.gpu: str | None = None

    def out_of_time(self) -> bool:
        return self.max_seconds is not None and time.monotonic() - self.started > self.max_seconds

    def run(self, folder: OutputFolder | None, path: Path, todo: list[Problem]) -> list[ResultRow]:
        writer = ResultsWriter(folder.results if folder else path / RESULTS_FILE)
        if folder and not self.resume and writer.path.exists() and writer.path.stat().st_size:
            raise LongcaError(f"{writer.path} already has results; pass --resume to continue it, "
                              f"or choose another --output")
        done = writer.done_ids() if self.resume else set()
        if self.spec.measure_peak:
            self.extra.update(peaks.run_peaks(self.spec.device, self.spec.dtypes))
        self.gpu = peaks.gpu_name(self.spec.device)
        run = None
        if folder:
            self.writer = writer
            run = record_run(path, self.extra, self.registry)["run"]
        supervisor = Supervisor(isolate=self.spec.isolate, clock=self.clock)
        if self.pool is not None:
            self.pool.adopt(self.clock, self.spec.isolate)
        try:
            for problem in todo:
                if self.out_of_time():
                    break
                if case_id(problem) in done:
                    if self.on_case:
                        self.on_case(problem, None)
                elif problem.strategy:
                    self.pending.append(problem)
                    if len(self.pending) >= CP_BATCH or problem.world_size != self.pending[0].world_size:
                        self.flush_cp()
                else:
                    self.flush_cp()
                    warmed = self.pool.for_case(problem) if self.pool is not None else None
                    self.record(problem, (warmed or supervisor).run(problem, self.options, self.spec.case_timeout))
            self.flush_cp()
        finally:
            supervisor.close()
            if run is not None:  # also when stopped by an error: the minutes it did spend
                record_run_end(path, run, {"wall_s": round(self.clock.wall_s(), 1), "phases_s": self.clock.summary(),
                                           "kernels_s": self.clock.kernel_summary(),
                                           "phase_names_s": self.clock.names_summary(), "cases_run": len(self.rows)})
        return self.rows

    def record(self, problem: Problem, row: ResultRow) -> None:
        integrity.stamp(row, self.extra, self.gpu)  # this run's peaks (resumed folders mix runs), then the gate
        self.rows.append(row)  # counted before it is written: a SIGTERM inside the write still leaves it run
        if self.writer:
            self.writer.append(row)
        if self.on_case:
            self.on_case(problem, row)

    def flush_cp(self) -> None:
        if not self.pending:  # no CP case: longca-cp is not needed (nor, maybe, installed)
            return
        from longca_runner.cp.cases import measure_cases
        from longca_runner.cp.launch import default_backend

        spec = self.spec
        while self.pending and not self.out_of_time():
            world = self.pending[0].world_size
            batch = [p for p in self.pending if p.world_size == world]
            self.pending[:] = [p for p in self.pending if p.world_size != world]
            measure_cases(batch, self.options, spec.backend or default_backend(spec.device), spec.timeout,
                          spec.case_timeout, on_row=self.record)  # each row written as soon as it is measured
