"""Tile sizes, warps and pipeline depth per device and head dim.

GPU defaults are for Hopper (H100/H200) with bf16/fp16; the CPU entries are small tiles for
Triton's interpreter (TRITON_INTERPRET=1), where they exercise many partial and full tiles at
the small sizes of the tests. `override` lets a tuning script try other settings.

The backward runs *split* (a dK/dV kernel, then a dQ kernel that recomputes P and dP: 7 matrix
products per tile, no atomics, deterministic) or *fused* (one dK/dV pass that also adds dQ into a
float32 buffer with atomics: 5 products per tile, plus zeroing that buffer and casting it).
`bwd_fused` picks it; the environment variable LONGCA_FLASHMASK_BWD=fused|split overrides the
table (and `override` overrides both).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Config:
    """Forward (fwd_m x fwd_n), dK/dV (dkv_m x dkv_n) and dQ (dq_m x dq_n) tiles, warps, stages,
    backward schedule switches, and the tiles of the fused backward (fused_m x fused_n)."""

    fwd_m: int
    fwd_n: int
    fwd_warps: int
    fwd_stages: int
    dkv_m: int
    dkv_n: int
    dkv_warps: int
    dkv_stages: int
    dq_m: int
    dq_n: int
    dq_warps: int
    dq_stages: int
    dkv_head_minor: int = 0  # dK/dV loop order: 1 = the GROUP heads of a query block back to back
    bwd_streams: int = 1  # 2 = dK/dV and dQ kernels on two CUDA streams, so one fills the other's tail
    bwd_fused: int = 0  # 1 = fused backward (dQ by atomics in the dK/dV pass), 0 = split
    fused_m: int = 64
    fused_n: int = 128
    fused_warps: int = 8
    fused_stages: int = 2
    fused_rotate: int = 0  # fused: 1 = each key block walks its query blocks from a different start
    fused_tma: int = 0  # fused: 1 = dQ tiles added by TMA bulk reductions (sm_90+, not in the interpreter)


# head_dim 128: the fastest of the sweeps on the H200 (docs/results/h200/flashmask/tuning_*.md);
# head_dim 64: settings that compile without register spills (Triton 3.6, sm_90)
GPU = {
    64: Config(128, 128, 8, 3, 64, 128, 8, 3, 128, 64, 8, 3),
    128: Config(128, 128, 8, 3, 64, 128, 8, 3, 128, 64, 8, 3, dkv_head_minor=1, bwd_streams=2),
}
_override: dict | None = None
ENV_BWD = "LONGCA_FLASHMASK_BWD"
BWD_MODES = {"split": 0, "fused": 1}


def interpreter_config(seqlen: int) -> Config:
    """Tiles of about an eighth of the sequence (16 to 128): many tiles, few interpreted steps."""
    n = min(128, max(32, 1 << max(0, (seqlen // 8) - 1).bit_length()))
    return Config(n, n, 4, 1, n // 2, n, 4, 1, n, n // 2, 4, 1, fused_m=n // 2, fused_n=n, fused_warps=4,
                  fused_stages=1, fused_rotate=1)


def env_bwd_fused() -> int | None:
    """LONGCA_FLASHMASK_BWD as bwd_fused (1 fused, 0 split), None when unset; ValueError if unknown."""
    value = os.environ.get(ENV_BWD, "").strip().lower()
    if not value:
        return None
    if value not in BWD_MODES:
        raise ValueError(f"{ENV_BWD}={value!r}: expected one of {', '.join(BWD_MODES)}")
    return BWD_MODES[value]


def config(head_dim: int, mode: str, seqlen: int) -> Config:
    """The settings for this head dim, on the GPU ("cuda") or in Triton's interpreter ("interpreter").

    `seqlen` is the longer of Sq and Sk (the interpreter's tiles follow it).
    """
    base = GPU.get(head_dim, GPU[128]) if mode == "cuda" else interpreter_config(seqlen)
    fused = env_bwd_fused()
    if fused is not None:
        base = replace(base, bwd_fused=fused)
    return replace(base, **_override) if _override else base


@contextlib.contextmanager
def override(**fields: int) -> Iterator[None]:
    """Temporarily replace some fields of every config (tuning scripts)."""
    global _override
    previous = _override
    _override = {**(previous or {}), **fields}
    try:
        yield
    finally:
        _override = previous
