"""The cuDNN frontend path on a GPU (`pytest -m longca_gpu`): every mask it claims against
`longca.reference`, forward and backward, GQA, bf16 and fp16, head_dim 64 and 128; the lse; graphs
built in prepare and never in the timed call; learnable sinks, fused into cuDNN's graphs or through
the lse. Skipped without a CUDA GPU, without nvidia-cudnn-frontend, or when the plugin runs its
torch path (LONGCA_CUDNN_BACKEND=torch)."""
from __future__ import annotations

import pytest
import torch

from longca.plugin import STATIC_MASKS, Problem, make_inputs, problem_mask, reference_forward_lse
from longca_flashplan.plugin import flash_run_forward
from longca_plugin_cudnn import frontend, hooks
from longca_testing import RunOptions, rel_err, run_problem

pytestmark = [pytest.mark.longca_gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MASK_PARAMS = {"sliding_window": {"window": 256}, "sliding_window_causal": {"window": 256},
               "global_sliding_window": {"window": 256, "global_tokens": 128}}


def _need_frontend() -> None:
    if hooks.PATH != "frontend":
        pytest.skip("the cudnn plugin runs its torch path here (nvidia-cudnn-frontend missing or "
                    f"{frontend.ENV_BACKEND}=torch)")
    reason = frontend.frontend_reason()
    if reason:
        pytest.skip(reason)


def _problem(mask: str, **kw) -> Problem:
    fields = dict(kernel="cudnn", mask=mask, seqlen=4096 if mask == "block_causal_document" else 2048,
                  heads_q=8, heads_kv=2, head_dim=128, dtype="bfloat16", direction="bwd", device="cuda", seed=3,
                  mask_params=MASK_PARAMS.get(mask, {}))
    return Problem(**{**fields, **kw})


def _check(problem: Problem) -> None:
    row = run_problem(problem, RunOptions(warmup=1, repeat=2, samples=1, check=True))
    assert row["status"] == "ok", (row["status"], row["reason"], row.get("rel_err_detail"))
    assert "cudnn-frontend" in row["backend"]


@pytest.mark.parametrize("head_dim", (64, 128))
@pytest.mark.parametrize("mask", STATIC_MASKS)
def test_mask_matches_reference_bf16(mask, head_dim):
    _need_frontend()
    _check(_problem(mask, head_dim=head_dim))


@pytest.mark.parametrize("mask", ("causal", "causal_document", "sliding_window", "share_question", "causal_blockwise"))
def test_mask_matches_reference_fp16(mask):
    _need_frontend()
    _check(_problem(mask, dtype="float16"))


@pytest.mark.parametrize("mask", ("causal", "causal_document", "sliding_window_causal", "prefix_lm_causal"))
def test_lse_matches_reference(mask):
    """The stats come back as the executor's lse: natural log, one value per query row and head."""
    _need_frontend()
    problem = _problem(mask, direction="fwd")
    m = problem_mask(problem)
    q, k, v = make_inputs(problem)
    prepared = frontend.prepare(problem, m, q, k, v)
    out, lse = flash_run_forward(prepared.adapter, prepared.ex, q, k, v)
    want, want_lse = reference_forward_lse(q.float(), k.float(), v.float(), m.slices)
    assert rel_err(out, want) < 1e-2
    assert torch.allclose(lse, want_lse, atol=2e-2)


def test_graphs_are_built_in_prepare_only():
    _need_frontend()
    problem = _problem("causal_document")
    q, k, v = make_inputs(problem, requires_grad=True)
    prepared = frontend.prepare(problem, problem_mask(problem), q, k, v)
    built = prepared.adapter.engine.builds
    assert built >= 2  # a forward and a backward graph
    dout = torch.randn_like(q)
    for _ in range(3):
        torch.autograd.grad(frontend.run(prepared, q, k, v), (q, k, v), dout)
    torch.cuda.synchronize()
    assert prepared.adapter.engine.builds == built
    again = frontend.prepare(problem, problem_mask(problem), q, k, v)  # fresh inputs of the same shape and mask
    assert again.adapter.engine is prepared.adapter.engine and again.adapter.engine.builds == built


def test_a_fresh_prepare_is_not_slower_on_its_first_call():
    """A prepare of a configuration built before reuses its graphs: no first, slow execution of a
    fresh graph in the first call on fresh inputs (the kit's seen-vs-fresh check failed on the H200)."""
    _need_frontend()
    problem = _problem("causal_document", direction="fwd")
    m = problem_mask(problem)
    seen = make_inputs(problem)
    warm = frontend.prepare(problem, m, *seen)
    frontend.run(warm, *seen)

    def fastest(calls) -> float:
        times = []
        for call in calls:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return min(times)

    draws = [make_inputs(problem, i) for i in range(1, 6)]  # new values in new buffers, each prepared
    fresh = [(frontend.prepare(problem, m, *inputs), *inputs) for inputs in draws]
    first_calls = fastest([lambda f=f: frontend.run(*f) for f in fresh])
    assert first_calls < 3 * fastest([lambda: frontend.run(warm, *seen)] * 5)


@pytest.mark.parametrize("direction", ("fwd", "bwd"))
@pytest.mark.parametrize("mask", ("causal", "sliding_window", "causal_document"))
def test_sinks_match_reference(mask, direction):
    """Learnable sinks, dsinks checked too: cuDNN's fused sink_token where the plan is one call and this cuDNN
    takes it; the document backward goes through the lse before cuDNN 9.26 (the H200's is 9.19), and only
    such rows have a caveat. A wrong sign or scale of cuDNN's dSink_token fails the dsinks check."""
    _need_frontend()
    problem = _problem(mask, direction=direction, sinks=True)
    row = run_problem(problem, RunOptions(warmup=1, repeat=2, samples=1, check=True))
    assert row["status"] == "ok", (row["status"], row["reason"], row.get("rel_err_detail"))
    assert row["checked"] == "full" and ("dsinks" in row["rel_err_detail"]) == (direction == "bwd")
    version = frontend.backend_version()
    fused = version >= frontend.SINK_CUDNN and not (
        mask == "causal_document" and direction == "bwd" and version < frontend.RAGGED_SINK_BACKWARD_CUDNN)
    assert (hooks.frontend_caveat(problem) is None) == fused, hooks.frontend_caveat(problem)


def test_fused_sinks_build_sink_graphs_in_prepare_only():
    """A fused problem's graphs take the sink (a sink_token forward, a backward with dSink_token), all built in
    prepare; repeated backwards give the same dsinks (the buffer is zeroed before each)."""
    _need_frontend()
    if frontend.backend_version() < frontend.SINK_CUDNN:
        pytest.skip("cuDNN before 9.13 has no sink_token")
    problem = _problem("causal", sinks=True)
    q, k, v = make_inputs(problem, requires_grad=True)
    sinks = torch.randn(problem.heads_q, device="cuda", requires_grad=True)
    prepared = frontend.prepare(problem, problem_mask(problem), q, k, v)
    engine = prepared.adapter.engine
    assert prepared.adapter.fused_sinks
    mine = [s for s in engine.specs if s.sink and s.heads_q == problem.heads_q and s.seqlen_q == problem.seqlen]
    assert {s.backward for s in mine} == {False, True}
    built = engine.builds
    dout = torch.randn_like(q)
    dsinks = [torch.autograd.grad(frontend.run(prepared, q, k, v, sinks=sinks), (q, k, v, sinks), dout)[3]
              for _ in range(3)]
    torch.cuda.synchronize()
    assert engine.builds == built and float(dsinks[0].abs().sum()) > 0
    assert torch.allclose(dsinks[0], dsinks[2], rtol=1e-3, atol=1e-4)
