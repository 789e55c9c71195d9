import pytest

from longca_cp.check import run_checks
from longca.masks.catalog import STATIC_MASKS
from longca.plugins import get_registry
from longca.problem import Problem

# numerics: float results, CI runs these again under another ATEN_CPU_CAPABILITY; slow: spawns gloo ranks
pytestmark = [pytest.mark.numerics, pytest.mark.slow]


def _problem(**kw):
    base = dict(kernel="reference", strategy="ulysses", mask="causal", seqlen=256, heads_q=8, heads_kv=8,
                head_dim=16, dtype="float32", world_size=4)
    return Problem(**{**base, **kw})


def test_registered_with_every_static_mask():
    registry = get_registry()
    spec = registry.strategy("ulysses")
    assert set(STATIC_MASKS) <= set(registry.claimed_masks(spec.masks))
    assert spec.resolve_options(_problem(), {}) == {}


def test_refuses_heads_that_do_not_divide():
    spec = get_registry().strategy("ulysses")
    want = "6 query heads do not divide over 4 head-parallel ranks"
    assert spec.supports(_problem(heads_q=6, heads_kv=6), {}) == want
    assert spec.supports(_problem(heads_q=8, heads_kv=2), {}) is None  # KV heads repeated twice
    assert "not a multiple of 4" in spec.supports(_problem(seqlen=258), {})


def test_matches_reference_on_two_ranks_with_gqa():
    case = {"problem": dict(kernel="reference", strategy="ulysses", mask="causal_document", seqlen=128, heads_q=4,
                            heads_kv=1, head_dim=16, dtype="float32", direction="fwdbwd", sampler="uniform")}
    errors = run_checks([case], 2)[0]["errors"]
    assert set(errors) == {"out", "dq", "dk", "dv"} and max(errors.values()) < 1e-5
