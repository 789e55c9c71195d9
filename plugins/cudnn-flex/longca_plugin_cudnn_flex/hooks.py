"""cuDNN frontend's interval-mask attention (`cudnn.flex_attention`, frontend 1.32), as its users call it.

A mask is given per query row as visible key intervals `[0, F0) U [F1, F2) U ...` (an INT32
`mask_func` of shape [1, nfunc, B x S], nfunc odd); `create_mask_plan` turns it into the kernel's
plan once (in `prepare`, untimed, the backward's plan too for backward cases) and
`flex_attn_func(q, k, v, mask_plan=..., deterministic=...)` runs the forward, with autograd for the
backward. Every static mask is a few intervals a row (`longca.plugin.visible_key_intervals`), so
every one runs in one call, fixed-length BSHD; GQA as is (Hq a multiple of Hkv).
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from longca.plugin import ANY_STATIC, KernelSpec, gpu_reason, hookimpl, installed_version, visible_key_intervals

INSTALL = ("pip install nvidia-cudnn-frontend==1.32.0 with nvidia-cutlass-dsl (its flex attention is CuTe DSL), "
           "or longca-plugin-cudnn-flex[lib]")
# cudnn.flex_attention's rule (SUPPORTED_HEAD_DIM_RULE): Dqk and Dv each in [8, 128] and divisible by 8,
# or (192, 128), or (256, 256); the square ones and the two pairs are listed
HEAD_DIMS = (*range(8, 129, 8), (192, 128), 256)


def library_reason() -> str | None:
    """Why cudnn.flex_attention cannot be imported here, found without importing it, or None."""
    spec = importlib.util.find_spec("cudnn")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not any(os.path.exists(os.path.join(loc, "flex_attention", "api.py")) for loc in locations):
        return f"cuDNN frontend's flex attention (cudnn.flex_attention, frontend >= 1.32) is not installed: {INSTALL}"
    if importlib.util.find_spec("cutlass") is None:
        return "cudnn.flex_attention needs the CuTe DSL (package `cutlass` from nvidia-cutlass-dsl), not importable"
    return None


def available() -> str | None:
    return library_reason() or gpu_reason()


def mask_func(slices, seqlen: int, batch: int = 1) -> np.ndarray:
    """The mask as cuDNN's endpoints: int32 [1, nfunc, batch x seqlen], row r seeing [0, F0) U [F1, F2) U ...

    A row's first interval is F0's when it starts at key 0 (else F0 = 0: empty); the others are pairs;
    rows with fewer pairs repeat their last endpoint (empty intervals, endpoints nondecreasing)."""
    rows, starts, ends = visible_key_intervals(slices)
    first = np.zeros(seqlen, dtype=np.int64)  # F0 of each row
    lead = np.ones(len(rows), dtype=bool)
    lead[1:] = rows[1:] != rows[:-1]
    opens = lead & (starts == 0)
    first[rows[opens]] = ends[opens]
    paired = ~opens
    counts = np.bincount(rows[paired], minlength=seqlen)
    width = int(counts.max()) if len(counts) else 0
    funcs = np.repeat(first[None, :], 1 + 2 * width, axis=0)
    if width:
        pr, ps, pe = rows[paired], starts[paired], ends[paired]
        slot = np.arange(len(pr)) - np.searchsorted(pr, pr)  # the pair's place among its row's pairs
        last = first.copy()
        np.maximum.at(last, pr, pe)
        funcs[1:] = last[None, :]  # padding: empty intervals at the row's last endpoint
        funcs[1 + 2 * slot, pr] = ps
        funcs[2 + 2 * slot, pr] = pe
    return np.ascontiguousarray(np.tile(funcs, (1, batch))[None].astype(np.int32))


@dataclass(frozen=True)
class Prepared:
    plan: Any
    deterministic: bool


def prepare(problem, mask, q, k, v) -> Prepared:
    """The mask's endpoints and cuDNN's plan of them (the backward's too for backward cases)."""
    import torch
    from cudnn.flex_attention import create_mask_plan

    funcs = torch.from_numpy(mask_func(mask.slices, mask.seqlen, q.shape[0])).to(q.device)
    plan = create_mask_plan(funcs, q, k, v, build_backward=problem.direction != "fwd")
    return Prepared(plan, problem.deterministic)


def run(prepared: Prepared, q, k, v):
    from cudnn.flex_attention import flex_attn_func

    return flex_attn_func(q, k, v, mask_plan=prepared.plan, deterministic=prepared.deterministic)


def version() -> str:
    return installed_version("nvidia-cudnn-frontend") or "unknown version"


SPEC = KernelSpec(
    name="cudnn-flex",
    family="dense",
    description="cuDNN frontend's interval-mask attention (cudnn.flex_attention): every static mask in one call",
    masks=(ANY_STATIC,),
    prepare=prepare,
    run=run,
    dtypes=("bfloat16", "float16"),
    head_dims=HEAD_DIMS,
    devices=("cuda",),
    min_compute_capability=(9, 0),
    available=available,
    deterministic=True,  # flex_attn_func(deterministic=...): "the deterministic backward path when supported"
    backend=lambda: f"nvidia-cudnn-frontend {version()} cudnn.flex_attention (create_mask_plan, flex_attn_func)",
    compiles=True,  # CuTe DSL kernels, compiled per configuration on first use
    url="https://github.com/NVIDIA/cudnn-frontend",
)


@hookimpl
def longca_kernels():
    return [SPEC]


@hookimpl
def longca_env_info(info):
    if (found := installed_version("nvidia-cudnn-frontend")):
        info["nvidia-cudnn-frontend"] = found
