"""The topk_sparse layout as NSA's selection: per query token and KV head, the key blocks it attends.

fla's `parallel_nsa` takes `block_indices` (B, T, H, S) and `block_counts` (B, T, H): for token t
of KV head h, its first `block_counts` entries are the selected blocks (the kernel masks keys after
t itself); the rest is -1, which the kernels skip. S is padded to a power of two because the
backward's block inversion (`prepare_block_csr`) is a Triton kernel over `tl.arange(0, S)`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Selection:
    indices: Any  # int64 (batch, seqlen, groups, width), -1 past each token's count
    counts: Any  # int64 (batch, seqlen, groups)
    block: int


def width(most: int) -> int:
    """The index width for at most `most` blocks per row: the next power of two."""
    return 1 << max(0, int(most) - 1).bit_length()


def from_layout(layout: Any, batch: int, device: Any) -> Selection:
    """Per-token block indices of a causal, uniform-block layout (the topk_sparse mask)."""
    import torch

    sizes = np.diff(layout.q_bounds)
    block = int(sizes[0])
    if not layout.causal or not np.array_equal(layout.q_bounds, layout.k_bounds) or (sizes[:-1] != block).any():
        raise ValueError("NSA's selection needs a causal layout of uniform blocks, one partition for queries and keys")
    keep = torch.from_numpy(layout.keep)  # (groups, query blocks, key blocks)
    counts = keep.sum(-1)  # (groups, query blocks)
    s = width(int(counts.max()))
    # kept key blocks first, in ascending order (a stable sort of "not kept"), then -1
    order = torch.argsort((~keep).to(torch.int8), dim=-1, stable=True)[..., :s]
    if order.shape[-1] < s:
        order = torch.cat([order, order.new_full((*order.shape[:-1], s - order.shape[-1]), -1)], dim=-1)
    order = torch.where(torch.arange(s) < counts[..., None], order, -1)
    per_token = torch.as_tensor(np.repeat(np.arange(len(sizes)), sizes))  # token -> its query block
    indices = order[:, per_token].permute(1, 0, 2)  # (seqlen, groups, width)
    counts = counts[:, per_token].permute(1, 0)  # (seqlen, groups)
    return Selection(indices[None].expand(batch, *indices.shape).contiguous().to(device),
                     counts[None].expand(batch, *counts.shape).contiguous().to(device), block)

