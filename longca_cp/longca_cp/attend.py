"""Running a list of inner-kernel calls on local buffers: forward into an accumulator, backward into sums."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from longca.merge import GradAccumulator, OutputAccumulator

from .calls import Call
from .inner import InnerKernel


def _rows(x: torch.Tensor, a: int, b: int) -> torch.Tensor:
    return x if a == 0 and b == x.shape[1] else x[:, a:b]


def _lse_rows(lse: torch.Tensor, a: int, b: int) -> torch.Tensor:
    return lse if a == 0 and b == lse.shape[-1] else lse[..., a:b].contiguous()


def forward_calls(inner: InnerKernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  calls: Sequence[Call], acc: OutputAccumulator) -> None:
    """Add the output and lse of every call to `acc` (rows of q's buffer)."""
    for c in calls:
        out, lse = inner.forward(_rows(q, c.q0, c.q1), _rows(k, c.k0, c.k1), _rows(v, c.k0, c.k1), c.slices,
                                 inner.softmax_scale)  # positional: plugins name the parameter differently
        acc.add(c.q0, c.q1, out, lse)


def backward_calls(inner: InnerKernel, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   out: torch.Tensor, lse: torch.Tensor, calls: Sequence[Call],
                   dq: GradAccumulator, dk: GradAccumulator, dv: GradAccumulator) -> None:
    """Add every call's gradients, computed from the final output and lse, to dq, dk and dv."""
    for c in calls:
        gq, gk, gv = inner.backward(_rows(dout, c.q0, c.q1), _rows(q, c.q0, c.q1), _rows(k, c.k0, c.k1),
                                    _rows(v, c.k0, c.k1), _rows(out, c.q0, c.q1), _lse_rows(lse, c.q0, c.q1),
                                    c.slices, inner.softmax_scale)
        dq.add(c.q0, c.q1, gq)
        dk.add(c.k0, c.k1, gk)
        dv.add(c.k0, c.k1, gv)
