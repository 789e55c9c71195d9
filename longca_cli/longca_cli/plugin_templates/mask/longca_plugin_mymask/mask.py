"""Causal sliding window with attention sinks (StreamingLLM): a query sees the keys at most `window`
before it and the first `sinks` tokens of the sequence, never a later key.

`build` draws one mask as typed slices (longca derives every other form from them: block maps,
FlashMask bounds, crops, the exact area); `flex_mask_mod` is the same rule as a FlexAttention user
writes it. Replace both with your pattern.
"""
from __future__ import annotations

from longca import plugin

NAME = "mymask"
DEFAULTS = {"window": 1024, "sinks": 4}


def _param(ctx, name: str) -> int:
    """An int parameter: the override given (`--mask-param window=256`) or the default."""
    value = int(ctx.param(name, lambda: DEFAULTS[name]))
    if value < 0:
        raise plugin.LongcaError(f"mask {NAME}: parameter {name}={value} must be >= 0")
    return value


def build(ctx):
    """One draw: 0 <= q - k <= window, plus the sink columns k < sinks further back (pair-disjoint)."""
    window, sinks = _param(ctx, "window"), _param(ctx, "sinks")
    s = ctx.seqlen
    band = plugin.band_to_slices(0, s, 0, s, -window, 0)
    sink = plugin.band_to_slices(0, s, 0, min(sinks, s), -s, -window - 1)  # only keys beyond the window
    return plugin.Mask(NAME, s, {"window": window, "sinks": sinks}, plugin.slices_array(band + sink))


def flex_mask_mod(mask, device):
    """FlexAttention's mask_mod for one draw: what the flex plugins build their BlockMask from."""
    window, sinks = mask.params["window"], mask.params["sinks"]

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & ((q_idx - kv_idx <= window) | (kv_idx < sinks))

    return mask_mod
