"""Conformance checks every kernel plugin runs: spec well formed, claims honoured, results correct."""
from __future__ import annotations

from typing import Optional

import torch

from ..bench import RunOptions, run_problem
from ..plugins import get_registry, validate
from ..problem import Problem


def small_problem(spec, mask: str, direction: str, device: str = "cpu") -> Problem:
    """A small case the kernel claims to support: GQA if it does, its first head dim, float32 if it can."""
    heads = (4, 2) if spec.gqa else (4, 4)
    head_dim = spec.head_dims[0] if spec.head_dims else 32
    dtype = "float32" if "float32" in spec.dtypes and device == "cpu" else (
        "bfloat16" if "bfloat16" in spec.dtypes else spec.dtypes[0])
    seqlen = 2048 if mask == "block_causal_document" else 256
    params = {"block": 64} if mask.startswith("block_sparse") else {}
    return Problem(kernel=spec.name, mask=mask, seqlen=seqlen, heads_q=heads[0], heads_kv=heads[1],
                   head_dim=head_dim, dtype=dtype, direction=direction, device=device, mask_params=params,
                   sampler="uniform", sampler_params={"min_len": 16, "max_len": 128} if seqlen == 256 else {})


def run_conformance(kernel: str, device: Optional[str] = None) -> list[dict]:
    """Run every claimed mask, forward (and backward if claimed), with --check; assert all ok."""
    registry = get_registry()
    entry = registry.entry("kernels", kernel)
    spec = entry.spec
    assert validate("kernels", spec) is None
    devices = [device] if device else [d for d in spec.devices if d == "cpu" or torch.cuda.is_available()]
    rows = []
    for dev in devices:
        for mask in spec.masks:
            for direction in ("fwd", "bwd") if spec.backward else ("fwd",):
                row = run_problem(small_problem(spec, mask, direction, dev),
                                  RunOptions(warmup=0, repeat=1, samples=1, check=True), registry)
                rows.append(row)
    bad = [r for r in rows if r["status"] != "ok" and not str(r["reason"]).startswith("unavailable")]
    assert not bad, "\n".join(f"{r['mask']} {r['direction']} {r['device']}: {r['status']}: {r['reason']}" for r in bad)
    return rows
