"""One base for the FlashAttention-family kernels (fa2, fa3, fa4): a library supplies what differs.

Each library brings its explicit-lse forward and backward, its window rule (which windows a call
may have, and how `(left, right)` are spelled: -1 or None for unbounded) and, optionally, its
public `flash_attn_func` / `flash_attn_varlen_func`; `flash_kernel` makes the KernelSpec around
them (planning, single-call fast path, lse primitives for CP, the usual refusals). A fix to that
shared part is made once, not in three plugins.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from longca.specs import DType, HeadDims, KernelSpec

from .executor import CallArgs, ExecCall, lse_primitives
from .kernel import FA_MASKS, gpu_reason, head_dim_reason, make_prepare_run, plan_reason
from .plan import any_window

FA_HEAD_DIMS = (128, 64, 96, 192, 256)  # what FlashAttention-3 and -4 compile (128 first: the common one)


class FlashAdapter:
    """A FlashAttention-family library's adapter for the executor; subclasses give `fwd` and `bwd`.

    `window_ok` says which windows one call may have; `window(args)` spells a call's window as the
    library wants it; `public_functions()` returns the library's own (dense, varlen) entry points
    for a mask that is a single call, or None to always run the plan's primitives.
    """

    name = "flash"
    window_ok = staticmethod(any_window)
    # the backward through the library's deterministic algorithm (set by prepare from Problem.deterministic)
    deterministic = False
    # the public entry points take learnable sinks (`learnable_sink`); else sinks go through the plan's lse
    public_sinks = False

    def window(self, args: CallArgs) -> tuple[bool, Any, Any]:
        """(causal, left, right) as the library takes them; FlashAttention-2/3 spell unbounded -1."""
        return args.causal, args.left, args.right

    def fwd(self, q, k, v, args: CallArgs):
        raise NotImplementedError

    def bwd(self, dout, q, k, v, out, lse, args: CallArgs):
        raise NotImplementedError

    def public_functions(self) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
        return None


def public_attention(adapter: FlashAdapter, functions: tuple[Callable[..., Any], Callable[..., Any]], q, k, v,
                     call: ExecCall, sinks=None):
    """One call through the library's public `flash_attn_func` or `flash_attn_varlen_func` (autograd-aware);
    `sinks`: the (heads_q,) logits, as the library's `learnable_sink` (flash-attn-4)."""
    func, varlen_func = functions
    a = call.args
    causal, left, right = adapter.window(a)
    # asked for only when set: a library without the argument still runs the default backward
    extra: dict[str, Any] = {"deterministic": True} if adapter.deterministic else {}
    if sinks is not None:
        extra["learnable_sink"] = sinks
    if not a.varlen:
        res = func(q, k, v, softmax_scale=a.scale, causal=causal, window_size=(left, right), **extra)
    else:
        res = varlen_func(q.reshape(-1, *q.shape[2:]), k.reshape(-1, *k.shape[2:]), v.reshape(-1, *v.shape[2:]),
                          cu_seqlens_q=a.cu_q, cu_seqlens_k=a.cu_k, max_seqlen_q=a.max_q, max_seqlen_k=a.max_k,
                          softmax_scale=a.scale, causal=causal, window_size=(left, right), **extra)
    out = res[0] if isinstance(res, tuple) else res
    return out.view(*q.shape[:3], v.shape[-1])


def library_public_for(adapter: FlashAdapter, call: ExecCall, q, k):
    """The adapter's public entry point for a single-call plan, or None."""
    functions = adapter.public_functions()
    if functions is None:
        return None
    return lambda q_, k_, v_, call_, sinks=None: public_attention(adapter, functions, q_, k_, v_, call_, sinks)


def flash_kernel(name: str, description: str, adapter: Callable[[], Any], *, url: str,
                 backend: Callable[[], str], library_reason: Callable[[], str | None] = lambda: None,
                 available: Callable[[], str | None] | None = None,
                 public_for: Callable[..., Any] | None = None,
                 supports: Callable[..., str | None] | None = None,
                 supports_mask: Callable[..., str | None] | None = None,
                 head_dims: HeadDims | None = FA_HEAD_DIMS,
                 min_compute_capability: tuple[int, int] = (9, 0),
                 deterministic: bool | str = False,
                 dtypes: tuple[DType, ...] = ("bfloat16", "float16"),
                 prepare_run: tuple[Callable[..., Any], Callable[..., Any]] | None = None,
                 compiles: bool = False, sinks: bool | str = False) -> KernelSpec:
    """The KernelSpec of a FlashAttention-family library.

    `adapter()` makes the adapter (a `FlashAdapter`, or any executor adapter with `public_for`);
    `available` defaults to the library's and the GPU's reasons joined; `supports` to the head-dim
    rule; `supports_mask` to whether the planner maps the mask with the adapter's window rule.
    `deterministic`: True when the library's backward takes `deterministic=True` (prepare sets the
    adapter's `deterministic` from the problem), else why not. `prepare_run` replaces the planned
    (prepare, run) pair (fa3's FP8 forward wraps it). `compiles`: a JIT library whose compiled
    kernels a disk cache keeps (`longca bench` compiles its cases first in parallel processes).
    `sinks`: True when the kernel takes learnable sinks: the public call's `learnable_sink` where the
    adapter says `public_sinks` and the mask is one call, else through the merged lse of the plan.
    """
    def default_available() -> str | None:
        return "; ".join(r for r in (library_reason(), gpu_reason()) if r) or None

    def default_supports_mask(problem, mask) -> str | None:
        return plan_reason(problem, mask, adapter().window_ok)  # the window rule prepare plans with

    prepare, run = prepare_run or make_prepare_run(adapter, public_for or library_public_for)
    forward_lse, backward_lse = lse_primitives(adapter)
    return KernelSpec(
        name=name, family="dense", description=description, masks=FA_MASKS, prepare=prepare, run=run,
        dtypes=dtypes, head_dims=head_dims, devices=("cuda",), deterministic=deterministic,
        min_compute_capability=min_compute_capability, available=available or default_available,
        supports=supports or head_dim_reason, supports_mask=supports_mask or default_supports_mask,
        forward_lse=forward_lse, backward_lse=backward_lse, backend=backend, url=url, compiles=compiles,
        sinks=sinks,
    )
