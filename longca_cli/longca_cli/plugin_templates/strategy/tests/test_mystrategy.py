"""Tests of the mystrategy plugin: longca's strategy suite (every claimed static mask on 2 and 4 gloo
ranks, forward and backward, against the single-device reference), plus its options and layouts."""
import pytest

import longca_testing as testing
from longca import plugin

test_strategy = testing.strategy_conformance_tests("mystrategy")


def _problem(**kw):
    return plugin.Problem(**{**dict(kernel="reference", strategy="mystrategy", mask="causal", seqlen=256, heads_q=4,
                                    heads_kv=2, head_dim=16, dtype="float32", world_size=4), **kw})


def test_options_resolve_and_bad_ones_are_refused():
    spec = plugin.get_registry().strategy("mystrategy")
    assert spec.resolve_options(_problem(), {}) == {"layout": "contiguous"}
    with pytest.raises(plugin.LongcaError, match="has no option rings"):
        spec.resolve_options(_problem(), {"rings": 2})
    with pytest.raises(plugin.LongcaError, match="layout 'spiral' is not one of contiguous, zigzag"):
        spec.resolve_options(_problem(), {"layout": "spiral"})


def test_lengths_the_layout_cannot_split_are_refused():
    spec = plugin.get_registry().strategy("mystrategy")
    assert spec.supports(_problem(), {"layout": "zigzag"}) is None
    assert "not a multiple of 4 ranks" in spec.supports(_problem(seqlen=258), {"layout": "contiguous"})
    assert "not a multiple of 2 x 4" in spec.supports(_problem(seqlen=260), {"layout": "zigzag"})


def test_zigzag_balances_causal_work_over_ranks():
    from longca_plugin_mystrategy.algorithm import rank_calls
    from longca_plugin_mystrategy.hooks import layout

    mask = testing.build_mask("causal", 256)

    def work(kind):  # pairs each rank attends
        lay = layout(_problem(), {"layout": kind})
        return [sum(call.area for call in rank_calls(mask.slices, lay, r)) for r in range(4)]

    contiguous, zigzag = work("contiguous"), work("zigzag")
    assert sum(contiguous) == sum(zigzag) == mask.area  # every pair once, whatever the layout
    assert len(set(zigzag)) == 1 and max(contiguous) > 3 * min(contiguous)
