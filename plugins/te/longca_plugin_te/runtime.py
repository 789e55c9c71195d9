"""TE's DotProductAttention called as its users call it (first run on an H100 on 2026-12-07; TE is not installed here).

Kernel: one module per problem; bshd for full / causal / windows, thd with cu_seqlens for documents.
CP: the same module after `set_context_parallel_group(group(s), global ranks, stream, cp_comm_type)`,
on shards in TE's DualChunkSwap order (longca's zigzag layout), bshd only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from longca_cp import plugin as cp

from .masks import te_form, window_of


def te_module(problem, mask, fmt: str, mask_type: str, softmax_scale: float | None = None):
    import torch
    from transformer_engine.pytorch import DotProductAttention

    module = DotProductAttention(problem.heads_q, problem.head_dim, num_gqa_groups=problem.heads_kv,
                                 attention_dropout=0.0, qkv_format=fmt, attn_mask_type=mask_type,
                                 window_size=window_of(mask), softmax_scale=softmax_scale)
    return module.to(torch.device(problem.device_type, torch.cuda.current_device()))


def prepare(problem, mask, q, k, v):
    """(module, thd arguments or None)."""
    import torch

    fmt, mask_type, _ = te_form(mask.name)
    module = te_module(problem, mask, fmt, mask_type)
    if fmt != "thd":
        return module, None
    bounds = cp.document_bounds(mask.slices, problem.seqlen)
    cu = torch.as_tensor(bounds, dtype=torch.int32, device=q.device)
    longest = int((bounds[1:] - bounds[:-1]).max())
    return module, {"cu_seqlens_q": cu, "cu_seqlens_kv": cu, "max_seqlen_q": longest, "max_seqlen_kv": longest}


def run(prepared, q, k, v):
    module, thd = prepared
    if thd is None:
        out = module(q, k, v)
        return out.view(q.shape[0], q.shape[1], q.shape[2], -1)
    out = module(q[0], k[0], v[0], **thd)  # packed (T, H, D)
    return out.view(1, q.shape[1], q.shape[2], -1)


@dataclass
class TECPPlan(cp.CPPlan):
    module: Any = None


def cp_prepare(problem, mask, inner, group, options):
    """Module, CP groups (a2a+p2p: [all-to-all group, ring group], created on every rank) and the layout."""
    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    ranks = dist.get_process_group_ranks(group)
    fmt, mask_type, _ = te_form(mask.name)
    module = te_module(problem, mask, fmt, mask_type, inner.softmax_scale)
    comm, cp_group = options["cp_comm_type"], group
    if comm == "a2a+p2p":
        deg = options["a2a_degree"]
        mine = []
        for sub in [ranks[i:i + deg] for i in range(0, world, deg)] + [ranks[i::deg] for i in range(deg)]:
            created = dist.new_group(sub)  # every rank creates every group, in the same order
            if ranks[rank] in sub:
                mine.append(created)
        cp_group = mine
    module.set_context_parallel_group(cp_group, ranks, torch.cuda.Stream(), comm)
    return TECPPlan(cp.zigzag_layout(problem.seqlen, world), rank, group, inner, dict(options), module=module)


def cp_attention(q, k, v, plan: TECPPlan):
    out = plan.module(q, k, v)
    return out.view(q.shape[0], q.shape[1], q.shape[2], -1)
