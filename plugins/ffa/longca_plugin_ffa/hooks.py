"""MagiAttention's Flex-Flash-Attention (FFA) kernel, `magi_attention.functional.flex_flash_attn_func`.

One call over packed (S, H, D) tensors with the mask's slices as q_ranges / k_ranges / attn_type_map
(`ranges.py`). MagiAttention has changed this signature across releases (max_seqlen_q/k positional and
(out, lse) returned in older ones; keyword-only options and (out, meta with .lse) in newer ones):
`call` reads the installed signature. Built from source only (no wheel): `available` says so.
"""
from __future__ import annotations

import inspect

from longca.plugin import ANY_STATIC, KernelSpec, hookimpl, linear_memory

from .ranges import ffa_ranges


def available() -> str | None:
    try:
        from magi_attention.functional import flex_flash_attn_func  # noqa: F401
    except ImportError as exc:
        return (f"magi_attention is not installed ({exc.msg}): build MagiAttention from source on a Hopper GPU "
                "(see the longca-plugin-ffa README); it has no wheel")
    import torch

    if not torch.cuda.is_available():
        return f"no CUDA GPU is visible (torch {torch.__version__}); FFA's kernels are Hopper (sm90) CUDA"
    return None


def call(q, k, v, prepared, softmax_scale: float | None = None):
    """flex_flash_attn_func on (B=1, S, H, D) tensors -> (out (1, S, H, D), lse (1, H, S) float32)."""
    from magi_attention.functional import flex_flash_attn_func

    q_ranges, k_ranges, types, seqlen = prepared
    args = [q[0], k[0], v[0], q_ranges, k_ranges]
    kwargs = {"attn_type_map": types, "softmax_scale": softmax_scale}
    params = inspect.signature(flex_flash_attn_func).parameters
    if "max_seqlen_k" in params:  # older releases: max_seqlen_q, max_seqlen_k are required
        kwargs.update(max_seqlen_q=seqlen, max_seqlen_k=seqlen)
    out, second = flex_flash_attn_func(*args, **kwargs)
    lse = getattr(second, "lse", second)  # newer releases return a meta object holding lse (S, H)
    return out.unsqueeze(0), lse.float().transpose(0, 1).unsqueeze(0)


def prepare(problem, mask, q, k, v):
    import torch

    q_ranges, k_ranges, types = (torch.from_numpy(a).to(q.device) for a in ffa_ranges(mask.slices))
    return q_ranges, k_ranges, types, problem.seqlen


def run(prepared, q, k, v):
    return call(q, k, v, prepared)[0]


def supports(problem) -> str | None:
    if problem.batch != 1:
        return f"batch {problem.batch}: FFA takes packed (S, H, D) tensors, one sequence (batch 1)"
    return None


@hookimpl
def longca_kernels():
    return [KernelSpec(
        name="ffa", family="dense",
        description="MagiAttention Flex-Flash-Attention: flex_flash_attn_func over the mask's slices as "
                    "q_ranges/k_ranges/attn_type_map",
        masks=(ANY_STATIC,), prepare=prepare, run=run, dtypes=("bfloat16", "float16"), devices=("cuda",),
        min_compute_capability=(9, 0), available=available, supports=supports,
        backend=lambda: "magi_attention.functional.flex_flash_attn_func", memory=linear_memory)]
