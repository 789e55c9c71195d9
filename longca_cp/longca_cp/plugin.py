"""The public face for CP strategy authors: what a strategy plugin imports from longca-cp.

    from longca import plugin
    from longca_cp import plugin as cp

    @plugin.hookimpl
    def longca_cp_strategies():
        return [cp.CPStrategySpec(name="mystrategy", prepare=..., run=..., schedule=...)]

Kernel, mask and problem names stay on `longca.plugin`; the strategy conformance suite is
`longca_testing.strategy_conformance_tests`. Importing this module is light: the names load on
first use (torch.distributed only when a strategy runs). docs/context-parallel.md uses them.
"""
from __future__ import annotations

from longca.faces import lazy_getattr
from longca.specs import CPStrategySpec

# name -> (module, attribute); tests/test_public_face.py resolves every entry
_LAZY = {
    "hybrid_strategy": ("longca_cp.strategy", "hybrid_strategy"),
    "GatherSchedule": ("longca_cp.schedule", "GatherSchedule"),
    "inner_unsupported": ("longca.capability", "inner_unsupported"),
    "CPPlan": ("longca_cp.plan", "CPPlan"),
    "dispatch": ("longca_cp.plan", "dispatch"),
    "undispatch": ("longca_cp.plan", "undispatch"),
    "resolve_strategy_options": ("longca_cp.plan", "resolve_options"),
    "contiguous_layout": ("longca_cp.layout", "contiguous"),
    "zigzag_layout": ("longca_cp.layout", "zigzag"),
    "document_bounds": ("longca_cp.layout", "document_bounds"),
    "Call": ("longca_cp.calls", "Call"),
    "pair_calls": ("longca_cp.calls", "pair_calls"),
    "forward_calls": ("longca_cp.attend", "forward_calls"),
    "backward_calls": ("longca_cp.attend", "backward_calls"),
    "OutputAccumulator": ("longca.merge", "OutputAccumulator"),
    "GradAccumulator": ("longca.merge", "GradAccumulator"),
    "gather_seq": ("longca_cp.comm", "gather_seq"),
    "reduce_scatter_seq": ("longca_cp.comm", "reduce_scatter_seq"),
}

__all__ = ["CPStrategySpec", *_LAZY]

__getattr__ = lazy_getattr(__name__, _LAZY, globals())
