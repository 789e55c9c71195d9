"""The `prepare` / `run` / `supports` of a kernel built on a plan and an adapter.

Shared by the fa2, fa3, fa4 and cudnn plugins. `prepare` turns the mask into a plan (timed as
prepare_ms); `run` either calls the library's own public function, when the whole mask is one
call the library takes as is (full, causal, documents, sliding windows), or runs the plan
through `plan_attention` (several calls, lse merge where calls share rows).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from longca.capability import gpu_reason  # noqa: F401 - this face's name for it (longca_flashplan.plugin)
from longca.specs import ANY_STATIC

from .executor import Adapter, ExecCall, ExecPlan, plan_attention, resolve_scale
from .plan import PlanError, make_plan

# public(q, k, v, call) -> out, the library's own autograd-aware entry point for a single call
Public = Callable[..., object]
# public_ok(call) -> can the public entry point run this call?
PublicOk = Callable[[ExecCall], bool]

# the planner maps any slices to calls (or refuses a mask it cannot, with the reason): every static
# mask, third-party ones included
FA_MASKS = (ANY_STATIC,)


@dataclass
class Prepared:
    adapter: Adapter
    ex: ExecPlan
    public: Public | None


def cached_plan(mask, window_ok):
    """The plan of a mask for a window check, made once per mask draw (supports_mask, then prepare)."""
    if mask.slices is None:
        raise PlanError(f"mask {mask.name!r} is block-sparse; this kernel takes static masks only")
    key = ("flashplan", window_ok)
    if key not in mask.cache:
        mask.cache[key] = make_plan(mask.slices, mask.seqlen, mask.seqlen, window_ok)
    return mask.cache[key]


def plan_for(adapter: Adapter, mask, batch: int, scale: float, device) -> ExecPlan:
    return ExecPlan(cached_plan(mask, adapter.window_ok), batch, scale, device)


def ask_deterministic(adapter: Any) -> None:
    """The adapter's backward (and the public entry points) ask the library for its deterministic algorithm
    (`FlashAdapter.deterministic`); kernels that cannot refuse `Problem.deterministic` before prepare."""
    adapter.deterministic = True


def make_prepare_run(adapter_factory: Callable[[], Adapter],
                     public_for: Callable[..., Public | None] | None = None):
    """(prepare, run) for a KernelSpec; `public_for(adapter, call, q, k)` picks a public entry point."""

    def prepare(problem, mask, q, k, v) -> Prepared:
        adapter = adapter_factory()
        if getattr(problem, "deterministic", False):
            ask_deterministic(adapter)
        ex = plan_for(adapter, mask, q.shape[0], resolve_scale(q, None), q.device)
        public = public_for(adapter, ex.single, q, k) if (public_for and ex.single is not None) else None
        return Prepared(adapter, ex, public)

    def run(prepared: Prepared, q, k, v, sinks=None):
        """The library's public call for a one-call mask (with `sinks` only where it takes them:
        `public_sinks`), else the plan's primitives merged by lse (sinks through the merged lse)."""
        if prepared.public is not None and (sinks is None or getattr(prepared.adapter, "public_sinks", False)):
            return prepared.public(q, k, v, prepared.ex.single, **({} if sinks is None else {"sinks": sinks}))
        return plan_attention(q, k, v, prepared.adapter, prepared.ex, sinks)

    return prepare, run


def head_dim_reason(problem, multiple: int = 8, largest: int = 256) -> str | None:
    """FlashAttention's rule for Q/K's and V's head dims (each a multiple of `multiple` up to `largest`)."""
    for d in dict.fromkeys((problem.head_dim, getattr(problem, "dv", problem.head_dim))):
        if d % multiple or d > largest:
            return f"head_dim {d}: FlashAttention needs a multiple of {multiple} up to {largest}"
    return None


def plan_reason(problem, mask, window_ok) -> str | None:
    """`supports_mask` of a planned kernel: why the built mask cannot be planned with this window
    check, or None (the plan is kept for prepare: nothing is planned twice)."""
    try:
        cached_plan(mask, window_ok)
    except PlanError as exc:
        return str(exc)
    return None
