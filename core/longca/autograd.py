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


class _SinkAttention(torch.autograd.Function):
    """With sinks: the backward of attention is the plain one given the output and lse that include
    the sink (the probabilities are then the sink-normalised ones), and the sink's own gradient is
    -sum over rows of p_sink * rowsum(dout * out), p_sink = exp(sink - lse)."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, forward, backward):
        out, lse = forward(q, k, v, sinks)
        ctx.save_for_backward(q, k, v, sinks, out, lse)
        ctx.backward_fn = backward
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, sinks, out, lse = ctx.saved_tensors
        dq, dk, dv = ctx.backward_fn(dout, q, k, v, out, lse)
        p_sink = torch.exp(sinks.float()[None, :, None] - lse)  # (B, H, S)
        rows = (dout.float() * out.float()).sum(-1).transpose(1, 2)  # (B, H, S)
        return dq, dk, dv, -(p_sink * rows).sum((0, 2)).to(sinks.dtype), None, None


def lse_attention(forward: Forward, backward: Backward, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """`forward(q, k, v)[0]`, with gradients from `backward(dout, q, k, v, out, lse)`; with `sinks`,
    `forward(q, k, v, sinks)` gives the output and lse that include them (`_SinkAttention`)."""
    if sinks is not None:
        return _SinkAttention.apply(q, k, v, sinks, forward, backward)
    return _LseAttention.apply(q, k, v, forward, backward)
