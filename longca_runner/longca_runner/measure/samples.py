"""One mask draw's measurement (`Sample`) and a row's figures from several: medians over draws."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from longca.plugins import Registry
from longca.problem import Problem
from longca.results import Checked, ResultRow
from longca_runner.measure.options import RunOptions
from longca_runner.measure.repeatable import Repeatability


@dataclass
class Sample:
    """One mask draw's measurement."""

    ms: tuple[float, float, float]
    iter_times: list[float]
    area: float
    flops: float
    peak: int | None
    prepare_ms: float
    errors: dict[str, float] | None = None
    ms_max_rank: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    checked: Checked = "no"  # how `errors` were measured: full, spot
    repeatability: Repeatability | None = None  # the backward run again on the same inputs (first draw only)
    energy: tuple[float, int] | None = None  # (joules per call, calls) from NVML's counter, where asked (first draw)

    @property
    def tflops(self) -> float | None:
        return self.flops / (self.ms[0] * 1e-3) / 1e12 if self.ms[0] > 0 else None


def summarize_samples(row: ResultRow, samples: list[Sample]) -> None:
    """Median over mask samples: times, TFLOP/s (each sample's own FLOPs / its time); mean area."""
    def med(values: list[float]) -> float:
        return float(np.median(values))

    peaks = [s.peak for s in samples if s.peak is not None]
    tflops = [s.tflops for s in samples]
    row.samples = len(samples)
    row.area = float(np.mean([s.area for s in samples]))
    row.flops = float(np.mean([s.flops for s in samples]))
    row.ms_median, row.ms_p20, row.ms_p80 = (med([s.ms[i] for s in samples]) for i in range(3))
    row.iter_times_ms = [float(t) for s in samples for t in s.iter_times]
    row.tflops = med([t for t in tflops if t is not None]) if all(t is not None for t in tflops) else None
    row.peak_mem_bytes = max(peaks) if peaks else None
    row.prepare_ms = med([s.prepare_ms for s in samples])
    energy = samples[0].energy if samples else None
    if energy is not None:
        row.energy_j, row.energy_calls = energy
    repeat = samples[0].repeatability if samples else None
    if repeat is not None:
        row.bitwise_repeatable, row.repeat_max_abs_diff = repeat.bitwise, repeat.max_abs_diff
    ranks = [s.ms_max_rank for s in samples if s.ms_max_rank is not None]
    if ranks:
        row.ms_max_rank = med(ranks)


def n_samples(problem: Problem, options: RunOptions, registry: Registry) -> int:
    """Document masks are measured over several draws; the others once."""
    return max(1, options.samples) if registry.mask(problem.mask).uses_documents else 1
