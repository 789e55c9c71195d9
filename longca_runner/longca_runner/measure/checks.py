"""Correctness checks of a measured case against the float32 reference: the whole output and
gradients ("full"), or the forward on a few query windows ("spot") where the whole reference would
cost more than the measurement. Both judge a copy of one timed call's result (`Readback.kept`),
never a call of their own, and the spot windows come from a secret drawn once per process
(`RUN_SECRET`), so neither the checked call nor the checked rows can be derived from the problem
(docs/timing-integrity.md)."""
from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from longca import reference
from longca.problem import Problem
from longca.results import Checked
from longca_runner.measure.options import FULL_CHECK_FLOPS, SPOT_ROWS, SPOT_WINDOWS, RunOptions
from longca_runner.measure.phases import Phases
from longca_runner.measure.step import GRAD_NAMES

RUN_SECRET = secrets.randbits(63)  # the spot windows' seed: from the OS, once per process, never recorded


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """norm(out - ref) / norm(ref), in float32; NaN anywhere gives NaN."""
    out, ref = out.float(), ref.float()
    denom = torch.linalg.vector_norm(ref).item()
    return torch.linalg.vector_norm(out - ref).item() / (denom or 1.0)


def check_mode(problem: Problem, mask, options: RunOptions) -> Checked:
    """How a case is checked: "full", "spot" or "no" (see RunOptions.check)."""
    if options.check is True:
        return "full"
    if options.check is False:
        return "no"
    if options.check == "spot":
        return "spot"
    work = 4 * mask.area * problem.heads_q * problem.head_dim * problem.batch
    return "full" if work <= FULL_CHECK_FLOPS.get(problem.device_type, FULL_CHECK_FLOPS["cpu"]) else "spot"


def spot_windows(problem: Problem, secret: int | None = None) -> list[tuple[int, int]]:
    """A few query windows: random ones and the last rows (where tails go wrong), drawn from `secret`
    (default `RUN_SECRET`) and the case: the same for every kernel of a run (one shared reference),
    unknown to all of them."""
    rows = min(SPOT_ROWS, problem.seqlen)
    rng = np.random.default_rng([RUN_SECRET if secret is None else secret, problem.seed, problem.seqlen, 17])
    starts = {problem.seqlen - rows, *rng.integers(0, problem.seqlen - rows + 1, SPOT_WINDOWS - 1).tolist()}
    return [(int(a), int(a) + rows) for a in sorted(starts)]


def _grads(out: torch.Tensor, inputs, dout: torch.Tensor):
    return torch.autograd.grad(out, inputs, dout, retain_graph=True)


def reference_key(problem: Problem, sample: int, mode: Checked) -> str:
    """What a reference depends on: the case without its kernel (every kernel of a case shares it)."""
    fields = {k: v for k, v in asdict(problem).items() if k not in ("kernel", "deterministic", "dtype")}
    return json.dumps([fields, str(problem.torch_dtype), sample, mode], sort_keys=True, default=str)


def _fingerprint(tensors) -> tuple:
    """Shapes, dtypes and value sums of the inputs: a reference is reused only for the same values
    (a kernel that wrote into its inputs gets a reference of what it left there)."""
    return tuple((tuple(t.shape), str(t.dtype), str(t.device), float(torch.sum(t.detach(), dtype=torch.float32)))
                 for t in tensors if t is not None)


class SharedReference:
    """The float32 reference of the case being measured, computed by its first kernel and reused by the
    next ones (a sweep runs kernels innermost, so one entry is enough). `forget_others` at the start of
    a case frees the entry of an earlier case."""

    def __init__(self) -> None:
        self._key: str | None = None
        self._fingerprint: tuple | None = None
        self._value: Any = None
        self.computed = 0  # how many references were computed (what a sweep shares shows in tests)

    def forget_others(self, problem: Problem) -> None:
        if self._key is not None and json.loads(self._key)[0] != json.loads(reference_key(problem, 0, "no"))[0]:
            self._key = self._fingerprint = self._value = None

    def get(self, key: str, inputs, make: Callable[[], Any]) -> Any:
        fingerprint = _fingerprint(inputs)
        if key != self._key or fingerprint != self._fingerprint:
            self._key = self._fingerprint = self._value = None  # free the old one before making the new
            self._value = make()
            self._key, self._fingerprint = key, fingerprint
            self.computed += 1
        return self._value


shared = SharedReference()


def _full_reference(problem: Problem, mask, q, k, v, dout: torch.Tensor | None, sinks: torch.Tensor | None = None):
    """The reference output (and gradients for dout: of q, k, v and the sinks where given) in float32, detached."""
    given = (q, k, v) if sinks is None else (q, k, v, sinks)
    leaves = tuple(t.detach().float().requires_grad_(problem.direction != "fwd") for t in given)
    qf, kf, vf = leaves[:3]
    ref = reference.attention(qf, kf, vf, mask, sinks=leaves[3] if sinks is not None else None)
    grads = None
    if problem.direction != "fwd":
        assert dout is not None  # made for every direction but fwd
        grads = tuple(g.detach() for g in _grads(ref, leaves, dout.float()))
    return ref.detach(), grads


def full_check(problem: Problem, mask, result: tuple[torch.Tensor, ...], q, k, v, dout: torch.Tensor | None,
               phases: Phases, sample: int = 0, sinks: torch.Tensor | None = None) -> dict[str, float]:
    """Relative errors of a timed call's `result` (out, and dq, dk, dv, dsinks but for fwd) against the
    float32 reference on the same mask (`shared`: computed once per case and inputs, whichever kernel asks first)."""
    phases("reference")
    ref, want = shared.get(reference_key(problem, sample, "full"), (q, k, v, dout, sinks),
                           lambda: _full_reference(problem, mask, q, k, v, dout, sinks))
    phases("check")
    errors = {"out": rel_err(result[0], ref)}
    if problem.direction != "fwd":
        assert dout is not None and want is not None
        errors.update({n: rel_err(g, w) for n, g, w in zip(GRAD_NAMES[:len(want)], result[1:], want, strict=True)})
    return errors


def _spot_reference(problem: Problem, mask, q, k, v, sinks: torch.Tensor | None = None) -> torch.Tensor:
    rows = [reference.forward_lse(q.detach(), k.detach(), v.detach(), mask, rows=(r0, r1))
            for r0, r1 in spot_windows(problem)]
    return torch.cat([out if sinks is None else reference.with_sinks(out, lse, sinks.detach())[0]
                      for out, lse in rows], 1)


def spot_check(problem: Problem, mask, out: torch.Tensor, q, k, v, phases: Phases, sample: int = 0,
               sinks: torch.Tensor | None = None) -> dict[str, float]:
    """Relative error of a timed call's output on a few query windows against the reference on those rows."""
    phases("reference")
    with torch.no_grad():
        want = shared.get(reference_key(problem, sample, "spot"), (q, k, v, sinks),
                          lambda: _spot_reference(problem, mask, q, k, v, sinks))
        phases("check")
        got = torch.cat([out[:, r0:r1] for r0, r1 in spot_windows(problem)], 1)
    return {"out_rows": rel_err(got, want)}
