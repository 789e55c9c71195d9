"""Measuring a context-parallel case: per-rank timing, reduction across ranks, the result row.

Every rank times its own forward (or backward) with the strategy; the per-rank medians are
gathered. As in the paper, the row's time is the mean over ranks (`ms_median`, with the mean
20th and 80th percentiles) and `tflops` is TFLOP/s per GPU: the problem's FLOPs / world size /
mean rank time. `ms_max_rank` is the slowest rank's median, which bounds a training step.
`flops` is the whole problem's. Document masks are measured over several mask draws and the
median of each quantity is reported, as for single kernels.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from longca.errors import LongcaError, UnsupportedError
from longca.flops import problem_flops
from longca.plugins import Registry, get_registry
from longca.problem import Problem
from longca.results import ResultRow, new_row
from longca_cp.accounting import balance, balance_of, median_balance, rank_totals
from longca_cp.inner import inner_kernel
from longca_cp.schedule import capturing
from longca_runner.cp.check import compare, secret_inputs, spot_compare
from longca_runner.measure import (
    TOLERANCE,
    Phases,
    Readback,
    RunOptions,
    Sample,
    check_mode,
    checked_step,
    fail,
    finish,
    mask_of,
    mask_refusal,
    n_samples,
    seeded_dout,
    summarize_samples,
    time_step,
)
from longca_runner.timing import host_ms

log = logging.getLogger(__name__)


def resolve(problem: Problem, options: dict[str, Any], registry: Registry | None = None) -> dict[str, Any]:
    """The strategy's options with defaults filled (unknown names raise LongcaError)."""
    return (registry or get_registry()).strategy(problem.strategy).resolved_options(problem, options)


def _reduce(ranks: list) -> tuple[tuple[float, float, float], list[float], int | None, float, float]:
    """Across ranks, as in the paper: the mean rank median (and mean percentiles and iterations);
    the largest peak, prepare time and rank median (which bounds a training step)."""
    medians = [float(np.median(r[0])) for r in ranks]
    p20 = float(np.mean([np.percentile(r[0], 20) for r in ranks]))
    p80 = float(np.mean([np.percentile(r[0], 80) for r in ranks]))
    iterations = [float(t) for t in np.mean([r[0] for r in ranks], axis=0)]
    peaks = [r[1] for r in ranks if r[1] is not None]
    return ((float(np.mean(medians)), p20, p80), iterations, max(peaks) if peaks else None,
            float(max(r[2] for r in ranks)), float(max(medians)))


def gather_timings(times: list[float], peak: int | None, prepare_ms: float, group,
                   device: torch.device) -> list[tuple[list[float], int | None, float]]:
    """Every rank's (times, peak, prepare ms) through tensor collectives, never all_gather_object:
    gloo ranks listen on 127.0.0.1 and an object collective unpickles whatever arrives, so what a
    rank sends is numbers only (docs/reliability.md)."""
    on = device if dist.get_backend(group) == "nccl" else torch.device("cpu")
    world = dist.get_world_size(group)
    length = torch.tensor([len(times)], dtype=torch.int64, device=on)
    lengths = [torch.zeros_like(length) for _ in range(world)]
    dist.all_gather(lengths, length, group=group)
    longest = int(max(int(n.item()) for n in lengths))
    packed = torch.full((3 + longest,), float("nan"), dtype=torch.float64, device=on)
    packed[0], packed[1], packed[2] = len(times), -1.0 if peak is None else float(peak), prepare_ms
    packed[3:3 + len(times)] = torch.tensor(times, dtype=torch.float64)
    gathered = [torch.empty_like(packed) for _ in range(world)]
    dist.all_gather(gathered, packed, group=group)
    out = []
    for row in (g.cpu().tolist() for g in gathered):
        n = int(row[0])
        out.append((row[3:3 + n], None if row[1] < 0 else int(row[1]), row[2]))
    return out


def _sample(spec, problem: Problem, options: dict, inner, sample: int, run: RunOptions, check: bool,
            group, device: torch.device, registry: Registry, phases: Phases) -> Sample:
    needs_grad = problem.direction != "fwd"
    mask = mask_of(problem, sample, registry, phases)
    # the inner kernel may refuse this mask (a planner that cannot map its slices): every rank
    # decides the same from the same global mask, so they all stop here together
    refusal = mask_refusal(registry.kernel(problem.kernel), problem.with_(strategy=None, world_size=1), mask, phases)
    if refusal:
        raise UnsupportedError(f"inner kernel {problem.kernel}: {refusal}")
    phases("inputs")
    q, k, v = secret_inputs(problem, group, sample)  # not derivable from the seed: K/V must be communicated
    phases("prepare")
    with capturing() as built:  # the schedule prepare builds its plan from: the row's accounting reuses it
        prepare_ms, plan = host_ms(lambda: spec.prepare(problem, mask, inner, group, options), device)
    ql, kl, vl = (spec.dispatch(t, plan).detach().requires_grad_(needs_grad) for t in (q, k, v))
    dout_g = seeded_dout(problem, sample) if needs_grad else None
    dout = spec.dispatch(dout_g, plan) if needs_grad else None
    step = checked_step(lambda: spec.attention(ql, kl, vl, plan), (ql, kl, vl), problem.direction, dout, phases,
                        "this rank's output")
    readback = Readback(None, keep=False)  # every timed call of this rank must give the same result
    timed = time_step(step, device, run.fixed(), before_timing=lambda: dist.barrier(group), phases=phases,
                      after=readback)
    readback.verify()
    phases("gather")
    ranks = gather_timings(timed.times, timed.peak, prepare_ms, group, device)
    ms, iterations, peak, prepare_max, slowest = _reduce(ranks)
    flops = problem_flops(problem, mask.area)
    errors = None
    mode = check_mode(problem, mask, run) if check else "no"
    if mode != "no":
        phases("check")
        errors = (compare(spec, plan, problem, mask, q, k, v, dout_g) if mode == "full"
                  else spot_compare(spec, plan, problem, mask, q, k, v))
    extra: dict[str, Any] = {"flops_total": flops}
    if dist.get_rank(group) == 0 and spec.schedule is not None:  # from the strategy's own schedule
        extra["balance"] = (balance_of(rank_totals(built[0])) if len(built) == 1
                            else balance(problem, mask, options, registry))
    # TFLOP/s per GPU: the problem's FLOPs over the world size
    return Sample(ms, iterations, mask.area, flops / dist.get_world_size(group), peak, prepare_max, errors,
                  ms_max_rank=slowest, extra=extra, checked=mode)


def measure_rank(problem: Problem, options: dict[str, Any], run: RunOptions, group=None,
                 registry: Registry | None = None, phases: Phases | None = None) -> ResultRow | None:
    """This rank's part of one CP case (collective): the row on rank 0, None on the others.

    Raises whatever the strategy raised on this rank: the caller decides what the row says
    (`measure` here, or the group supervisor in `longca_runner.cp.group`, which hears every rank)."""
    registry = registry or get_registry()
    group = group or dist.group.WORLD
    phases = phases or Phases()
    spec = registry.strategy(problem.strategy)
    device = torch.device(problem.device)
    row = new_row(problem, strategy_options=dict(options))
    inner = inner_kernel(problem, registry)
    row.backend = inner.backend
    try:
        samples = [_sample(spec, problem, options, inner, sample, run, bool(run.check) and sample == 0, group, device,
                           registry, phases) for sample in range(n_samples(problem, run, registry))]
    except UnsupportedError as exc:  # the inner kernel refused the mask it was given: every rank alike
        row.status, row.reason = "unsupported", str(exc)
        return row if dist.get_rank(group) == 0 else None
    if dist.get_rank(group) != 0:
        return None
    summarize_samples(row, samples)
    row.flops = float(np.mean([s.extra["flops_total"] for s in samples]))  # the whole problem's
    if all("balance" in s.extra for s in samples):
        row.balance = median_balance([s.extra["balance"] for s in samples])
    return finish(row, samples[0].errors, run.tolerance or TOLERANCE[problem.dtype], samples[0].checked)


def measure(problem: Problem, options: dict[str, Any], run: RunOptions | None = None, group=None,
            registry: Registry | None = None) -> ResultRow | None:
    """Measure one CP case on every rank of `group` (collective); the result row on rank 0, else None.

    `options` must be resolved (`resolve`) and the case supported (`unsupported`): both are
    decided before processes start. Failures inside the strategy become rank 0's row (this
    rank's view of it: under torchrun, where no supervisor hears the other ranks).
    """
    run = run or RunOptions()
    group = group or dist.group.WORLD
    phases = Phases()
    try:
        return measure_rank(problem, options, run, group, registry, phases)
    except LongcaError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - recorded in the row
        log.debug("CP case failed", exc_info=True)
        row = fail(new_row(problem, strategy_options=dict(options)), exc, phases.current)
        row.reason = f"rank {dist.get_rank(group)} saw: {row.reason}"
        return row if dist.get_rank(group) == 0 else None


def measure_in_group(device: str, cases: list[tuple[dict[str, Any], dict[str, Any]]],
                     run_fields: dict[str, Any]) -> list[dict[str, Any]]:
    """`measure` of each (problem fields, options) case in a spawned group (see `launch.spawn`).

    Arguments are plain dicts (they cross process boundaries); rows come back from rank 0 with
    the problem's own device name, an empty list from the other ranks.
    """
    rows = []
    for fields, options in cases:
        row = measure(Problem(**{**fields, "device": device}), options, RunOptions(**run_fields))
        if row is not None:
            row.device = fields["device"]
            rows.append(row.model_dump())
    return rows
