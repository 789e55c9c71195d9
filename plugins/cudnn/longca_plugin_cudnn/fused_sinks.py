"""Learnable sinks through cuDNN's own fused `sink_token` / `dSink_token`, for a plan of one call.

Why: the lse path (flashplan's `plan_attention`) adds the sinks after the cuDNN call, an
elementwise pass over the output forward and the sinks' gradient from out and lse backward; cuDNN
folds the sink into its softmax and its backward graph gives the sinks' gradient itself. Only for
a plan that is one call covering the whole attention (`frontend.unfused_sinks_reason`), whose
graphs `prepare` built with the sink. The forward's stats include the sink (logaddexp(lse, sink)),
and the backward graph reads them as they are. torch is imported with this module, which
`frontend.run` imports on its first fused call (the plugin registers without torch).
"""
from __future__ import annotations

import torch


def sink_view(sinks: torch.Tensor) -> torch.Tensor:
    """(Hq,) sinks as cuDNN's (1, Hq, 1, 1) float32 sink_token: a view, no copy, when already float32 and
    contiguous (`make_sinks` gives float32)."""
    return sinks.to(torch.float32).contiguous().view(1, -1, 1, 1)


class _FusedSinkAttention(torch.autograd.Function):
    """The one call's forward graph with the sink; its backward graph gives dq, dk, dv and dsinks."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, adapter, call):
        out, lse = adapter.fwd(call.pack_q(q), call.pack_k(k), call.pack_k(v), call.args, sink=sink_view(sinks))
        out = out.view(*q.shape[:-1], v.shape[-1])  # a ragged call's (tokens, H, D) is the (B, S, H, D) in place
        ctx.save_for_backward(q, k, v, sinks, out, lse)
        ctx.adapter, ctx.call = adapter, call
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, sinks, out, lse = ctx.saved_tensors
        call, sink = ctx.call, sink_view(sinks)
        dsink = torch.empty_like(sink)  # zeroed by the adapter before the graph runs
        grads = ctx.adapter.bwd(call.pack_q(dout.contiguous()), call.pack_q(q), call.pack_k(k), call.pack_k(v),
                                call.pack_q(out), lse, call.args, sink=sink, dsink=dsink)
        dq, dk, dv = (g.view(x.shape) for g, x in zip(grads, (q, k, v), strict=True))
        return dq, dk, dv, dsink.view(sinks.shape).to(sinks.dtype), None, None


def fused_sink_attention(q, k, v, sinks, adapter, call) -> torch.Tensor:
    """Attention of the one `call` that is the whole mask, the (Hq,) `sinks` fused into cuDNN's graphs,
    differentiable in q, k, v and sinks."""
    return _FusedSinkAttention.apply(q, k, v, sinks, adapter, call)
