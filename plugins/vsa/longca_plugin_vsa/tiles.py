"""The core's block-sparse layouts on VSA's 64-token tiles.

VSA attends over (B, H, S_pad, D) tensors in which block i of the mask occupies tile i (tokens
[64 i, 64 i + 64)); `variable_block_sizes[i]` says how many of its first tokens are real: the
kernel masks the rest as keys, and the output rows of the padding are dropped. A core layout
therefore maps exactly when every block has at most 64 tokens: uniform blocks of 64 (the last
one possibly shorter) and variable blocks drawn with block=64 (sizes 32 to 64). When every
block is full, the input is copied into the head-major layout (the libraries copy a non-contiguous
input themselves, and vsa 0.0.3's sm90 backward refuses the non-contiguous inputs its forward
saved); otherwise the tokens are scattered into a zero-padded tensor. Both happen inside the
timed call, as a VSA user pays them too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

TILE = 64


def block_param(problem: Any) -> int | None:
    """The mask's `block` parameter (the catalog's default is 128); None if it is not a number."""
    try:
        return int(problem.mask_params.get("block", 128))
    except (TypeError, ValueError):
        return None


def block_reason(problem: Any) -> str | None:
    """Why the problem's block size does not fit VSA's tiles, or None."""
    block = block_param(problem)
    if block is not None and block != TILE:
        return (f"block {block}: VSA's tiles are {TILE} tokens, so the mask's block must be {TILE} "
                f"(uniform, or variable sizes in [{TILE // 2}, {TILE}]); pass --mask-param block={TILE}")
    return None


@dataclass
class Tiles:
    """Where the tokens go: `dest` (S,) is each token's padded position (None: no padding needed)."""

    dest: torch.Tensor | None
    padded_len: int
    block_sizes: torch.Tensor  # (num_blocks,) int32: real tokens of each tile


def block_sizes(layout: Any) -> np.ndarray:
    """Token count of each block; raises ValueError if the layout does not fit 64-token tiles."""
    if not np.array_equal(layout.q_bounds, layout.k_bounds):
        raise ValueError("VSA needs one block partition for queries and keys; the layout has two")
    sizes = np.diff(layout.q_bounds)
    if sizes.max() > TILE:
        raise ValueError(f"a block of {int(sizes.max())} tokens does not fit VSA's {TILE}-token tiles")
    return sizes


def make_tiles(layout: Any, device: Any) -> Tiles:
    """The tile placement of a block-sparse layout, on `device`."""
    import torch

    sizes = block_sizes(layout)
    count = torch.as_tensor(sizes, dtype=torch.int32, device=device)
    padded = len(sizes) * TILE
    if (sizes == TILE).all():
        return Tiles(None, padded, count)
    block_of = np.repeat(np.arange(len(sizes)), sizes)
    offset = np.arange(int(layout.q_bounds[-1])) - layout.q_bounds[:-1][block_of]
    dest = torch.as_tensor(block_of * TILE + offset, dtype=torch.int64, device=device)
    return Tiles(dest, padded, count)


def to_tiles(x: torch.Tensor, tiles: Tiles) -> torch.Tensor:
    """(B, S, H, D) -> contiguous (B, H, S_pad, D) with zeros in the padding; differentiable."""
    heads_first = x.transpose(1, 2)
    if tiles.dest is None:
        return heads_first.contiguous()
    padded = heads_first.new_zeros(*heads_first.shape[:2], tiles.padded_len, heads_first.shape[-1])
    return padded.index_copy(2, tiles.dest, heads_first)


def from_tiles(out: torch.Tensor, tiles: Tiles) -> torch.Tensor:
    """(B, H, S_pad, D) -> (B, S, H, D), dropping the rows of the padding."""
    if tiles.dest is not None:
        out = out.index_select(2, tiles.dest)
    return out.transpose(1, 2)


def block_map(layout: Any, batch: int, heads: int, device: Any) -> torch.Tensor:
    """The kept blocks as VSA's bool block map (B, H, num_q_blocks, num_k_blocks), contiguous."""
    import torch

    keep = torch.from_numpy(layout.keep)
    if keep.shape[0] != heads:
        keep = keep.repeat_interleave(heads // keep.shape[0], dim=0)
    return keep[None].expand(batch, -1, -1, -1).contiguous().to(device)
