"""cuDNN block-sparse attention's documented semantics in float32 torch, with its SM90 argument checks.

`forward` and `backward` take the arguments of `cudnn.block_sparse_attention.block_sparse_attention_forward`
/ `_backward` (frontend 1.32) and refuse what those refuse on SM90 (api.py's and _interface.py's
checks: shapes, int32 metadata, counts within [1, capacity], block_sizes of one entry per key tile,
the 64-token forward's seqlen_q multiple of 64, the backward's MHA). What they compute is what the
library documents: query tile i of head h attends the first count(i) key tiles listed for it, keys
past a tile's `block_sizes` entry (or past seqlen_k) masked; GQA heads share their KV head. The
plugin's own code never enters here: tests hand these to `kernel.prepare_with` in place of the
library and compare the plugin's output and gradients with longca's reference.
"""
from __future__ import annotations

import math

import torch

CALLS: list[str] = []  # which function ran, in order (tests that count library calls)


def _check(q, k, v, index, num, sizes, nums, tile, layout, allow_empty=False):
    assert layout == "bshd", "the plugin passes longca's (B, S, H, D) tensors as layout 'bshd'"
    assert q.ndim == k.ndim == v.ndim == 4 and all(t.stride(-1) == 1 for t in (q, k, v))
    assert q.dtype == k.dtype == v.dtype
    b, sq, hq, d = q.shape
    _, sk, hkv, _ = k.shape
    assert k.shape[:3] == v.shape[:3] and k.shape[-1] == d and hq % hkv == 0
    assert tile in (64, 128), f"sparse_block_size {tile}: SM90 takes 64 or 128"
    if tile == 64:
        assert sq % 64 == 0, f"seqlen_q {sq}: the SM90 64-token forward needs a multiple of 64"
    nq, nk = -(-sq // tile), -(-sk // tile)
    assert index.dtype == torch.int32 and index.is_contiguous()
    assert tuple(index.shape[:3]) == (b, hq, nq) and index.shape[-1] >= 1, (tuple(index.shape), (b, hq, nq))
    if nums is None:
        assert isinstance(num, int) and 1 <= num <= index.shape[-1], (num, index.shape[-1])
        counts = torch.full((b, hq, nq), num, dtype=torch.int64)
    else:
        assert nums.dtype == torch.int32 and tuple(nums.shape) == (b, hq, nq) and nums.is_contiguous()
        counts = nums.long()
        assert int(counts.max()) <= index.shape[-1] and int(counts.min()) >= (0 if allow_empty else 1)
    if sizes is not None:
        assert sizes.dtype == torch.int32 and tuple(sizes.shape) == (nk,), (tuple(sizes.shape), nk)
        assert int(sizes.min()) >= 1 and int(sizes.max()) <= tile
    listed = torch.arange(index.shape[-1]) < counts[..., None]
    ids = index.long()
    assert bool(((ids >= 0) & (ids < nk))[listed].all()), "a listed key tile out of range"
    prev = torch.where(listed, ids, -1)
    assert bool(((prev[..., 1:] > prev[..., :-1]) | ~listed[..., 1:]).all()), "lists must be ascending, no repeats"
    picked = torch.nn.functional.one_hot(torch.where(listed, ids, nk), nk + 1)  # unlisted entries: column nk
    return picked[..., :nk].bool().any(dim=-2)  # (B, Hq, nq, nk)


def _attend(q, k, v, allowed, sizes, tile, scale=None):
    """float32 out (B, Sq, Hq, Dv) and lse (B, Hq, Sq) of the tile-allowed pairs; empty rows give 0 and -inf."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    rows, cols = torch.arange(sq) // tile, torch.arange(sk) // tile
    real = torch.ones(sk, dtype=torch.bool)
    if sizes is not None:
        real = (torch.arange(sk) % tile) < sizes.long()[cols]
    pairs = allowed[:, :, rows][:, :, :, cols] & real  # (B, Hq, Sq, Sk)
    qh = q.float().transpose(1, 2)
    kh = k.float().transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    vh = v.float().transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    scores = (qh @ kh.transpose(-1, -2)) * (scale if scale is not None else 1.0 / math.sqrt(d))
    scores = scores.masked_fill(~pairs, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
    return (probs @ vh).transpose(1, 2), lse


def forward(q, k, v, q2k_block_index, block_sparse_num=None, block_sizes=None, q2k_block_nums=None, *,
            sparse_block_size=None, allow_empty_block_nums=False, softmax_scale=None, layout="bhsd", **rest):
    assert not rest, f"arguments the plugin is not expected to pass: {sorted(rest)}"
    CALLS.append("forward")
    allowed = _check(q, k, v, q2k_block_index, block_sparse_num, block_sizes, q2k_block_nums, sparse_block_size,
                     layout, allow_empty_block_nums)
    out, lse = _attend(q, k, v, allowed, block_sizes, sparse_block_size, softmax_scale)
    return {"o_tensor": out.to(q.dtype).contiguous(), "lse_tensor": lse}


def backward(do_tensor, q, k, v, o_tensor, lse_tensor, q2k_block_index, block_sparse_num=None, block_sizes=None,
             q2k_block_nums=None, *, sparse_block_size=None, softmax_scale=None, layout="bhsd", **rest):
    assert not rest, f"arguments the plugin is not expected to pass: {sorted(rest)}"
    CALLS.append("backward")
    assert q.shape[2] == k.shape[2], "the backward is MHA only"
    assert do_tensor.shape == o_tensor.shape == q.shape and do_tensor.stride(-1) == 1
    assert lse_tensor.dtype == torch.float32 and tuple(lse_tensor.shape) == (q.shape[0], q.shape[2], q.shape[1])
    allowed = _check(q, k, v, q2k_block_index, block_sparse_num, block_sizes, q2k_block_nums, sparse_block_size,
                     layout, allow_empty=True)
    with torch.enable_grad():
        leaves = [x.detach().float().requires_grad_() for x in (q, k, v)]
        out, _ = _attend(*leaves, allowed, block_sizes, sparse_block_size, softmax_scale)
        grads = torch.autograd.grad(out, leaves, do_tensor.float())
    return {"dq_tensor": grads[0].to(q.dtype), "dk_tensor": grads[1].to(k.dtype), "dv_tensor": grads[2].to(v.dtype)}
