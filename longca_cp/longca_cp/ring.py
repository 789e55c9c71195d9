"""Ring attention over P2P, single or double ring, forward and backward (autograd).

R ring ranks, each holding queries and keys/values of its own runs. K/V blocks travel around the
ring while every rank attends its queries to the block in hand, merging partial outputs by their
lse. The double ring (LoongTrain) groups the R ranks into `windows` windows of w = R / windows
consecutive ranks: an inner ring passes blocks inside a window (w steps), and between inner rings
an outer ring passes blocks to the same position in the next window, overlapped with the whole
inner ring. One window is the plain ring.

Ring position p = a * w + b (window a, index b). At step (o, t) rank (a, b) holds the block of
rank ((a - o) mod windows, (b - t) mod w). In the backward the K/V blocks travel the same way and
their gradients travel with them: a block's dK/dV accumulator follows it around the inner ring
and comes back to the rank holding the block's outer copy, which adds the window's sum to the
accumulator arriving on the outer ring and sends it on; after the last step each accumulator is
one hop from home and takes it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from longca.autograd import lse_attention
from longca.merge import GradAccumulator, OutputAccumulator

from .attend import backward_calls, forward_calls
from .calls import Call
from .comm import Exchange, subgroup
from .inner import InnerKernel
from .schedule import RingSchedule


@dataclass
class RingPlan:
    """What one rank needs to run the ring: schedule, peers, groups and the calls for every source."""

    schedule: RingSchedule
    position: int
    inner: InnerKernel
    calls: dict[int, list[Call]]  # source ring position -> calls (local q buffer x that source's buffer)
    inner_group: object | None = None
    inner_next: int = -1
    inner_prev: int = -1
    outer_group: object | None = None
    outer_next: int = -1
    outer_prev: int = -1

    @property
    def size(self) -> int:
        return self.schedule.ring_size

    @property
    def windows(self) -> int:
        return self.schedule.windows

    @property
    def window(self) -> int:
        return self.schedule.window

    def source(self, o: int, t: int) -> int:
        return self.schedule.source(self.position, o, t)


def ring_plan(schedule: RingSchedule, position: int, ring_ranks: Sequence[int], inner: InnerKernel) -> RingPlan:
    """The plan of ring position `position`; `ring_ranks[p]` is the global rank at position p.

    Every member of the ring calls this together (it creates the inner and outer subgroups).
    The calls and the step order are the schedule's (the same the accounting reads).
    """
    size, windows = len(ring_ranks), schedule.windows
    if size != schedule.ring_size or size % windows:
        raise ValueError(f"ring of {size} ranks does not match the schedule's {schedule.ring_size} / {windows} windows")
    w = size // windows
    plan = RingPlan(schedule, position, inner, schedule.calls_by_source(position))
    a, b = divmod(position, w)
    if w > 1:
        members = [ring_ranks[a * w + i] for i in range(w)]
        plan.inner_group = subgroup(members)
        plan.inner_next, plan.inner_prev = members[(b + 1) % w], members[(b - 1) % w]
    if windows > 1:
        members = [ring_ranks[i * w + b] for i in range(windows)]
        plan.outer_group = subgroup(members)
        plan.outer_next, plan.outer_prev = members[(a + 1) % windows], members[(a - 1) % windows]
    return plan


def _inner_exchange(plan: RingPlan, tensors: Sequence[torch.Tensor]) -> Exchange:
    return Exchange(tensors, plan.inner_next, plan.inner_prev, plan.inner_group)


def _outer_exchange(plan: RingPlan, tensors: Sequence[torch.Tensor]) -> Exchange:
    return Exchange(tensors, plan.outer_next, plan.outer_prev, plan.outer_group)


def _pair(tensors: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The (k, v) or (dk, dv) pair an exchange delivered."""
    first, second = tensors
    return first, second


def ring_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: RingPlan):
    """(output in q's dtype, lse float32 (B, H, S)) of the local queries against the whole ring."""
    acc = OutputAccumulator(q, v.shape[-1])
    outer_kv = (k, v)
    for o in range(plan.windows):
        outer = _outer_exchange(plan, outer_kv) if o + 1 < plan.windows else None
        cur = outer_kv
        for t in range(plan.window):
            nxt = _inner_exchange(plan, cur) if t + 1 < plan.window else None
            forward_calls(plan.inner, q, cur[0], cur[1], plan.calls[plan.source(o, t)], acc)
            if nxt is not None:
                cur = _pair(nxt.wait())
        if outer is not None:
            outer_kv = _pair(outer.wait())
    return acc.result(q.dtype)


def ring_backward(dout, q, k, v, out, lse, plan: RingPlan):
    """(dq, dk, dv) of the local shards, in their dtypes."""
    dq = GradAccumulator(q)
    outer_kv = (k, v)
    outer_dkv: Exchange | None = None
    result: list[torch.Tensor] | None = None
    for o in range(plan.windows):
        outer = _outer_exchange(plan, outer_kv) if o + 1 < plan.windows else None
        cur = outer_kv
        inner_dkv: Exchange | None = None
        for t in range(plan.window):
            nxt = _inner_exchange(plan, cur) if t + 1 < plan.window else None
            dk, dv = GradAccumulator(k), GradAccumulator(v)
            backward_calls(plan.inner, dout, q, cur[0], cur[1], out, lse, plan.calls[plan.source(o, t)], dq, dk, dv)
            if inner_dkv is not None:
                got = inner_dkv.wait()
                dk.add_full(got[0])
                dv.add_full(got[1])
            travels = plan.window > 1 or plan.windows > 1  # sums that cross ranks are kept in float32
            block = [dk.result(torch.float32 if travels else None), dv.result(torch.float32 if travels else None)]
            inner_dkv = _inner_exchange(plan, block) if plan.window > 1 else None
            if nxt is not None:
                cur = _pair(nxt.wait())
        window_sum = inner_dkv.wait() if inner_dkv is not None else block
        if outer_dkv is not None:
            got = outer_dkv.wait()
            window_sum = [window_sum[0] + got[0], window_sum[1] + got[1]]
        if plan.windows > 1:
            outer_dkv = _outer_exchange(plan, window_sum)
        else:
            result = window_sum
        if outer is not None:
            outer_kv = _pair(outer.wait())
    if outer_dkv is not None:
        result = outer_dkv.wait()
    assert result is not None  # the last window's sum, kept or received
    return dq.result(q.dtype), result[0].to(k.dtype), result[1].to(v.dtype)


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: RingPlan) -> torch.Tensor:
    """Ring attention of the local shards (autograd-aware)."""
    return lse_attention(lambda q_, k_, v_: ring_forward(q_, k_, v_, plan),
                         lambda dout, q_, k_, v_, out, lse: ring_backward(dout.contiguous(), q_, k_, v_, out, lse,
                                                                          plan), q, k, v)
