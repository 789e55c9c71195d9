"""PyTorch's own context parallel (`torch.distributed.tensor.experimental`) as a longca CP strategy.

`--inner sdpa`: torch's ring attention over the CUDA SDPA kernels (full and causal masks; K/V rotated
by all-gather or all-to-all; head-tail load balancing for causal). `--inner flex`: torch's
FlexAttention CP (K/V all-gathered, dK/dV reduce-scattered, a CP BlockMask from each mask's mask_mod:
every static mask). Refusals (CPU SDPA, lengths, options) are exact and come before any rank starts.
"""
from __future__ import annotations

from longca import plugin
from longca_cp import plugin as cp_face

from .options import INNER, OPTIONS, refusal, resolve


def available() -> str | None:
    """None when this torch has the context-parallel pieces the strategy calls, else why not."""
    import torch

    try:
        from . import runtime

        cp = runtime.torch_cp()
        for name in ("_ContextParallel", "_context_parallel_shard", "context_parallel_unshard",
                     "_HeadTailLoadBalancer", "_enable_context_parallel_dispatcher", "set_rotate_method"):
            getattr(cp, name)
        cp._attention._create_cp_block_mask  # noqa: B018 - present, or AttributeError below
    except (ImportError, AttributeError) as exc:
        return f"torch {torch.__version__} lacks torch.distributed.tensor.experimental._context_parallel ({exc})"
    return None


def supports(problem, options) -> str | None:
    reason = available()
    return f"unavailable: {reason}" if reason else refusal(problem, options)


def _runtime(name: str):
    """runtime.NAME, imported on the first call (torch.distributed's CP pieces load only when a case runs)."""
    def call(*args):
        from . import runtime

        return getattr(runtime, name)(*args)
    return call


@plugin.hookimpl
def longca_cp_strategies():
    return [cp_face.CPStrategySpec(
        name="torch-cp",
        description="PyTorch's context_parallel: ring attention over SDPA (--inner sdpa) or all-gather "
                    "FlexAttention CP (--inner flex), torch's head-tail load balancing",
        masks=(plugin.ANY_STATIC,),
        prepare=_runtime("prepare"), dispatch=_runtime("dispatch"), attention=_runtime("attention"),
        undispatch=_runtime("undispatch"),
        supports=supports, resolve_options=resolve, options=dict(OPTIONS), inner_kernels=INNER)]
