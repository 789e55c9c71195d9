"""Autograd for attention given as an lse-returning forward and an explicit backward.

Kernels, the flashplan executor and the CP strategies all have this shape: `forward(q, k, v)`
returns (out, lse), and `backward(dout, q, k, v, out, lse)` returns (dq, dk, dv). `lse_attention`
makes such a pair one differentiable call; the closures bind everything else (mask, plan, scale).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

Forward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple]
Backward = Callable[..., tuple]


class _LseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, forward, backward):
        out, lse = forward(q, k, v)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.backward_fn = backward
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ctx.backward_fn(dout, q, k, v, out, lse)
        return dq, dk, dv, None, None


def lse_attention(forward: Forward, backward: Backward, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor) -> torch.Tensor:
    """`forward(q, k, v)[0]`, with gradients from `backward(dout, q, k, v, out, lse)`."""
    return _LseAttention.apply(q, k, v, forward, backward)
