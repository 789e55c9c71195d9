"""flash-attn-4: FlashAttention written in the CuTe DSL (`flash_attn.cute`), JIT-compiled per shape.

One call: `flash_attn_func` (full, causal, `window_size`) or `flash_attn_varlen_func`
(documents). Several calls (heterogeneous masks, context-parallel crops): the library's
explicit-lse primitives `_flash_attn_fwd` / `_flash_attn_bwd`, merged by longca's executor.
"""
from __future__ import annotations

import importlib.util
import os

from longca import plugin
from longca.plugin import installed_version
from longca_flashplan import plugin as flash
from longca_flashplan.plugin import CallArgs

# flash-attn-4's own on-disk cache of compiled kernels (its FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED,
# read when flash_attn.cute is imported): each case's kernels are JIT-compiled once for all processes
# and runs (`longca bench` compiles them first, in parallel) instead of once per process; the kernels
# are the same. A user's own setting wins (0 turns it off).
os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "1")


class FA4(flash.FlashAdapter):
    """flash-attn-4's explicit-lse primitives."""

    name = "fa4"
    public_sinks = True  # flash_attn_func's learnable_sink

    def window(self, args: CallArgs):
        """(causal, left, right) in flash-attn-4's convention: None = unbounded."""
        if args.causal:
            return True, None, None
        return False, (None if args.left < 0 else args.left), (None if args.right < 0 else args.right)

    def fwd(self, q, k, v, args: CallArgs):
        from flash_attn.cute.interface import _flash_attn_fwd

        causal, left, right = self.window(args)
        res = _flash_attn_fwd(q, k, v, cu_seqlens_q=args.cu_q, cu_seqlens_k=args.cu_k,
                              max_seqlen_q=args.max_q if args.varlen else None,
                              max_seqlen_k=args.max_k if args.varlen else None,
                              softmax_scale=args.scale, causal=causal, window_size_left=left,
                              window_size_right=right, return_lse=True)
        return res[0], res[1]

    def bwd(self, dout, q, k, v, out, lse, args: CallArgs):
        from flash_attn.cute.interface import _flash_attn_bwd

        causal, left, right = self.window(args)
        kwargs: dict = dict(cu_seqlens_q=args.cu_q, cu_seqlens_k=args.cu_k,
                            max_seqlen_q=args.max_q, max_seqlen_k=args.max_k) if args.varlen else {}
        if self.deterministic:  # asked for only when set: the default call is the same on every version
            kwargs["deterministic"] = True
        dq, dk, dv = _flash_attn_bwd(q, k, v, out, dout, lse, args.scale, causal, 0.0,
                                     window_size_left=left, window_size_right=right, **kwargs)[:3]
        return dq, dk, dv

    def public_functions(self):
        from flash_attn.cute import flash_attn_func, flash_attn_varlen_func

        return flash_attn_func, flash_attn_varlen_func


def library_reason() -> str | None:
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


def version() -> str:
    return installed_version("flash-attn-4", "fa4") or "unknown version"


# what flash-attn-4's _validate_head_dims accepts on both SM90 and SM100: 64..128 (V the same), 192/128
# (DeepSeek) and 256/256; on SM90 any pair of multiples of 8 up to 256 would run, SM100 not
HEAD_DIMS = (*flash.FA_HEAD_DIMS, (192, 128))
NO_DETERMINISTIC = ("this flash-attn-4 has no deterministic backward (_flash_attn_bwd takes no `deterministic`; "
                    "newer releases do)")


def has_deterministic() -> bool:
    import inspect

    from flash_attn.cute.interface import _flash_attn_bwd

    return "deterministic" in inspect.signature(_flash_attn_bwd).parameters


planned_prepare, run = flash.make_prepare_run(FA4, flash.library_public_for)


# flash-attn-4 4.0.0b36 asserts in its backward "GQA backward requires head_dim == head_dim_v" (seen on the H200)
GQA_DV_BACKWARD = "flash-attn-4's backward with GQA needs V's head dim equal to Q/K's (its assertion)"


def supports(problem) -> str | None:
    if (reason := flash.head_dim_reason(problem)):
        return reason
    gqa = problem.heads_q != problem.heads_kv
    if gqa and problem.direction != "fwd" and problem.dv != problem.head_dim:
        return f"{GQA_DV_BACKWARD}: heads {problem.heads_q}:{problem.heads_kv}, head dims {problem.head_dims_label}"
    return None


def prepare(problem, mask, q, k, v):
    if problem.deterministic and not has_deterministic():
        raise plugin.UnsupportedError(NO_DETERMINISTIC)
    return planned_prepare(problem, mask, q, k, v)


SPEC = flash.flash_kernel(
    "fa4", "flash-attn-4 (CuTe DSL, JIT): varlen documents, window_size, lse-merged calls for heterogeneous masks",
    FA4, library_reason=library_reason, backend=lambda: f"flash-attn-4 {version()} (flash_attn.cute)",
    head_dims=HEAD_DIMS, deterministic=True, prepare_run=(prepare, run), supports=supports, compiles=True,
    sinks=True,  # flash_attn_func's learnable_sink on one-call masks, the merged lse on the others
    url="https://github.com/Dao-AILab/flash-attention/tree/main/flash_attn/cute")


@plugin.hookimpl
def longca_kernels():
    return [SPEC]


@plugin.hookimpl
def longca_env_info(info):
    for dist in ("flash-attn-4", "nvidia-cutlass-dsl", "quack-kernels", "apache-tvm-ffi"):
        if (found := installed_version(dist)):
            info[dist] = found
