"""LoongTrain's 2D attention: head parallelism plus a double ring.

Ranks r = i * h + u form head-parallel groups of h consecutive ranks (all-to-all) and a context
ring of R = W / h positions, cut into `windows` windows of R / windows ranks: K/V pass around an
inner ring inside a window while the outer ring moves blocks to the next window, overlapped with
the whole inner ring. One window is a plain ring (then this is USP).
"""
from __future__ import annotations

import math

from longca import plugin
from longca_cp import plugin as cp


@plugin.hookimpl
def longca_cp_strategies():
    return [cp.hybrid_strategy(
        "loongtrain", "head-parallel all-to-all plus a double ring (inner ring in a window, outer ring across "
                      "windows)",
        head="head_degree", windows="windows", head_at_most=math.isqrt,
        options={"head_degree": "head-parallel ranks (default: the largest divisor of the world size, at most "
                                "its square root and LOCAL_WORLD_SIZE, that splits the heads)",
                 "windows": "windows of the double ring (default: 2 when the ring has an even number >= 4 "
                            "of ranks, else 1)"})]
