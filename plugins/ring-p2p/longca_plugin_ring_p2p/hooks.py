"""Ring attention with point-to-point K/V passing (ring-flash-attn / Megatron CP style).

Each rank keeps its queries; K/V blocks travel around the ring with batched isend/irecv that
overlap the inner kernel, partial outputs are merged by their lse in float32, and in the
backward dK/dV travel around the ring with their block. Sequence-level zigzag layout by default
(rank r holds chunks r and 2W-1-r) to balance causal work.
"""
from __future__ import annotations

from longca import hookimpl
from longca_cp.plan import dispatch, undispatch
from longca.specs import ANY_STATIC, CPStrategySpec

NAME = "ring-p2p"


def resolve_options(problem, options):
    from longca_cp.plan import resolve_options as resolve

    return resolve(NAME, options, {"layout": "zigzag"})


def supports(problem, options):
    from longca_cp.hybrid import hybrid_unsupported

    return hybrid_unsupported(problem, 1, 1, options["layout"])


def schedule(problem, mask, options):
    from longca_cp.hybrid import hybrid_schedule

    return hybrid_schedule(problem, mask, 1, 1, options["layout"])


def prepare(problem, mask, inner, group, options):
    from longca_cp.hybrid import prepare_hybrid

    return prepare_hybrid(schedule(problem, mask, options), inner, group, options)


def attention(q, k, v, plan):
    from longca_cp.ring import ring_attention

    return ring_attention(q, k, v, plan.ring)


@hookimpl
def longca_cp_strategies():
    return [CPStrategySpec(
        name=NAME,
        description="K/V passed around a ring with batched P2P overlapped with the inner kernel, lse merge",
        masks=(ANY_STATIC,),  # any mask given as slices: every call gets an exact crop
        prepare=prepare, dispatch=dispatch, attention=attention, undispatch=undispatch,
        supports=supports, resolve_options=resolve_options, schedule=schedule,
        options={"layout": "zigzag (default: rank r holds chunks r and 2W-1-r of the sequence), contiguous"
                                  ", doc_zigzag (each document in 2R pieces, one varlen call a step: TE's THD)"},
    )]
