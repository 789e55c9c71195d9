"""torch's context parallel on longca's (B, S, H, D) tensors, called as its users call it.

SDPA: a module calling `F.scaled_dot_product_attention`, wrapped by `_ContextParallel(SDPA)` with the CP
dispatcher on, so torch's ring attention runs the CUDA SDPA kernels. Flex: a module calling
`flex_attention` (compiled on CUDA), wrapped by `_ContextParallel(FLEX)` (K/V all-gathered, dK/dV
reduce-scattered), with the CP BlockMask `_create_cp_block_mask` builds from the mask's own mask_mod.
Shards and restores are torch's (`_context_parallel_shard`, `context_parallel_unshard`) with its
head-tail load balancer; the layout in the plan is the same order, for longca's accounting and checks.
These are torch's experimental, underscore-named APIs (the ones torchtitan calls), so they may move.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from longca import plugin
from longca_cp import plugin as cp_face

RECOMPILE_LIMIT = 256  # every mask_mod and shape is a new compiled graph (flex on CUDA, create_block_mask)


def torch_cp():
    """torch's context-parallel module (ImportError on a torch without it)."""
    from torch.distributed.tensor.experimental import _context_parallel as cp

    return cp


@dataclass
class TorchCPPlan(cp_face.CPPlan):
    mesh: Any = None
    balancer: Any = None
    module: Any = None  # the wrapped attention module
    block_mask: Any = None  # flex only: this rank's CP BlockMask
    kind: str = "sdpa"
    is_causal: bool = False  # sdpa only: the mask is causal


def _set_globals(plan: TorchCPPlan) -> None:
    """torch keeps CP options in module globals, read again by the backward: set them for this plan."""
    cp = torch_cp()
    cp._attention._cp_options.enable_load_balance = plan.balancer is not None
    if plan.kind == "sdpa":
        cp.set_rotate_method(plan.options["rotate"])


def _flex_fn(device_type: str):
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    if device_type != "cuda":
        return flex_attention  # torch runs flex eagerly on CPU (forward only)
    return torch.compile(flex_attention, dynamic=False)


def _raise_recompile_limits() -> None:
    """torch compiles `create_block_mask` (fullgraph) for every CP BlockMask: with dynamo's default limit
    of 8, the ninth mask_mod in one process fails (FailOnRecompileLimitHit, seen on CPU, torch 2.13)."""
    import torch

    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), RECOMPILE_LIMIT))


def _modules(kind: str, device_type: str):
    import torch
    import torch.nn.functional as F

    if kind == "sdpa":
        class SDPA(torch.nn.Module):
            def forward(self, q, k, v, *, is_causal: bool, scale: float):
                return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
        return SDPA()
    fn = _flex_fn(device_type)

    class Flex(torch.nn.Module):
        def forward(self, q, k, v, *, block_mask, scale: float, enable_gqa: bool):
            return fn(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=enable_gqa)
    return Flex()


def prepare(problem, mask, inner, group, options):
    """Mesh, load balancer, wrapped module and (flex) the CP BlockMask of this rank: collective."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import parallelize_module

    cp = torch_cp()
    world, rank, seqlen = dist.get_world_size(group), dist.get_rank(group), problem.seqlen
    device_type = problem.device_type
    mesh = DeviceMesh.from_group(group, device_type)
    balanced = options["load_balance"] == "head-tail"
    balancer = cp._HeadTailLoadBalancer(seqlen, world, device_type) if balanced else None
    layout = cp_face.zigzag_layout(seqlen, world) if balanced else cp_face.contiguous_layout(seqlen, world)
    kind = problem.kernel
    style = cp._ContextParallel(seq_dim=2, attention_type=cp._ContextParallel.AttentionType.SDPA if kind == "sdpa"
                                else cp._ContextParallel.AttentionType.FLEX)
    module = parallelize_module(_modules(kind, device_type), mesh, style)
    plan = TorchCPPlan(layout, rank, group, inner, dict(options), mesh=mesh, balancer=balancer, module=module,
                       kind=kind, is_causal=problem.mask == "causal")
    _set_globals(plan)
    if kind == "sdpa":
        cp._enable_context_parallel_dispatcher()  # DTensor's SDPA ops -> torch's ring attention
    else:
        _raise_recompile_limits()
        mask_mod = plugin.natural_mask_mod(mask, device_type)
        plan.block_mask = cp._attention._create_cp_block_mask(mask_mod, 1, 1, seqlen, seqlen, mesh, balancer)
    return plan


def dispatch(x, plan: TorchCPPlan):
    """This rank's (B, S/W, H, D) shard, cut by torch (`_context_parallel_shard`, seq dim 2 of (B, H, S, D))."""
    (local,) = torch_cp()._context_parallel_shard(plan.mesh, [x.transpose(1, 2)], [2], plan.balancer)
    _set_globals(plan)  # _context_parallel_shard resets the load-balance global
    return local.transpose(1, 2)


def undispatch(local, plan: TorchCPPlan):
    """The global tensor from every rank's shard (`context_parallel_unshard`: an all-gather, restored order)."""
    (full,) = torch_cp().context_parallel_unshard(plan.mesh, [local.detach().transpose(1, 2)], [2], plan.balancer)
    return full.transpose(1, 2)


def attention(q, k, v, plan: TorchCPPlan):
    """torch's distributed attention on the local shards (autograd through torch's CP backward)."""
    _set_globals(plan)
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    scale = plan.inner.softmax_scale
    if plan.kind == "sdpa":
        group = qh.shape[1] // kh.shape[1]
        if group > 1:  # GQA: K/V heads repeated before SDPA, as torchtitan's attention does under CP
            kh, vh = kh.repeat_interleave(group, dim=1), vh.repeat_interleave(group, dim=1)
        out = plan.module(qh, kh, vh, is_causal=plan.is_causal, scale=scale)
    else:
        out = plan.module(qh, kh, vh, block_mask=plan.block_mask, scale=scale, enable_gqa=qh.shape[1] != kh.shape[1])
    return out.transpose(1, 2)
