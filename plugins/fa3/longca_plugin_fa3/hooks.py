"""FlashAttention-3 (`flash_attn_interface`, package `flash_attn_3`), Hopper GPUs only.

One call: `flash_attn_func` (full, causal, `window_size`) or `flash_attn_varlen_func`
(documents). Several calls (heterogeneous masks, context-parallel crops): the library's
explicit-lse primitives `_flash_attn_forward` / `_flash_attn_backward`, merged by longca's
executor. No wheel is published: it is built from the flash-attention repository's hopper/
folder (see README).
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from longca import plugin
from longca.plugin import installed_version
from longca_flashplan import plugin as flash
from longca_flashplan.plugin import CallArgs, any_window, head_dim_reason, plan_reason


class FA3(flash.FlashAdapter):
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
            args.scale, args.causal, args.left, args.right, 0.0, self.deterministic, 0)
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
    elif problem.fp8 and off("FP8"):
        what = "FP8"
    elif off(f"HDIM{problem.head_dim}"):
        what = f"head_dim {problem.head_dim}"
    elif problem.direction != "fwd" and off("BACKWARD"):
        what = "the backward"
    elif (off("LOCAL") or off("VARLEN")) and mask is not False:
        mask = mask if mask is not None else plugin.problem_mask(problem)
        plan = flash.cached_flash_plan(mask, any_window)
        if off("LOCAL") and any(c.window not in ((-1, -1), (-1, 0)) for c in plan.calls):
            what = f"sliding windows (mask {problem.mask})"
        elif off("VARLEN") and any(len(c.bands) > 1 for c in plan.calls):
            what = f"varlen (mask {problem.mask})"
    if what is None:
        return None
    return f"this FlashAttention-3 build was compiled without {what} (FLASH_ATTENTION_DISABLE_* switches)"


# hopper/flash_api.cpp: Q/K head dims round up to 64, 96, 128, 192, 256 (V the same), and V may differ from
# Q/K for 128 < d <= 192 with 96 < dv <= 128 (DeepSeek's 192/128); the backward pads both to the larger.
HEAD_DIMS = (*flash.FA_HEAD_DIMS, (192, 128))
FP8_BACKWARD = "FlashAttention-3's FP8 (e4m3) path is a forward only: its backward takes float16 and bfloat16"
DETERMINISTIC_256 = "FlashAttention-3 has no deterministic backward for head dim 256 (hopper/flash_api.cpp)"


def supports(problem) -> str | None:
    import torch

    if problem.device_type == "cuda" and torch.cuda.get_device_capability(problem.device)[0] != 9:
        return "FlashAttention-3 runs on Hopper (compute capability 9.x) only"
    if problem.fp8 and problem.direction != "fwd":
        return FP8_BACKWARD
    if problem.deterministic and max(problem.head_dim, problem.dv) > 192:
        return DETERMINISTIC_256
    return head_dim_reason(problem) or build_reason(problem, build_flags(), mask=False)


@dataclass
class Fp8Prepared:
    """An FP8 forward: the planned single call and the per-tensor scaled e4m3 copies of q, k, v."""

    base: Any
    q: Any
    k: Any
    v: Any
    descales: tuple[Any, Any, Any]  # (batch or sequences, heads_kv) float32 each, as FA3 takes them


planned_prepare, planned_run = flash.make_prepare_run(FA3, flash.library_public_for)


def prepare(problem, mask, q, k, v):
    """The planned prepare; for FP8 also the e4m3 copies (untimed), for a mask that is one library call."""
    prepared = planned_prepare(problem, mask, q, k, v)
    if not problem.fp8:
        return prepared
    call = prepared.ex.single
    if call is None or prepared.public is None:
        raise plugin.UnsupportedError(f"FlashAttention-3 FP8: mask {problem.mask} needs several calls merged by "
                                      "their lse; longca runs FP8 through one flash_attn_(varlen_)func call only")
    rows = call.args.cu_q.numel() - 1 if call.args.varlen else q.shape[0]
    quantized = [plugin.quantize_fp8(x, problem.dtype) for x in (q, k, v)]
    descales = tuple(d.expand(rows, k.shape[2]).contiguous() for _, d in quantized)
    return Fp8Prepared(prepared, *(x for x, _ in quantized), descales)


def run(prepared, q, k, v):
    if not isinstance(prepared, Fp8Prepared):
        return planned_run(prepared, q, k, v)
    from flash_attn_interface import flash_attn_func, flash_attn_varlen_func

    call = prepared.base.ex.single
    a = call.args
    causal, left, right = prepared.base.adapter.window(a)
    dq, dk, dv = prepared.descales
    kw = dict(softmax_scale=a.scale, causal=causal, window_size=(left, right), q_descale=dq, k_descale=dk,
              v_descale=dv)
    q8, k8, v8 = prepared.q, prepared.k, prepared.v
    if not a.varlen:
        res = flash_attn_func(q8, k8, v8, **kw)
    else:
        res = flash_attn_varlen_func(q8.reshape(-1, *q8.shape[2:]), k8.reshape(-1, *k8.shape[2:]),
                                     v8.reshape(-1, *v8.shape[2:]), cu_seqlens_q=a.cu_q, cu_seqlens_k=a.cu_k,
                                     max_seqlen_q=a.max_q, max_seqlen_k=a.max_k, **kw)
    out = res[0] if isinstance(res, tuple) else res
    return out.view(*q.shape[:3], v.shape[-1])  # FA3 returns an FP8 call's output in bfloat16


def supports_mask(problem, mask) -> str | None:
    return plan_reason(problem, mask, any_window) or build_reason(problem, build_flags(), mask)


def version() -> str:
    return installed_version("flash_attn_3", "flash-attn-3") or "unknown version"


SPEC = flash.flash_kernel(
    "fa3", "FlashAttention-3 (Hopper): varlen documents, window_size, lse-merged calls for heterogeneous masks",
    FA3, library_reason=library_reason, supports=supports, supports_mask=supports_mask, head_dims=HEAD_DIMS,
    deterministic=True, dtypes=("bfloat16", "float16", "float8_e4m3fn"), prepare_run=(prepare, run),
    backend=lambda: f"FlashAttention-3 {version()} (flash_attn_interface)",
    url="https://github.com/Dao-AILab/flash-attention/tree/main/hopper")


@plugin.hookimpl
def longca_kernels():
    return [SPEC]


@plugin.hookimpl
def longca_env_info(info):
    info["flash_attn_3"] = version() if library_reason() is None else "not installed"
