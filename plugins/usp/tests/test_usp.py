import pytest

from longca_cp.check import run_checks
from longca.plugins import get_registry
from longca.problem import Problem

# numerics: float results, CI runs these again under another ATEN_CPU_CAPABILITY; slow: spawns gloo ranks
pytestmark = [pytest.mark.numerics, pytest.mark.slow]


def _problem(**kw):
    base = dict(kernel="reference", strategy="usp", mask="causal", seqlen=256, heads_q=8, heads_kv=8,
                head_dim=16, dtype="float32", world_size=8)
    return Problem(**{**base, **kw})


def test_default_degree_and_refusals(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    spec = get_registry().strategy("usp")
    assert spec.resolve_options(_problem(), {}) == {"ulysses_degree": 4, "layout": "zigzag"}
    assert spec.resolve_options(_problem(heads_q=6, heads_kv=6), {})["ulysses_degree"] == 2
    refusal = spec.supports(_problem(heads_q=6, heads_kv=6), {"ulysses_degree": 4, "layout": "zigzag"})
    assert "do not divide over 4" in refusal
    assert "does not divide the world size" in spec.supports(_problem(), {"ulysses_degree": 3, "layout": "zigzag"})


def test_matches_reference_on_four_ranks():
    case = {"problem": dict(kernel="reference", strategy="usp", mask="causal_document", seqlen=128, heads_q=4,
                            heads_kv=2, head_dim=16, dtype="float32", direction="fwdbwd", sampler="uniform"),
            "options": {"ulysses_degree": 2}}
    errors = run_checks([case], 4)[0]["errors"]
    assert max(errors.values()) < 1e-5, errors
