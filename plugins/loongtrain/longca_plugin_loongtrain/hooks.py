"""LoongTrain's 2D attention: head parallelism plus a double ring.

Ranks r = i * h + u form head-parallel groups of h consecutive ranks (all-to-all) and a context
ring of R = W / h positions, cut into `windows` windows of R / windows ranks: K/V pass around an
inner ring inside a window while the outer ring moves blocks to the next window, overlapped with
the whole inner ring. One window is a plain ring (then this is USP).
"""
from __future__ import annotations

import math

from longca import hookimpl
from longca_cp.plan import dispatch, undispatch
from longca.specs import ANY_STATIC, CPStrategySpec

NAME = "loongtrain"


def resolve_options(problem, options):
    from longca_cp.hybrid import default_head_degree
    from longca_cp.plan import resolve_options as resolve

    out = resolve(NAME, options, {"head_degree": None, "windows": None, "layout": "zigzag"})
    if out["head_degree"] is None:
        out["head_degree"] = default_head_degree(problem, max(1, math.isqrt(problem.world_size)))
    if out["windows"] is None:
        ring = problem.world_size // out["head_degree"] if problem.world_size % out["head_degree"] == 0 else 1
        out["windows"] = 2 if ring >= 4 and ring % 2 == 0 else 1
    return out


def supports(problem, options):
    from longca_cp.hybrid import hybrid_unsupported

    return hybrid_unsupported(problem, options["head_degree"], options["windows"], options["layout"])


def schedule(problem, mask, options):
    from longca_cp.hybrid import hybrid_schedule

    return hybrid_schedule(problem, mask, options["head_degree"], options["windows"], options["layout"])


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
        description="head-parallel all-to-all plus a double ring (inner ring in a window, outer ring across windows)",
        masks=(ANY_STATIC,),  # any mask given as slices: every call gets an exact crop
        prepare=prepare, dispatch=dispatch, attention=attention, undispatch=undispatch,
        supports=supports, resolve_options=resolve_options, schedule=schedule,
        options={"head_degree": "head-parallel ranks (default: the largest divisor of the world size, at most "
                                "its square root and LOCAL_WORLD_SIZE, that splits the heads)",
                 "windows": "windows of the double ring (default: 2 when the ring has an even number >= 4 "
                            "of ranks, else 1)",
                 "layout": "ring layout: zigzag (default), contiguous"
                            ", doc_zigzag (each document in 2R pieces, one varlen call a step: TE's THD)"},
    )]
