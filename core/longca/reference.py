"""The built-in `reference` kernel: exact attention for every mask, computed in float32.

Chunked over query rows (and restricted to the keys those rows can see), so it never holds an
S x S matrix; the forward returns the output and the log-sum-exp, and the backward is written
out from them, so it is also the yardstick for `--check` and the CPU inner kernel of every
context-parallel strategy.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from .autograd import lse_attention
from .masks import slices as sl
from .masks.mask import Mask

# rows -> (first key, end key, bool tensor (groups, rows, keys)) or None when the rows see nothing
MaskRows = Callable[[int, int], tuple[int, int, torch.Tensor] | None]
MaskSource = Mask | np.ndarray
CHUNK_ELEMENTS = 1 << 25


def mask_rows(source: MaskSource, seqlen_k: int, device: torch.device) -> MaskRows:
    """A row-window reader of the mask, from a Mask or from slices (local coordinates)."""
    if isinstance(source, Mask) and source.layout is not None:
        layout = source.layout

        def sparse_rows(r0: int, r1: int):
            return 0, seqlen_k, torch.from_numpy(layout.dense((r0, r1), (0, seqlen_k))).to(device)

        return sparse_rows
    slices = source.static_slices() if isinstance(source, Mask) else sl.as_array(source)

    def static_rows(r0: int, r1: int):
        part = sl.crop(slices, (r0, r1), (0, seqlen_k))
        if not len(part):
            return None
        c0, c1 = int(part[:, 2].min()), int(part[:, 3].max())
        return c0, c1, torch.from_numpy(sl.dense(part, (r0, r1), (c0, c1))).to(device)[None]

    return static_rows


def _chunks(seqlen_q: int, seqlen_k: int, batch_heads: int):
    step = max(1, min(seqlen_q, CHUNK_ELEMENTS // max(1, batch_heads * seqlen_k)))
    return ((r0, min(seqlen_q, r0 + step)) for r0 in range(0, seqlen_q, step))


def _heads_first(x: torch.Tensor, repeat: int) -> torch.Tensor:
    """(B, S, H, D) any dtype -> (B, H*repeat, S, D) float32."""
    return x.float().transpose(1, 2).repeat_interleave(repeat, dim=1)


def _group_mask(m: torch.Tensor, heads: int) -> torch.Tensor:
    """(groups, rows, keys) -> broadcastable (1 or heads, rows, keys)."""
    return m if m.shape[0] == 1 else m.repeat_interleave(heads // m.shape[0], dim=0)


def _scale(q: torch.Tensor, softmax_scale: float | None) -> float:
    return softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])


def forward_lse(q, k, v, source: MaskSource, softmax_scale: float | None = None,
                rows: tuple[int, int] | None = None):
    """Attention output (q's dtype) and lse (float32, natural log, (B, Hq, Sq); -inf on empty rows).

    With `rows = (r0, r1)`, only those query rows of the whole problem (q is still the whole q):
    out (B, r1 - r0, Hq, D) and lse (B, Hq, r1 - r0), at the cost of those rows alone (spot checks).
    """
    batch, seqlen_q, heads, _ = q.shape
    seqlen_k, rep = k.shape[1], heads // k.shape[2]
    first, last = rows or (0, seqlen_q)
    scale = _scale(q, softmax_scale)
    reader = mask_rows(source, seqlen_k, q.device)
    qf, kf, vf = q[:, first:last].float().transpose(1, 2), _heads_first(k, rep), _heads_first(v, rep)
    out = torch.zeros(batch, heads, last - first, v.shape[-1], dtype=torch.float32, device=q.device)
    lse = torch.full((batch, heads, last - first), -math.inf, dtype=torch.float32, device=q.device)
    for r0, r1 in _chunks(last - first, seqlen_k, batch * heads):
        window = reader(first + r0, first + r1)
        if window is None:
            continue
        c0, c1, m = window
        scores = (qf[:, :, r0:r1] @ kf[:, :, c0:c1].transpose(-1, -2)) * scale
        scores.masked_fill_(~_group_mask(m, heads), -math.inf)
        row_lse = torch.logsumexp(scores, dim=-1)
        probs = torch.exp(scores - row_lse.unsqueeze(-1)).nan_to_num_(0.0)
        out[:, :, r0:r1] = probs @ vf[:, :, c0:c1]
        lse[:, :, r0:r1] = row_lse
    return out.transpose(1, 2).to(q.dtype), lse


def backward_lse(dout, q, k, v, out, lse, source: MaskSource, softmax_scale: float | None = None):
    """Gradients (dq, dk, dv) in the inputs' dtypes, from the forward's output and lse."""
    batch, seqlen_q, heads, _ = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    rep = heads // heads_kv
    scale = _scale(q, softmax_scale)
    reader = mask_rows(source, seqlen_k, q.device)
    qf, kf, vf = q.float().transpose(1, 2), _heads_first(k, rep), _heads_first(v, rep)
    do = dout.float().transpose(1, 2)
    delta = (do * out.float().transpose(1, 2)).sum(-1)
    dq, dk, dv = torch.zeros_like(qf), torch.zeros_like(kf), torch.zeros_like(vf)
    for r0, r1 in _chunks(seqlen_q, seqlen_k, batch * heads):
        window = reader(r0, r1)
        if window is None:
            continue
        c0, c1, m = window
        scores = (qf[:, :, r0:r1] @ kf[:, :, c0:c1].transpose(-1, -2)) * scale
        probs = torch.exp(scores - lse[:, :, r0:r1].unsqueeze(-1))
        probs = probs.masked_fill_(~_group_mask(m, heads), 0.0).nan_to_num_(0.0)
        dv[:, :, c0:c1] += probs.transpose(-1, -2) @ do[:, :, r0:r1]
        dprobs = do[:, :, r0:r1] @ vf[:, :, c0:c1].transpose(-1, -2)
        dscores = probs * (dprobs - delta[:, :, r0:r1].unsqueeze(-1)) * scale
        dq[:, :, r0:r1] = dscores @ kf[:, :, c0:c1]
        dk[:, :, c0:c1] += dscores.transpose(-1, -2) @ qf[:, :, r0:r1]

    def fold(g: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        g = g.view(batch, heads_kv, rep, *g.shape[2:]).sum(2) if rep > 1 else g
        return g.transpose(1, 2).to(like.dtype)

    return dq.transpose(1, 2).to(q.dtype), fold(dk, k), fold(dv, v)


def with_sinks(out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of attention whose rows also normalise over one sink logit per head (no value):
    lse' = logaddexp(lse, sink), out' = out * exp(lse - lse'); a row with no keys gives 0 and the sink."""
    lse_s = torch.logaddexp(lse, sinks.float()[None, :, None])
    return (out.float() * torch.exp(lse - lse_s).transpose(1, 2).unsqueeze(-1)).to(out.dtype), lse_s


def attention(q, k, v, source: MaskSource, softmax_scale: float | None = None,
              sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Exact masked attention with autograd; q (B, Sq, Hq, D), k and v (B, Sk, Hkv, D); `sinks`:
    (Hq,) learnable sink logits (`with_sinks`), with their gradient."""
    def forward(q_, k_, v_, s_=None):
        out, lse = forward_lse(q_, k_, v_, source, softmax_scale)
        return (out, lse) if s_ is None else with_sinks(out, lse, s_)

    return lse_attention(forward, lambda dout, q_, k_, v_, out, lse: backward_lse(dout, q_, k_, v_, out, lse, source,
                                                                                 softmax_scale), q, k, v, sinks)


from .builtins.reference import REFERENCE  # noqa: E402,F401 - the registration, light (imports this module lazily)
