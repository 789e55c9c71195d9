"""A FlexAttention BlockMask built directly from mask slices, without evaluating S² positions.

`create_block_mask` evaluates a mask function at every (query, key) pair to classify blocks.
The slice representation already knows its geometry: `block_map` classifies every 128 x 128
block as empty, partial or full in time proportional to the number of slices times blocks, and
the FlashMask column bounds give one vectorised `mask_mod` valid for all 12 static masks: key k
is masked for rows in [UTS[k], UTE[k]) and [LTS[k], LTE[k]). The kernel evaluates that
`mask_mod` only inside partial blocks.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from longca.masks import slices as sl

BLOCK = 128


def flashmask_mask_mod(slices: np.ndarray, seqlen_q: int, seqlen_k: int, device) -> Callable:
    """mask_mod(b, h, q_idx, kv_idx) -> may attend, from the FlashMask column bounds of `slices`."""
    bounds = sl.flashmask_bounds(slices, seqlen_q, seqlen_k)
    lts, lte, uts, ute = (torch.from_numpy(bounds[n].astype(np.int32)).to(device) for n in ("LTS", "LTE", "UTS", "UTE"))

    def mask_mod(b, h, q_idx, kv_idx):
        upper = (q_idx >= uts[kv_idx]) & (q_idx < ute[kv_idx])
        lower = (q_idx >= lts[kv_idx]) & (q_idx < lte[kv_idx])
        return ~(upper | lower)

    return mask_mod


def _block_lists(selected: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(counts (nqb,), indices (nqb, nkb)) with each row's selected key blocks first, in order."""
    counts = selected.sum(axis=1).astype(np.int32)
    order = np.argsort(~selected, axis=1, kind="stable").astype(np.int32)
    return torch.from_numpy(counts), torch.from_numpy(order)


def block_mask_from_slices(slices: np.ndarray, seqlen_q: int, seqlen_k: int, device, block: int = BLOCK):
    """The BlockMask of `slices` (shared by every batch and head), via `BlockMask.from_kv_blocks`."""
    from torch.nn.attention.flex_attention import BlockMask

    slices = sl.as_array(slices)
    bmap = sl.block_map(slices, seqlen_q, seqlen_k, block, block)
    kv_num, kv_idx = _block_lists(bmap == sl.PARTIAL)
    full_num, full_idx = _block_lists(bmap == sl.FULL_BLOCK)
    put = lambda t: t[None, None].to(device)  # noqa: E731 - (B=1, H=1, ...) broadcast over batch and heads
    return BlockMask.from_kv_blocks(put(kv_num), put(kv_idx), put(full_num), put(full_idx), BLOCK_SIZE=block,
                                    mask_mod=flashmask_mask_mod(slices, seqlen_q, seqlen_k, device),
                                    seq_lengths=(seqlen_q, seqlen_k))
