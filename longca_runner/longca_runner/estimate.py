"""How long a case must take at the least on this machine: its FLOPs over the machine's measured
matmul rate. A case that cannot finish is refused before any input is made (sdpa at 10M tokens on a
CPU would otherwise compute until killed), and the default per-case deadline follows from the same
estimate.

The rules (docs/reliability.md, "Per-case deadline"):
- rate R: the best of a tiny matmul of the case's dtype and of float32 on its device (`peaks.measure`,
  256^3 on a CPU, 4096^3 on a GPU; the datasheet figure where it is higher), measured once a process.
  Attention's FLOPs are matmuls, so no kernel beats R by much: `FASTEST` x R bounds every kernel.
- fastest time T: the case's calls (warm-up, timed, first and peak-memory calls, per mask sample) x
  FLOPs of the drawn mask / (`FASTEST` x R): a lower bound.
- refused (`unsupported`) when T exceeds `MAX_CASE_S` (1 h): no kernel could finish it here.
- default deadline: `BASE_S` + `SLACK` x T (the calls at 5 % of the matmul rate, checks included).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from longca.flops import problem_flops

from .timing import MIN_REPEAT

FASTEST = 2.0  # no kernel runs faster than twice the tiny calibration matmul (a small shape under-reads the peak)
SLACK = 40.0  # the deadline allows SLACK x the fastest time: a kernel at FASTEST/SLACK = 5 % of the matmul rate
BASE_S = 120.0  # start-up, JIT compilation, autotuning
MAX_CASE_S = 3600.0  # a case whose fastest time is longer is refused
CALIBRATION = {"cpu": (256, 0.05, 5), "cuda": (4096, 0.2, 10)}  # square size, warm seconds, timed calls

_rates: dict[tuple[str, str], float] = {}


@dataclass(frozen=True)
class Estimate:
    """A case's FLOPs over its calls, the rate they were divided by and the fastest time that gives."""

    flops: float
    calls: int
    rate: float  # FLOP/s
    fastest_s: float
    check_calls: int = 0  # the reference check, counted as this many more calls

    @property
    def deadline_s(self) -> float:
        """The default deadline: BASE_S + SLACK x the fastest time of every call, checks included."""
        return BASE_S + SLACK * self.fastest_s * (self.calls + self.check_calls) / max(1, self.calls)


def _calibrate(device: str, dtype: str) -> float:
    from . import peaks

    size, warm, repeat = CALIBRATION["cuda" if device.startswith("cuda") else "cpu"]
    try:
        measured = peaks.measure(device, [dtype], shapes=(size,), warm_seconds=warm, repeat=repeat)
    except Exception:  # noqa: BLE001 - a device that cannot multiply fails the case itself, with its reason
        return 0.0
    return measured[dtype]["tflops"] * 1e12 if dtype in measured else 0.0


def matmul_rate(device: str, dtype: str) -> float:
    """FLOP/s of this machine's matmul for a case of `dtype` on `device` (the best of that dtype, float32
    and the GPU's datasheet figure), measured once per process and device; 0 where none could be measured."""
    key = (device, dtype)
    if key not in _rates:
        from . import peaks

        wanted = "bfloat16" if dtype.startswith("float8") else dtype
        best = max(_calibrate(device, name) for name in dict.fromkeys((wanted, "float32")))
        sheet = peaks.datasheet(peaks.gpu_name(device), dtype) if device.startswith("cuda") else None
        _rates[key] = max(best, sheet.tflops * 1e12 if sheet else 0.0)
    return _rates[key]


def estimate(problem: Any, area: float, options: Any, samples: int | None = None,
             rate: float | None = None) -> Estimate | None:
    """The fastest time of `problem` with a mask of `area` pairs under `options`, over `samples` mask
    draws (default `options.samples`); `rate`: FLOP/s, else measured here. Calls: warm-up, timed, the
    first and the peak-memory call per draw. None where no rate could be measured."""
    rate = rate or matmul_rate(problem.device, problem.dtype)
    if not rate > 0:
        return None
    flops = problem_flops(problem, area) / max(1, problem.world_size)
    draws = options.samples if samples is None else samples
    # an adaptive count (repeat None) makes at least MIN_REPEAT timed calls: the lower bound counts those
    calls = (options.warmup + (options.repeat or MIN_REPEAT) + 2) * draws
    checks = 3 if options.check else 0
    return Estimate(flops, calls, rate, calls * flops / (FASTEST * rate), checks)


def refusal(found: Estimate) -> str | None:
    """Why a case with this estimate cannot finish here, or None."""
    if found.fastest_s <= MAX_CASE_S:
        return None
    return (f"cannot finish here: {found.calls} calls of {found.flops:.3g} FLOP need at least "
            f"{_duration(found.fastest_s)} even at {FASTEST:g}x this machine's measured matmul rate "
            f"({found.rate / 1e9:.3g} GFLOP/s); limit {_duration(MAX_CASE_S)}. Refused before any input was made")


def _duration(seconds: float) -> str:
    if seconds >= 86400 * 2:
        return f"{seconds / 86400:.3g} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds:.3g} s"
