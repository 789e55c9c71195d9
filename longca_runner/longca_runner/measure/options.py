"""How to measure a case (`RunOptions`), and the tolerances and check sizes its row is judged by."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from longca.errors import LongcaError
from longca_runner.timing import TIMING_MODES

# relative Frobenius error allowed against the float32 reference on the (bfloat16) inputs; FP8's are
# a few times the error that rounding the inputs alone causes, measured by benchmarks/fp8_error.py (docs/fp8.md)
TOLERANCE = {"bfloat16": 1e-2, "float16": 1e-2, "float32": 1e-3, "float8_e4m3fn": 0.15, "float8_e5m2": 0.3}
CHECK_MODES = ("auto", "spot")
# reference FLOPs (4 * area * heads_q * head_dim * batch, forward) up to which "auto" checks a case
# against the whole float32 reference; above it, the forward on SPOT_WINDOWS windows of query rows
FULL_CHECK_FLOPS = {"cuda": 5e12, "cpu": 2e10}
SPOT_WINDOWS, SPOT_ROWS = 4, 64


# a quantized kernel on 16-bit inputs (KernelSpec.quantized: SageAttention's INT8 Q·K) is held to the
# tolerance of the 8-bit format measured here (FP8 e4m3), not to the dtype's; its error is reported
QUANTIZED_TOLERANCE = TOLERANCE["float8_e4m3fn"]


def tolerance_for(problem, spec: Any = None) -> float:
    """The relative error a row of this problem may have: `TOLERANCE` of its dtype, or for a quantized
    kernel's (`spec.quantized`) 16-bit problem the 8-bit one, whichever is larger."""
    if spec is not None and spec.quantized:
        return max(TOLERANCE[problem.dtype], QUANTIZED_TOLERANCE)
    return TOLERANCE[problem.dtype]


@dataclass
class RunOptions:
    """How to measure: iterations, mask samples for document masks, correctness check."""

    warmup: int = 5
    # timed calls; None: as many as the median needs (`longca_runner.timing.until_precise`: the 95 % interval
    # within +-1 %, 5 to 100 calls, at most 2 s of them)
    repeat: int | None = None
    samples: int = 5
    # True: against the whole reference; "spot": the forward on a few query windows; "auto": the
    # whole reference where it is cheap (FULL_CHECK_FLOPS), else spot; False: not checked
    check: bool | str = False
    flush_l2: bool = True
    tolerance: float | None = None
    timing: str = "events"  # longca_runner.timing.TIMING_MODES: events, cuda_graph, profiler
    energy: bool = False  # joules per call from NVML's counter (longca_runner.measure.energy; about 1 s a row)
    # a worker gives torch's cached GPU memory back after the case (the prewarm's workers, kept idle
    # for the sweep while another one measures, so that they hold none of the GPU's free memory)
    release_memory: bool = False

    def fixed(self, repeat: int = 20) -> RunOptions:
        """These options with a fixed count of timed calls where `repeat` is None: the ranks of a CP
        group must make the same calls, so they cannot each stop when their own median is precise."""
        return self if self.repeat is not None else replace(self, repeat=repeat)

    def __post_init__(self) -> None:
        for name, low in (("warmup", 0), ("repeat", 1), ("samples", 1)):
            value = getattr(self, name)
            if name == "repeat" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise LongcaError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.check, bool) and self.check not in CHECK_MODES:
            modes = " or ".join(repr(m) for m in CHECK_MODES)
            raise LongcaError(f"check must be true, false, {modes}, got {self.check!r}")
        if self.tolerance is not None and not (isinstance(self.tolerance, (int, float)) and self.tolerance > 0):
            raise LongcaError(f"tolerance must be a positive number, got {self.tolerance!r}")
        if self.timing not in TIMING_MODES:
            raise LongcaError(f"timing {self.timing!r}: use one of {', '.join(TIMING_MODES)}")
