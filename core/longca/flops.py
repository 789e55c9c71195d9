"""FLOP counts from the exact mask area."""
from __future__ import annotations

BACKWARD_FACTOR = 2.5
# FLOP/s a slow kernel (the float32 reference, naive torch) manages: the scale of deadlines and of the
# reference's refusals, not a target
SLOW_RATE = {"cuda": 20e12, "cpu": 2e9}
REFERENCE_LIMIT_S = 3600.0  # the reference refuses a call it would need longer than this for


def reference_seconds(area: float, heads_q: int, head_dim: int, batch: int, direction: str, device: str) -> float:
    """About how long the float32 reference needs for one call (at SLOW_RATE)."""
    return attention_flops(area, heads_q, head_dim, batch, direction) / SLOW_RATE.get(device.split(":")[0], 2e9)


def reference_refusal(area: float, heads_q: int, head_dim: int, batch: int, direction: str,
                      device: str) -> str | None:
    """Why the reference will not run a call this big, or None."""
    seconds = reference_seconds(area, heads_q, head_dim, batch, direction, device)
    if seconds <= REFERENCE_LIMIT_S:
        return None
    return (f"the float32 reference would need about {seconds / 3600:.3g} h for one call here (area {area:.3g} "
            f"pairs; limit {REFERENCE_LIMIT_S / 3600:g} h)")


def attention_flops(area: float, heads_q: int, head_dim: int, batch: int, direction: str) -> float:
    """Forward 4*area*heads*d*batch (two matmuls of 2 FLOPs per pair and dim); backward 2.5x that."""
    forward = 4.0 * area * heads_q * head_dim * batch
    return {"fwd": 1.0, "bwd": BACKWARD_FACTOR, "fwdbwd": 1.0 + BACKWARD_FACTOR}[direction] * forward
