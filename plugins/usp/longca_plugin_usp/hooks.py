"""USP (Unified Sequence Parallelism): Ulysses inside groups of `ulysses_degree` ranks, ring across groups.

Ranks r = i * U + u: the U consecutive ranks of a group exchange heads by all-to-all, then ring
attention (zigzag over the R = W / U ring positions) runs among the ranks with the same u.
"""
from __future__ import annotations

from longca import hookimpl
from longca_cp.plan import dispatch, undispatch
from longca.specs import ANY_STATIC, CPStrategySpec

NAME = "usp"


def resolve_options(problem, options):
    from longca_cp.hybrid import default_head_degree
    from longca_cp.plan import resolve_options as resolve

    out = resolve(NAME, options, {"ulysses_degree": None, "layout": "zigzag"})
    if out["ulysses_degree"] is None:
        out["ulysses_degree"] = default_head_degree(problem, max(1, problem.world_size // 2))
    return out


def supports(problem, options):
    from longca_cp.hybrid import hybrid_unsupported

    return hybrid_unsupported(problem, options["ulysses_degree"], 1, options["layout"])


def schedule(problem, mask, options):
    from longca_cp.hybrid import hybrid_schedule

    return hybrid_schedule(problem, mask, options["ulysses_degree"], 1, options["layout"])


def prepare(problem, mask, inner, group, options):
    from longca_cp.hybrid import prepare_hybrid

    return prepare_hybrid(schedule(problem, mask, options), inner, group, options)


def attention(q, k, v, plan):
    from longca_cp.hybrid import hybrid_attention

    return hybrid_attention(q, k, v, plan)


@hookimpl
def longca_cp_strategies():
    return [CPStrategySpec(
        name=NAME,
        description="Ulysses all-to-all inside groups of ulysses_degree ranks, ring P2P across the groups",
        masks=(ANY_STATIC,),  # any mask given as slices: every call gets an exact crop
        prepare=prepare, dispatch=dispatch, attention=attention, undispatch=undispatch,
        supports=supports, resolve_options=resolve_options, schedule=schedule,
        options={"ulysses_degree": "ranks per all-to-all group (default: the largest divisor of the world "
                                   "size, at most half of it and at most LOCAL_WORLD_SIZE, that splits the heads)",
                 "layout": "ring layout: zigzag (default), contiguous"
                            ", doc_zigzag (each document in 2R pieces, one varlen call a step: TE's THD)"},
    )]
