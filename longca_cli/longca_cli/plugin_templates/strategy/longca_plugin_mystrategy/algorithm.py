"""The algorithm: every rank gathers the whole K and V, attends its own queries through the inner
kernel (one call per query run, the mask cropped to it), and the backward reduce-scatters the
partial dK and dV to the ranks that own those keys. Replace it with yours: `prepare` runs once per
mask (collective), `attention` on every timed step, differentiable through `lse_attention`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from longca import plugin
from longca_cp import plugin as cp


@dataclass
class AllGatherPlan(cp.CPPlan):
    calls: list = field(default_factory=list)  # cp.Call: this rank's query runs against all keys, mask cropped


def rank_calls(mask_slices, layout, rank: int) -> list:
    """The inner-kernel calls of one rank: its query runs against the whole key sequence."""
    return cp.pair_calls(mask_slices, layout.runs[rank], [(0, layout.seqlen)])


def prepare(layout, mask, inner, group, options) -> AllGatherPlan:
    rank = dist.get_rank(group)
    return AllGatherPlan(layout, rank, group, inner, dict(options), rank_calls(mask.slices, layout, rank))


def _gather(x, plan: AllGatherPlan):
    """The global tensor, in sequence order, from every rank's tokens."""
    return plan.layout.assemble(cp.gather_seq(x, plan.group))


def forward(q, k, v, plan: AllGatherPlan):
    acc = cp.OutputAccumulator(q, v.shape[-1])
    cp.forward_calls(plan.inner, q, _gather(k, plan), _gather(v, plan), plan.calls, acc)
    return acc.result(q.dtype)  # (out, lse): the lse is what the backward needs


def backward(dout, q, k, v, out, lse, plan: AllGatherPlan):
    k_all, v_all = _gather(k, plan), _gather(v, plan)
    dq, dk, dv = cp.GradAccumulator(q), cp.GradAccumulator(k_all), cp.GradAccumulator(v_all)
    cp.backward_calls(plan.inner, dout.contiguous(), q, k_all, v_all, out, lse, plan.calls, dq, dk, dv)
    # every rank holds partial gradients of every key: summed (in float32) on the rank that owns the key
    dk_local = cp.reduce_scatter_seq(plan.layout.split(dk.result(torch.float32)), plan.group)
    dv_local = cp.reduce_scatter_seq(plan.layout.split(dv.result(torch.float32)), plan.group)
    return dq.result(q.dtype), dk_local.to(k.dtype), dv_local.to(v.dtype)


def attention(q, k, v, plan: AllGatherPlan):
    """Differentiable: `lse_attention` keeps (q, k, v, out, lse) and calls `backward` for the gradients."""
    return plugin.lse_attention(lambda q_, k_, v_: forward(q_, k_, v_, plan),
                                lambda *grad_args: backward(*grad_args, plan), q, k, v)
