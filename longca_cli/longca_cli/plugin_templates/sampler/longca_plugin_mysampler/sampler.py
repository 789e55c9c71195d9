"""Heavy-tailed document lengths: a Pareto law above a minimum length, as web-crawl corpora have
(many short documents, a few very long ones).

`sample(total, rng, **params)` must return positive int64 lengths summing exactly to `total`,
drawn from `rng` only (one seed, one answer). Replace the law with yours.
"""
from __future__ import annotations

import numpy as np

from longca import plugin

NAME = "mysampler"


def sample(total, rng, min_len=128, alpha=1.5):
    """Lengths `min_len * (1 + Pareto(alpha))`, rounded down; the last one cut so that they sum to `total`."""
    total, min_len, alpha = int(total), int(min_len), float(alpha)
    if min_len < 1 or not alpha > 0:
        raise plugin.LongcaError(f"sampler {NAME}: min_len={min_len} must be >= 1 and alpha={alpha} > 0")
    # enough draws for the whole total even if every one were min_len; each capped at the total (no overflow)
    draws = np.minimum(min_len * (1.0 + rng.pareto(alpha, size=total // min_len + 1)), total).astype(np.int64)
    ends = np.cumsum(draws)
    n = int(np.searchsorted(ends, total))  # the first draw that reaches the total: cut to what is left
    lengths = draws[: n + 1].copy()
    lengths[n] = total - (ends[n - 1] if n else 0)
    return lengths
