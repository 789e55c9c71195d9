import pytest

from longca_cp.check import run_checks
from longca.plugins import get_registry
from longca.problem import Problem

# numerics: float results, CI runs these again under another ATEN_CPU_CAPABILITY; slow: spawns gloo ranks
pytestmark = [pytest.mark.numerics, pytest.mark.slow]


def _problem(**kw):
    base = dict(kernel="reference", strategy="ring-p2p", mask="causal", seqlen=256, heads_q=8, heads_kv=2,
                head_dim=16, dtype="float32", world_size=4)
    return Problem(**{**base, **kw})


def test_options_and_refusals():
    spec = get_registry().strategy("ring-p2p")
    assert spec.resolve_options(_problem(), {}) == {"layout": "zigzag"}
    assert "multiple of 8" in spec.supports(_problem(seqlen=260), {"layout": "zigzag"})
    assert spec.supports(_problem(seqlen=260), {"layout": "contiguous"}) is None


def test_matches_reference_on_two_ranks():
    cases = [{"problem": dict(kernel="reference", strategy="ring-p2p", mask=m, seqlen=128, heads_q=4, heads_kv=2,
                              head_dim=16, dtype="float32", direction="fwdbwd", sampler="uniform")}
             for m in ("causal", "causal_document")]
    for result in run_checks(cases, 2):
        assert max(result["errors"].values()) < 1e-5, result
