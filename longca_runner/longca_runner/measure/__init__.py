"""The one measurement path, a module per job: the options (`options`), the step every timing site
times with its seeded output gradient (`step`), the status rules (`status`), the stages of a case
(`phases`, an object passed in), correctness checks (`checks`), summaries over mask draws
(`samples`) and one single-GPU case (`case.run_problem`). CP ranks (`longca_runner.cp.measure`) and the
benchmark scripts use the same pieces. Everything is re-exported here: `from longca_runner.measure import X`.
"""
from __future__ import annotations

from longca_runner.measure.case import check_device, fits, mask_of, mask_refusal, run_problem, unsupported_reason
from longca_runner.measure.checks import check_mode, full_check, rel_err, spot_check, spot_windows
from longca_runner.measure.options import (
    CHECK_MODES,
    FULL_CHECK_FLOPS,
    SPOT_ROWS,
    SPOT_WINDOWS,
    TOLERANCE,
    RunOptions,
    tolerance_for,
)
from longca_runner.measure.phases import Phases
from longca_runner.measure.readback import Readback, result_tensors
from longca_runner.measure.samples import Sample, n_samples, summarize_samples
from longca_runner.measure.status import KernelFailure, fail, failure_reason, failure_status, finish, is_oom
from longca_runner.measure.step import (
    Step,
    Timed,
    check_grads,
    check_tensor,
    checked_step,
    make_step,
    seeded_dout,
    time_step,
)

__all__ = [
    "CHECK_MODES", "FULL_CHECK_FLOPS", "SPOT_ROWS", "SPOT_WINDOWS", "TOLERANCE", "tolerance_for", "KernelFailure",
    "Phases", "Readback", "result_tensors",
    "RunOptions", "Sample", "Step", "Timed", "check_device", "check_grads", "check_mode", "check_tensor",
    "checked_step", "fail", "failure_reason", "failure_status", "finish", "fits", "full_check", "is_oom",
    "make_step", "mask_of", "mask_refusal", "n_samples", "rel_err", "run_problem", "seeded_dout", "spot_check",
    "spot_windows", "summarize_samples", "time_step", "unsupported_reason",
]
