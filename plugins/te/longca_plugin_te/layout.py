"""TE's context-parallel token layouts (DualChunkSwap), computed without TE so they can be checked on CPU.

bshd: the sequence in 2W chunks, rank r holds chunks r and 2W-1-r (longca's zigzag). thd: every
document padded to a multiple of 2W (TE's cu_seqlens_padded), cut into 2W chunks, rank r holds chunks
r and 2W-1-r of every document, documents in order; padding positions are -1. This is the order TE's
`thd_get_partitioned_indices` gives (its docstring's example is a test here); the thd path is not wired yet.
"""
from __future__ import annotations

import numpy as np


def padded_cu_seqlens(bounds, world: int) -> tuple[np.ndarray, np.ndarray]:
    """(cu_seqlens, cu_seqlens_padded), int32: document edges, and edges with each document padded to 2W."""
    bounds = np.asarray(bounds, dtype=np.int64)
    lengths = np.diff(bounds)
    padded = -(-lengths // (2 * world)) * (2 * world)
    return (bounds - bounds[0]).astype(np.int32), np.concatenate([[0], np.cumsum(padded)]).astype(np.int32)


def thd_rank_tokens(bounds, world: int, rank: int) -> np.ndarray:
    """The global token index held at each local position of `rank` (-1: padding), thd layout."""
    bounds = np.asarray(bounds, dtype=np.int64)
    _, cu_padded = padded_cu_seqlens(bounds, world)
    out = []
    for d in range(len(bounds) - 1):
        start, length = int(bounds[d]), int(bounds[d + 1] - bounds[d])
        chunk = int(cu_padded[d + 1] - cu_padded[d]) // (2 * world)
        for j in (rank, 2 * world - 1 - rank):
            pos = np.arange(j * chunk, (j + 1) * chunk)
            out.append(np.where(pos < length, start + pos, -1))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def bshd_rank_tokens(seqlen: int, world: int, rank: int) -> np.ndarray:
    chunk = seqlen // (2 * world)
    return np.concatenate([np.arange(j * chunk, (j + 1) * chunk) for j in (rank, 2 * world - 1 - rank)])
