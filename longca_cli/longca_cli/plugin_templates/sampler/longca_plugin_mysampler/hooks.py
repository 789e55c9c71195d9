"""The hooks longca calls: what this plugin registers. Keep imports light here (no torch): every
`longca` command imports this module, also on machines without a GPU."""
from __future__ import annotations

from longca import plugin

from . import sampler


@plugin.hookimpl
def longca_samplers():
    return [plugin.SamplerSpec(
        name=sampler.NAME,
        description="document lengths min_len * (1 + Pareto(alpha)): many short documents, a few long ones",
        sample=sampler.sample,
        params={"min_len": "the shortest document (default 128)",
                "alpha": "tail index: smaller gives more very long documents (default 1.5)"},
    )]
