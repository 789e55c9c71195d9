"""Per-rank accounting of a CP case without running attention: work, calls and bytes of every rank.

Everything comes from the strategy's own `schedule` (see `schedule`): the calls its `prepare`
hands the inner kernel and the transfers its collectives make. Areas are head-normalised (a
rank's unmasked pairs times the fraction of the query heads it runs on), so they sum to the
mask's area and `area_mean` is area / W. `balance` is what every CP row carries.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from longca.errors import UnsupportedError
from longca.masks.mask import Mask
from longca.plugins import Registry, get_registry
from longca.problem import Problem

from .schedule import CommOp, Schedule


def schedule_of(problem: Problem, mask: Mask, options: dict[str, Any],
                registry: Registry | None = None) -> Schedule:
    """The strategy's schedule for this problem (options resolved); UnsupportedError when it cannot run it."""
    spec = (registry or get_registry()).strategy(problem.strategy)
    if spec.schedule is None:
        raise UnsupportedError(f"strategy {spec.name} gives no schedule, so it cannot be accounted or simulated")
    reason = spec.supports(problem, options) if spec.supports else None
    if reason:
        raise UnsupportedError(reason)
    return spec.schedule(problem, mask, options)


def link_bytes(op: CommOp) -> int:
    """Bytes that leave the rank for one op (NCCL's bus-bandwidth convention: (n-1)/n of a collective's size)."""
    if op.kind == "p2p":
        return op.nbytes
    n = op.group_size
    return op.nbytes * (n - 1) // n


@dataclass
class RankTotals:
    """Per rank (arrays of length W): head-normalised area, calls, bytes sent forward and backward."""

    area: np.ndarray
    calls: np.ndarray
    bytes_fwd: np.ndarray
    bytes_bwd: np.ndarray


def rank_totals(schedule: Schedule) -> RankTotals:
    world = schedule.world
    heads_q = schedule.problem.heads_q
    area, calls = np.zeros(world), np.zeros(world, dtype=np.int64)
    for rep, ranks in schedule.classes():
        if rep not in schedule.totals:  # (simulating the schedule made them already)
            schedule.rank_calls(rep)
        rep_area, rep_calls, rep_heads = schedule.totals[rep]
        area[ranks] = float(rep_area) * rep_heads / heads_q
        calls[ranks] = rep_calls
    fwd, bwd = np.zeros(world, dtype=np.int64), np.zeros(world, dtype=np.int64)
    for rep, same in schedule.comm_classes():  # (ranks whose transfers have the same sizes)
        for op in schedule.comm(rep):
            (fwd if op.phase == "fwd" else bwd)[same] += link_bytes(op) * op.count
    return RankTotals(area, calls, fwd, bwd)


def balance_of(totals: RankTotals) -> dict[str, Any]:
    mean = float(totals.area.mean())
    peak = float(totals.area.max())
    return {"area_max": peak, "area_mean": mean,
            "imbalance_pct": 100.0 * (peak / mean - 1.0) if mean > 0 else 0.0,
            "busiest_rank": int(totals.area.argmax()),
            "calls_max": int(totals.calls.max()), "calls_total": int(totals.calls.sum()),
            "comm_bytes_fwd_max": int(totals.bytes_fwd.max()), "comm_bytes_bwd_max": int(totals.bytes_bwd.max()),
            "comm_bytes_fwd_total": int(totals.bytes_fwd.sum()), "comm_bytes_bwd_total": int(totals.bytes_bwd.sum())}


def balance(problem: Problem, mask: Mask, options: dict[str, Any],
            registry: Registry | None = None) -> dict[str, Any]:
    """The balance figures of one mask draw (see the module docstring)."""
    return balance_of(rank_totals(schedule_of(problem, mask, options, registry)))


def median_balance(draws: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over mask draws (document masks are measured over several)."""
    if len(draws) == 1:
        return draws[0]
    out: dict[str, Any] = {}
    for key in draws[0]:
        values = [d[key] for d in draws]
        med = float(np.median(values))
        out[key] = int(round(med)) if isinstance(values[0], int) else med
    return out
