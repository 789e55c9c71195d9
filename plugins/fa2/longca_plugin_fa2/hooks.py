"""FlashAttention-2: the flash_attn package when installed, else torch's bundled FA2 kernels.

Masks: full and causal (one call), documents (varlen cu_seqlens), sliding windows
(`window_size`), and the heterogeneous masks as several calls, merged through their lse where
calls share query rows (see `plan` and `executor`). Block-sparse masks are not supported.
"""
from __future__ import annotations

from typing import Optional

from longca.runinfo import installed_version
from longca import hookimpl
from longca.specs import KernelSpec

from longca_flashplan.executor import lse_primitives
from longca_flashplan.kernel import FA_MASKS, gpu_reason, head_dim_reason, make_prepare_run, plan_reason
from longca_flashplan.plan import any_window

from . import backends


def available() -> Optional[str]:
    reason = gpu_reason()
    if reason:
        lib = "flash_attn" if backends.flash_attn_installed() else "torch's bundled FlashAttention-2 (no flash_attn)"
        return f"{reason} (would use {lib})"
    return None


def supports(problem) -> Optional[str]:
    return head_dim_reason(problem)


def supports_mask(problem, mask) -> Optional[str]:
    return plan_reason(problem, mask, any_window)


def backend() -> str:
    if backends.chosen() == "flash_attn":
        found = installed_version("flash-attn")
        return f"flash_attn {found}" if found else "flash_attn"
    import torch

    return (f"torch {torch.__version__} bundled FlashAttention-2 "
            "(SDPA flash / varlen_attn / aten._flash_attention_forward)")


prepare, run = make_prepare_run(backends.adapter, backends.public_for)
forward_lse, backward_lse = lse_primitives(backends.adapter)

SPEC = KernelSpec(
    name="fa2",
    family="dense",
    description="FlashAttention-2 (flash_attn, else torch's bundled copy): varlen documents, window_size, "
                "lse-merged calls for heterogeneous masks",
    masks=FA_MASKS,
    prepare=prepare,
    run=run,
    dtypes=("bfloat16", "float16"),
    devices=("cuda",),
    min_compute_capability=(8, 0),
    available=available,
    supports=supports,
    supports_mask=supports_mask,
    forward_lse=forward_lse,
    backward_lse=backward_lse,
    backend=backend,
    url="https://github.com/Dao-AILab/flash-attention",
)


@hookimpl
def longca_kernels():
    return [SPEC]


@hookimpl
def longca_env_info(info):
    if (found := installed_version("flash-attn")):
        info["flash-attn"] = found
