"""FlexAttention (torch.compile'd flex_attention) on the block-sparse masks, forward and backward.

prepare builds the BlockMask with `BlockMask.from_kv_blocks` from the block map (see
`blockmask`), its peak memory is part of what the harness records on CUDA (peak_mem_bytes):
the index tensors are (1, heads_q, tiles, tiles) int32, kept for both directions. On CPU,
torch 2.13's compiled CPU kernel fails to build when full blocks are given (a C++ error on
`kv_indices`), so there every kept tile is passed as partial (mask_mod on every pair), and
FlexAttention has no backward on CPU at all.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from longca.plugin import BLOCK_SPARSE_MASKS, TOKEN_SPARSE_MASKS, KernelSpec, hookimpl

from . import blockmask

RECOMPILE_LIMIT = 4096  # a sweep compiles once per shape; never fall back to eager silently
_flex: Callable[..., Any] | None = None


def _compiled() -> Callable[..., Any]:
    """torch.compile(flex_attention), made once, with dynamo's recompile limits raised."""
    global _flex
    if _flex is None:
        import torch
        import torch._dynamo.config as dynamo_config
        from torch.nn.attention.flex_attention import flex_attention

        for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                     "accumulated_cache_size_limit"):
            if hasattr(dynamo_config, name):
                setattr(dynamo_config, name, max(getattr(dynamo_config, name), RECOMPILE_LIMIT))
        _flex = torch.compile(flex_attention, dynamic=False)
    return _flex


def available() -> str | None:
    import torch

    try:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention  # noqa: F401
    except ImportError as exc:
        return f"torch {torch.__version__} has no FlexAttention (needs torch >= 2.6): {exc}"
    if not hasattr(BlockMask, "from_kv_blocks"):
        return f"torch {torch.__version__}: BlockMask has no from_kv_blocks"
    return None


def supports(problem: Any) -> str | None:
    if problem.device_type == "cpu" and problem.direction != "fwd":
        import torch

        return (f"FlexAttention has no backward on CPU (torch {torch.__version__} raises NotImplementedError); "
                f"run backward on CUDA")
    if problem.device_type == "cpu":
        return cpu_compile_refusal()
    return None


def cpu_compile_refusal() -> str | None:
    """torch's own check for its compiled CPU FlexAttention (AVX2, and ATEN_CPU_CAPABILITY not `default`),
    or None where this torch has no such check (the call itself then says what fails)."""
    try:
        from torch._inductor.kernel.flex.flex_cpu import check_cpu_supported
    except ImportError:
        return None
    if check_cpu_supported():
        return None
    return ("torch.compile's CPU FlexAttention does not run here: torch's check_cpu_supported() needs AVX2 and "
            "ATEN_CPU_CAPABILITY other than 'default' (torch: 'torch.compile on current platform is not supported "
            "for CPU')")


@dataclass
class Prepared:
    block_mask: Any
    gqa: bool
    tile: int
    full_tiles: int
    partial_tiles: int


def prepare(problem, mask, q, k, v) -> Prepared:
    layout = mask.layout
    if layout is None:
        raise ValueError(f"mask {mask.name!r} is not block-sparse")
    tile = blockmask.tile_size(mask.name, int(mask.params["block"]))
    built = blockmask.build(layout, q.shape[2], tile, q.device, full_blocks=q.device.type == "cuda")
    return Prepared(built.block_mask, q.shape[2] != k.shape[2], tile, built.full_tiles, built.partial_tiles)


def run(prepared: Prepared, q, k, v):
    out = _compiled()(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=prepared.block_mask,
                      enable_gqa=prepared.gqa)
    return out.transpose(1, 2)


def _backend() -> str:
    import torch

    return f"torch {torch.__version__} flex_attention (torch.compile, BlockMask.from_kv_blocks)"


@hookimpl
def longca_kernels():
    return [KernelSpec(
        name="flex-sparse",
        family="sparse",
        description="FlexAttention (compiled) with a BlockMask made from the block map: full tiles skip "
                    "mask_mod, partial tiles look pairs up in the map; any block size, GQA",
        masks=BLOCK_SPARSE_MASKS + TOKEN_SPARSE_MASKS,  # topk_sparse: causal layout, see blockmask
        prepare=prepare,
        run=run,
        gqa=True,
        backward=True,
        devices=("cpu", "cuda"),
        available=available,
        supports=supports,
        backend=_backend,
        url="https://pytorch.org/docs/stable/nn.attention.flex_attention.html",
    )]
