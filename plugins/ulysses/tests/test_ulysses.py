import pytest

import longca_testing as testing
from longca import plugin

# numerics: float results, CI runs these again under another ATEN_CPU_CAPABILITY; slow: spawns gloo ranks
pytestmark = [pytest.mark.numerics, pytest.mark.slow]

# every claimed mask on 2 and 4 gloo ranks against the reference (GQA and other grids: tests/test_cp_strategies.py)
test_conformance = testing.strategy_conformance_tests("ulysses")


def _problem(**kw):
    return plugin.Problem(**{**dict(kernel="reference", strategy="ulysses", mask="causal", seqlen=256, heads_q=8,
                                    heads_kv=8, head_dim=16, dtype="float32", world_size=4), **kw})


def test_registered_with_every_static_mask():
    registry = plugin.get_registry()
    spec = registry.strategy("ulysses")
    assert set(plugin.STATIC_MASKS) <= set(registry.claimed_masks(spec.masks))
    assert spec.resolve_options(_problem(), {}) == {}
    assert spec.option_variants(8, 8, 8) == [{}]  # no options: the simulator tries the defaults only


def test_refuses_heads_that_do_not_divide():
    spec = plugin.get_registry().strategy("ulysses")
    want = "6 query heads do not divide over 4 head-parallel ranks"
    assert spec.supports(_problem(heads_q=6, heads_kv=6), {}) == want
    assert spec.supports(_problem(heads_q=8, heads_kv=2), {}) is None  # KV heads repeated twice
    assert "not a multiple of 4" in spec.supports(_problem(seqlen=258), {})
