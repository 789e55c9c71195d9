"""Ring attention with point-to-point K/V passing (ring-flash-attn / Megatron CP style).

Each rank keeps its queries; K/V blocks travel around the ring with batched isend/irecv that
overlap the inner kernel, partial outputs are merged by their lse in float32, and in the
backward dK/dV travel around the ring with their block. Sequence-level zigzag layout by default
(rank r holds chunks r and 2W-1-r) to balance causal work.
"""
from __future__ import annotations

from longca import plugin
from longca_cp import plugin as cp


@plugin.hookimpl
def longca_cp_strategies():
    return [cp.hybrid_strategy(
        "ring-p2p", "K/V passed around a ring with batched P2P overlapped with the inner kernel, lse merge",
        options={"layout": "zigzag (default: rank r holds chunks r and 2W-1-r of the sequence), contiguous"
                           ", doc_zigzag (each document in 2R pieces, one varlen call a step: TE's THD)"})]
