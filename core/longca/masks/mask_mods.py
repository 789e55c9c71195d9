"""FlexAttention's natural `mask_mod` for each static mask: what a Flex user writes for it.

Flex users do not write the generic FlashMask-bounds form (four gathers per evaluated pair, valid
for any slices); they write `q_idx >= kv_idx` for causal, a document-id lookup for documents, and
so on (the attention-gym style). A kernel that wraps FlexAttention should run that, or its
numbers are below what Flex users get. Each builder takes one draw (a `Mask`, with its drawn
parameters) and a device, and returns `mask_mod(b, h, q_idx, kv_idx) -> may attend`; tensors it
indexes (document ids, per-key bounds) are int32 on `device`. `MaskSpec.flex_mask_mod` holds the
builder; masks that give none fall back to the generic bounds form (`natural_mask_mod` -> None).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .mask import Mask

if TYPE_CHECKING:
    import torch

MaskMod = Callable[..., Any]


def _doc_ids(mask: Mask, device) -> torch.Tensor:
    import torch  # here, not at import: loading the registry (which lists these builders) stays torch-free

    lens = np.asarray(mask.params["doc_lens"], dtype=np.int64)
    return torch.from_numpy(np.repeat(np.arange(len(lens), dtype=np.int32), lens)).to(device)


def full(mask: Mask, device) -> MaskMod:
    def mask_mod(b, h, q_idx, kv_idx):
        return q_idx >= 0

    return mask_mod


def causal(mask: Mask, device) -> MaskMod:
    def mask_mod(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    return mask_mod


def full_document(mask: Mask, device) -> MaskMod:
    doc = _doc_ids(mask, device)

    def mask_mod(b, h, q_idx, kv_idx):
        return doc[q_idx] == doc[kv_idx]

    return mask_mod


def causal_document(mask: Mask, device) -> MaskMod:
    doc = _doc_ids(mask, device)

    def mask_mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    return mask_mod


def sliding_window(mask: Mask, device) -> MaskMod:
    w = int(mask.params["window"])

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx <= w) & (kv_idx - q_idx <= w)

    return mask_mod


def sliding_window_causal(mask: Mask, device) -> MaskMod:
    w = int(mask.params["window"])

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx <= w)

    return mask_mod


def share_question(mask: Mask, device) -> MaskMod:
    doc = _doc_ids(mask, device)  # document 0 is the question

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & ((doc[q_idx] == doc[kv_idx]) | (doc[kv_idx] == 0))

    return mask_mod


def causal_blockwise(mask: Mask, device) -> MaskMod:
    doc = _doc_ids(mask, device)
    docs_after = int(doc[-1]) - doc  # 0 in the last document; a tensor, so new draws reuse the compiled kernel

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & ((doc[q_idx] == doc[kv_idx]) | (docs_after[q_idx] == 0))

    return mask_mod


def prefix_lm_causal(mask: Mask, device) -> MaskMod:
    p = int(mask.params["prefix"])

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < p) | (q_idx >= kv_idx)

    return mask_mod


def prefix_lm_document(mask: Mask, device) -> MaskMod:
    import torch

    lens = np.asarray(mask.params["doc_lens"], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    cut = np.repeat(starts + np.minimum(int(mask.params["prefix"]), lens), lens).astype(np.int32)
    doc, prefix_end = _doc_ids(mask, device), torch.from_numpy(cut).to(device)  # per key: its document's prefix end

    def mask_mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & ((kv_idx < prefix_end[kv_idx]) | (q_idx >= kv_idx))

    return mask_mod


def global_sliding_window(mask: Mask, device) -> MaskMod:
    w, g = int(mask.params["window"]), int(mask.params["global_tokens"])

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx < g) | (kv_idx < g) | ((q_idx - kv_idx <= w) & (kv_idx - q_idx <= w))

    return mask_mod


def block_causal_document(mask: Mask, device) -> MaskMod:
    doc, block = _doc_ids(mask, device), int(mask.params["block"])

    def mask_mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx // block >= kv_idx // block)

    return mask_mod


BUILDERS: dict[str, Callable[[Mask, Any], MaskMod]] = {
    f.__name__: f for f in (full, causal, full_document, causal_document, sliding_window, sliding_window_causal,
                            share_question, causal_blockwise, prefix_lm_causal, prefix_lm_document,
                            global_sliding_window, block_causal_document)
}


def mask_mod_builder(name: str, registry=None) -> Callable[[Mask, Any], MaskMod] | None:
    """The `flex_mask_mod` builder the mask `name` registers, or None."""
    from ..errors import LongcaError
    from ..plugins import get_registry

    try:
        return (registry or get_registry()).mask(name).flex_mask_mod
    except LongcaError:  # a name no plugin registers (a crop made for a CP shard) has none
        return None


def natural_mask_mod(mask: Mask, device, registry=None) -> MaskMod | None:
    """The mask_mod its MaskSpec registers for this draw, or None (use the generic bounds form)."""
    builder = mask_mod_builder(mask.name, registry)
    return builder(mask, device) if builder is not None else None
