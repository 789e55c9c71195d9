"""FlexAttention: `torch.compile`d `flex_attention` with a BlockMask built from the mask's slices.

Every static mask runs natively: one kernel call that skips empty blocks, runs full blocks
without masking and evaluates the FlashMask-bounds `mask_mod` inside partial blocks. GQA through
`enable_gqa`. On CUDA the call is compiled (`torch.compile(flex_attention)`); on a CPU it runs
eager (the unfused reference path: S² memory, forward only, since torch's FlexAttention has no
CPU backward), which is enough to check correctness at small sizes. `LONGCA_FLEX_COMPILE=0/1`
forces either.
"""
from __future__ import annotations

import os
from typing import Optional

import torch
from longca import hookimpl
from longca.specs import ANY_STATIC, KernelSpec

from .blockmask import block_mask_from_slices

_COMPILED = {}


def _compile_wanted(device: torch.device) -> bool:
    forced = os.environ.get("LONGCA_FLEX_COMPILE", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return device.type == "cuda"


def flex_fn(device: torch.device):
    """flex_attention, compiled once per process where compilation is wanted."""
    from torch.nn.attention.flex_attention import flex_attention

    if not _compile_wanted(device):
        return flex_attention
    if "fn" not in _COMPILED:
        _COMPILED["fn"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["fn"]


def _call(q, k, v, block_mask, scale=None, lse: bool = False):
    """flex_attention on (B, S, H, D) tensors; returns out (and lse (B, H, S) if asked)."""
    fn = flex_fn(q.device)
    args = (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    kwargs = {"block_mask": block_mask, "scale": scale, "enable_gqa": q.shape[2] != k.shape[2]}
    if not lse:
        return fn(*args, **kwargs).transpose(1, 2)
    try:
        from torch.nn.attention.flex_attention import AuxRequest

        out, aux = fn(*args, **kwargs, return_aux=AuxRequest(lse=True))
        return out.transpose(1, 2), aux.lse
    except ImportError:  # torch < 2.9
        out, lse_ = fn(*args, **kwargs, return_lse=True)
        return out.transpose(1, 2), lse_


def supports_mask(problem, mask) -> Optional[str]:
    """The mask_mod comes from FlashMask column bounds: at most two masked row intervals per key column."""
    try:
        mask.flashmask_bounds()
    except ValueError as exc:
        return f"mask {mask.name!r}: the FlexAttention mask_mod is built from FlashMask bounds, and {exc}"
    return None


def prepare(problem, mask, q, k, v):
    """The BlockMask, built from the slices (this is what prepare_ms measures)."""
    return block_mask_from_slices(mask.slices, mask.seqlen, mask.seqlen, q.device)


def run(block_mask, q, k, v):
    return _call(q, k, v, block_mask)


def forward_lse(q, k, v, slices, softmax_scale: Optional[float] = None):
    bm = block_mask_from_slices(slices, q.shape[1], k.shape[1], q.device)
    with torch.no_grad():
        out, lse = _call(q, k, v, bm, softmax_scale, lse=True)
    return out, lse.float()


def backward_lse(dout, q, k, v, out, lse, slices, softmax_scale: Optional[float] = None):
    """Gradients of the part of a split softmax that `slices` covers, given the merged out and lse.

    Recomputes the local (out_l, lse_l) under autograd and back-propagates dout * c into out_l
    and c * (rowsum(dout * out_l) - rowsum(dout * out)) into lse_l, with c = exp(lse_l - lse):
    exactly the gradient a kernel with an explicit-lse backward would give.
    """
    bm = block_mask_from_slices(slices, q.shape[1], k.shape[1], q.device)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        out_l, lse_l = _call(*leaves, bm, softmax_scale, lse=True)
        c = torch.exp(lse_l.float() - lse.float()).nan_to_num(0.0)  # (B, H, S)
        c_rows = c.transpose(1, 2).unsqueeze(-1)  # (B, S, H, 1)
        d_local = (dout.float() * out_l.float()).sum(-1).transpose(1, 2)
        d_global = (dout.float() * out.float()).sum(-1).transpose(1, 2)
        dlse = c * (d_local - d_global)
        grads = torch.autograd.grad((out_l, lse_l), leaves,
                                    ((dout.float() * c_rows).to(out_l.dtype), dlse.to(lse_l.dtype)),
                                    allow_unused=True)
    return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, (q, k, v)))


def supports(problem) -> Optional[str]:
    if problem.device_type == "cpu" and problem.direction != "fwd":
        return "FlexAttention has no backward on CPU (torch raises NotImplementedError); forward only"
    if problem.head_dim < 16:
        return f"head_dim {problem.head_dim}: FlexAttention needs at least 16"
    return None


def available() -> Optional[str]:
    try:
        import torch.nn.attention.flex_attention as fa
    except ImportError:
        return f"torch {torch.__version__} has no torch.nn.attention.flex_attention (needs >= 2.5)"
    if not hasattr(fa.BlockMask, "from_kv_blocks"):
        return f"torch {torch.__version__} lacks BlockMask.from_kv_blocks"
    return None


def backend() -> str:
    return f"torch {torch.__version__} flex_attention (compiled on CUDA, eager on CPU), BlockMask from slices"


SPEC = KernelSpec(
    name="flex",
    family="dense",
    description="FlexAttention: compiled flex_attention, BlockMask from slices, FlashMask-bounds mask_mod",
    masks=(ANY_STATIC,),  # every static mask with FlashMask bounds (supports_mask)
    prepare=prepare,
    run=run,
    devices=("cpu", "cuda"),
    available=available,
    supports=supports,
    supports_mask=supports_mask,
    forward_lse=forward_lse,
    backward_lse=backward_lse,
    backend=backend,
    url="https://pytorch.org/docs/stable/nn.attention.flex_attention.html",
)


@hookimpl
def longca_kernels():
    return [SPEC]
