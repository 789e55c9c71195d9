"""Backward rows say whether the step is bitwise repeatable: a deterministic flag asks, this checks."""
from __future__ import annotations

from dataclasses import replace

import torch

from longca import reference
from longca.plugins import PluginInfo, load_registry
from longca.problem import Problem
from longca_runner.measure import RunOptions, run_problem
from longca_runner.measure.repeatable import repeatability

CASE = dict(mask="causal", seqlen=128, heads_q=2, heads_kv=2, head_dim=16, dtype="float32", device="cpu")
RUN = RunOptions(warmup=0, repeat=5, check=False)


class _Atomics(torch.autograd.Function):
    """The identity forward; a backward whose last bits change from call to call, like atomics that add
    in another order: the gradient times (1 + a tiny random factor)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * (1 + 1e-6 * torch.rand((), dtype=grad.dtype))


def _registry_with(name: str, run):
    registry = load_registry()
    spec = replace(registry.kernel("reference"), name=name, run=run, description="reference, one change")
    registry.entries["kernels"].pop(name, None)
    registry._add("kernels", spec, PluginInfo(name, "longca-plugin-test", "0", "tests"))
    return registry


def test_the_reference_backward_is_bitwise_repeatable():
    row = run_problem(Problem(kernel="reference", direction="bwd", **CASE), RUN)
    assert row.status == "ok" and row.bitwise_repeatable is True and row.repeat_max_abs_diff == 0.0


def test_a_backward_that_changes_its_last_bits_is_not():
    registry = _registry_with("atomics", lambda mask, q, k, v: reference.attention(_Atomics.apply(q), k, v, mask))
    row = run_problem(Problem(kernel="atomics", direction="bwd", **CASE), RUN, registry=registry)
    assert row.bitwise_repeatable is False and 0 < row.repeat_max_abs_diff < 1e-3


def test_forward_rows_do_not_say():
    row = run_problem(Problem(kernel="reference", direction="fwd", **CASE), RUN)
    assert row.bitwise_repeatable is None and row.repeat_max_abs_diff is None


def test_repeatability_compares_every_result_with_the_first():
    values = iter([torch.ones(3), torch.ones(3), torch.tensor([1.0, 1.5, 1.0])])
    found = repeatability(lambda: next(values), calls=3)
    assert not found.bitwise and found.max_abs_diff == 0.5
    assert repeatability(lambda: torch.ones(2)).bitwise
