"""Ring all-gather (Llama 3 / InternEvo style): all-gather K/V, attend the local queries, reduce-scatter dK/dV.

Every rank gathers the whole K and V (in global order), then its (zigzag) query runs attend to
the keys they need, one inner-kernel call per query run. The backward gathers K/V again (nothing
S-sized is kept between passes), computes dQ locally and the full-length dK/dV partial sums,
which a reduce-scatter returns to the ranks that own them.
"""
from __future__ import annotations

from longca import plugin
from longca_cp import plugin as cp


def schedule(problem, mask, options):
    return cp.GatherSchedule(problem, mask.slices, options["layout"])


def prepare(schedule, inner, group, options):
    from .allgather import prepare as build

    return build(schedule, inner, group, options)


def attention(q, k, v, plan):
    from .allgather import attention as run

    return run(q, k, v, plan)


@plugin.hookimpl
def longca_cp_strategies():
    return [cp.hybrid_strategy(
        "ring-allgather", "all-gather K/V, local (zigzag) queries against the keys they need, reduce-scatter dK/dV",
        schedule=schedule, prepare=prepare, attention=attention,
        options={"layout": "query layout: zigzag (default), contiguous"
                           ", doc_zigzag (each document in 2R pieces, one varlen call a step: TE's THD)"})]
