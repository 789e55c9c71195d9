"""The two FlashAttention-2 implementations: the `flash_attn` package, and torch's bundled copy.

Both are adapters for `executor` (explicit-lse forward and backward, dense or varlen, any
bottom-right window) plus the public entry point used when the whole mask is one call:

- `flash_attn`: `flash_attn_func` / `flash_attn_varlen_func` (`window_size`); the plan's
  primitives are `flash_attn.flash_attn_interface._flash_attn_(varlen_)forward/backward`
  (flash-attn >= 2.6 signatures).
- torch: SDPA's flash backend (`sdpa_kernel(SDPBackend.FLASH_ATTENTION)`) for full and causal,
  `torch.nn.attention.varlen.varlen_attn` for documents when this torch has it, and
  `torch.ops.aten._flash_attention_forward/_backward` (cu_seqlens, window sizes, lse) otherwise.
"""
from __future__ import annotations

import importlib.util
import inspect
import os
from typing import Any

from longca_flashplan import plugin as flash
from longca_flashplan.plugin import CallArgs, ExecCall

ENV_BACKEND = "LONGCA_FA2_BACKEND"  # "flash_attn" or "torch": force one implementation


def flash_attn_installed() -> bool:
    """The flash_attn (FA2) package with its CUDA extension, found without importing it."""
    return importlib.util.find_spec("flash_attn_2_cuda") is not None and \
        importlib.util.find_spec("flash_attn") is not None


def chosen() -> str:
    """'flash_attn' or 'torch': the implementation fa2 runs with here."""
    forced = os.environ.get(ENV_BACKEND, "").strip()
    if forced in ("flash_attn", "torch"):
        return forced
    return "flash_attn" if flash_attn_installed() else "torch"


def fa2_window(len_q: int, len_k: int, left: int, right: int) -> bool:
    """FlashAttention-2's window rule: any bottom-right window except a bounded right edge of len_k or more.

    FA2's `mha_fwd` (flash_attn's and torch's bundled copy alike) resets `window_size_right >= seqlen_k`
    to -1 (unbounded). That is only the same mask when len_q <= len_k + 1; a taller crop (a CP query
    shard against a shorter key shard, e.g. 171 x 86 with right = 127) then silently attends to every
    key (measured on the H200: relative error 0.29, docs/results/h200/gpu-tests/2026-12-03). The planner
    cuts such a band into full blocks and causal squares instead.
    """
    return right < len_k


def _gqa(q, k) -> bool:
    return q.shape[-2] != k.shape[-2]


class TorchFlash(flash.FlashAdapter):
    """torch's bundled FlashAttention-2 through `aten._flash_attention_forward/_backward`."""

    name = "torch-flash"
    window_ok = staticmethod(fa2_window)

    def _extra(self, q, args: CallArgs):
        import torch

        cu_q, cu_k = (args.cu_q, args.cu_k) if args.varlen else (None, None)
        max_q, max_k = (args.max_q, args.max_k) if args.varlen else (None, None)
        return cu_q, cu_k, max_q, max_k, torch

    def fwd(self, q, k, v, args: CallArgs):
        cu_q, cu_k, max_q, max_k, torch = self._extra(q, args)
        if not args.varlen:
            max_q, max_k = q.shape[1], k.shape[1]
        out, lse, *_ = torch.ops.aten._flash_attention_forward(
            q, k, v, cu_q, cu_k, max_q, max_k, 0.0, args.causal, False, scale=args.scale,
            window_size_left=args.left, window_size_right=args.right)
        return out, lse

    def bwd(self, dout, q, k, v, out, lse, args: CallArgs):
        cu_q, cu_k, max_q, max_k, torch = self._extra(q, args)
        if not args.varlen:
            max_q, max_k = q.shape[1], k.shape[1]
        rng = torch.zeros(2, dtype=torch.uint64, device=q.device)
        unused = torch.empty(0, device=q.device)
        dq, dk, dv = torch.ops.aten._flash_attention_backward(
            dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, 0.0, args.causal, rng, unused,
            scale=args.scale, window_size_left=args.left, window_size_right=args.right)
        return dq, dk, dv


class FlashAttn2(flash.FlashAdapter):
    """The flash_attn package's explicit-lse primitives (flash-attn >= 2.6)."""

    name = "flash_attn"
    window_ok = staticmethod(fa2_window)

    def fwd(self, q, k, v, args: CallArgs):
        from flash_attn import flash_attn_interface as fai

        if args.varlen:
            out, lse, *_ = fai._flash_attn_varlen_forward(
                q, k, v, args.cu_q, args.cu_k, args.max_q, args.max_k, 0.0, args.scale, args.causal,
                args.left, args.right, 0.0, None, False)
        else:
            out, lse, *_ = fai._flash_attn_forward(q, k, v, 0.0, args.scale, args.causal, args.left, args.right,
                                                   0.0, None, False)
        return out, lse

    def bwd(self, dout, q, k, v, out, lse, args: CallArgs):
        import torch
        from flash_attn import flash_attn_interface as fai

        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        if args.varlen:
            fai._flash_attn_varlen_backward(dout, q, k, v, out, lse, dq, dk, dv, args.cu_q, args.cu_k,
                                            args.max_q, args.max_k, 0.0, args.scale, args.causal,
                                            args.left, args.right, 0.0, None, self.deterministic, None)
        else:
            fai._flash_attn_backward(dout, q, k, v, out, lse, dq, dk, dv, 0.0, args.scale, args.causal,
                                     args.left, args.right, 0.0, None, self.deterministic, None)
        return dq, dk, dv

    def public_functions(self):
        from flash_attn import flash_attn_func, flash_attn_varlen_func

        return flash_attn_func, flash_attn_varlen_func


def adapter():
    return FlashAttn2() if chosen() == "flash_attn" else TorchFlash()


# ---- public entry points for single-call plans -------------------------------------------------

def _flash_attn_public(q, k, v, call: ExecCall):
    fa2 = FlashAttn2()
    return flash.public_attention(fa2, fa2.public_functions(), q, k, v, call)


def _flash_attn_public_deterministic(q, k, v, call: ExecCall):
    """`flash_attn_func(..., deterministic=True)`: the backward's deterministic algorithm."""
    fa2 = FlashAttn2()
    fa2.deterministic = True
    return flash.public_attention(fa2, fa2.public_functions(), q, k, v, call)


def _sdpa_flash(q, k, v, call: ExecCall):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kwargs: dict[str, Any] = {"enable_gqa": True} if _gqa(q, k) else {}
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=call.args.causal, scale=call.args.scale, **kwargs)
    return out.transpose(1, 2)


def varlen_attn_kwargs(call: ExecCall, gqa: bool) -> dict | None:
    """Keyword arguments for this torch's `varlen_attn`, or None if it lacks what the call needs."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    a = call.args
    kwargs: dict = {}
    if "window_size" in params:
        kwargs["window_size"] = (a.left, a.right)
    elif "is_causal" in params and a.unwindowed:
        kwargs["is_causal"] = a.causal
    else:
        return None
    if "enable_gqa" in params:
        kwargs["enable_gqa"] = gqa
    elif gqa:
        return None
    if "scale" in params:
        kwargs["scale"] = a.scale
    return kwargs


def _varlen_attn_public(kwargs: dict):
    def run(q, k, v, call: ExecCall):
        from torch.nn.attention.varlen import varlen_attn

        a = call.args
        assert a.cu_q is not None and a.cu_k is not None  # a varlen call
        out = varlen_attn(q.reshape(-1, *q.shape[2:]), k.reshape(-1, *k.shape[2:]), v.reshape(-1, *v.shape[2:]),
                          a.cu_q, a.cu_k, a.max_q, a.max_k, **kwargs)
        assert not isinstance(out, tuple)  # the output alone: no return_lse
        return out.view(*q.shape[:3], v.shape[-1])

    return run


def public_for(adapter_, call: ExecCall, q, k):
    """The public entry point for a single-call plan, or None to run the plan's primitives."""
    gqa = _gqa(q, k)
    if isinstance(adapter_, FlashAttn2):
        return _flash_attn_public_deterministic if adapter_.deterministic else _flash_attn_public
    if not call.args.varlen and call.args.unwindowed:
        return _sdpa_flash
    if call.args.varlen:
        kwargs = varlen_attn_kwargs(call, gqa)
        if kwargs is not None:
            return _varlen_attn_public(kwargs)
    return None


def path_name(adapter_, call: ExecCall | None, public) -> str:
    """Which entry point runs a prepared case (for logs and tests)."""
    if public in (_flash_attn_public, _flash_attn_public_deterministic):
        assert call is not None  # a public entry point runs a single-call plan
        return "flash_attn_func" if not call.args.varlen else "flash_attn_varlen_func"
    if public is _sdpa_flash:
        return "sdpa[FLASH_ATTENTION]"
    if public is not None:
        return "torch.nn.attention.varlen.varlen_attn"
    return f"{adapter_.name} primitives"
