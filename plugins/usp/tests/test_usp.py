import pytest

import longca_testing as testing
from longca import plugin

# numerics: float results, CI runs these again under another ATEN_CPU_CAPABILITY; slow: spawns gloo ranks
pytestmark = [pytest.mark.numerics, pytest.mark.slow]

# every claimed mask on 2 and 4 gloo ranks against the reference (other degrees: tests/test_cp_strategies.py)
test_conformance = testing.strategy_conformance_tests("usp")


def test_default_degree_and_refusals(monkeypatch):
    spec = plugin.get_registry().strategy("usp")
    problem = plugin.Problem(kernel="reference", strategy="usp", mask="causal", seqlen=256, heads_q=8,
                             heads_kv=8, world_size=8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # the all-to-all stays on one host's ranks
    assert spec.resolve_options(problem, {})["ulysses_degree"] == 2
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert spec.resolve_options(problem, {}) == {"ulysses_degree": 4, "layout": "zigzag"}
    odd = problem.with_(heads_q=6, heads_kv=6)
    assert spec.resolve_options(odd, {})["ulysses_degree"] == 2
    assert "do not divide over 4" in spec.supports(odd, {"ulysses_degree": 4, "layout": "zigzag"})
    assert "does not divide the world size" in spec.supports(problem, {"ulysses_degree": 3, "layout": "zigzag"})


def test_variants_try_the_degrees_inside_a_node():
    variants = plugin.get_registry().strategy("usp").option_variants(8, 8, 4)
    assert [v["ulysses_degree"] for v in variants] == [2, 2, 4, 4]  # 1 is Ring P2P, 8 Ulysses, and 8 > 4 per node
