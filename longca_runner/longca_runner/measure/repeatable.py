"""Is the backward bitwise repeatable? Asking for a deterministic backward is not the same as
getting one (FlashAttention threads show `deterministic=True` still giving different dQ), so a
case's step runs `CALLS` more times on the same inputs after its timed calls and every result is
compared with the first: `bitwise_repeatable` and the largest absolute difference seen, recorded
on every backward row, deterministic or not."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from longca_runner.measure.readback import result_tensors

CALLS = 3  # results compared: the first and two more


@dataclass(frozen=True)
class Repeatability:
    bitwise: bool
    max_abs_diff: float  # over the output and dq, dk, dv; 0.0 when bitwise


def repeatability(step: Callable[[], Any], calls: int = CALLS) -> Repeatability:
    """Run `step` `calls` times on the same inputs and compare each result with the first, bit for bit."""
    result = result_tensors(step())  # the step runs its backward itself: not under no_grad
    with torch.no_grad():
        first = tuple(t.detach().clone() for t in result)
    same, worst = True, 0.0
    for _ in range(calls - 1):
        now = result_tensors(step())
        with torch.no_grad():
            for a, b in zip(first, now, strict=True):
                if not torch.equal(a, b.detach()):
                    same = False
                    worst = max(worst, float((a.float() - b.detach().float()).abs().nan_to_num(float("inf")).max()))
    return Repeatability(same, worst)
