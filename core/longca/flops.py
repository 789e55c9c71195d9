"""FLOP counts from the exact mask area."""
from __future__ import annotations

BACKWARD_FACTOR = 2.5


def attention_flops(area: float, heads_q: int, head_dim: int, batch: int, direction: str) -> float:
    """Forward 4*area*heads*d*batch (two matmuls of 2 FLOPs per pair and dim); backward 2.5x that."""
    forward = 4.0 * area * heads_q * head_dim * batch
    return {"fwd": 1.0, "bwd": BACKWARD_FACTOR, "fwdbwd": 1.0 + BACKWARD_FACTOR}[direction] * forward
