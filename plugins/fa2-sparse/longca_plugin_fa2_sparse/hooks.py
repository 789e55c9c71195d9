"""MIT Han Lab's Block-Sparse-Attention: FlashAttention-2 with a per-head 128x128 block mask.

`block_sparse_attn_func` takes packed (total_tokens, heads, head_dim) tensors with cu_seqlens,
`head_mask_type` (1 = block-sparse, per query head) and `base_blockmask` (batch, heads,
ceil(S/128), ceil(S/128)) bool. prepare builds the mask, head types and cu_seqlens on the
device; the library turns the bool mask into its row (forward) and column (backward) index
lists inside the call. Uniform 128-token blocks only (the last may be shorter, as in the
core's layout); GQA through per-query-head masks (the core's group mask repeated).
"""
from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from typing import Any

from longca.plugin import KernelSpec, hookimpl, installed_version

BLOCK = 128
MASKS = ("block_sparse_uniform",)


@functools.cache
def available() -> str | None:
    import torch

    if importlib.util.find_spec("block_sparse_attn") is None:
        return ("block_sparse_attn is not installed: build MIT Han Lab's Block-Sparse-Attention from source "
                "(not on PyPI; see the longca-plugin-fa2-sparse README)")
    if not torch.cuda.is_available():
        return (f"block_sparse_attn is installed, but no CUDA GPU is visible (torch {torch.__version__}, "
                f"CUDA build: {torch.version.cuda or 'none'})")
    try:
        from block_sparse_attn import block_sparse_attn_func  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - e.g. built for another torch: undefined c10 symbols
        text = str(exc).strip().splitlines()
        return (f"block_sparse_attn does not import ({type(exc).__name__}: {text[0] if text else ''}); "
                f"rebuild it for torch {torch.__version__}")
    return None


def supports(problem: Any) -> str | None:
    try:
        block = int(problem.mask_params.get("block", BLOCK))
    except (TypeError, ValueError):
        return None
    if block != BLOCK:
        return (f"block {block}: Block-Sparse-Attention's sparse blocks are {BLOCK}x{BLOCK}; "
                f"pass --mask-param block={BLOCK}")
    return None


@dataclass
class Prepared:
    blockmask: Any  # (batch, heads_q, nqb, nkb) bool
    head_mask_type: Any  # (heads_q,) int32, all 1: every head block-sparse
    cu_seqlens: Any  # (batch + 1,) int32
    seqlen: int


def prepare(problem, mask, q, k, v) -> Prepared:
    import torch

    layout = mask.layout
    batch, seqlen, heads, _ = q.shape
    blocks = -(-seqlen // BLOCK)
    if layout is None or layout.keep.shape[1:] != (blocks, blocks) or layout.q_bounds[1] != min(BLOCK, seqlen):
        raise ValueError(f"mask {mask.name!r}: Block-Sparse-Attention needs uniform {BLOCK}-token blocks")
    keep = torch.from_numpy(layout.keep)
    if keep.shape[0] != heads:
        keep = keep.repeat_interleave(heads // keep.shape[0], dim=0)
    blockmask = keep[None].expand(batch, -1, -1, -1).contiguous().to(q.device)
    head_mask_type = torch.ones(heads, dtype=torch.int32, device=q.device)
    cu_seqlens = torch.arange(0, (batch + 1) * seqlen, seqlen, dtype=torch.int32, device=q.device)
    return Prepared(blockmask, head_mask_type, cu_seqlens, seqlen)


def run(prepared: Prepared, q, k, v):
    from block_sparse_attn import block_sparse_attn_func

    batch, seqlen, heads, head_dim = q.shape
    packed = [x.reshape(batch * seqlen, x.shape[2], head_dim) for x in (q, k, v)]
    out = block_sparse_attn_func(*packed, prepared.cu_seqlens, prepared.cu_seqlens, prepared.head_mask_type,
                                 None, prepared.blockmask, seqlen, seqlen, 0.0,
                                 deterministic=False, softmax_scale=None, is_causal=False)
    return out.view(batch, seqlen, heads, head_dim)


def _version() -> str:
    return installed_version("block_sparse_attn") or ""


@hookimpl
def longca_kernels():
    return [KernelSpec(
        name="fa2-sparse",
        family="sparse",
        description="MIT Han Lab Block-Sparse-Attention (FlashAttention-2 based): per-head 128x128 block mask",
        masks=MASKS,
        prepare=prepare,
        run=run,
        dtypes=("bfloat16", "float16"),
        head_dims=(32, 64, 128),
        gqa=True,
        backward=True,
        devices=("cuda",),
        min_compute_capability=(8, 0),
        available=available,
        supports=supports,
        backend=lambda: f"block_sparse_attn {_version()}".strip(),
        url="https://github.com/mit-han-lab/Block-Sparse-Attention",
    )]


@hookimpl
def longca_env_info(info):
    found = _version()
    if found:
        info["block_sparse_attn"] = found
