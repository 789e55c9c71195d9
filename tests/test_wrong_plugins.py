"""Wrong plugins of every kind, each failing its conformance suite with a message naming the fault.

Each plugin here is correct except for one fault; the suites must catch it (the honest versions
pass: tests/test_plugin_conformance.py and the suites' own tests).
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

import longca_testing as testing
from longca import plugin, reference
from longca.plugins import PluginInfo, load_registry
from longca_testing.mask_suite import check_mask
from longca_testing.sampler_suite import check_sampler
from longca_testing.strategy_suite import check_strategy, register_modules


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def _add(registry, kind: str, spec) -> None:
    registry.entries[kind].pop(spec.name, None)
    registry._add(kind, spec, PluginInfo(spec.name, "longca-plugin-wrong", "0", "tests"))


def _check(registry, kernel: str, shapes: bool = False):
    """The kernel suite on CPU; the shape-* cases only where the fault needs them (they take seconds)."""
    settings = testing.Settings() if shapes else testing.Settings(variants=())
    return testing.check_kernel(kernel, "cpu", registry=registry, settings=settings)


def _reference_kernel(name: str, **changes) -> plugin.KernelSpec:
    spec = plugin.KernelSpec(name=name, family="dense", description="the reference, with one fault",
                             masks=("causal", "causal_document"), prepare=lambda problem, mask, q, k, v: mask,
                             run=lambda mask, q, k, v: reference.attention(q, k, v, mask), dtypes=("float32",),
                             devices=("cpu",), forward_lse=reference.forward_lse, backward_lse=reference.backward_lse)
    return replace(spec, **changes)


def _own_forward_backward(dout, q, k, v, out, lse, slices, softmax_scale=None):
    """The template's old bug: recompute this piece's forward instead of using the out and lse given."""
    own_out, own_lse = reference.forward_lse(q, k, v, slices, softmax_scale)
    return reference.backward_lse(dout, q, k, v, own_out, own_lse, slices, softmax_scale)


def test_kernel_ignoring_merged_out_and_lse(registry):
    _add(registry, "kernels", _reference_kernel("ignores_lse", backward_lse=_own_forward_backward))
    report = _check(registry, "ignores_lse")
    assert set(report.failures) == {"cp_merge-cpu"}, report.summary()
    assert "backward_lse ignores the merged out and lse it is given" in report.failures["cp_merge-cpu"]


def _refuses_backward_lse(dout, q, k, v, out, lse, slices, softmax_scale=None):
    """As torch's FLASH backend does (no gradient through the lse, dLSE): an honest refusal."""
    raise plugin.UnsupportedError("this backend has no gradient through the lse")


def _lse_times_ln2(q, k, v, slices, softmax_scale=None):
    """flex_attention's FLASH lse in torch 2.11 (pytorch issue 181645): the natural lse times ln 2."""
    out, lse = reference.forward_lse(q, k, v, slices, softmax_scale)
    return out, lse * 0.6931471805599453


def test_kernel_refusing_every_backward_lse_is_a_refusal_with_its_forward_merge_checked(registry):
    _add(registry, "kernels", _reference_kernel("refuses_bwd_lse", backward_lse=_refuses_backward_lse))
    report = _check(registry, "refuses_bwd_lse")
    assert not report.failures, report.summary()
    assert "no gradient through the lse" in report.skips["backward_lse-cpu"]
    assert "forward parts checked" in report.skips["cp_merge-cpu"]


def test_a_refused_backward_lse_does_not_hide_a_wrong_forward_lse(registry):
    _add(registry, "kernels", _reference_kernel("lse_ln2", forward_lse=_lse_times_ln2,
                                                backward_lse=_refuses_backward_lse))
    report = _check(registry, "lse_ln2")
    assert {"forward_lse-cpu", "cp_merge-cpu"} <= set(report.failures), report.summary()
    assert "lse-merged output" in report.failures["cp_merge-cpu"]


def test_kernel_refusing_backward_lse_on_some_pieces_only_fails(registry):
    def short_pieces_refused(dout, q, k, v, out, lse, slices, softmax_scale=None):
        if q.shape[1] < 256:
            raise plugin.UnsupportedError("short pieces refused")
        return reference.backward_lse(dout, q, k, v, out, lse, slices, softmax_scale)

    _add(registry, "kernels", _reference_kernel("some_bwd_lse", backward_lse=short_pieces_refused))
    report = _check(registry, "some_bwd_lse")
    assert "refused" in report.failures["backward_lse-cpu"], report.summary()


def _right_only_on_first_256_rows(mask, q, k, v):
    """Right on the first 256 query rows, full attention (no mask) after them."""
    import torch

    right = reference.attention(q, k, v, mask)
    full = reference.attention(q, k, v, plugin.slices_array([(0, q.shape[1], 0, k.shape[1], plugin.FULL)]))
    return torch.cat([right[:, :256], full[:, 256:]], dim=1)


def test_kernel_wrong_past_row_256(registry):
    _add(registry, "kernels", _reference_kernel("wrong_after_256", run=_right_only_on_first_256_rows,
                                                forward_lse=None, backward_lse=None))
    report = _check(registry, "wrong_after_256", shapes=True)
    assert not any(case.startswith("mask-") for case in report.failures), report.summary()  # S=256 cannot see it
    assert {"shape-s1152-fwd-cpu", "shape-s997-b2-gqa3-fwd-cpu", "shape-s515-mha-fwd-cpu"} <= set(report.failures)
    message = report.failures["shape-s1152-fwd-cpu"]
    assert "mask causal_document fwd on cpu (float32, S=1152" in message and "incorrect: relative error" in message
    assert "from row 256 to 1151" in message, message


def test_kernel_returning_heads_first_layout(registry):
    _add(registry, "kernels", _reference_kernel(
        "heads_first", run=lambda mask, q, k, v: reference.attention(q, k, v, mask).transpose(1, 2)))
    report = _check(registry, "heads_first")
    message = report.failures["mask-causal-fwd-cpu"]
    assert "run() returned shape (1, 4, 256, 64), expected (batch, seqlen, heads_q, head_dim) = (1, 256, 4, 64)" \
        in message and "that is (batch, heads, seqlen, head_dim)" in message, message


# ---- masks, samplers, strategies: tests/fixtures/wrong_plugins/longca_wrong_plugins.py

WRONG_DIR = Path(__file__).resolve().parent / "fixtures" / "wrong_plugins"
WRONG_MODULE = "longca_wrong_plugins"


@pytest.fixture(scope="module")
def wrong_registry():
    sys.path.insert(0, str(WRONG_DIR))
    registry = load_registry()
    register_modules(registry, (WRONG_MODULE,))
    yield registry
    sys.path.remove(str(WRONG_DIR))


def test_mask_with_overlapping_slices(wrong_registry):
    report = check_mask("causal_twice", wrong_registry)
    assert {"build", "area", "deterministic", "forms"} <= set(report.failures), report.summary()
    message = report.failures["build"]
    assert "mask 'causal_twice' of plugin longca_wrong_plugins ((not installed))" in message, message
    assert "both contain the pair (query 0, key 0); slices must be disjoint" in message, message


def test_mask_is_validated_when_a_run_builds_it(wrong_registry):
    with pytest.raises(plugin.LongcaError, match="mask 'causal_twice' of plugin longca_wrong_plugins.*disjoint"):
        testing.build_mask("causal_twice", 256, registry=wrong_registry)
    with pytest.raises(ValueError, match="slice 0 .* has type 7"):
        plugin.Mask("bad", 16, {}, plugin.slices_array([(0, 16, 0, 16, 7)]))
    with pytest.raises(ValueError, match="ranges outside"):
        plugin.Mask("bad", 16, {}, plugin.slices_array([(8, 4, 0, 16, plugin.FULL)]))


def test_sampler_whose_lengths_do_not_sum_to_the_total(wrong_registry):
    report = check_sampler("short_by_one", wrong_registry)
    assert set(report.failures) == {"sums"}, report.summary()
    assert "they must sum to the 7 tokens asked for" in report.failures["sums"] or \
        "summing to" in report.failures["sums"], report.failures["sums"]


@pytest.mark.slow  # spawns 2 gloo ranks
def test_strategy_dropping_a_ranks_keys(wrong_registry):
    report = check_strategy("drops_last_rank_keys", wrong_registry, world_sizes=(2,), plugin_modules=(WRONG_MODULE,))
    assert set(report.failures) == {"world-2"}, report.summary()
    message = report.failures["world-2"]
    assert "mask causal at 2 ranks: relative errors" in message, message
    assert "no gradient reaches keys 256..511 (held by rank 1): no query attends them" in message, message


def test_above_the_full_check_size_a_spot_check_still_catches_it(registry, monkeypatch):
    """Where the whole reference is too costly, "auto" checks the forward on query windows: the
    kernel wrong past row 256 is incorrect there too, and its row says checked "spot"."""
    from longca.problem import Problem
    from longca_runner import measure

    _add(registry, "kernels", _reference_kernel("wrong_after_256_spot", run=_right_only_on_first_256_rows,
                                                forward_lse=None, backward_lse=None))
    monkeypatch.setitem(measure.FULL_CHECK_FLOPS, "cpu", 1e6)  # every case counts as large here
    problem = Problem(kernel="wrong_after_256_spot", mask="causal", seqlen=1024, heads_q=4, heads_kv=2,
                      head_dim=16, dtype="float32", direction="bwd")
    options = measure.RunOptions(warmup=0, repeat=1, samples=1, check="auto")
    row = measure.run_problem(problem, options, registry)
    assert row.checked == "spot" and row.status == "incorrect" and "out_rows" in row.rel_err_detail, row
    honest = measure.run_problem(problem.with_(kernel="reference"), options, registry)
    assert honest.checked == "spot" and honest.status == "ok" and honest.rel_err < 1e-5, honest
