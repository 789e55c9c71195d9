import pytest

import longca_testing as testing
from longca import plugin

# numerics: float results, CI runs these again under another ATEN_CPU_CAPABILITY; slow: spawns gloo ranks
pytestmark = [pytest.mark.numerics, pytest.mark.slow]

# every claimed mask on 2 and 4 gloo ranks against the reference (other layouts: tests/test_cp_strategies.py)
test_conformance = testing.strategy_conformance_tests("ring-allgather")


def test_options_and_refusals():
    spec = plugin.get_registry().strategy("ring-allgather")
    problem = plugin.Problem(kernel="reference", strategy="ring-allgather", mask="causal", seqlen=100, world_size=4)
    assert spec.resolve_options(problem, {}) == {"layout": "zigzag"}
    assert "multiple of 8" in spec.supports(problem, {"layout": "zigzag"})
    assert "unknown layout 'spiral'" in spec.supports(problem, {"layout": "spiral"})
