"""Correctness checks of a measured case against the float32 reference: the whole output and
gradients ("full"), or the forward on a few seeded query windows ("spot") where the whole
reference would cost more than the measurement."""
from __future__ import annotations

import numpy as np
import torch

from longca import reference
from longca.problem import Problem
from longca.results import Checked
from longca_runner.measure.options import FULL_CHECK_FLOPS, SPOT_ROWS, SPOT_WINDOWS, RunOptions
from longca_runner.measure.phases import Phases


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


def spot_windows(problem: Problem) -> list[tuple[int, int]]:
    """A few query windows, seeded by the case: random ones and the last rows (where tails go wrong)."""
    rows = min(SPOT_ROWS, problem.seqlen)
    rng = np.random.default_rng([problem.seed, problem.seqlen, 17])
    starts = {problem.seqlen - rows, *rng.integers(0, problem.seqlen - rows + 1, SPOT_WINDOWS - 1).tolist()}
    return [(int(a), int(a) + rows) for a in sorted(starts)]


def _grads(out: torch.Tensor, inputs, dout: torch.Tensor):
    return torch.autograd.grad(out, inputs, dout, retain_graph=True)


def full_check(spec, problem: Problem, mask, prepared, q, k, v, dout: torch.Tensor | None,
               phases: Phases) -> dict[str, float]:
    """Relative errors of output (and gradients) against the float32 reference on the same mask."""
    phases("check")
    qf, kf, vf = (t.detach().float().requires_grad_(problem.direction != "fwd") for t in (q, k, v))
    ref = reference.attention(qf, kf, vf, mask)
    out = spec.run(prepared, q, k, v)
    errors = {"out": rel_err(out, ref)}
    if problem.direction != "fwd":
        assert dout is not None  # made for every direction but fwd
        got = _grads(out, (q, k, v), dout)
        want = _grads(ref, (qf, kf, vf), dout.float())
        errors.update({f"d{n}": rel_err(g, w) for n, g, w in zip("qkv", got, want, strict=True)})
    return errors


def spot_check(spec, problem: Problem, mask, prepared, q, k, v, phases: Phases) -> dict[str, float]:
    """Relative error of the forward on a few query windows against the reference on those rows only."""
    phases("check")
    with torch.no_grad():
        out = spec.run(prepared, q, k, v)
        got, want = [], []
        for r0, r1 in spot_windows(problem):
            got.append(out[:, r0:r1])
            want.append(reference.forward_lse(q.detach(), k.detach(), v.detach(), mask, rows=(r0, r1))[0])
    return {"out_rows": rel_err(torch.cat(got, 1), torch.cat(want, 1))}
