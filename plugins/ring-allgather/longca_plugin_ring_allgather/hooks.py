"""Ring all-gather (Llama 3 / InternEvo style): all-gather K/V, attend the local queries, reduce-scatter dK/dV.

Every rank gathers the whole K and V (in global order), then its (zigzag) query runs attend to
the keys they need, one inner-kernel call per query run. The backward gathers K/V again (nothing
S-sized is kept between passes), computes dQ locally and the full-length dK/dV partial sums,
which a reduce-scatter returns to the ranks that own them.
"""
from __future__ import annotations

from longca import hookimpl
from longca_cp.plan import dispatch, undispatch
from longca.specs import ANY_STATIC, CPStrategySpec

NAME = "ring-allgather"


def resolve_options(problem, options):
    from longca_cp.plan import resolve_options as resolve

    return resolve(NAME, options, {"layout": "zigzag"})


def supports(problem, options):
    from longca_cp.hybrid import hybrid_unsupported

    return hybrid_unsupported(problem, 1, 1, options["layout"])


def schedule(problem, mask, options):
    from longca_cp.schedule import GatherSchedule

    return GatherSchedule(problem, mask.slices, options["layout"])


def prepare(problem, mask, inner, group, options):
    from .allgather import prepare as build

    return build(schedule(problem, mask, options), inner, group, options)


def attention(q, k, v, plan):
    from .allgather import attention as run

    return run(q, k, v, plan)


@hookimpl
def longca_cp_strategies():
    return [CPStrategySpec(
        name=NAME,
        description="all-gather K/V, local (zigzag) queries against the keys they need, reduce-scatter dK/dV",
        masks=(ANY_STATIC,),  # any mask given as slices: every call gets an exact crop
        prepare=prepare, dispatch=dispatch, attention=attention, undispatch=undispatch,
        supports=supports, resolve_options=resolve_options, schedule=schedule,
        options={"layout": "query layout: zigzag (default), contiguous"
                                  ", doc_zigzag (each document in 2R pieces, one varlen call a step: TE's THD)"},
    )]
