"""Ulysses (DeepSpeed-Ulysses): all-to-all from sequence to head sharding, local attention, and back.

Every rank holds S/W contiguous tokens of all heads; an all-to-all gives it all S tokens of
H/W heads, the inner kernel attends over the whole mask, and an all-to-all returns the output to
sequence sharding. GQA: KV heads are repeated when the group is larger than the KV-head count.
Refused, with the reason, when the query heads do not divide over the ranks.
"""
from __future__ import annotations

from longca import plugin
from longca_cp import plugin as cp


@plugin.hookimpl
def longca_cp_strategies():
    return [cp.hybrid_strategy(
        "ulysses", "all-to-all sequence->head sharding, inner kernel over the whole sequence, all-to-all back",
        head="world", layout=None)]
