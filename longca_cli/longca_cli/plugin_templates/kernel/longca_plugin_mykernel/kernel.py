"""Tiled attention with an online softmax (the FlashAttention recurrence) in plain PyTorch.

`prepare` turns the mask's slices into a plan: for every query tile, the key tiles that hold at
least one allowed pair, and a boolean tile where a tile is only partly allowed. `run` visits just
those tiles, so masked work is skipped. Replace the body of `_attend` with a call to your kernel.
"""
from __future__ import annotations

import math

import numpy as np

from longca import plugin  # block_map, dense, PARTIAL: the tile plan

TILE = 128


def available() -> str | None:
    """None, or why the kernel cannot run here. Import your library here, inside a try."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        return f"torch is not installed: {exc}"
    return None


def supports(problem) -> str | None:
    """None, or why this problem is refused beyond what the KernelSpec declares."""
    if problem.seqlen > 65536:
        return "the plain-PyTorch tile loop is too slow beyond 64K tokens"
    return None


def plan(slices: np.ndarray, seqlen_q: int, seqlen_k: int, device) -> list:
    """Per query tile: (q0, q1, [(k0, k1, bool tile or None when fully allowed), ...])."""
    import torch

    blocks = plugin.block_map(slices, seqlen_q, seqlen_k, TILE, TILE)
    out = []
    for qb in range(blocks.shape[0]):
        q0, q1 = qb * TILE, min(seqlen_q, (qb + 1) * TILE)
        tiles = []
        for kb in np.flatnonzero(blocks[qb]).tolist():
            k0, k1 = kb * TILE, min(seqlen_k, (kb + 1) * TILE)
            part = None
            if blocks[qb, kb] == plugin.PARTIAL:
                part = torch.from_numpy(plugin.dense(slices, (q0, q1), (k0, k1))).to(device)
            tiles.append((k0, k1, part))
        out.append((q0, q1, tiles))
    return out


def _attend(q, k, v, tiles: list, scale: float):
    """Output (q's dtype) and lse (float32, (B, Hq, Sq), -inf on rows that see nothing)."""
    import torch

    rep = q.shape[2] // k.shape[2]
    qh = q.transpose(1, 2).float()
    kh, vh = (x.transpose(1, 2).float().repeat_interleave(rep, dim=1) for x in (k, v))
    outs, lses = [], []
    for q0, q1, row_tiles in tiles:
        qt = qh[:, :, q0:q1]
        shape = qt.shape[:-1]
        m = torch.full(shape, -math.inf, device=q.device)
        denom = torch.zeros(shape, device=q.device)
        acc = torch.zeros(*shape, vh.shape[-1], device=q.device)
        for k0, k1, part in row_tiles:
            s = (qt @ kh[:, :, k0:k1].transpose(-1, -2)) * scale
            if part is not None:
                s = s.masked_fill(~part, -math.inf)
            # the running max only stabilises the exponentials: detached, the result is exact
            m_new = torch.maximum(m, s.detach().amax(-1))
            shift = m_new.masked_fill(torch.isinf(m_new), 0.0)
            p = torch.exp(s - shift[..., None])
            alpha = torch.exp(m - shift)
            denom = denom * alpha + p.sum(-1)
            acc = acc * alpha[..., None] + p @ vh[:, :, k0:k1]
            m = m_new
        seen = denom > 0
        outs.append(torch.where(seen[..., None], acc / denom.clamp_min(1e-30)[..., None], 0.0))
        finite_m = m.masked_fill(~seen, 0.0)
        lses.append(torch.where(seen, finite_m + denom.clamp_min(1e-30).log(), -math.inf))
    out = torch.cat(outs, dim=2).transpose(1, 2).to(q.dtype)
    return out, torch.cat(lses, dim=2)


def _attend_backward(dout, q, k, v, out, lse, tiles: list, scale: float):
    """Gradients (dq, dk, dv) from the `out` and `lse` given, over the same tiles as the forward.

    Context-parallel strategies call this on one piece of the keys with the out and lse merged
    over *all* pieces: the probabilities are exp(scores - lse) with that lse, and the softmax
    correction uses delta = rowsum(dout * out) of that out. Recomputing a forward here instead
    would normalise over this piece alone and give wrong gradients under CP.
    """
    import torch

    heads_kv = k.shape[2]
    rep = q.shape[2] // heads_kv
    qh, do, o = (x.transpose(1, 2).float() for x in (q, dout, out))
    kh, vh = (x.transpose(1, 2).float().repeat_interleave(rep, dim=1) for x in (k, v))
    delta = (do * o).sum(-1)
    # rows that see no key have lse -inf: +inf makes their probabilities exp(-inf) = 0
    lse = lse.float().masked_fill(torch.isneginf(lse), math.inf)
    dq, dk, dv = torch.zeros_like(qh), torch.zeros_like(kh), torch.zeros_like(vh)
    for q0, q1, row_tiles in tiles:
        qt, dot, lt, dt = qh[:, :, q0:q1], do[:, :, q0:q1], lse[:, :, q0:q1, None], delta[:, :, q0:q1, None]
        for k0, k1, part in row_tiles:
            p = torch.exp((qt @ kh[:, :, k0:k1].transpose(-1, -2)) * scale - lt)
            if part is not None:
                p = p.masked_fill(~part, 0.0)
            dv[:, :, k0:k1] += p.transpose(-1, -2) @ dot
            ds = p * (dot @ vh[:, :, k0:k1].transpose(-1, -2) - dt) * scale
            dq[:, :, q0:q1] += ds @ kh[:, :, k0:k1]
            dk[:, :, k0:k1] += ds.transpose(-1, -2) @ qt

    def per_kv_head(g, like):  # GQA: sum the gradients of the query heads sharing a KV head
        g = g.unflatten(1, (heads_kv, rep)).sum(2)
        return g.transpose(1, 2).to(like.dtype)

    return dq.transpose(1, 2).to(q.dtype), per_kv_head(dk, k), per_kv_head(dv, v)


def _scale(q, softmax_scale: float | None) -> float:
    return softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])


def prepare(problem, mask, q, k, v):
    """The tile plan of the whole mask (timed apart from run as prepare_ms)."""
    return plan(mask.slices, mask.seqlen, mask.seqlen, q.device)


def run(tiles, q, k, v):
    """The timed call: attention output (B, S, Hq, D). Its backward is `_attend_backward`, the same
    code strategies call through backward_lse, so the conformance suite tests it both ways."""
    from longca.plugin import lse_attention

    scale = _scale(q, None)
    return lse_attention(lambda q_, k_, v_: _attend(q_, k_, v_, tiles, scale),
                         lambda dout, q_, k_, v_, out, lse: _attend_backward(dout, q_, k_, v_, out, lse, tiles, scale),
                         q, k, v)


def forward_lse(q, k, v, slices, softmax_scale=None):
    """Primitive for context parallelism: (out, lse) on slices in local coordinates."""
    import torch

    with torch.no_grad():
        return _attend(q, k, v, plan(slices, q.shape[1], k.shape[1], q.device), _scale(q, softmax_scale))


def backward_lse(dout, q, k, v, out, lse, slices, softmax_scale=None):
    """Primitive for context parallelism: (dq, dk, dv) from the given (possibly merged) out and lse."""
    import torch

    with torch.no_grad():
        return _attend_backward(dout, q, k, v, out, lse, plan(slices, q.shape[1], k.shape[1], q.device),
                                _scale(q, softmax_scale))
