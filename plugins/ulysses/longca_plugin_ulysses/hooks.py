"""Ulysses (DeepSpeed-Ulysses): all-to-all from sequence to head sharding, local attention, and back.

Every rank holds S/W contiguous tokens of all heads; an all-to-all gives it all S tokens of
H/W heads, the inner kernel attends over the whole mask, and an all-to-all returns the output to
sequence sharding. GQA: KV heads are repeated when the group is larger than the KV-head count.
Refused, with the reason, when the query heads do not divide over the ranks.
"""
from __future__ import annotations

from longca import hookimpl
from longca_cp.plan import dispatch, undispatch
from longca.specs import ANY_STATIC, CPStrategySpec

NAME = "ulysses"


def resolve_options(problem, options):
    from longca_cp.plan import resolve_options as resolve

    return resolve(NAME, options, {})


def supports(problem, options):
    from longca_cp.hybrid import hybrid_unsupported

    return hybrid_unsupported(problem, problem.world_size, 1, "contiguous")


def schedule(problem, mask, options):
    from longca_cp.hybrid import hybrid_schedule

    return hybrid_schedule(problem, mask, problem.world_size, 1, "contiguous")


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
        description="all-to-all sequence->head sharding, inner kernel over the whole sequence, all-to-all back",
        masks=(ANY_STATIC,),  # any mask given as slices: every call gets an exact crop
        prepare=prepare, dispatch=dispatch, attention=attention, undispatch=undispatch,
        supports=supports, resolve_options=resolve_options, schedule=schedule,
    )]
