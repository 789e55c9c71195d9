"""A FlexAttention BlockMask straight from the core's block-sparse layout (no dense mask, no vmap).

FlexAttention works on square tiles of one size T. Every (query tile, key tile) pair is empty,
full (every token pair kept: the kernel skips mask_mod) or partial (some kept: mask_mod looks
each pair up in the block map). Uniform blocks that are a multiple of 128 are used as the
tiles themselves, so every kept block is a full tile. Other blocks go on 128-token tiles,
because FlexAttention's Triton kernels need sparse blocks that are multiples of their own tiles
(on H100/H200 bf16 head_dim 128: forward 128x64, backward 64x128 and 128x64): a 64-token map
makes partial tiles wherever a tile's four blocks are not all kept or all dropped. A causal
layout (`topk_sparse`) also masks keys after the query: tiles above the diagonal are empty,
diagonal tiles partial, and mask_mod adds `q_idx >= kv_idx`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_TILE = 128


def tile_size(mask_name: str, block: int) -> int:
    """The FlexAttention tile for a mask: its own block if uniform and a multiple of 128, else 128."""
    if mask_name == "block_sparse_uniform" and block % DEFAULT_TILE == 0:
        return block
    return DEFAULT_TILE


def _spans(bounds: np.ndarray, tile: int, seqlen: int) -> tuple[np.ndarray, np.ndarray]:
    """First and last block overlapping each tile."""
    starts = np.arange(0, seqlen, tile)
    ends = np.minimum(starts + tile, seqlen)
    first = np.searchsorted(bounds, starts, side="right") - 1
    last = np.searchsorted(bounds, ends - 1, side="right") - 1
    return first, last


def _reduce(keep: Any, first: np.ndarray, last: np.ndarray, dim: int) -> tuple[Any, Any]:
    """(any, all) of `keep` over the blocks [first[t], last[t]] of each tile t along `dim`."""
    import torch

    any_, all_ = None, None
    for offset in range(int((last - first).max()) + 1):
        index = torch.as_tensor(np.minimum(first + offset, last), device=keep.device)
        part = keep.index_select(dim, index)
        any_ = part if any_ is None else any_ | part
        all_ = part if all_ is None else all_ & part
    return any_, all_


def classify(layout: Any, tile: int, device: Any) -> tuple[Any, Any]:
    """(full, partial) bool (groups, query tiles, key tiles): tiles wholly or partly kept."""
    import torch

    seqlen = int(layout.q_bounds[-1])
    keep = torch.from_numpy(layout.keep).to(device)
    rows_first, rows_last = _spans(layout.q_bounds, tile, seqlen)
    cols_first, cols_last = _spans(layout.k_bounds, tile, seqlen)
    rows_any, rows_all = _reduce(keep, rows_first, rows_last, 1)
    tiles_any, _ = _reduce(rows_any, cols_first, cols_last, 2)
    _, tiles_all = _reduce(rows_all, cols_first, cols_last, 2)
    if layout.causal:  # query and key tiles share their bounds: tile j > i is above
        n = tiles_any.shape[1]
        below = torch.ones(n, n, dtype=torch.bool, device=tiles_any.device).tril(-1)
        tiles_any = tiles_any & (below | torch.eye(n, dtype=torch.bool, device=tiles_any.device))
        tiles_all = tiles_all & below
    return tiles_all, tiles_any & ~tiles_all


def _kv_blocks(selected: Any, heads: int) -> tuple[Any, Any]:
    """(num_blocks, indices) int32 with a batch dimension of 1, one row per query head."""
    import torch

    selected = selected.repeat_interleave(heads // selected.shape[0], dim=0)
    counts = selected.sum(dim=-1, dtype=torch.int32)
    order = torch.argsort(selected.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)
    return counts[None], order[None]


def lookup_mask_mod(layout: Any, heads: int, device: Any) -> Callable[..., Any]:
    """mask_mod(b, h, q, k): is the (q block, k block) pair of head h's group kept."""
    import torch

    keep = torch.from_numpy(layout.keep).to(device)
    q_block = torch.as_tensor(np.repeat(np.arange(len(layout.q_bounds) - 1), np.diff(layout.q_bounds)),
                              dtype=torch.int32, device=device)
    k_block = torch.as_tensor(np.repeat(np.arange(len(layout.k_bounds) - 1), np.diff(layout.k_bounds)),
                              dtype=torch.int32, device=device)
    per_group = heads // keep.shape[0]

    def mask_mod(b, h, q_idx, kv_idx):
        return keep[h // per_group, q_block[q_idx], k_block[kv_idx]]

    def causal_mask_mod(b, h, q_idx, kv_idx):
        return keep[h // per_group, q_block[q_idx], k_block[kv_idx]] & (q_idx >= kv_idx)

    return causal_mask_mod if layout.causal else mask_mod


@dataclass
class Built:
    block_mask: Any
    tile: int
    full_tiles: int
    partial_tiles: int


def build(layout: Any, heads: int, tile: int, device: Any, full_blocks: bool = True) -> Built:
    """The BlockMask; with `full_blocks=False` every kept tile is partial (for CPU, see hooks)."""
    from torch.nn.attention.flex_attention import BlockMask

    seqlen = int(layout.q_bounds[-1])
    full, partial = classify(layout, tile, device)
    counts = (int(full.sum()), int(partial.sum()))
    full_args: tuple[Any | None, Any | None] = (None, None)
    if full_blocks:
        full_args = _kv_blocks(full, heads)
    else:
        partial = partial | full
    num, indices = _kv_blocks(partial, heads)
    block_mask = BlockMask.from_kv_blocks(num, indices, *full_args, BLOCK_SIZE=(tile, tile),
                                          mask_mod=lookup_mask_mod(layout, heads, device),
                                          seq_lengths=(seqlen, seqlen))
    return Built(block_mask, tile, *counts)
