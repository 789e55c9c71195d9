"""Options of torch-cp and what it refuses, without torch: resolved and checked before any rank starts.

The inner kernel names torch's attention: `sdpa` is torch's ring attention over SDPA (full and causal
only: SDPA takes no other mask under CP), `flex` is torch's FlexAttention CP (K/V all-gathered, a CP
BlockMask from the mask's own mask_mod, so every static mask with one).
"""
from __future__ import annotations

from typing import Any

from longca import plugin
from longca_cp import plugin as cp

INNER = ("sdpa", "flex")
LOAD_BALANCE = ("head-tail", "none")
ROTATE = ("allgather", "alltoall")
FLEX_BLOCK = 128  # torch's _DEFAULT_SPARSE_BLOCK_SIZE: the CP BlockMask needs S % (W * 128) == 0
SDPA_MASKS = ("full", "causal")

OPTIONS = {
    "load_balance": "head-tail (torch's _HeadTailLoadBalancer: rank r holds chunks r and 2W-1-r of 2W, "
                    "longca's zigzag) or none (contiguous shards); default head-tail, none for sdpa on full",
    "rotate": "sdpa only: how K/V shards travel, allgather (torch's default) or alltoall (set_rotate_method)",
}


def resolve(problem: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Defaults filled, names and values checked (LongcaError: one line)."""
    balance_default = "none" if problem.kernel == "sdpa" and problem.mask == "full" else "head-tail"
    out = cp.resolve_strategy_options("torch-cp", options, {"load_balance": balance_default,
                                                                "rotate": "allgather"})
    for name, allowed in (("load_balance", LOAD_BALANCE), ("rotate", ROTATE)):
        if out[name] not in allowed:
            raise plugin.LongcaError(f"strategy 'torch-cp': option {name}={out[name]!r} is not one of "
                                     f"{', '.join(allowed)}")
    return out


def refusal(problem: Any, options: dict[str, Any]) -> str | None:
    """Why torch's context_parallel cannot run this problem with these options, or None."""
    world, seqlen = problem.world_size, problem.seqlen
    balance = options.get("load_balance", "head-tail")
    if problem.kernel not in INNER:  # longca_cp refuses it first, with the same list; kept for direct callers
        return f"torch-cp's inner kernel is sdpa or flex (torch's own attention), not {problem.kernel}"
    if problem.kernel == "sdpa":
        if problem.device_type != "cuda":
            return ("torch's context_parallel shards only the CUDA SDPA kernels (flash, efficient, cuDNN); on "
                    f"{problem.device_type} SDPA calls aten._scaled_dot_product_flash_attention_for_cpu, which "
                    "has no context-parallel sharding strategy (NotImplementedError)")
        if problem.mask not in SDPA_MASKS:
            return (f"mask {problem.mask}: torch's SDPA ring attention takes is_causal only (full or causal); "
                    "other masks need --inner flex")
        if balance == "head-tail" and problem.mask != "causal":
            return "load_balance=head-tail: torch's SDPA ring attention requires is_causal=True for load balancing"
    else:
        if options.get("rotate", "allgather") != "allgather":
            return "rotate=alltoall: torch's FlexAttention CP only all-gathers K/V"
        if seqlen % (world * FLEX_BLOCK):
            return (f"sequence length {seqlen} is not a multiple of {world} ranks x {FLEX_BLOCK}: torch's CP "
                    "BlockMask needs whole 128-token blocks per rank")
        if plugin.get_registry().mask(problem.mask).flex_mask_mod is None:
            return f"mask {problem.mask} registers no flex_mask_mod, which torch's CP BlockMask is built from"
    if balance == "head-tail" and seqlen % (2 * world):
        return f"sequence length {seqlen} is not a multiple of 2 x {world} ranks (load_balance=head-tail)"
    if seqlen % world:
        return f"sequence length {seqlen} is not a multiple of {world} ranks"
    return None
