"""Correctness of a strategy: output and gradients of q, k, v against the single-device reference."""
from __future__ import annotations

import logging
import secrets
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from longca import reference
from longca.plugins import Registry, get_registry
from longca.problem import Problem, build_mask, make_inputs
from longca_cp.inner import inner_kernel
from longca_runner.measure import rel_err, seeded_dout

log = logging.getLogger(__name__)


def secret_inputs(problem: Problem, group=None, sample: int = 0, requires_grad: bool = False):
    """Global q, k, v of the problem's shapes from a seed rank 0 draws from the OS and broadcasts:
    the same on every rank, but not derivable from the problem, so a strategy that regenerated the
    other ranks' K/V from the seeded inputs instead of communicating them computes on other values
    and fails its check (docs/timing-integrity.md). Collective."""
    group = group or dist.group.WORLD
    device = torch.device(problem.device)
    seed = torch.tensor([secrets.randbits(31) if dist.get_rank(group) == 0 else 0], dtype=torch.int64, device=device)
    dist.broadcast(seed, src=dist.get_global_rank(group, 0), group=group)
    return make_inputs(problem.with_(seed=int(seed.item())), sample, requires_grad)


def _recorded(moved: dict[str, list] | None, phase: str):
    """`comm.recording` of one pass into `moved[phase]`, or nothing when `moved` is None."""
    from contextlib import nullcontext

    from longca_cp.comm import recording

    if moved is None:
        return nullcontext()

    @contextmanager
    def into() -> Iterator[None]:
        with recording() as ledger:
            yield
            moved[phase] = list(ledger)

    return into()


def outputs(spec, plan, problem: Problem, mask, q, k, v, dout: torch.Tensor | None,
            moved: dict[str, list] | None = None):
    """(got, want): the strategy's global out (and dq, dk, dv when `dout`) and the reference's; on rank 0,
    else None. Collective: every rank of the plan's group calls it with the same global tensors.
    `moved`, where given, gets this rank's transfers of the forward and backward (`comm.recording`:
    not dispatch and undispatch, which no schedule accounts)."""
    backward = dout is not None
    local = [spec.dispatch(t.detach(), plan).detach().requires_grad_(backward) for t in (q, k, v)]
    with _recorded(moved, "fwd"):
        out_l = spec.attention(*local, plan)
    got = {"out": spec.undispatch(out_l, plan)}
    if backward:
        dout_l = spec.dispatch(dout, plan)
        with _recorded(moved, "bwd"):
            grads = torch.autograd.grad(out_l, local, dout_l)
        got.update({f"d{n}": spec.undispatch(g, plan) for n, g in zip("qkv", grads, strict=True)})
    if dist.get_rank(plan.group) != 0:
        return None
    ref_in = [t.detach().float().requires_grad_(backward) for t in (q, k, v)]
    ref = reference.attention(ref_in[0], ref_in[1], ref_in[2], mask)
    want = {"out": ref}
    if dout is not None:
        want.update({f"d{n}": g for n, g in zip("qkv", torch.autograd.grad(ref, ref_in, dout.float()), strict=True)})
    return got, want


def compare(spec, plan, problem: Problem, mask, q, k, v, dout: torch.Tensor | None) -> dict[str, float] | None:
    """Relative errors (out, and dq, dk, dv when `dout`) of the strategy on global inputs; on rank 0, else None.

    Collective: every rank of the plan's group calls it with the same global tensors.
    """
    both = outputs(spec, plan, problem, mask, q, k, v, dout)
    if both is None:
        return None
    got, want = both
    return {name: rel_err(got[name], want[name]) for name in got}


def spot_compare(spec, plan, problem: Problem, mask, q, k, v) -> dict[str, float] | None:
    """The forward's relative error on a few query windows (`measure.spot_windows`) against the
    reference on those rows only; on rank 0, else None. Collective, like `compare`."""
    from longca_runner.measure import spot_windows

    with torch.no_grad():
        out = spec.undispatch(spec.attention(*(spec.dispatch(t.detach(), plan) for t in (q, k, v)), plan), plan)
        if dist.get_rank(plan.group) != 0:
            return None
        windows = spot_windows(problem)
        got = torch.cat([out[:, a:b] for a, b in windows], 1)
        want = torch.cat([reference.forward_lse(q, k, v, mask, rows=w)[0] for w in windows], 1)
    return {"out_rows": rel_err(got, want)}


def check_problem(problem: Problem, options: dict[str, Any], group=None,
                  registry: Registry | None = None, sample: int = 0) -> dict[str, float] | None:
    """Build mask, inputs and plan for `problem` and compare (collective; result on rank 0)."""
    registry = registry or get_registry()
    spec = registry.strategy(problem.strategy)
    group = group or dist.group.WORLD
    inner = inner_kernel(problem, registry)
    mask = build_mask(problem, sample, registry)
    resolved = spec.resolve_options(problem, options) if spec.resolve_options else dict(options)
    plan = spec.prepare(problem, mask, inner, group, resolved)
    q, k, v = secret_inputs(problem, group, sample)
    dout = seeded_dout(problem, sample) if problem.direction != "fwd" else None
    return compare(spec, plan, problem, mask, q, k, v, dout)


def check_cases(device: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run many checks in one process group (the body of `run_checks`, on every rank).

    Each case is {"problem": Problem fields, "options": {...}}; the answer per case has `errors`
    (rank 0) or `error` (the exception, if the case raised).
    """
    results = []
    for case in cases:
        problem = Problem(**{**case["problem"], "device": device, "world_size": dist.get_world_size()})
        try:
            errors = check_problem(problem, case.get("options", {}))
            results.append({**case, "errors": errors})
        except Exception as exc:  # noqa: BLE001 - reported per case; the other ranks raise the same
            log.debug("check failed", exc_info=True)
            results.append({**case, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
    return results


def run_checks(cases: list[dict[str, Any]], world_size: int, backend: str = "gloo", device: str = "cpu",
               timeout_s: float = 300) -> list[dict[str, Any]]:
    """Spawn `world_size` processes once and check every case there; rank 0's answers."""
    from longca_runner.cp.launch import spawn

    return spawn(check_cases, world_size, backend, device, (cases,), timeout_s)[0]


def transfer_cases(device: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every transfer each case's forward and backward really make on this rank (`comm.recording`).

    Run in a spawned group (`launch.spawn`); tests compare the answer with `schedule.comm`.
    """
    from longca_cp.comm import recording

    registry = get_registry()
    answers = []
    for case in cases:
        problem = Problem(**{**case["problem"], "device": device, "world_size": dist.get_world_size()})
        spec = registry.strategy(problem.strategy)
        options = spec.resolve_options(problem, case.get("options", {})) if spec.resolve_options else {}
        mask = build_mask(problem, 0, registry)
        plan = spec.prepare(problem, mask, inner_kernel(problem, registry), dist.group.WORLD, options)
        local = [spec.dispatch(t, plan).detach().requires_grad_(True) for t in make_inputs(problem, 0)]
        with recording() as fwd:
            out = spec.attention(local[0], local[1], local[2], plan)
        dout = spec.dispatch(seeded_dout(problem, 0), plan)
        with recording() as bwd:
            torch.autograd.grad(out, local, dout)
        answers.append({"fwd": fwd, "bwd": bwd, "options": options})
    return answers
