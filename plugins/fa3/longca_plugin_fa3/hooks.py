"""FlashAttention-3 (`flash_attn_interface`, package `flash_attn_3`), Hopper GPUs only.

One call: `flash_attn_func` (full, causal, `window_size`) or `flash_attn_varlen_func`
(documents). Several calls (heterogeneous masks, context-parallel crops): the library's
explicit-lse primitives `_flash_attn_forward` / `_flash_attn_backward`, merged by longca's
executor. No wheel is published: it is built from the flash-attention repository's hopper/
folder (see README).
"""
from __future__ import annotations

import importlib.util

from longca import plugin
from longca.plugin import CallArgs, any_window, head_dim_reason, installed_version, plan_reason


class FA3(plugin.FlashAdapter):
    """FlashAttention-3's explicit-lse primitives (flash-attention 2.8.x hopper/ signatures)."""

    name = "fa3"

    def fwd(self, q, k, v, args: CallArgs):
        import flash_attn_interface as fai

        res = fai._flash_attn_forward(
            q, k, v, cu_seqlens_q=args.cu_q, cu_seqlens_k=args.cu_k,
            max_seqlen_q=args.max_q if args.varlen else None, max_seqlen_k=args.max_k if args.varlen else None,
            softmax_scale=args.scale, causal=args.causal, window_size_left=args.left, window_size_right=args.right)
        return res[0], res[1]

    def bwd(self, dout, q, k, v, out, lse, args: CallArgs):
        import flash_attn_interface as fai
        import torch

        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        varlen = args.varlen
        fai._flash_attn_backward(
            dout, q, k, v, out, lse, args.cu_q, args.cu_k, None, None,
            args.max_q if varlen else None, args.max_k if varlen else None, dq, dk, dv,
            args.scale, args.causal, args.left, args.right, 0.0, False, 0)
        return dq, dk, dv

    def public_functions(self):
        from flash_attn_interface import flash_attn_func, flash_attn_varlen_func

        return flash_attn_func, flash_attn_varlen_func


def library_reason() -> str | None:
    if importlib.util.find_spec("flash_attn_interface") is None or importlib.util.find_spec("flash_attn_3") is None:
        return ("FlashAttention-3 (flash_attn_interface / flash_attn_3) is not installed; no wheel is published: "
                "build it from flash-attention's hopper/ folder (see the longca-plugin-fa3 README)")
    return None


def build_flags() -> dict:
    """The FLASHATTENTION_DISABLE_* switches this FlashAttention-3 build was compiled with."""
    try:
        import flash_attn_config  # written by hopper/setup.py next to flash_attn_interface
    except ImportError:
        return {}
    return {k: v for k, v in getattr(flash_attn_config, "CONFIG", {}).get("build_flags", {}).items() if v}


def build_reason(problem, flags: dict, mask=None) -> str | None:
    """Why a cut-down build cannot run this problem (calling it anyway crashes the process).

    The mask-dependent switches (LOCAL, VARLEN) are judged from `mask`: from supports_mask, with
    the mask of the run; `supports` leaves them out (mask=False)."""
    def off(name: str) -> bool:
        return bool(flags.get(f"FLASHATTENTION_DISABLE_{name}"))

    what = None
    if problem.dtype == "float16" and off("FP16"):
        what = "float16"
    elif off(f"HDIM{problem.head_dim}"):
        what = f"head_dim {problem.head_dim}"
    elif problem.direction != "fwd" and off("BACKWARD"):
        what = "the backward"
    elif (off("LOCAL") or off("VARLEN")) and mask is not False:
        mask = mask if mask is not None else plugin.problem_mask(problem)
        plan = plugin.cached_flash_plan(mask, any_window)
        if off("LOCAL") and any(c.window not in ((-1, -1), (-1, 0)) for c in plan.calls):
            what = f"sliding windows (mask {problem.mask})"
        elif off("VARLEN") and any(len(c.bands) > 1 for c in plan.calls):
            what = f"varlen (mask {problem.mask})"
    if what is None:
        return None
    return f"this FlashAttention-3 build was compiled without {what} (FLASH_ATTENTION_DISABLE_* switches)"


def supports(problem) -> str | None:
    import torch

    if problem.device_type == "cuda" and torch.cuda.get_device_capability(problem.device)[0] != 9:
        return "FlashAttention-3 runs on Hopper (compute capability 9.x) only"
    return head_dim_reason(problem) or build_reason(problem, build_flags(), mask=False)


def supports_mask(problem, mask) -> str | None:
    return plan_reason(problem, mask, any_window) or build_reason(problem, build_flags(), mask)


def version() -> str:
    return installed_version("flash_attn_3", "flash-attn-3") or "unknown version"


SPEC = plugin.flash_kernel(
    "fa3", "FlashAttention-3 (Hopper): varlen documents, window_size, lse-merged calls for heterogeneous masks",
    FA3, library_reason=library_reason, supports=supports, supports_mask=supports_mask,
    backend=lambda: f"FlashAttention-3 {version()} (flash_attn_interface)",
    url="https://github.com/Dao-AILab/flash-attention/tree/main/hopper")


@plugin.hookimpl
def longca_kernels():
    return [SPEC]


@plugin.hookimpl
def longca_env_info(info):
    info["flash_attn_3"] = version() if library_reason() is None else "not installed"
