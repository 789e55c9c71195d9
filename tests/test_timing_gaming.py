"""Every gaming pattern of docs/timing-integrity.md fails, and its honest twins pass.

The kernels are in tests/fixtures/gaming_kernels (a third-party author's plugin module). The
conformance case `timing-integrity-cpu` catches what it can see; the measured case (check on, as
runs and sweeps measure) catches kernels that do less work whenever they are not checked. Where a
pattern is caught by a timing comparison, the cheat is off by 10x and more; the honest twins'
assertions are the ones a loaded machine could move, and the comparisons they pass are ratios of
fastest calls with wide margins, measured again before they fail.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from longca.plugins import PluginInfo, load_registry
from longca.problem import Problem, build_mask
from longca_runner import measure
from longca_testing.conformance import Settings, check_timing_integrity, check_work_scaling

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures" / "gaming_kernels"))
import longca_gaming_kernels as gaming  # noqa: E402

sys.path.pop(0)


@pytest.fixture(scope="module")
def registry():
    registry = load_registry()
    for spec in (*gaming.GAMING.values(), *gaming.HONEST.values()):
        registry.entries["kernels"].pop(spec.name, None)
        registry._add("kernels", spec, PluginInfo(spec.name, "longca-gaming-kernels", "0", "tests"))
    return registry


def _failures(registry, name: str) -> str:
    """The failure messages of the timing-integrity and work-scaling cases, '' when both pass."""
    messages = []
    for case in (check_timing_integrity, check_work_scaling):
        try:
            case(name, "cpu", registry, Settings(variants=()))
        except AssertionError as exc:
            messages.append(str(exc))
    return "\n".join(messages)


OFF = "is off the reference"
GROWS = "does not do work that grows with the problem"


@pytest.mark.parametrize("name, says", [
    ("game_ptr_version", ("the output is remembered",)),
    ("game_value_hash", ("the output is remembered",)),
    ("game_lazy", ("not a plain torch.Tensor",)),
    # the thread's write usually lands after the read; where it wins the race, its time still does not grow
    ("game_thread", ("changed after the timer stopped", OFF, GROWS)),
    ("game_grad_mode", (OFF,)),
    ("game_counter", (OFF,)),
    ("game_stack", (OFF,)),
    ("game_spot_aim", (OFF,)),
    ("game_in_prepare", (GROWS,)),
    ("game_sometimes_half", (OFF,)),
])
def test_conformance_catches(registry, name, says):
    message = _failures(registry, name)
    assert any(s in message for s in says), message


@pytest.mark.parametrize("name", sorted(gaming.HONEST) + ["reference", "sdpa", "torch"])
def test_honest_twins_pass_the_conformance_cases(registry, name):
    assert _failures(registry, name) == ""


def _measured(registry, name: str, check="auto", seqlen=256, **options):
    problem = Problem(kernel=name, mask="causal", seqlen=seqlen, heads_q=4, heads_kv=2, head_dim=16,
                      dtype="float32", direction="fwd")
    return measure.run_problem(problem, measure.RunOptions(samples=1, check=check, **{"warmup": 1, "repeat": 4,
                                                                                        **options}), registry)


@pytest.mark.parametrize("name", ["game_grad_mode", "game_counter", "game_stack"])
def test_less_work_when_unchecked_is_incorrect(registry, name):
    """The check judges a timed call's own result: grad mode, call count and stack are the timed ones."""
    row = _measured(registry, name)
    assert row.status == "incorrect" and row.checked == "full", row


def test_adaptive_call_counts_judge_a_timed_call_too(registry):
    row = _measured(registry, "game_counter", repeat=None)
    assert row.status == "incorrect" and row.checked == "full", row


def test_work_aimed_at_problem_derived_spot_windows_is_incorrect(registry, monkeypatch):
    monkeypatch.setitem(measure.FULL_CHECK_FLOPS, "cpu", 1e3)  # every case is spot-checked
    row = _measured(registry, "game_spot_aim", seqlen=1024)
    assert row.checked == "spot" and row.status == "incorrect", row
    honest = _measured(registry, "reference", seqlen=1024)
    assert honest.checked == "spot" and honest.status == "ok", honest


def test_spot_windows_come_from_the_secret_not_the_problem():
    problem = Problem(kernel="reference", mask="causal", seqlen=4096, heads_q=1, heads_kv=1, head_dim=16,
                      dtype="float32")
    assert measure.spot_windows(problem) == measure.spot_windows(problem)  # one run, one set of windows
    drawn = {tuple(measure.spot_windows(problem, secret)) for secret in range(8)}
    assert len(drawn) == 8 and tuple(gaming._seeded_spot_windows(4096)) not in drawn


def test_half_the_work_on_some_calls_is_an_error(registry):
    row = _measured(registry, "game_sometimes_half", check=False, repeat=6)
    assert row.status == "error" and "gave another result than the others" in row.reason, row


def test_lazy_output_is_an_error_row(registry):
    row = _measured(registry, "game_lazy", check=False)
    assert row.status == "error" and "subclass" in row.reason, row


@pytest.mark.parametrize("name", sorted(gaming.HONEST) + ["reference"])
def test_honest_twins_measure_ok(registry, name):
    row = _measured(registry, name)
    assert row.status == "ok" and row.checked == "full", row


def test_work_scaling_skips_a_kernel_refusing_more_heads(registry):
    from dataclasses import replace

    from longca_testing.conformance import ConformanceSkip

    spec = replace(gaming.HONEST["honest_reused_buffer"], name="few_heads",
                   supports=lambda p: "at most 8 heads" if p.heads_q > 8 else None)
    registry._add("kernels", spec, PluginInfo(spec.name, "longca-gaming-kernels", "0", "tests"))
    with pytest.raises(ConformanceSkip, match="16 heads refused: at most 8 heads"):
        check_work_scaling("few_heads", "cpu", registry, Settings(variants=()))


CP_MODULE = "longca_gaming_cp"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gaming_kernels"


def test_the_cp_cheat_would_pass_on_seeded_inputs():
    """What makes `regenerates_kv` a cheat: the K/V it makes are exactly the seeded inputs."""
    import torch

    sys.path.insert(0, str(FIXTURES))
    try:
        import longca_gaming_cp as cheat
    finally:
        sys.path.remove(str(FIXTURES))
    from longca.problem import make_inputs

    problem = Problem(kernel="reference", mask="causal", seqlen=64, heads_q=4, heads_kv=2, head_dim=16,
                      dtype="float32", strategy="regenerates_kv", world_size=2, seed=3)
    plan = type("Plan", (), {"problem": problem})()
    _, k, v = make_inputs(problem)
    assert all(torch.equal(a, b) for a, b in zip(cheat._regenerated(plan), (k, v), strict=True))


@pytest.mark.slow  # spawns 2 gloo ranks
def test_cp_strategy_regenerating_other_ranks_kv_fails_its_suite():
    from longca_testing.strategy_suite import check_strategy, register_modules

    sys.path.insert(0, str(FIXTURES))
    try:
        registry = load_registry()
        register_modules(registry, (CP_MODULE,))
        report = check_strategy("regenerates_kv", registry, world_sizes=(2,), plugin_modules=(CP_MODULE,))
    finally:
        sys.path.remove(str(FIXTURES))
    assert set(report.failures) == {"world-2"}, report.summary()
    assert "mask causal at 2 ranks: relative errors out" in report.failures["world-2"], report.failures["world-2"]


@pytest.mark.slow  # spawns 2 gloo ranks
def test_cp_strategy_whose_accounting_leaves_out_transfers_fails_its_suite():
    from longca_testing.strategy_suite import check_strategy, register_modules

    sys.path.insert(0, str(FIXTURES))
    try:
        registry = load_registry()
        register_modules(registry, (CP_MODULE,))
        report = check_strategy("underaccounts", registry, world_sizes=(2,), plugin_modules=(CP_MODULE,))
    finally:
        sys.path.remove(str(FIXTURES))
    assert set(report.failures) == {"world-2"}, report.summary()
    message = report.failures["world-2"]
    assert "bytes moved differ from the accounting: rank 0's bwd moved" in message, message
    assert "relative errors" not in message, message  # its numbers are right: only its accounting is not


def _sleeps_its_work(state, q, k, v):
    """A stand-in whose call costs a fixed 20 ms plus time that grows as heads x length squared (0.25 ms at
    4 heads and 256), as a library call with a host cost does: the ladder's subject, not a kernel."""
    import time

    import torch

    time.sleep(0.020 + 0.25e-3 * (q.shape[2] / 4) * (q.shape[1] / 256) ** 2)
    return torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)


@pytest.fixture
def fixed_cost(registry):
    from dataclasses import replace

    spec = replace(gaming.HONEST["honest_reused_buffer"], name="fixed_cost", run=_sleeps_its_work)
    registry._add("kernels", spec, PluginInfo(spec.name, "longca-gaming-kernels", "0", "tests"))
    yield spec.name
    registry.entries["kernels"].pop(spec.name, None)


def test_a_fixed_call_cost_hides_the_work_at_a_short_length(registry, fixed_cost):
    """What the work check's ladder is for: 4x the heads take 1.04x the time when a fixed cost dominates."""
    with pytest.raises(AssertionError, match=GROWS):
        check_work_scaling(fixed_cost, "cpu", registry, Settings(variants=()))


def test_the_work_check_doubles_the_length_until_the_work_shows(registry, fixed_cost, monkeypatch):
    from longca_testing import timing_integrity

    monkeypatch.setitem(timing_integrity.WORK_MIN_MS, "cpu", 60.0)
    monkeypatch.setattr(timing_integrity, "WORK_MAX_SEQLEN", 4096)
    spec = registry.kernel(fixed_cost)
    small = Problem(kernel=fixed_cost, mask="causal", seqlen=256, heads_q=4, heads_kv=2, head_dim=16,
                    dtype="float32", direction="fwd")
    large = small.with_(heads_q=16, heads_kv=8)
    masks = {"small": build_mask(small, 0, registry), "large": build_mask(large, 0, registry)}
    small, large, masks = timing_integrity.past_launch_bound(spec, small, large, masks, registry)
    assert (small.seqlen, large.seqlen, large.heads_q) == (4096, 4096, 16)  # 36 ms at 2048, 84 ms at 4096
    assert masks["large"].seqlen == 4096
    check_work_scaling(fixed_cost, "cpu", registry, Settings(variants=()))  # passes there


def test_a_host_cost_above_the_ladders_bar_is_compared_again_at_the_longest_length(registry, fixed_cost,
                                                                                   monkeypatch):
    """TE's DotProductAttention on an H100 (2026-12-07): its host cost alone passed WORK_MIN_MS at the first length,
    so the ladder stopped where the work does not show (1.12x); the pair is compared again at the longest length."""
    from longca_testing import timing_integrity

    monkeypatch.setitem(timing_integrity.WORK_MIN_MS, "cpu", 10.0)  # the 20 ms fixed cost passes it at 256
    monkeypatch.setattr(timing_integrity, "WORK_MAX_SEQLEN", 4096)
    check_work_scaling(fixed_cost, "cpu", registry, Settings(variants=()))


def test_a_call_that_does_no_work_still_fails_at_the_longest_length(registry, monkeypatch):
    from longca_testing import timing_integrity

    monkeypatch.setitem(timing_integrity.WORK_MIN_MS, "cpu", 60.0)
    monkeypatch.setattr(timing_integrity, "WORK_MAX_SEQLEN", 2048)
    with pytest.raises(AssertionError, match=GROWS):
        check_work_scaling("game_in_prepare", "cpu", registry, Settings(variants=()))
