"""Which longca masks TE's DotProductAttention takes, and as what (no TE import: checked anywhere).

TE describes a mask by `attn_mask_type`, a `window_size` (left, right) and, for packed documents,
the `thd` format with cu_seqlens. longca's masks map onto that exactly for these six; the others
(prefix, shared question, global tokens, blockwise) have no TE form.
"""
from __future__ import annotations

# mask -> (qkv_format, attn_mask_type, uses window_size)
TE_MASKS = {
    "full": ("bshd", "no_mask", False),
    "causal": ("bshd", "causal", False),
    "sliding_window": ("bshd", "no_mask", True),
    "sliding_window_causal": ("bshd", "causal", True),
    "full_document": ("thd", "padding", False),
    "causal_document": ("thd", "padding_causal", False),
}


def te_form(mask_name: str) -> tuple[str, str, bool] | None:
    return TE_MASKS.get(mask_name)


def window_of(mask) -> tuple[int, int]:
    """TE's window_size: (-1, -1) none, else the mask's own (left, right), the same convention."""
    form = te_form(mask.name)
    if form is None or not form[2]:
        return (-1, 0) if form is not None and "causal" in form[1] else (-1, -1)
    left, right = mask.params["window_size"]
    return int(left), int(right)
