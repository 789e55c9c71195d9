"""A library whose backward frees what its forward saved (TransformerEngine's fused attention: a second backward
of one forward fails): declared `backward_once`, each timed backward gets a fresh forward made outside the timed
region; undeclared, its bwd row is the library's error, never a lost sweep."""
from __future__ import annotations

import time
from dataclasses import replace

import pytest
import torch

from longca import reference
from longca.errors import UnsupportedError
from longca.plugins import PluginInfo, load_registry
from longca.problem import Problem
from longca_runner import timing
from longca_runner.measure import RunOptions, run_problem
from longca_runner.measure.step import make_step

CASE = dict(mask="causal", seqlen=128, heads_q=2, heads_kv=2, head_dim=16, dtype="float32", device="cpu",
            direction="bwd")
FORWARD_S = 0.05  # the forward's cost: a timed backward that included it would take at least this


class _OneBackward(torch.autograd.Function):
    """The identity; its backward drops the forward's state, as TE's FusedAttnFunc sets ctx.backward_objects = None."""

    @staticmethod
    def forward(ctx, x):
        ctx.state = "saved"
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.state is None:
            raise AttributeError("'NoneType' object has no attribute 'grad_output'")
        ctx.state = None
        return grad


def _slow_once(mask, q, k, v):
    time.sleep(FORWARD_S)
    return reference.attention(_OneBackward.apply(q), k, v, mask)


def _registry(backward_once: bool):
    registry = load_registry()
    spec = replace(registry.kernel("reference"), name="once", run=_slow_once, backward_once=backward_once,
                   description="the reference behind a backward that runs once per forward")
    registry.entries["kernels"].pop("once", None)
    registry._add("kernels", spec, PluginInfo("once", "longca-plugin-test", "0", "tests"))
    return registry


def test_undeclared_the_bwd_row_is_the_librarys_error():
    row = run_problem(Problem(kernel="once", **CASE), RunOptions(warmup=0, repeat=3, check=False),
                      registry=_registry(False))
    assert row.status == "error" and "grad_output" in row.reason


def test_declared_each_backward_gets_a_fresh_untimed_forward_and_is_checked():
    row = run_problem(Problem(kernel="once", **CASE), RunOptions(warmup=1, repeat=5, check=True),
                      registry=_registry(True))
    assert row.status == "ok" and row.checked == "full" and row.rel_err < 1e-5
    assert row.ms_median < FORWARD_S * 1e3 / 2  # the 50 ms forward ran outside every timed call
    assert row.bitwise_repeatable is True


def test_the_timers_run_the_fresh_forward_outside_the_timed_call():
    q, k, v = (torch.randn(1, 64, 2, 16, requires_grad=True) for _ in range(3))
    made = []

    def call():
        made.append(1)
        time.sleep(FORWARD_S)
        return _OneBackward.apply(q) * 1.0 + k + v

    step = make_step(call, (q, k, v), "bwd", torch.ones(1, 64, 2, 16), fresh_forward=True)
    assert max(timing.time_ms(step, torch.device("cpu"), warmup=1, repeat=3)) < FORWARD_S * 1e3 / 2
    assert len(made) == 4  # one forward for the warm-up (made in the call), one before each timed call
    both = timing.time_interleaved({"a": step, "b": make_step(call, (q, k, v), "bwd", torch.ones(1, 64, 2, 16),
                                                              fresh_forward=True)}, torch.device("cpu"), 1, 2)
    assert max(max(t) for t in both.values()) < FORWARD_S * 1e3 / 2
    with pytest.raises(UnsupportedError, match="runs once per forward"):
        timing.time_graph_ms(step, torch.device("cpu"))
