"""FLOP counts from the exact mask area."""
from __future__ import annotations

BACKWARD_FACTOR = 2.5
# FLOP/s a slow kernel (the float32 reference, naive torch) manages: the scale of deadlines and of the
# reference's refusals, not a target
SLOW_RATE = {"cuda": 20e12, "cpu": 2e9}
REFERENCE_LIMIT_S = 3600.0  # the reference refuses a call it would need longer than this for


def reference_seconds(area: float, heads_q: int, head_dim: int, batch: int, direction: str, device: str,
                      head_dim_v: int | None = None) -> float:
    """About how long the float32 reference needs for one call (at SLOW_RATE)."""
    flops = attention_flops(area, heads_q, head_dim, batch, direction, head_dim_v)
    return flops / SLOW_RATE.get(device.split(":")[0], 2e9)


def reference_refusal(area: float, heads_q: int, head_dim: int, batch: int, direction: str,
                      device: str, head_dim_v: int | None = None) -> str | None:
    """Why the reference will not run a call this big, or None."""
    seconds = reference_seconds(area, heads_q, head_dim, batch, direction, device, head_dim_v)
    if seconds <= REFERENCE_LIMIT_S:
        return None
    return (f"the float32 reference would need about {seconds / 3600:.3g} h for one call here (area {area:.3g} "
            f"pairs; limit {REFERENCE_LIMIT_S / 3600:g} h)")


def attention_flops(area: float, heads_q: int, head_dim: int, batch: int, direction: str,
                    head_dim_v: int | None = None) -> float:
    """Forward 2*area*heads*(d + dv)*batch: QK^T (2 FLOPs per pair and Q/K dim d) and PV (2 per pair and
    V dim dv), 4*area*heads*d*batch when dv = d (`head_dim_v` None); backward 2.5x that."""
    forward = 2.0 * area * heads_q * (head_dim + (head_dim_v or head_dim)) * batch
    return {"fwd": 1.0, "bwd": BACKWARD_FACTOR, "fwdbwd": 1.0 + BACKWARD_FACTOR}[direction] * forward


def problem_flops(problem, area: float) -> float:
    """`attention_flops` of a Problem (its heads, head dims, batch and direction) over `area` pairs."""
    return attention_flops(area, problem.heads_q, problem.head_dim, problem.batch, problem.direction,
                           problem.head_dim_v)
