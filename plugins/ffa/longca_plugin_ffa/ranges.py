"""longca's slices as FFA's arguments, and FFA's arguments as a dense mask (for the exactness test).

longca's slice `(q0, q1, k0, k1, type)` is MagiAttention's (q_range, k_range, attn_type) with the same
type codes (0 full, 1 causal aligned bottom-right, 2 inverse causal aligned top-left, 3 bi-causal), so
the conversion is a column split; `dense_from_ranges` reads the ranges back by FFA's documented
semantics, independently of longca's own `dense`, so that a test can compare the two.
"""
from __future__ import annotations

import numpy as np

from longca import plugin


def ffa_ranges(slices) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q_ranges (n, 2), k_ranges (n, 2), attn_type_map (n,)), int32, from a mask's slices."""
    arr = plugin.slices_array(slices)
    if arr.size and int(arr[:, :4].max()) >= 2 ** 31:
        raise plugin.UnsupportedError("a range end does not fit FFA's int32 ranges")
    return (np.ascontiguousarray(arr[:, 0:2], dtype=np.int32), np.ascontiguousarray(arr[:, 2:4], dtype=np.int32),
            np.ascontiguousarray(arr[:, 4], dtype=np.int32))


def dense_from_ranges(q_ranges: np.ndarray, k_ranges: np.ndarray, types: np.ndarray, seqlen_q: int,
                      seqlen_k: int) -> np.ndarray:
    """The (seqlen_q, seqlen_k) boolean mask FFA computes for these ranges (pairs counted once each)."""
    out = np.zeros((seqlen_q, seqlen_k), dtype=np.int64)
    for (q0, q1), (k0, k1), t in zip(q_ranges.tolist(), k_ranges.tolist(), types.tolist(), strict=True):
        i = np.arange(q1 - q0)[:, None]
        j = np.arange(k1 - k0)[None, :]
        keep = np.ones((q1 - q0, k1 - k0), dtype=bool)
        if t in (1, 3):  # causal: bottom-right aligned
            keep &= j <= i + (k1 - k0) - (q1 - q0)
        if t in (2, 3):  # inverse causal: top-left aligned
            keep &= j >= i
        out[q0:q1, k0:k1] += keep
    if (out > 1).any():
        raise ValueError("ranges overlap: a pair would be attended twice")
    return out.astype(bool)
