"""The hooks longca calls: what this plugin registers. Keep imports light here (no torch, no
torch.distributed): every `longca` command imports this module, also on machines without a GPU;
the algorithm is imported inside `prepare` and `attention`."""
from __future__ import annotations

from longca import plugin
from longca_cp import plugin as cp

NAME = "mystrategy"
DEFAULTS = {"layout": "contiguous"}
LAYOUTS = {"contiguous": cp.contiguous_layout, "zigzag": cp.zigzag_layout}


def layout(problem, options):
    """Which global tokens each rank holds: contiguous pieces, or zigzag (two a rank, causal work balanced)."""
    return LAYOUTS[options.get("layout", DEFAULTS["layout"])](problem.seqlen, problem.world_size)


def resolve_options(problem, options):
    """The defaults filled in; an unknown option or layout is an input error (one line, exit 2)."""
    resolved = cp.resolve_strategy_options(NAME, options, DEFAULTS)
    if resolved["layout"] not in LAYOUTS:
        raise plugin.LongcaError(f"strategy {NAME!r}: layout {resolved['layout']!r} is not one of {', '.join(LAYOUTS)}")
    return resolved


def supports(problem, options):
    """None, or why the case cannot run: the layout's own refusal (a length it cannot split)."""
    try:
        layout(problem, options)
    except plugin.UnsupportedError as exc:
        return str(exc)
    return None


def prepare(problem, mask, inner, group, options):
    from .algorithm import prepare as build

    return build(layout(problem, options), mask, inner, group, options)


def attention(q, k, v, plan):
    from .algorithm import attention as all_gather_attention

    return all_gather_attention(q, k, v, plan)


@plugin.hookimpl
def longca_cp_strategies():
    return [cp.CPStrategySpec(
        name=NAME,
        description="all-gather K/V, each rank attends its own (contiguous or zigzag) queries, reduce-scatter dK/dV",
        masks=(plugin.ANY_STATIC,),  # works from the slices of any static mask, third-party ones too
        prepare=prepare,
        dispatch=cp.dispatch,  # this rank's tokens of a global tensor, by the plan's layout
        attention=attention,
        undispatch=cp.undispatch,
        supports=supports,
        resolve_options=resolve_options,
        options={"layout": "query layout: contiguous (default) or zigzag (two pieces a rank: balances causal masks)"},
    )]
