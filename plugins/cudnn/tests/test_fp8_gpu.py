"""cuDNN FP8 attention through the plugin on a GPU (`pytest -m longca_gpu`): sdpa_fp8 forward and
sdpa_fp8_backward on full and causal, against the float32 reference on the bfloat16 inputs at the FP8
tolerance; deterministic backward; refusals of what the FP8 path does not take. Skipped without a
CUDA GPU, without nvidia-cudnn-frontend (or on its torch path), or with a cuDNN older than 9.14."""
from __future__ import annotations

import pytest
import torch

from longca.plugin import Problem
from longca_plugin_cudnn import fp8, frontend, hooks
from longca_testing import RunOptions, run_problem, tolerance_for

pytestmark = [pytest.mark.longca_gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _problem(**kw) -> Problem:
    if hooks.PATH != "frontend" or frontend.frontend_reason():
        pytest.skip("the cudnn plugin's frontend path cannot run here")
    fields = dict(kernel="cudnn", mask="causal", seqlen=2048, heads_q=8, heads_kv=2, head_dim=128,
                  dtype="float8_e4m3fn", direction="fwd", device="cuda", seed=3)
    problem = Problem(**{**fields, **kw})
    reason = fp8.fp8_reason(problem)
    if reason and "needs cuDNN" in reason:
        pytest.skip(reason)
    return problem


@pytest.mark.parametrize("direction", ("fwd", "bwd"))
@pytest.mark.parametrize("mask", fp8.FP8_MASKS)
@pytest.mark.parametrize("dims", ((128, None), (64, None), (192, 128)))
def test_fp8_matches_reference_within_the_fp8_tolerance(mask, direction, dims):
    problem = _problem(mask=mask, direction=direction, head_dim=dims[0], head_dim_v=dims[1])
    hopper_refusal = fp8._hopper_backward_reason(problem)
    if hopper_refusal:  # measured: cuDNN 9.19 declines these graphs on the H200
        assert "head dim 128 only" in hooks.supports(problem)
        return
    row = run_problem(problem, RunOptions(warmup=1, repeat=2, samples=1, check=True))
    assert row["status"] == "ok", (row["status"], row["reason"], row.get("rel_err_detail"))
    assert row["rel_err"] < tolerance_for(problem)
    assert row["rel_err"] > 0.01  # FP8 inputs cannot match the bf16 reference to bf16 precision: FP8 really ran


def test_fp8_e5m2_forward_and_deterministic_backward():
    row = run_problem(_problem(dtype="float8_e5m2"), RunOptions(warmup=1, repeat=2, samples=1, check=True))
    assert row["status"] == "ok", row["reason"]
    det = _problem(direction="bwd", deterministic=True)
    rows = [run_problem(det, RunOptions(warmup=0, repeat=1, samples=1, check=True)) for _ in range(2)]
    assert all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    assert rows[0]["rel_err_detail"] == rows[1]["rel_err_detail"]  # the same gradients, bit for bit


def test_fp8_refusals():
    assert "masks full, causal only" in hooks.supports(_problem(mask="causal_document"))
    assert "e5m2 runs forward only" in hooks.supports(_problem(dtype="float8_e5m2", direction="bwd"))
    assert "head dims" in hooks.supports(_problem(head_dim=96))
