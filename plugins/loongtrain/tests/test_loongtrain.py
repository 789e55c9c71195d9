import pytest

import longca_testing as testing
from longca import plugin

# numerics: float results, CI runs these again under another ATEN_CPU_CAPABILITY; slow: spawns gloo ranks
pytestmark = [pytest.mark.numerics, pytest.mark.slow]

# every claimed mask on 2 and 4 gloo ranks against the reference (double rings: tests/test_cp_strategies.py)
test_conformance = testing.strategy_conformance_tests("loongtrain")


def test_defaults_use_both_dimensions_and_two_windows(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    spec = plugin.get_registry().strategy("loongtrain")
    problem = plugin.Problem(kernel="reference", strategy="loongtrain", mask="causal", seqlen=256, heads_q=8,
                             heads_kv=8, world_size=8)
    assert spec.resolve_options(problem, {}) == {"head_degree": 2, "windows": 2, "layout": "zigzag"}
    assert spec.resolve_options(problem.with_(world_size=4), {})["windows"] == 1
    assert "windows do not divide" in spec.supports(problem, {"head_degree": 2, "windows": 3, "layout": "zigzag"})


def test_variants_need_more_than_one_window():
    variants = plugin.get_registry().strategy("loongtrain").option_variants(8, 8, 8)
    assert {(v["head_degree"], v["windows"]) for v in variants} == {(1, 2), (1, 4), (2, 2)}
