"""longca's block-sparse layouts as cuDNN block-sparse attention's sparse metadata (pure torch/numpy).

cuDNN's kernel (`cudnn.block_sparse_attention`, frontend 1.32) works on square tiles of T tokens,
T = `sparse_block_size` (64 or 128 on SM90). For every (batch, query head, query tile) it takes
the ascending list of key tiles to attend, `q2k_block_index` (int32, (B, Hq, query tiles,
capacity)), with one count for all rows (`block_sparse_num`) or one per row (`q2k_block_nums`,
int32 (B, Hq, query tiles)); optionally `block_sizes` (int32, (key tiles,)): how many of each key
tile's first tokens are real keys, the rest masked (padding). Without `block_sizes` every key tile
is full except the last one, cut at seqlen_k. The SM90 64-token forward needs seqlen_q a multiple
of 64.

The mapping: block i of the layout goes on ceil(size_i / T) consecutive tiles, its tokens from the
first tile's start. Where every block but the last is a whole number of tiles (uniform blocks that
are a multiple of T: the common case), tiles sit where the tokens already are: q, k, v go to the
library as they are, only q padded at the end to a multiple of 64 for the 64-token kernel. Else
(variable blocks) q, k and v are scattered into zero-padded tensors of `padded_len` tokens,
`block_sizes` masks the padding keys, and the output rows of the padding are dropped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

TILES = (64, 128)  # cuDNN's SM90 sparse block sizes
FORWARD_Q_MULTIPLE = 64  # SM90 blk64 forward: seqlen_q % 64 == 0 (api.py); the blk128 path takes any seqlen_q


def tile_for_block(block: int) -> int:
    """The sparse block size for a mask's `block` parameter: 128 for multiples of 128, else 64."""
    return 128 if block % 128 == 0 else 64


def block_reason(block: Any) -> str | None:
    """Why a mask's `block` parameter does not map onto cuDNN's tiles, or None."""
    try:
        block = int(block)
    except (TypeError, ValueError):
        return None  # the mask itself refuses a block that is not a number
    if block <= 0 or block % TILES[0]:
        return (f"block {block}: cuDNN's SM90 block-sparse tiles are 64 or 128 tokens, so the mask's block must be "
                f"a multiple of 64 (uniform blocks then fill whole tiles; variable blocks are padded into them); "
                f"pass --mask-param block=64 or 128")
    return None


@dataclass(frozen=True)
class Tiling:
    """Where the tokens of one block partition go on T-token tiles."""

    tile: int
    tile_block: np.ndarray  # (tiles,) the layout block of each tile
    tile_valid: np.ndarray  # (tiles,) real tokens of each tile (the first ones of the tile)
    dest: np.ndarray | None  # (S,) each token's position in the padded tensor; None: where it is now
    seqlen: int

    @property
    def tiles(self) -> int:
        return len(self.tile_block)

    @property
    def padded_len(self) -> int:
        return self.tiles * self.tile


def tiling(bounds: np.ndarray, tile: int) -> Tiling:
    """Block i of the partition `bounds` (0 ... S) on ceil(size_i / tile) consecutive tiles."""
    bounds = np.asarray(bounds, dtype=np.int64)
    sizes = np.diff(bounds)
    if len(sizes) == 0 or (sizes <= 0).any():
        raise ValueError("a block-sparse partition needs blocks of at least one token")
    per_block = -(-sizes // tile)
    first = np.concatenate([[0], np.cumsum(per_block)[:-1]])
    tile_block = np.repeat(np.arange(len(sizes)), per_block)
    offset = np.arange(len(tile_block)) - first[tile_block]
    tile_valid = np.minimum(tile, sizes[tile_block] - offset * tile)
    seqlen = int(bounds[-1])
    if (sizes[:-1] % tile == 0).all():  # tiles already where the tokens are: no scatter
        return Tiling(tile, tile_block, tile_valid, None, seqlen)
    token_block = np.repeat(np.arange(len(sizes)), sizes)
    dest = first[token_block] * tile + (np.arange(seqlen) - bounds[:-1][token_block])
    return Tiling(tile, tile_block, tile_valid, dest, seqlen)


@dataclass
class Metadata:
    """What the library is given besides q, k, v (made once, in prepare)."""

    tile: int  # sparse_block_size
    index: Any  # q2k_block_index: int32 (B, Hq, query tiles, capacity), contiguous
    num: int  # block_sparse_num: the count of every row when `nums` is None, else the capacity
    nums: Any  # q2k_block_nums: int32 (B, Hq, query tiles), or None (every row keeps `num`)
    allow_empty: bool  # some row keeps no key tile (allow_empty_block_nums)
    block_sizes: Any  # int32 (key tiles,), or None (full key tiles, the last cut at seqlen_k)
    q_dest: Any  # int64 (S,) token positions in the padded tensors, or None (direct: no scatter)
    k_dest: Any
    q_len: int  # the length q (and the output) has in the call
    k_len: int  # the length k and v have in the call
    seqlen: int  # the problem's S

    @property
    def scattered(self) -> bool:
        return self.q_dest is not None

    @property
    def q_pad(self) -> int:
        """Rows of zeros appended to q when nothing is scattered (the 64-token forward's seqlen_q rule)."""
        return 0 if self.scattered else self.q_len - self.seqlen


def kept_tiles(layout: Any, qt: Tiling, kt: Tiling, device: Any) -> Any:
    """bool (groups, query tiles, key tiles): tile (i, j) is kept when its blocks are."""
    import torch

    keep = torch.from_numpy(np.ascontiguousarray(layout.keep)).to(device)
    if qt.tiles != keep.shape[1]:
        keep = keep.index_select(1, torch.as_tensor(qt.tile_block, device=device))
    if kt.tiles != keep.shape[2]:
        keep = keep.index_select(2, torch.as_tensor(kt.tile_block, device=device))
    return keep


def block_lists(keep: Any) -> tuple[Any, Any]:
    """(index, counts) of a bool (groups, query tiles, key tiles): each row's kept key tiles in ascending
    order first (int32 (groups, query tiles, capacity), capacity = the longest row), and its count.
    Entries past a row's count are other (valid) tile ids; the library reads only the first `count`."""
    import torch

    counts = keep.sum(dim=-1, dtype=torch.int32)
    capacity = max(1, int(counts.max())) if counts.numel() else 1
    rows = []
    for group in keep:  # one group at a time: argsort's int64 result is (tiles x tiles) per group only
        order = torch.argsort(group.to(torch.int8), dim=-1, descending=True, stable=True)
        rows.append(order[:, :capacity].to(torch.int32))
    return torch.stack(rows), counts


def build(layout: Any, block: int, batch: int, heads_q: int, device: Any) -> Metadata:
    """The metadata of a layout for (batch, heads_q) on `device`; ValueError for a layout it cannot map."""
    import torch

    if layout is None:
        raise ValueError("the mask is not block-sparse: it has no block layout")
    if layout.causal:
        raise ValueError("the layout is causal inside its blocks (token-level); cuDNN's block-sparse attention is "
                         "non-causal")
    if heads_q % layout.groups:
        raise ValueError(f"{heads_q} query heads do not split into the layout's {layout.groups} mask groups")
    tile = tile_for_block(block)
    qt, kt = tiling(layout.q_bounds, tile), tiling(layout.k_bounds, tile)
    keep = kept_tiles(layout, qt, kt, device)
    index, counts = block_lists(keep)
    if int(counts.max()) == 0:
        raise ValueError("the layout keeps no block at all")
    per_group = heads_q // layout.groups
    index = index.repeat_interleave(per_group, dim=0)[None].expand(batch, -1, -1, -1).contiguous()
    lowest, highest = int(counts.min()), int(counts.max())
    nums = None  # one count for every row: the kernel's fixed-count path (block_sparse_num)
    if lowest != highest:
        nums = counts.repeat_interleave(per_group, dim=0)[None].expand(batch, -1, -1).contiguous()
    scattered = qt.dest is not None or kt.dest is not None
    dests: tuple[Any, Any] = (None, None)
    if scattered:
        q_dest = qt.dest if qt.dest is not None else np.arange(qt.seqlen)
        k_dest = kt.dest if kt.dest is not None else np.arange(kt.seqlen)
        q_len, k_len = qt.padded_len, kt.padded_len
        block_sizes = torch.as_tensor(kt.tile_valid, dtype=torch.int32, device=device)
        dests = (torch.as_tensor(q_dest, dtype=torch.int64, device=device),
                 torch.as_tensor(k_dest, dtype=torch.int64, device=device))
    else:
        q_len = -(-qt.seqlen // FORWARD_Q_MULTIPLE) * FORWARD_Q_MULTIPLE if tile == 64 else qt.seqlen
        k_len = kt.seqlen
        block_sizes = None
    return Metadata(tile=tile, index=index, num=highest, nums=nums, allow_empty=lowest == 0,
                    block_sizes=block_sizes, q_dest=dests[0], k_dest=dests[1], q_len=q_len, k_len=k_len,
                    seqlen=qt.seqlen)

