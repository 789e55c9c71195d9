"""FlashAttention-2: the flash_attn package when installed, else torch's bundled FA2 kernels.

Masks: full and causal (one call), documents (varlen cu_seqlens), sliding windows
(`window_size`), and the heterogeneous masks as several calls, merged through their lse where
calls share query rows (see `plan` and `executor`). Block-sparse masks are not supported.
"""
from __future__ import annotations

from longca import plugin
from longca.plugin import installed_version
from longca_flashplan import plugin as flash
from longca_flashplan.plugin import gpu_reason

from . import backends


def available() -> str | None:
    reason = gpu_reason()
    if reason:
        lib = "flash_attn" if backends.flash_attn_installed() else "torch's bundled FlashAttention-2 (no flash_attn)"
        return f"{reason} (would use {lib})"
    return None


def backend() -> str:
    if backends.chosen() == "flash_attn":
        found = installed_version("flash-attn")
        return f"flash_attn {found}" if found else "flash_attn"
    import torch

    return (f"torch {torch.__version__} bundled FlashAttention-2 "
            "(SDPA flash / varlen_attn / aten._flash_attention_forward)")


# FlashAttention-2 takes Q, K and V of one head dim, a multiple of 8 up to 256 (flash_attn's README;
# torch's bundled copy checks the same)
HEAD_DIMS = tuple(range(8, 257, 8))
TORCH_DETERMINISTIC = ("torch's bundled FlashAttention-2 (aten._flash_attention_backward, SDPA's flash backend) "
                       "takes no deterministic flag; install flash_attn, whose backward has deterministic=True")


def supports(problem) -> str | None:
    if problem.deterministic and backends.chosen() != "flash_attn":
        return TORCH_DETERMINISTIC
    return flash.head_dim_reason(problem)


SPEC = flash.flash_kernel(
    "fa2", "FlashAttention-2 (flash_attn, else torch's bundled copy): varlen documents, window_size, "
           "lse-merged calls for heterogeneous masks",
    backends.adapter, public_for=backends.public_for, available=available, backend=backend, head_dims=HEAD_DIMS,
    supports=supports, deterministic=True, min_compute_capability=(8, 0),
    sinks=True,  # FlashAttention-2 has none of its own: through the explicit-lse calls' merged lse
    url="https://github.com/Dao-AILab/flash-attention")


@plugin.hookimpl
def longca_kernels():
    return [SPEC]


@plugin.hookimpl
def longca_env_info(info):
    if (found := installed_version("flash-attn")):
        info["flash-attn"] = found
