"""te-cp's options and refusals (no TE import), from TE's `attn_forward_func_with_cp` and its CP tests."""
from __future__ import annotations

from typing import Any

from longca import plugin
from longca_cp import plugin as cp

from .masks import te_form

COMM_TYPES = ("p2p", "a2a", "a2a+p2p", "all_gather")
OPTIONS = {
    "cp_comm_type": "TE's cp_comm_type: p2p (KV ring, default), a2a (Ulysses-style all-to-all of QKV/O), "
                    "a2a+p2p (all-to-all inside groups of a2a_degree, ring across), all_gather (KV all-gather)",
    "a2a_degree": "a2a+p2p only: ranks per all-to-all group (TE's first CP group); default 2, as TE's own test",
}


def resolve(problem: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Defaults filled, names and types checked (LongcaError: one line), the comm type one of TE's."""
    out = cp.resolve_strategy_options("te-cp", options, {"cp_comm_type": "p2p", "a2a_degree": 2})
    if out["cp_comm_type"] not in COMM_TYPES:
        raise plugin.LongcaError(f"strategy 'te-cp': option cp_comm_type={out['cp_comm_type']!r} is not one of "
                                 f"{', '.join(COMM_TYPES)}")
    return out


def refusal(problem: Any, options: dict[str, Any]) -> str | None:
    """Why TE's CP cannot run this problem with these options, or None."""
    form = te_form(problem.mask)
    world, comm = problem.world_size, options["cp_comm_type"]
    if form is None:
        return f"mask {problem.mask}: TransformerEngine has no attn_mask_type / window / thd form for it"
    fmt, _, windowed = form
    if fmt == "thd" and comm != "p2p":
        return f"cp_comm_type={comm}: TE's CP takes the thd (document) format with p2p only"
    if windowed and comm not in ("a2a", "all_gather"):
        return f"cp_comm_type={comm}: TE's CP takes a sliding window with a2a or all_gather only"
    a2a = {"a2a": world, "a2a+p2p": options["a2a_degree"]}.get(comm)
    if comm == "a2a+p2p" and (a2a is None or a2a < 1 or world % a2a):
        return f"a2a_degree={options['a2a_degree']} does not divide the {world} ranks"
    if a2a and (problem.heads_q % a2a or problem.heads_kv % a2a):
        return f"{problem.heads_q}:{problem.heads_kv} heads do not divide over the {a2a} ranks of TE's all-to-all"
    if fmt == "bshd" and problem.seqlen % (2 * world):
        return f"sequence length {problem.seqlen} is not a multiple of 2 x {world} ranks (TE's DualChunkSwap)"
    if problem.device_type != "cuda":
        return "TransformerEngine runs on CUDA GPUs only"
    return None
