import pytest

from longca_cp.check import run_checks
from longca.plugins import get_registry
from longca.problem import Problem

# numerics: float results, CI runs these again under another ATEN_CPU_CAPABILITY; slow: spawns gloo ranks
pytestmark = [pytest.mark.numerics, pytest.mark.slow]


def _problem(**kw):
    base = dict(kernel="reference", strategy="loongtrain", mask="causal", seqlen=256, heads_q=8, heads_kv=8,
                head_dim=16, dtype="float32", world_size=8)
    return Problem(**{**base, **kw})


def test_defaults_use_both_dimensions_and_two_windows(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    spec = get_registry().strategy("loongtrain")
    assert spec.resolve_options(_problem(), {}) == {"head_degree": 2, "windows": 2, "layout": "zigzag"}
    assert spec.resolve_options(_problem(world_size=4), {})["windows"] == 1
    assert "windows do not divide" in spec.supports(_problem(), {"head_degree": 2, "windows": 3, "layout": "zigzag"})


def test_double_ring_matches_reference_on_four_ranks():
    case = {"problem": dict(kernel="reference", strategy="loongtrain", mask="causal_document", seqlen=128,
                            heads_q=4, heads_kv=2, head_dim=16, dtype="float32", direction="fwdbwd",
                            sampler="uniform"),
            "options": {"head_degree": 1, "windows": 2}}
    errors = run_checks([case], 4)[0]["errors"]
    assert max(errors.values()) < 1e-5, errors
