"""Head parallelism (Ulysses all-to-all) around a single or double ring: the engine of four strategies.

W ranks form a grid of `head_degree` U x ring size R (rank = ring_position * U + head_index, so
head-parallel groups are consecutive ranks, the fast links of one host). Inside a head group an
all-to-all turns sequence shards into head shards; across groups the ring (with `windows`
windows, see `ring`) passes K/V. Ulysses is U = W (a ring of one), Ring P2P is U = 1 with one
window, USP is U and R both > 1, LoongTrain adds windows > 1.

GQA: query heads are split over U; when U does not divide the KV heads they are repeated by the
smallest factor f that makes `heads_kv * f` a multiple of U (f always divides the query group
when U divides the query heads, so each rank keeps whole groups).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from longca.masks.mask import Mask
from longca.problem import Problem

from .comm import group_ranks, head_to_seq, seq_to_head, subgroup
from .inner import InnerKernel
from .layout import LAYOUTS
from .plan import CPPlan
from .ring import RingPlan, ring_attention, ring_plan
from .schedule import RingSchedule, kv_repeat  # noqa: F401 - kv_repeat is part of this module's API


def heads_unsupported(heads_q: int, heads_kv: int, degree: int) -> str | None:
    """Why `degree` head-parallel ranks cannot split these heads, or None."""
    if heads_q % degree:
        return f"{heads_q} query heads do not divide over {degree} head-parallel ranks"
    # then kv_repeat always divides the GQA group: degree / gcd(heads_kv, degree) divides heads_q / heads_kv
    return None


def hybrid_unsupported(problem: Problem, head_degree: int, windows: int, layout: str) -> str | None:
    """Why this grid (head degree, windows, layout) cannot run the problem, or None."""
    world = problem.world_size
    if head_degree < 1 or world % head_degree:
        return f"head-parallel degree {head_degree} does not divide the world size {world}"
    ring = world // head_degree
    if windows < 1 or ring % windows:
        return f"{windows} windows do not divide the ring of {ring} ranks"
    if layout not in LAYOUTS:
        return f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}"
    reason = heads_unsupported(problem.heads_q, problem.heads_kv, head_degree)
    if reason:
        return reason
    need = math.lcm(2 * ring, world) if layout != "contiguous" else world
    if problem.seqlen % need:
        return (f"sequence length {problem.seqlen} is not a multiple of {need} "
                f"({'2 x ring size and world size' if layout != 'contiguous' else 'world size'}, {layout} layout)")
    return None


@dataclass
class HybridPlan(CPPlan):
    """CPPlan plus the head-parallel group and the ring plan."""

    head_degree: int = 1
    head_group: Any = None
    kv_repeat: int = 1
    ring: RingPlan | None = None


def hybrid_schedule(problem: Problem, mask: Mask, head_degree: int, windows: int, layout: str) -> RingSchedule:
    """The schedule (layouts, calls per step, transfers) of this grid; no process group needed."""
    return RingSchedule(problem, mask.static_slices(), head_degree, windows, layout)


def prepare_hybrid(schedule: RingSchedule, inner: InnerKernel, group, options: dict) -> HybridPlan:
    """The plan of this rank (collective over `group`: every member calls it)."""
    ranks = group_ranks(group)
    rank = dist.get_rank(group)
    if len(ranks) != schedule.world:
        raise ValueError(f"schedule for {schedule.world} ranks, group of {len(ranks)}")
    head_degree = schedule.head_degree
    position, head_index = schedule.position(rank)
    head_group = None
    if head_degree > 1:
        head_group = subgroup([ranks[position * head_degree + u] for u in range(head_degree)])
    ring_ranks = [ranks[p * head_degree + head_index] for p in range(schedule.ring_size)]
    ring = ring_plan(schedule, position, ring_ranks, inner)
    return HybridPlan(schedule.layout, rank, group, inner, dict(options), head_degree, head_group,
                      schedule.kv_repeat, ring)


def hybrid_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: HybridPlan) -> torch.Tensor:
    """Distributed attention of the local shards (B, S/W, H, D) -> (B, S/W, Hq, D), autograd-aware."""
    if plan.head_degree > 1:
        if plan.kv_repeat > 1:
            k = k.repeat_interleave(plan.kv_repeat, dim=2)
            v = v.repeat_interleave(plan.kv_repeat, dim=2)
        q, k, v = (seq_to_head(t, plan.head_group) for t in (q, k, v))
    assert plan.ring is not None  # prepare_hybrid sets it; the default exists for the dataclass order only
    out = ring_attention(q, k, v, plan.ring)
    return head_to_seq(out, plan.head_group) if plan.head_degree > 1 else out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def default_head_degree(problem: Problem, at_most: int) -> int:
    """The largest head-parallel degree <= at_most that divides the world size and the heads.

    Capped by LOCAL_WORLD_SIZE (the ranks of one host, set by torchrun) so that the all-to-all
    stays on one host's links.
    """
    import os

    cap = min(at_most, int(os.environ.get("LOCAL_WORLD_SIZE", problem.world_size)))
    fits = [d for d in _divisors(problem.world_size)
            if d <= max(1, cap) and heads_unsupported(problem.heads_q, problem.heads_kv, d) is None]
    return max(fits) if fits else 1
