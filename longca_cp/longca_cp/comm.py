"""Process-group helpers shared by the strategies: subgroups, sequence collectives, all-to-all, ring P2P.

Tensors are (batch, seqlen, heads, head_dim) and are sharded along the sequence (dim 1). The
collectives move the sequence dimension to the front so that each rank's part is contiguous.
Subgroups are created with local synchronisation (only their members call `new_group`) and
cached, so repeated plans reuse one communicator per set of ranks.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.distributed as dist

_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_subgroups: dict[tuple[str, tuple[int, ...]], object] = {}
# the collective timeout the group was started with (`launch.init_group`): subgroups get it too, since
# torch gives a new group its own default (30 min on gloo, 10 on NCCL), not the world's
_timeout: list = []
_ledger: list[tuple[str, int, int]] | None = None


@contextmanager
def recording() -> Iterator[list[tuple[str, int, int]]]:
    """Record (kind, bytes as NCCL's tests count them, peer or group size) of every transfer made here.

    How tests check `longca_cp.schedule`'s byte counts against what the strategies really send.
    """
    global _ledger
    _ledger = []
    try:
        yield _ledger
    finally:
        _ledger = None


def _record(kind: str, nbytes: int, peer_or_size: int) -> None:
    if _ledger is not None:
        _ledger.append((kind, int(nbytes), int(peer_or_size)))


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def set_timeout(timeout) -> None:
    """The timeout (a timedelta) every subgroup made from now on gets: the world group's."""
    _timeout[:] = [timeout]


def group_ranks(group=None) -> list[int]:
    """Global ranks of a process group, in group-rank order."""
    return list(dist.get_process_group_ranks(group or dist.group.WORLD))


def subgroup(ranks: Sequence[int], backend: str | None = None):
    """The process group of these global ranks (created once; only members may call this)."""
    key = (backend or dist.get_backend(), tuple(ranks))
    if key not in _subgroups:
        _subgroups[key] = dist.new_group(list(ranks), backend=backend, use_local_synchronization=True,
                                         timeout=_timeout[0] if _timeout else None)
    return _subgroups[key]


def size(group) -> int:
    return dist.get_world_size(group)


def gather_seq(x: torch.Tensor, group) -> list[torch.Tensor]:
    """Every rank's (B, S_local, H, D) tensor, in group-rank order."""
    world = size(group)
    if world == 1:
        return [x]
    front = x.transpose(0, 1).contiguous()
    out = torch.empty((world * front.shape[0], *front.shape[1:]), dtype=x.dtype, device=x.device)
    _all_gather(out, front, group=group)
    _record("all_gather", _nbytes(out), world)
    n = front.shape[0]
    return [out[i * n:(i + 1) * n].transpose(0, 1) for i in range(world)]


def reduce_scatter_seq(parts: Sequence[torch.Tensor], group) -> torch.Tensor:
    """Sum over ranks of their `parts[r]` (one (B, S_local, H, D) tensor per destination rank r)."""
    if len(parts) == 1:
        return parts[0]
    stacked = torch.cat([p.transpose(0, 1) for p in parts], 0).contiguous()
    out = torch.empty((stacked.shape[0] // len(parts), *stacked.shape[1:]), dtype=stacked.dtype,
                      device=stacked.device)
    _reduce_scatter(out, stacked, group=group)
    _record("reduce_scatter", _nbytes(stacked), len(parts))
    return out.transpose(0, 1)


def _a2a(x5: torch.Tensor, group) -> torch.Tensor:
    out = torch.empty_like(x5)
    dist.all_to_all_single(out, x5, group=group)
    _record("all_to_all", _nbytes(x5), size(group))
    return out


def _seq_to_head(x: torch.Tensor, group) -> torch.Tensor:
    world = size(group)
    b, s, h, d = x.shape
    x5 = x.reshape(b, s, world, h // world, d).permute(2, 1, 0, 3, 4).contiguous()
    return _a2a(x5, group).permute(2, 0, 1, 3, 4).reshape(b, world * s, h // world, d)


def _head_to_seq(y: torch.Tensor, group) -> torch.Tensor:
    world = size(group)
    b, s, h, d = y.shape
    y5 = y.reshape(b, world, s // world, h, d).permute(1, 2, 0, 3, 4).contiguous()
    return _a2a(y5, group).permute(2, 1, 0, 3, 4).reshape(b, s // world, world * h, d)


class _SeqToHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _seq_to_head(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _head_to_seq(grad, ctx.group), None


class _HeadToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, group):
        ctx.group = group
        return _head_to_seq(y, group)

    @staticmethod
    def backward(ctx, grad):
        return _seq_to_head(grad, ctx.group), None


def seq_to_head(x: torch.Tensor, group) -> torch.Tensor:
    """All-to-all (B, S/W, H, D) -> (B, S, H/W, D): gather the group's sequence, keep a slice of the heads."""
    return x if size(group) == 1 else _SeqToHead.apply(x, group)


def head_to_seq(y: torch.Tensor, group) -> torch.Tensor:
    """All-to-all (B, S, H/W, D) -> (B, S/W, H, D), the inverse of `seq_to_head`."""
    return y if size(group) == 1 else _HeadToSeq.apply(y, group)


class Exchange:
    """Send tensors to `dst` and receive as many of the same shapes from `src`, batched and asynchronous.

    With NCCL the transfers run on the communicator's own stream, so the caller's kernels overlap
    them until `wait()`.
    """

    def __init__(self, sends: Sequence[torch.Tensor], dst: int, src: int, group):
        self.sent = [t.contiguous() for t in sends]  # kept alive until the transfer is done
        self.buffers = [torch.empty_like(t) for t in self.sent]
        ops = [dist.P2POp(dist.isend, t, dst, group) for t in self.sent]
        ops += [dist.P2POp(dist.irecv, b, src, group) for b in self.buffers]
        self.works = dist.batch_isend_irecv(ops)
        _record("p2p", sum(_nbytes(t) for t in self.sent), dst)

    def wait(self) -> list[torch.Tensor]:
        for work in self.works:
            work.wait()
        return self.buffers
