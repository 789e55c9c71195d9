import pytest

import longca_testing as testing
from longca import plugin

# numerics: float results, CI runs these again under another ATEN_CPU_CAPABILITY; slow: spawns gloo ranks
pytestmark = [pytest.mark.numerics, pytest.mark.slow]

# every claimed mask on 2 and 4 gloo ranks against the reference (other layouts: tests/test_cp_strategies.py)
test_conformance = testing.strategy_conformance_tests("ring-p2p")


def test_options_and_refusals():
    spec = plugin.get_registry().strategy("ring-p2p")
    problem = plugin.Problem(kernel="reference", strategy="ring-p2p", mask="causal", seqlen=260, heads_q=8,
                             heads_kv=2, head_dim=16, dtype="float32", world_size=4)
    assert spec.resolve_options(problem, {}) == {"layout": "zigzag"}
    assert "multiple of 8" in spec.supports(problem, {"layout": "zigzag"})
    assert spec.supports(problem, {"layout": "contiguous"}) is None
    assert [v["layout"] for v in spec.option_variants(4, 8, 8)] == ["zigzag", "doc_zigzag", "contiguous"]
