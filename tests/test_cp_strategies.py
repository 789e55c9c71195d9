"""Every CP strategy against the single-process reference, on CPU with gloo.

One process group is spawned per world size and runs all its cases (spawning is the slow part);
each case then is one test: output and the gradients of q, k, v within float32 tolerance.
Documents come from the `uniform` sampler, whose documents cross the zigzag chunk edges.
"""
from __future__ import annotations

import functools

import pytest

from longca.plugins import get_registry

# numerics: float results, CI runs these again under another ATEN_CPU_CAPABILITY; slow: spawns gloo ranks
pytestmark = [pytest.mark.numerics, pytest.mark.slow]

# the cases with options below name these built-ins; the plain cases run every installed strategy that takes
# any inner kernel with the lse primitives (not torch-cp or te-cp), so a sixth strategy is checked too
BUILT_IN = ("ulysses", "ring-p2p", "ring-allgather", "usp", "loongtrain")
STRATEGIES = tuple(n for n in get_registry().names("strategies") if get_registry().strategy(n).inner_kernels is None)
MASKS = ("full", "causal", "full_document", "causal_document")
EXTRA_MASKS = ("sliding_window", "sliding_window_causal", "share_question", "causal_blockwise", "prefix_lm_causal",
               "prefix_lm_document", "global_sliding_window")
TOLERANCE = 1e-5
# the per-document layout (its documents' leftovers included: uniform lengths are rarely multiples of 2R)
DOC_LAYOUT = (("ring-p2p", {}), ("ring-allgather", {}), ("usp", {}), ("loongtrain", {"head_degree": 1, "windows": 2}))
DOC_MASKS = ("causal_document", "full_document", "causal")
SEQLEN = 256


def _case(strategy: str, mask: str, options=None, heads=(8, 8), direction="fwdbwd") -> dict:
    params = {"window": 24} if "window" in mask else {}
    return {"problem": dict(kernel="reference", strategy=strategy, mask=mask, seqlen=SEQLEN, heads_q=heads[0],
                            heads_kv=heads[1], head_dim=16, dtype="float32", direction=direction,
                            sampler="uniform", seed=1, mask_params=params),
            "options": options or {}}


def _cases(world: int) -> list[dict]:
    if world == 8:  # the grids of the hybrid strategies
        grids = [("usp", {"ulysses_degree": 2}), ("usp", {"ulysses_degree": 4}),
                 ("loongtrain", {"head_degree": 2, "windows": 2}), ("loongtrain", {"head_degree": 1, "windows": 4})]
        cases = [_case(s, m, o) for s, o in grids for m in MASKS]
        cases += [_case("ulysses", "causal_document", heads=(8, 2)),  # KV heads repeated 4 times
                  _case("usp", "causal_document", {"ulysses_degree": 4}, heads=(8, 2)),
                  _case("loongtrain", "causal", {"head_degree": 2, "windows": 2}, heads=(8, 1))]
        cases += [_case(s, "causal_document", {**o, "layout": "doc_zigzag"}) for s, o in grids[::2]]
        return cases
    cases = [_case(s, m) for s in STRATEGIES for m in MASKS]
    if world == 4:
        cases += [_case("loongtrain", m, {"head_degree": 1, "windows": 2}) for m in MASKS]  # a real double ring
        cases += [_case("ring-p2p", m, {"layout": "contiguous"}) for m in ("causal", "causal_document")]
        cases += [_case("ring-allgather", "causal_document", {"layout": "contiguous"})]
        cases += [_case(s, m, heads=(8, 2)) for s in ("ulysses", "usp", "ring-p2p")
                  for m in ("causal", "causal_document")]
        cases += [_case(s, m) for s in ("ring-p2p", "ring-allgather") for m in EXTRA_MASKS]
        cases += [_case("loongtrain", "share_question", {"head_degree": 1, "windows": 2})]
        cases += [_case("ring-p2p", "causal_document", direction="fwd")]
        cases += [_case(s, m, {**o, "layout": "doc_zigzag"}) for s, o in DOC_LAYOUT for m in DOC_MASKS]
    return cases


def _case_id(case: dict) -> str:
    p = case["problem"]
    opts = ",".join(f"{k}={v}" for k, v in case["options"].items())
    return f"{p['strategy']}[{opts}]-{p['mask']}-{p['heads_q']}:{p['heads_kv']}-{p['direction']}"


@functools.cache
def _results(world: int) -> dict[str, dict]:
    from longca_runner.cp.check import run_checks

    return {_case_id(r): r for r in run_checks(_cases(world), world, timeout_s=240)}


def _params():
    for world in (2, 4, 8):
        for case in _cases(world):
            yield pytest.param(world, _case_id(case), id=f"w{world}-{_case_id(case)}")


@pytest.fixture(scope="module", autouse=True)
def _strategies_installed():
    missing = [s for s in BUILT_IN if s not in get_registry().names("strategies")]
    if missing:
        pytest.skip(f"strategy plugins not installed: {', '.join(missing)} (make install)")


@pytest.mark.parametrize("world,case_id", list(_params()))
def test_strategy_matches_reference(world, case_id):
    result = _results(world)[case_id]
    assert "error" not in result, result.get("traceback") or result["error"]
    errors = result["errors"]
    expected = {"out"} | ({"dq", "dk", "dv"} if result["problem"]["direction"] != "fwd" else set())
    assert set(errors) == expected
    assert max(errors.values()) < TOLERANCE, errors
