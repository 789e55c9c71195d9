"""The hooks longca calls: what this plugin registers. Keep imports light here (no torch): every
`longca` command imports this module, also on machines without a GPU."""
from __future__ import annotations

from longca import plugin

from . import mask


@plugin.hookimpl
def longca_masks():
    return [plugin.MaskSpec(
        name=mask.NAME,
        kind="regular",  # regular, heterogeneous (documents of several shapes) or block_sparse
        description="0 <= q - k <= w, or k < sinks and k <= q (causal sliding window with attention sinks)",
        build=mask.build,
        params={"window": f"keys at most this far before the query (default {mask.DEFAULTS['window']})",
                "sinks": f"first tokens every query sees (default {mask.DEFAULTS['sinks']})"},
        aliases={"w": "window"},
        flex_mask_mod=mask.flex_mask_mod,
    )]
