"""Tiled attention with an online softmax (the FlashAttention recurrence) in plain PyTorch.

`prepare` turns the mask's slices into a plan: for every query tile, the key tiles that hold at
least one allowed pair, and a boolean tile where a tile is only partly allowed. `run` visits just
those tiles, so masked work is skipped. Replace the body of `_attend` with a call to your kernel.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from longca.masks import slices as sl

TILE = 128


def available() -> Optional[str]:
    """None, or why the kernel cannot run here. Import your library here, inside a try."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        return f"torch is not installed: {exc}"
    return None


def supports(problem) -> Optional[str]:
    """None, or why this problem is refused beyond what the KernelSpec declares."""
    if problem.seqlen > 65536:
        return "the plain-PyTorch tile loop is too slow beyond 64K tokens"
    return None


def plan(slices: np.ndarray, seqlen_q: int, seqlen_k: int, device) -> list:
    """Per query tile: (q0, q1, [(k0, k1, bool tile or None when fully allowed), ...])."""
    import torch

    blocks = sl.block_map(slices, seqlen_q, seqlen_k, TILE, TILE)
    out = []
    for qb in range(blocks.shape[0]):
        q0, q1 = qb * TILE, min(seqlen_q, (qb + 1) * TILE)
        tiles = []
        for kb in np.flatnonzero(blocks[qb]).tolist():
            k0, k1 = kb * TILE, min(seqlen_k, (kb + 1) * TILE)
            part = None
            if blocks[qb, kb] == sl.PARTIAL:
                part = torch.from_numpy(sl.dense(slices, (q0, q1), (k0, k1))).to(device)
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


def prepare(problem, mask, q, k, v):
    """The tile plan of the whole mask (timed apart from run as prepare_ms)."""
    return plan(mask.slices, mask.seqlen, mask.seqlen, q.device)


def run(tiles, q, k, v):
    """The timed call: attention output (B, S, Hq, D); autograd gives the backward."""
    return _attend(q, k, v, tiles, 1.0 / math.sqrt(q.shape[-1]))[0]


def forward_lse(q, k, v, slices, softmax_scale=None):
    """Primitive for context parallelism: (out, lse) on slices in local coordinates."""
    import torch

    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    with torch.no_grad():
        return _attend(q, k, v, plan(slices, q.shape[1], k.shape[1], q.device), scale)


def backward_lse(dout, q, k, v, out, lse, slices, softmax_scale=None):
    """Primitive for context parallelism: (dq, dk, dv), here by recomputing the forward with autograd."""
    import torch

    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    with torch.enable_grad():
        inputs = [x.detach().requires_grad_(True) for x in (q, k, v)]
        again, _ = _attend(*inputs, plan(slices, q.shape[1], k.shape[1], q.device), scale)
        return torch.autograd.grad(again, inputs, dout)
