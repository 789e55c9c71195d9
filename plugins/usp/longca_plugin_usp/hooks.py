"""USP (Unified Sequence Parallelism): Ulysses inside groups of `ulysses_degree` ranks, ring across groups.

Ranks r = i * U + u: the U consecutive ranks of a group exchange heads by all-to-all, then ring
attention (zigzag over the R = W / U ring positions) runs among the ranks with the same u.
"""
from __future__ import annotations

from longca import plugin
from longca_cp import plugin as cp


@plugin.hookimpl
def longca_cp_strategies():
    return [cp.hybrid_strategy(
        "usp", "Ulysses all-to-all inside groups of ulysses_degree ranks, ring P2P across the groups",
        head="ulysses_degree", head_at_most=lambda world: world // 2,
        options={"ulysses_degree": "ranks per all-to-all group (default: the largest divisor of the world "
                                   "size, at most half of it and at most LOCAL_WORLD_SIZE, that splits the heads)"})]
