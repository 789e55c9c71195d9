"""The all-gather algorithm: plan, forward, backward (imported lazily by `hooks`)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from longca.plugin import lse_attention
from longca_cp.plugin import (
    Call,
    CPPlan,
    GradAccumulator,
    OutputAccumulator,
    backward_calls,
    forward_calls,
    gather_seq,
    reduce_scatter_seq,
)


@dataclass
class AllGatherPlan(CPPlan):
    """CPPlan plus the calls of the local query runs against the whole (gathered) key sequence."""

    calls: list[Call] = field(default_factory=list)


def prepare(schedule, inner, group, options) -> AllGatherPlan:
    """This rank's plan from the strategy's `GatherSchedule` (layout and calls)."""
    if dist.get_world_size(group) != schedule.world:
        raise ValueError(f"schedule for {schedule.world} ranks, group of {dist.get_world_size(group)}")
    rank = dist.get_rank(group)
    return AllGatherPlan(schedule.layout, rank, group, inner, dict(options), schedule.calls(rank))


def _gather(x: torch.Tensor, plan: AllGatherPlan) -> torch.Tensor:
    """The global tensor in sequence order from every rank's shard."""
    return plan.layout.assemble(gather_seq(x, plan.group))


def forward(q, k, v, plan: AllGatherPlan):
    acc = OutputAccumulator(q, v.shape[-1])
    forward_calls(plan.inner, q, _gather(k, plan), _gather(v, plan), plan.calls, acc)
    return acc.result(q.dtype)


def backward(dout, q, k, v, out, lse, plan: AllGatherPlan):
    k_all, v_all = _gather(k, plan), _gather(v, plan)
    dq, dk, dv = GradAccumulator(q), GradAccumulator(k_all), GradAccumulator(v_all)
    backward_calls(plan.inner, dout, q, k_all, v_all, out, lse, plan.calls, dq, dk, dv)
    wide = torch.float32 if plan.layout.world_size > 1 else None  # partial sums cross ranks in float32
    dk_l = reduce_scatter_seq(plan.layout.split(dk.result(wide)), plan.group)
    dv_l = reduce_scatter_seq(plan.layout.split(dv.result(wide)), plan.group)
    return dq.result(q.dtype), dk_l.to(k.dtype), dv_l.to(v.dtype)


def attention(q, k, v, plan: AllGatherPlan) -> torch.Tensor:
    return lse_attention(lambda q_, k_, v_: forward(q_, k_, v_, plan),
                         lambda dout, q_, k_, v_, out, lse: backward(dout.contiguous(), q_, k_, v_, out, lse, plan),
                         q, k, v)
