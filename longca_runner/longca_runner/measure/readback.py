"""Every timed call's result read back, and one of them kept for the correctness check (`Readback`).

Why: a check that makes a call of its own can be told apart from the timed ones (grad mode, a
call counter, the call stack), and a kernel could do less work whenever it is not checked. Here
the check judges a copy of one timed call's result, the call drawn in secret, and every timed call
must give the same checksums (sum and sum of magnitudes of each tensor) as that one. The read
happens right after each call's timer stopped (the timers' `after` hook): one reduction over the
output (and the gradients, for bwd) per call, outside the timed region, so no reported time
changes; what a user of the output would pay for reading it is not attention's work.
"""
from __future__ import annotations

import secrets
from typing import Any

import torch

from longca_runner.measure.status import KernelFailure
from longca_runner.timing import MIN_REPEAT

# of the sum of magnitudes: reductions in another order (atomics, split-K) stay far below it, while
# a call that skips an eighth of the heads or tiles is off by about 0.12
CHECKSUM_TOLERANCE = 2e-3


def result_tensors(result: Any) -> tuple[torch.Tensor, ...]:
    """The tensors of a step's result: the output (fwd), or the output and dq, dk, dv; a torch.Tensor
    subclass is refused (it can defer its work until it is read, after the timer stopped)."""
    items = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    for item in items:
        if type(item) is not torch.Tensor:
            raise KernelFailure(f"a timed call returned a {type(item).__module__}.{type(item).__qualname__}, not a "
                                f"plain torch.Tensor: longca times work done by the call, not work a wrapper "
                                f"defers until its result is read")
    return items


class Readback:
    """The timers' `after` hook: checksums of every timed call, a copy of the result of one, drawn
    from the OS (not from the case's seed) among the first `repeat` (adaptive counts: MIN_REPEAT,
    the fewest calls they make) when `keep`; only its output where `output_only` (a spot check
    reads no gradients: no copies of dq, dk, dv at the sizes that are spot-checked)."""

    def __init__(self, repeat: int | None, keep: bool = True, output_only: bool = False):
        self.keep = secrets.randbelow(repeat or MIN_REPEAT) if keep else None
        self.output_only = output_only
        self.sums: list[torch.Tensor] = []
        self.kept: tuple[torch.Tensor, ...] | None = None

    def __call__(self, result: Any) -> None:
        tensors = result_tensors(result)
        with torch.no_grad():
            self.sums.append(torch.stack([s for t in tensors for s in (
                t.detach().sum(dtype=torch.float32), torch.linalg.vector_norm(t.detach(), 1, dtype=torch.float32))]))
            if len(self.sums) - 1 == self.keep:  # a copy: a buffer the next call reuses is legal
                self.kept = tuple(t.detach().clone() for t in (tensors[:1] if self.output_only else tensors))

    def verify(self) -> None:
        """Raise KernelFailure when a timed call's checksums differ from the kept (or first) call's."""
        if len(self.sums) < 2:
            return
        sums = torch.stack(self.sums).cpu().double()  # one synchronisation, after the timed loop
        base = sums[self.keep if self.keep is not None else 0]
        scale = base[1::2].clamp_min(1e-30)  # each tensor's sum of magnitudes
        for i, row in enumerate(sums):
            off = float(((row - base).abs().view(-1, 2) / scale[:, None]).max())
            if not off <= CHECKSUM_TOLERANCE:
                raise KernelFailure(f"timed call {i + 1} of {len(sums)} gave another result than the others on the "
                                    f"same inputs (checksums differ by {off:.3g} of the output's magnitude): a "
                                    f"kernel must do the same work on every call")
