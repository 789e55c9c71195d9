"""flash-attn-4: FlashAttention written in the CuTe DSL (`flash_attn.cute`), JIT-compiled per shape.

One call: `flash_attn_func` (full, causal, `window_size`) or `flash_attn_varlen_func`
(documents). Several calls (heterogeneous masks, context-parallel crops): the library's
explicit-lse primitives `_flash_attn_fwd` / `_flash_attn_bwd`, merged by longca's executor.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Optional

from longca.runinfo import installed_version
from longca import hookimpl
from longca.specs import KernelSpec
from longca_flashplan.executor import CallArgs, ExecCall, lse_primitives
from longca_flashplan.kernel import gpu_reason
from longca_flashplan.kernel import FA_MASKS, head_dim_reason, make_prepare_run, plan_reason
from longca_flashplan.plan import any_window


def _window(args: CallArgs):
    """(causal, left, right) in flash-attn-4's convention: None = unbounded."""
    if args.causal:
        return True, None, None
    return False, (None if args.left < 0 else args.left), (None if args.right < 0 else args.right)


class FA4:
    """flash-attn-4's explicit-lse primitives."""

    name = "fa4"
    window_ok = staticmethod(any_window)

    def fwd(self, q, k, v, args: CallArgs):
        from flash_attn.cute.interface import _flash_attn_fwd

        causal, left, right = _window(args)
        res = _flash_attn_fwd(q, k, v, cu_seqlens_q=args.cu_q, cu_seqlens_k=args.cu_k,
                              max_seqlen_q=args.max_q if args.varlen else None,
                              max_seqlen_k=args.max_k if args.varlen else None,
                              softmax_scale=args.scale, causal=causal, window_size_left=left,
                              window_size_right=right, return_lse=True)
        return res[0], res[1]

    def bwd(self, dout, q, k, v, out, lse, args: CallArgs):
        from flash_attn.cute.interface import _flash_attn_bwd

        causal, left, right = _window(args)
        kwargs = dict(cu_seqlens_q=args.cu_q, cu_seqlens_k=args.cu_k,
                      max_seqlen_q=args.max_q, max_seqlen_k=args.max_k) if args.varlen else {}
        dq, dk, dv = _flash_attn_bwd(q, k, v, out, dout, lse, args.scale, causal, 0.0,
                                     window_size_left=left, window_size_right=right, **kwargs)[:3]
        return dq, dk, dv


def _public(q, k, v, call: ExecCall):
    from flash_attn.cute import flash_attn_func, flash_attn_varlen_func

    a = call.args
    causal, left, right = _window(a)
    if not a.varlen:
        res = flash_attn_func(q, k, v, softmax_scale=a.scale, causal=causal, window_size=(left, right))
    else:
        res = flash_attn_varlen_func(q.reshape(-1, *q.shape[2:]), k.reshape(-1, *k.shape[2:]),
                                     v.reshape(-1, *v.shape[2:]), cu_seqlens_q=a.cu_q, cu_seqlens_k=a.cu_k,
                                     max_seqlen_q=a.max_q, max_seqlen_k=a.max_k, softmax_scale=a.scale,
                                     causal=causal, window_size=(left, right))
    out = res[0] if isinstance(res, tuple) else res
    return out.view(*q.shape[:3], v.shape[-1])


def public_for(adapter, call: ExecCall, q, k):
    return _public


def library_reason() -> Optional[str]:
    """Why flash-attn-4 cannot be imported here, found without importing it, or None."""
    spec = importlib.util.find_spec("flash_attn")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not any(os.path.exists(os.path.join(loc, "cute", "interface.py")) for loc in locations):
        return ("flash-attn-4 is not installed (pip install 'longca-plugin-fa4[cu13]' for a CUDA 13 torch, "
                "[cu12] for CUDA 12; it pins flash-attn-4 4.0.0b36)")
    if importlib.util.find_spec("cutlass") is None:
        return ("flash-attn-4 is installed but the CuTe DSL (package `cutlass` from nvidia-cutlass-dsl) is not "
                "importable; install nvidia-cutlass-dsl with its libs-base, libs-core and libs-cu13/cu12 wheels, "
                "and process its .pth (site.addsitedir) if installed with --target")
    return None


def available() -> Optional[str]:
    lib = library_reason()
    gpu = gpu_reason()
    return "; ".join(r for r in (lib, gpu) if r) or None


def supports(problem) -> Optional[str]:
    return head_dim_reason(problem)


def supports_mask(problem, mask) -> Optional[str]:
    return plan_reason(problem, mask, any_window)


def version() -> str:
    return installed_version("flash-attn-4", "fa4") or "unknown version"


prepare, run = make_prepare_run(FA4, public_for)
forward_lse, backward_lse = lse_primitives(FA4)

SPEC = KernelSpec(
    name="fa4",
    family="dense",
    description="flash-attn-4 (CuTe DSL, JIT): varlen documents, window_size, lse-merged calls for "
                "heterogeneous masks",
    masks=FA_MASKS,
    prepare=prepare,
    run=run,
    dtypes=("bfloat16", "float16"),
    head_dims=(128, 64, 96, 192, 256),
    devices=("cuda",),
    min_compute_capability=(9, 0),
    available=available,
    supports=supports,
    supports_mask=supports_mask,
    forward_lse=forward_lse,
    backward_lse=backward_lse,
    backend=lambda: f"flash-attn-4 {version()} (flash_attn.cute)",
    url="https://github.com/Dao-AILab/flash-attention/tree/main/flash_attn/cute",
)


@hookimpl
def longca_kernels():
    return [SPEC]


@hookimpl
def longca_env_info(info):
    for dist in ("flash-attn-4", "nvidia-cutlass-dsl", "quack-kernels", "apache-tvm-ffi"):
        if (found := installed_version(dist)):
            info[dist] = found
