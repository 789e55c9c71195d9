"""Pictures of masks (PNG), drawn from the block map so that long masks stay cheap."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from longca.masks.mask import Mask
from longca.sizes import format_size

MAX_PIXELS = 1024


def mask_image(mask: Mask) -> np.ndarray:
    """Fraction of unmasked pairs per pixel (float, at most MAX_PIXELS a side); first group if sparse."""
    s = mask.seqlen
    if s <= MAX_PIXELS:
        dense = mask.dense()
        return (dense[0] if dense.ndim == 3 else dense).astype(float)
    if mask.layout is not None:
        step = -(-s // MAX_PIXELS)
        idx = np.arange(0, s, step)
        return mask.layout.dense((0, s), (0, s))[0][np.ix_(idx, idx)].astype(float) if s <= 16384 else \
            mask.layout.keep[0].astype(float)
    block = -(-s // MAX_PIXELS)
    return mask.block_map(block).astype(float) / 2.0


def draw_mask(mask: Mask, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 4))
    ax.imshow(mask_image(mask), cmap="Blues", vmin=0, vmax=1, interpolation="nearest",
              extent=(0, mask.seqlen, mask.seqlen, 0))
    ax.set_title(f"{mask.name}  (S={format_size(mask.seqlen)})", fontsize=9)
    ax.set_xlabel("key", fontsize=8)
    ax.set_ylabel("query", fontsize=8)
    ax.tick_params(labelsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
