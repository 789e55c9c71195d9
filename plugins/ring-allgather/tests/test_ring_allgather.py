import pytest

from longca_cp.check import run_checks
from longca.plugins import get_registry
from longca.problem import Problem

# numerics: float results, CI runs these again under another ATEN_CPU_CAPABILITY; slow: spawns gloo ranks
pytestmark = [pytest.mark.numerics, pytest.mark.slow]


def test_options_and_refusals():
    spec = get_registry().strategy("ring-allgather")
    problem = Problem(kernel="reference", strategy="ring-allgather", mask="causal", seqlen=100, world_size=4)
    assert spec.resolve_options(problem, {}) == {"layout": "zigzag"}
    assert "multiple of 8" in spec.supports(problem, {"layout": "zigzag"})


def test_matches_reference_on_two_ranks():
    cases = [{"problem": dict(kernel="reference", strategy="ring-allgather", mask=m, seqlen=128, heads_q=4,
                              heads_kv=2, head_dim=16, dtype="float32", direction="fwdbwd", sampler="uniform"),
              "options": {"layout": layout}}
             for m in ("causal", "full_document") for layout in ("zigzag", "contiguous")]
    for result in run_checks(cases, 2):
        assert max(result["errors"].values()) < 1e-5, result
