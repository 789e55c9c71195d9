"""Building test inputs the way longca builds them for a run: a registered mask, seeded tensors."""
from __future__ import annotations

from typing import Any

from longca.masks.mask import Mask
from longca.plugins import Registry


def build_mask(name: str, seqlen: int, seed: int = 0, sample: int = 0, heads: tuple[int, int] = (1, 1),
               sampler: str = "uniform", sampler_params: dict[str, Any] | None = None,
               registry: Registry | None = None, **params: Any) -> Mask:
    """One draw of the registered mask `name`, exactly as a run with these settings draws it.

    `params` are the mask's parameters (`window=64`, `doc_lens=[100, 156]`); documents come from
    `sampler` (default `uniform`, fine at any length). For a plugin's own tests:
    `mask = plugin.build_mask("causal_document", 1024, seed=3)`.
    """
    from longca.problem import Problem
    from longca.problem import build_mask as build

    problem = Problem(kernel="reference", mask=name, seqlen=seqlen, heads_q=heads[0], heads_kv=heads[1],
                      seed=seed, sampler=sampler, sampler_params=dict(sampler_params or {}), mask_params=params)
    return build(problem, sample, registry)
