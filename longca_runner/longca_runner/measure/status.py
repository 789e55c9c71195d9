"""The status rules: how what happened to a case becomes its row's status and one-line reason."""
from __future__ import annotations

import math
from typing import Literal

import torch

from longca.results import Checked, ResultRow


class KernelFailure(Exception):
    """A kernel broke its contract (wrong layout, non-finite values): the row's reason, status error."""


def is_oom(exc: BaseException) -> bool:
    return (isinstance(exc, (torch.OutOfMemoryError, MemoryError))
            or "out of memory" in str(exc).lower())


def failure_reason(exc: BaseException) -> str:
    """One line for a row's reason: the exception type and the first line of its message."""
    if isinstance(exc, KernelFailure):
        return str(exc)[:500]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:500]


def failure_status(exc: BaseException) -> Literal["oom", "error"]:
    return "oom" if is_oom(exc) else "error"


def finish(row: ResultRow, errors: dict[str, float] | None, tolerance: float,
           checked: Checked = "full") -> ResultRow:
    """Status ok, or incorrect when the worst relative error (NaN counts as worst) is over tolerance.

    `checked` records how the errors were measured: full (output and gradients against the whole
    reference) or spot (the forward on a few query windows)."""
    if errors is not None:
        worst = max(errors.values(), key=lambda e: math.inf if math.isnan(e) else e)
        row.rel_err, row.rel_err_detail, row.checked = worst, dict(errors), checked
        if math.isnan(worst) or worst > tolerance:
            row.status, row.reason = "incorrect", f"relative error {worst:.3g} > tolerance {tolerance:g}"
            return row
    row.status = "ok"
    return row


def fail(row: ResultRow, exc: BaseException, where: str | None = None) -> ResultRow:
    """The row of a case that raised: oom or error, the one-line reason, the phase it was in."""
    row.status, row.reason, row.phase = failure_status(exc), failure_reason(exc), where
    return row
