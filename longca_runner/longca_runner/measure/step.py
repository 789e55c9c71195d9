"""The step every timing site times (`make_step`), its checked first call, and timing it.

One closure for single-GPU cases, CP ranks and the benchmark scripts, so "bwd" means the same
everywhere: the gradients of one kept forward (graph retained; for a library whose backward runs once per
forward, of a fresh forward made outside the timed region), never accumulated into `.grad`.
The output gradient is seeded by the case (`seeded_dout`): the same on every rank and in every run.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from longca.problem import Problem, seeded_normal
from longca_runner.measure.options import RunOptions
from longca_runner.measure.phases import Phases
from longca_runner.measure.status import KernelFailure
from longca_runner.timing import summarize, time_by_mode

Step = Callable[[], Any]


def seeded_dout(problem: Problem, sample: int = 0) -> torch.Tensor:
    """The output gradient (B, S, Hq, dv) of a case's mask draw, seeded like its inputs
    (`problem.make_inputs`): every rank of a CP group and every run of the case sees the same one."""
    gen = torch.Generator(device="cpu").manual_seed(problem.seed * 1000003 + sample + 7)
    return seeded_normal(problem, (problem.batch, problem.seqlen, problem.heads_q, problem.dv), gen)


class FreshForwardBackward:
    """`bwd` of a library whose backward frees what the forward saved (KernelSpec.backward_once): each call
    is the backward of a fresh forward that `before()` made outside the timed region (the timers call it;
    a caller that does not, a warm-up, has the forward made inside the call)."""

    def __init__(self, call: Callable[[], torch.Tensor], inputs: Sequence[torch.Tensor], dout: torch.Tensor):
        self.call, self.inputs, self.dout = call, tuple(inputs), dout
        self.pending: torch.Tensor | None = None

    def before(self) -> None:
        if self.pending is None:
            self.pending = self.call()

    def __call__(self) -> Any:
        out = self.pending if self.pending is not None else self.call()
        self.pending = None
        return (out, *torch.autograd.grad(out, self.inputs, self.dout))


def make_step(call: Callable[[], torch.Tensor], inputs: Sequence[torch.Tensor], direction: str,
              dout: torch.Tensor | None = None, out: torch.Tensor | None = None,
              fresh_forward: bool = False) -> Step:
    """The timed step of `call` (a forward over `inputs`): fwd = `call()` under no_grad; bwd = the
    gradients of one kept forward output (`out`, made here when not given), or with `fresh_forward` of a
    new forward each call, made untimed (`FreshForwardBackward`); fwdbwd = both.

    It returns what it computed (fwd: the output; bwd, fwdbwd: the output and dq, dk, dv), so the
    timers can read every timed call's result back and the check judges one of them (`Readback`)."""
    if direction == "fwd":
        def fwd() -> Any:
            with torch.no_grad():
                return call()
        return fwd
    if dout is None:
        raise ValueError(f"direction {direction!r} needs the output gradient dout")
    if direction == "bwd" and fresh_forward:
        return FreshForwardBackward(call, inputs, dout)
    if direction == "bwd":
        kept = call() if out is None else out
        return lambda: (kept, *torch.autograd.grad(kept, inputs, dout, retain_graph=True))
    if direction == "fwdbwd":
        def fwdbwd() -> Any:
            made = call()
            return (made, *torch.autograd.grad(made, inputs, dout))
        return fwdbwd
    raise ValueError(f"unknown direction {direction!r}; known: fwd, bwd, fwdbwd")


def _layout(t: Any) -> str:
    if not isinstance(t, torch.Tensor):
        return f"a {type(t).__name__}"
    return f"shape {tuple(t.shape)} {str(t.dtype).replace('torch.', '')} on {t.device.type}"


def check_tensor(what: str, got: Any, like: torch.Tensor, shape: Sequence[int] | None = None) -> None:
    """`got` must have the layout of `like` (shape, or `shape` where given, dtype, device) and only finite
    values."""
    want = torch.Size(shape) if shape is not None else like.shape
    if isinstance(got, torch.Tensor) and type(got) is not torch.Tensor:
        raise KernelFailure(f"{what} is a {type(got).__qualname__}, a torch.Tensor subclass: longca times plain "
                            f"tensors (a subclass can defer its work until the result is read)")
    if (not isinstance(got, torch.Tensor) or got.shape != want or got.dtype != like.dtype
            or got.device != like.device):
        expected = _layout(like.new_empty(want, device="meta")).replace(" on meta", f" on {like.device.type}")
        raise KernelFailure(f"wrong output layout: {what} has {_layout(got)}, expected {expected}")
    finite = torch.isfinite(got.detach())
    if not bool(finite.all()):
        bad = int((~finite).sum())
        raise KernelFailure(f"non-finite output: {what} has {bad} NaN/Inf of {got.numel()} values")


GRAD_NAMES = ("dq", "dk", "dv", "dsinks")  # of the inputs q, k, v and, where the problem has them, the sinks


def check_grads(grads: Sequence[Any], inputs: Sequence[torch.Tensor]) -> None:
    if len(grads) != len(inputs):
        raise KernelFailure(f"wrong output layout: backward gave {len(grads)} gradients, expected {len(inputs)}")
    for name, g, x in zip(GRAD_NAMES, grads, inputs, strict=False):
        check_tensor(name, g, x)


def checked_step(call: Callable[[], torch.Tensor], inputs: Sequence[torch.Tensor], direction: str,
                 dout: torch.Tensor | None, phases: Phases, what: str = "the output",
                 fresh_forward: bool = False) -> Step:
    """`make_step` after a first call whose output (and gradients) are checked (`check_tensor`).

    The first call is also the warm one: JIT compilation and workspaces happen there."""
    phases("first call")
    like = inputs[0]  # the output is q's (B, S, Hq) with V's head dim, in the inputs' dtype
    shape = (*like.shape[:-1], inputs[2].shape[-1])
    if direction == "fwd":
        step = make_step(call, inputs, direction)
        check_tensor(what, step(), like, shape)
        return step
    out = call()
    check_tensor(what, out, like, shape)
    phases("backward")
    check_grads(torch.autograd.grad(out, inputs, dout, retain_graph=not fresh_forward), inputs)
    return make_step(call, inputs, direction, dout, None if fresh_forward else out, fresh_forward)


@dataclass
class Timed:
    """The timed calls of one step: every iteration's ms and the peak memory of one call (CUDA)."""

    times: list[float]
    peak: int | None = None

    @property
    def summary(self) -> tuple[float, float, float]:
        return summarize(self.times)


def time_step(step: Step, device: torch.device, options: RunOptions,
              before_timing: Callable[[], None] = lambda: None, phases: Phases | None = None,
              after: Callable[[Any], None] | None = None) -> Timed:
    """Peak memory of one warm call (CUDA), then `options.warmup` + `options.repeat` calls timed.

    The caller has made the first call already (it compiles kernels and validates the output).
    `before_timing` runs right before the timed loop (CP ranks meet at a barrier there); `after`
    hears each timed call's result once its timer stopped (`Readback`)."""
    phases = phases or Phases()
    peak = None
    if device.type == "cuda":
        phases("peak memory")
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
    before_timing()
    phases("timing")
    return Timed(time_by_mode(options.timing, step, device, options.warmup, options.repeat, options.flush_l2, after),
                 peak)
