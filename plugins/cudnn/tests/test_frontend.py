"""The cuDNN frontend path on a CPU: its pure logic, its refusals, and the whole path end to end
with `emulated.EmulatedGraphs` (cuDNN's documented SDPA semantics in float32) against
`longca.reference`. The cuDNN API calls themselves only run in test_frontend_gpu.py."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from longca import plugin
from longca.plugin import (
    STATIC_MASKS,
    Problem,
    get_registry,
    make_inputs,
    problem_mask,
    reference_attention,
    reference_backward_lse,
    reference_forward_lse,
)
from longca_flashplan.plugin import CallArgs, flash_plan_for, lse_primitives, plan_reason, window_slices
from longca_plugin_cudnn import frontend, hooks
from longca_plugin_cudnn.emulated import EmulatedGraphs, band_mask
from longca_plugin_cudnn.frontend import FrontendAdapter, Ragged, RaggedLayout, band_ok, band_settings, cudnn_bounds
from longca_testing import assert_close, compare_primitives, rel_err

pytestmark = pytest.mark.numerics  # float results: CI runs these again under another ATEN_CPU_CAPABILITY

# small windows, so that the window masks are not full at these lengths
MASK_PARAMS = {"sliding_window": {"window": 100}, "sliding_window_causal": {"window": 100},
               "global_sliding_window": {"window": 60, "global_tokens": 40}}


def _problem(mask: str, **kw) -> Problem:
    seqlen = 1024 if mask == "block_causal_document" else 512
    fields = dict(kernel="cudnn", mask=mask, seqlen=seqlen, heads_q=4, heads_kv=2, head_dim=16, batch=2,
                  dtype="float32", direction="bwd", mask_params=MASK_PARAMS.get(mask, {}))
    return Problem(**{**fields, **kw})


def test_bounds_from_windows():
    assert cudnn_bounds(-1, -1) == (None, None)
    assert cudnn_bounds(-1, 0) == (None, 0)  # causal
    assert cudnn_bounds(100, 0) == (101, 0)  # cuDNN's left bound is exclusive: 100 keys back + the diagonal
    assert cudnn_bounds(100, 7) == (101, 7)
    assert band_settings(-1, 0, square=True) == (True, None, 0)
    assert band_settings(-1, 0, square=False) == (False, None, 0)  # bottom-right, per sequence
    assert band_settings(-1, -1, square=False) == (True, None, None)  # no band: alignment does not matter
    with pytest.raises(ValueError):
        cudnn_bounds(-3, 0)


def test_band_ok():
    assert band_ok(10, 10, -1, -1) and band_ok(30, 10, -1, -1)  # full rectangles, any shape
    assert band_ok(10, 30, -1, 0) and band_ok(10, 30, 5, 3)  # bottom-right bands with Lq <= Lk
    assert not band_ok(30, 10, 5, 0)  # a band with more queries than keys needs padding: the planner cuts it
    assert not band_ok(10, 10, -2, 0) and not band_ok(10, 10, 3, -5)  # no cuDNN band for these


@pytest.mark.parametrize("len_q,len_k", [(7, 7), (5, 13), (13, 13), (1, 9)])
def test_cudnn_band_is_the_flashattention_window(len_q, len_k):
    """cuDNN's band (bounds, alignment) keeps exactly the pairs of FlashAttention's window."""
    for left in (-1, 0, 1, 3, 20):
        for right in (-1, 0, 1, 4):
            if not band_ok(len_q, len_k, left, right):
                continue
            want = plugin.dense(window_slices(len_q, len_k, left, right), (0, len_q), (0, len_k))
            got = band_mask(len_q, len_k, *band_settings(left, right, len_q == len_k)).numpy()
            assert np.array_equal(got, want), (len_q, len_k, left, right)


def test_ragged_offsets_and_stats_rows():
    r = Ragged(np.array([0, 3, 5, 9]), np.array([0, 3, 7, 9]))
    assert r.lens_q.tolist() == [3, 2, 4] and r.lens_kv.tolist() == [3, 4, 2] and not r.square
    assert r.offsets(r.cu_q, 2, 8).tolist() == [0, 48, 80, 144]  # elements of a packed (tokens, 2, 8) tensor
    seq, pos = r.rows()
    assert seq.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2] and pos.tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3]
    assert Ragged(np.array([0, 4, 6]), np.array([0, 4, 6])).square


def test_ragged_layout_tensors_and_lse_round_trip():
    cu_q, cu_k = torch.tensor([0, 3, 5, 9], dtype=torch.int32), torch.tensor([0, 3, 7, 9], dtype=torch.int32)
    args = CallArgs(varlen=True, left=-1, right=0, cu_q=cu_q, cu_k=cu_k, max_q=4, max_k=4)
    layout = RaggedLayout(args, torch.zeros(9, 4, 8), torch.zeros(9, 2, 8))
    b = layout.buffers
    assert b["seq_len_q"].shape == (3, 1, 1, 1) and b["seq_len_q"].dtype == torch.int32
    assert b["offset_q"].view(-1).tolist() == [0, 96, 160, 288] and b["offset_q"].dtype == torch.int64
    assert b["offset_kv"].view(-1).tolist() == [0, 48, 112, 144]
    assert (layout.batch, layout.seqlen_q, layout.total_q, layout.square) == (3, 4, 9, False)
    lse = torch.randn(4, 9)
    stats = layout.stats(lse)
    assert stats.shape == (3, 4, 4, 1) and stats[1, 2, 1, 0] == lse[2, 4] and stats[1, :, 2:].abs().sum() == 0
    assert torch.equal(layout.lse(stats), lse)
    assert layout.strides("k", torch.zeros(9, 2, 8)) == (4 * 2 * 8, 8, 2 * 8, 1)


@pytest.mark.parametrize("mask", STATIC_MASKS)
def test_every_static_mask_plans_into_cudnn_bands(mask):
    problem = _problem(mask, seqlen=4096 if mask == "block_causal_document" else 2048, mask_params={})
    assert plan_reason(problem, problem_mask(problem), band_ok) is None
    assert mask in get_registry().claimed_masks(hooks.masks_for("frontend"))


def test_supports_with_the_frontend(monkeypatch):
    monkeypatch.setattr(hooks, "PATH", "frontend")
    monkeypatch.setattr(frontend, "frontend_reason", lambda: None)
    for mask in ("sliding_window", "global_sliding_window", "causal_document", "share_question"):
        assert hooks.supports(Problem(kernel="cudnn", mask=mask, seqlen=2048, direction="bwd")) is None
    gqa = Problem(kernel="cudnn", mask="causal", seqlen=2048, head_dim=64, heads_q=8, heads_kv=2)
    assert hooks.supports(gqa) is None
    assert "up to 128" in hooks.supports(Problem(kernel="cudnn", mask="causal", seqlen=2048, head_dim=256))
    assert "multiples of 8" in hooks.supports(Problem(kernel="cudnn", mask="causal", seqlen=2048, head_dim=60))
    monkeypatch.setattr(frontend, "frontend_reason", lambda: "cannot import the cuDNN frontend (x)")
    assert hooks.supports(Problem(kernel="cudnn", mask="causal", seqlen=2048)) == "cannot import the cuDNN frontend (x)"


def test_frontend_reason_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only answer")
    frontend.frontend_reason.cache_clear()
    assert "CUDA GPU" in frontend.frontend_reason()


@pytest.mark.parametrize("mask", STATIC_MASKS)
def test_emulated_frontend_matches_reference(mask):
    """Forward and backward of every static mask, GQA, batch 2: graphs are all built in prepare."""
    problem = _problem(mask)
    m = problem_mask(problem)
    q, k, v = make_inputs(problem, requires_grad=True)
    engine = EmulatedGraphs()
    prepared = frontend.prepare(problem, m, q, k, v, engine=engine)
    built = engine.builds
    assert 0 < built <= 2 * len(prepared.ex.calls)  # one forward and one backward graph per call, or shared
    dout = torch.randn_like(q)
    for _ in range(2):
        out = frontend.run(prepared, q, k, v)
        grads = torch.autograd.grad(out, (q, k, v), dout)
    assert engine.builds == built and engine.executions == 2 * 2 * len(prepared.ex.calls)
    ref = reference_attention(q, k, v, m)
    want = torch.autograd.grad(ref, (q, k, v), dout)
    assert rel_err(out, ref) < 1e-5
    for got, w in zip(grads, want, strict=False):
        assert rel_err(got, w) < 1e-5


def test_emulated_forward_only_builds_no_backward_graph():
    problem = _problem("causal_document", direction="fwd")
    q, k, v = make_inputs(problem)
    engine = EmulatedGraphs()
    frontend.prepare(problem, problem_mask(problem), q, k, v, engine=engine)
    assert engine.builds == 1 and not any(s.backward for s in engine.built)


def test_emulated_graph_specs():
    """What reaches cuDNN: ragged documents with padding, a band for windows, dense views' strides."""
    problem = _problem("global_sliding_window", direction="fwd", heads_q=4, heads_kv=4)
    q, k, v = make_inputs(problem)
    engine = EmulatedGraphs()
    frontend.prepare(problem, problem_mask(problem), q, k, v, engine=engine)
    specs = sorted(engine.built, key=lambda s: s.ragged)
    window, globals_ = specs
    assert not window.ragged and (window.top_left, window.left_bound, window.right_bound) == (True, 61, 60)
    assert window.stride("q") == (512 * 4 * 16, 16, 4 * 16, 1)  # a slice of the (2, 512, 4, 16) tensor
    assert window.stride("o") == (window.seqlen_q * 4 * 16, 16, 4 * 16, 1)  # a new contiguous output
    assert globals_.ragged and globals_.left_bound is None and globals_.right_bound is None
    assert globals_.batch == 2 * 2 and globals_.total_q == 2 * 512  # two rectangles per sequence, batch 2


@pytest.mark.parametrize("mask", ["causal_document", "share_question", "sliding_window_causal", "global_sliding_window",
                                  "prefix_lm_causal"])
def test_emulated_lse_primitives_on_crops(mask):
    """forward_lse / backward_lse as a context-parallel strategy calls them (ring block, all-gather rows)."""
    problem = _problem(mask, batch=1)
    m = problem_mask(problem)
    q, k, v = make_inputs(problem.with_(direction="fwd"))
    adapter = FrontendAdapter(EmulatedGraphs())
    forward_lse, backward_lse = lse_primitives(lambda: adapter)
    spec = SimpleNamespace(forward_lse=forward_lse, backward_lse=backward_lse)
    assert compare_primitives(spec, q, k, v, m, 1e-4, backward=False) == []
    assert compare_primitives(spec, q, k, v, m, 1e-4, backward=True) == []


@pytest.mark.parametrize("mask,params", [("sliding_window", {"window": 70}), ("sliding_window_causal", {"window": 70}),
                                         ("global_sliding_window", {"window": 50, "global_tokens": 30}),
                                         ("causal_blockwise", {}), ("prefix_lm_document", {})])
def test_emulated_lse_primitives_on_random_crops(mask, params):
    """Any crop plans into cuDNN bands (bounded rectangles with more queries than keys are cut)."""
    m = problem_mask(Problem(kernel="cudnn", mask=mask, seqlen=384, mask_params=params))
    forward_lse, backward_lse = lse_primitives(lambda: FrontendAdapter(EmulatedGraphs()))
    rng = np.random.default_rng(1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(8):
        (a, b), (c, d) = np.sort(rng.integers(0, 385, 2)), np.sort(rng.integers(0, 385, 2))
        slices = m.crop((a, b), (c, d))
        if b - a < 2 or d - c < 2 or not len(slices):
            continue
        q, k, v = (torch.randn(1, n, h, 16, generator=gen) for n, h in ((b - a, 4), (d - c, 2), (d - c, 2)))
        out, lse = forward_lse(q, k, v, slices)
        want, want_lse = reference_forward_lse(q, k, v, slices)
        assert rel_err(out, want) < 1e-5
        assert_close(lse, want_lse, 1e-5, "lse")  # -inf rows must match exactly
        dout = torch.randn(out.shape, generator=gen)
        got = backward_lse(dout, q, k, v, want, want_lse, slices)
        for g, w in zip(got, reference_backward_lse(dout, q, k, v, want, want_lse, slices), strict=False):
            assert rel_err(g, w) < 1e-5


def test_cudnn_version_reason():
    assert frontend.cudnn_version_reason(91900) is None and frontend.cudnn_version_reason(91002) is None
    assert "9.6" in frontend.cudnn_version_reason(90500)
    assert "9.10.2" in frontend.cudnn_version_reason(91000) and "9.10.2" in frontend.cudnn_version_reason(91001)


def _one_pair_spec_and_buffers(ragged: bool, gen):
    """A backward spec of 3 one-query one-key sequences (GQA 4:2) and its buffers, as the adapter passes them."""
    n, hq, hk, d = 3, 4, 2, 8
    if ragged:
        q, o, do = (torch.randn(n, hq, d, generator=gen) for _ in range(3))
        k, v = (torch.randn(n, hk, d, generator=gen) for _ in range(2))
        cu = torch.arange(n + 1, dtype=torch.int32)
        layout = RaggedLayout(CallArgs(varlen=True, left=-1, right=0, cu_q=cu, cu_k=cu, max_q=1, max_k=1), q, k)
    else:  # slices of longer sequences keep the full tensors' strides
        q, o, do = (torch.randn(n, 5, hq, d, generator=gen)[:, 2:3] for _ in range(3))
        k, v = (torch.randn(n, 6, hk, d, generator=gen)[:, 4:5] for _ in range(2))
        layout = frontend.DenseLayout(q, k)
    args = CallArgs(varlen=ragged, left=-1, right=0, scale=0.3)
    spec = frontend.graph_spec(True, args, layout, q=q, k=k, v=v, o=o, dO=do)
    lse = torch.randn(hq, n, generator=gen) if ragged else torch.randn(n, hq, 1, generator=gen)
    buffers = dict(q=q, k=k, v=v, o=o, dO=do, stats=layout.stats(lse.float()), **layout.buffers)
    return spec, buffers


@pytest.mark.parametrize("ragged", [False, True])
def test_one_pair_backward_runs_without_a_graph(ragged):
    """cuDNN's sdpa_backward refuses s_q = s_kv = 1: CudnnGraphs computes it in torch (no cudnn import)."""
    from longca_plugin_cudnn.graphs import CudnnGraphs

    spec, buffers = _one_pair_spec_and_buffers(ragged, torch.Generator().manual_seed(0))
    assert spec.backward and spec.one_pair
    grads = (("dQ", "q"), ("dK", "k"), ("dV", "v"))
    got, want = ({**buffers, **{r: torch.full(buffers[x].shape, float("nan")) for r, x in grads}}
                 for _ in range(2))
    engine = CudnnGraphs()
    engine.build(spec, "cpu")
    engine.execute(spec, got)
    EmulatedGraphs().execute(spec, want)
    assert engine.builds == 0
    for role in ("dQ", "dK", "dV"):
        assert_close(got[role], want[role], 1e-5, role)


def test_a_crop_can_need_a_one_pair_backward():
    """A 27 x 18 crop of sliding_window_causal whose diagonal touches a corner plans a 1 x 1 causal square."""
    m = problem_mask(Problem(kernel="cudnn", mask="sliding_window_causal", seqlen=384, mask_params={"window": 70}))
    engine = EmulatedGraphs()
    forward_lse, backward_lse = lse_primitives(lambda: FrontendAdapter(engine))
    slices = m.crop((291, 318), (317, 335))
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, n, h, 16, generator=gen) for n, h in ((27, 4), (18, 2), (18, 2)))
    out, lse = forward_lse(q, k, v, slices)
    backward_lse(torch.randn(out.shape, generator=gen), q, k, v, out, lse, slices)
    assert any(s.backward and s.one_pair for s in engine.built)


def _sinks_run(problem: Problem, engine: EmulatedGraphs):
    """(prepared, got, want): out and the gradients of q, k, v and the sinks, the frontend's and the reference's;
    every graph built in prepare, none in the run."""
    m = problem_mask(problem)
    q, k, v = make_inputs(problem, requires_grad=True)
    sinks = torch.randn(problem.heads_q, generator=torch.Generator().manual_seed(5), requires_grad=True)
    prepared = frontend.prepare(problem, m, q, k, v, engine=engine)
    built = engine.builds
    dout = torch.randn_like(q)
    results = []
    for out in (hooks.frontend_run(prepared, q, k, v, sinks=sinks), reference_attention(q, k, v, m, sinks=sinks)):
        results.append((out, *torch.autograd.grad(out, (q, k, v, sinks), dout)))
    assert engine.builds == built
    return prepared, *results


@pytest.mark.parametrize("mask,version", [("causal", 91200), ("causal_document", 91900), ("share_question", 92600)])
def test_emulated_frontend_takes_sinks_through_the_lse(mask, version, monkeypatch):
    """Learnable sinks that cannot be fused (cuDNN < 9.13; a ragged backward before 9.26; several calls):
    the graphs' stats give the lse they enter through, forward and backward (the sinks' gradient too),
    against the reference with sinks; no sink graph is built, and rows say how and why (caveat)."""
    problem = _problem(mask, sinks=True)
    engine = EmulatedGraphs(version=version)
    prepared, got, want = _sinks_run(problem, engine)
    for g, w in zip(got, want, strict=True):
        assert rel_err(g, w) < 1e-5
    assert not prepared.adapter.fused_sinks and not any(s.sink for s in engine.built)
    monkeypatch.setattr(frontend, "backend_version", lambda: version)
    caveat = hooks.frontend_caveat(problem)
    assert caveat.startswith(hooks.SINKS_CAVEAT + ": ")
    assert {"causal": "9.13", "causal_document": "9.26", "share_question": "2 cuDNN calls"}[mask] in caveat
    assert hooks.frontend_caveat(problem.with_(sinks=False)) is None


@pytest.mark.parametrize("mask", ["causal", "full", "sliding_window", "causal_document"])
def test_emulated_frontend_fuses_sinks_into_one_call(mask, monkeypatch):
    """A plan of one call takes the sinks as cuDNN's fused sink_token (the stand-in poses as cuDNN 9.26):
    only sink graphs are built, in prepare, and executed (one forward, one backward: no graph of the lse
    path), forward and backward (dsinks from the dSink_token output) match the reference, and the row
    has no caveat."""
    problem = _problem(mask, sinks=True)
    engine = EmulatedGraphs(version=92600)
    prepared, got, want = _sinks_run(problem, engine)
    for g, w in zip(got, want, strict=True):
        assert rel_err(g, w) < 1e-5
    assert prepared.adapter.fused_sinks and engine.executions == 2
    assert {s.backward for s in engine.built} == {False, True} and all(s.sink for s in engine.built)
    monkeypatch.setattr(frontend, "backend_version", lambda: 92600)
    assert hooks.frontend_caveat(problem) is None


def test_the_dsink_buffer_is_zeroed_before_each_backward():
    """cuDNN may add into dSink_token (the stand-in does): the adapter zeroes it, so a reused buffer holding
    an earlier gradient gives the same result."""
    problem = _problem("causal", direction="fwd")
    q, k, v = make_inputs(problem)
    adapter = FrontendAdapter(EmulatedGraphs())
    args = CallArgs(varlen=False, left=-1, right=0, scale=0.25)
    sink = torch.randn(1, problem.heads_q, 1, 1)
    out, lse = adapter.fwd(q, k, v, args, sink=sink)
    dout, dsink = torch.randn_like(q), torch.full_like(sink, 7.0)
    first = [*adapter.bwd(dout, q, k, v, out, lse, args, sink=sink, dsink=dsink), dsink.clone()]
    second = [*adapter.bwd(dout, q, k, v, out, lse, args, sink=sink, dsink=dsink), dsink]
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    assert float(dsink.abs().sum()) > 0


def _exec_plan(mask: str, **kw):
    problem = _problem(mask, **kw)
    return flash_plan_for(FrontendAdapter(EmulatedGraphs()), problem_mask(problem), 1, 1.0, "cpu")


def test_unfused_sinks_reason():
    """Fused only where one call is the whole attention and this cuDNN takes a sink_token there."""
    reason = frontend.unfused_sinks_reason
    causal, document, shared = _exec_plan("causal"), _exec_plan("causal_document"), _exec_plan("share_question")
    for version in (None, 91300, 91900, 92600):
        assert reason(causal, "bwd", version) is None and reason(document, "fwd", version) is None
        assert "2 cuDNN calls, merged by their lse" in reason(shared, "fwd", version)
    assert "9.13" in reason(causal, "fwd", 91200) and "9.13" in reason(document, "fwd", 91200)
    for direction in ("bwd", "fwdbwd"):
        assert "needs cuDNN 9.26 or newer; this process loads 91900" in reason(document, direction, 91900)
        assert reason(document, direction, 92600) is None and reason(document, direction, None) is None
    assert "gathers" in reason(_exec_plan("causal_blockwise"), "fwd", 92600)  # one call, keys packed apart
    one_query = flash_plan_for(FrontendAdapter(), problem_mask(_problem("causal", seqlen=1)), 1, 1.0, "cpu")
    assert "s_q = 1" in reason(one_query, "fwd", 92600)


def test_the_caveat_follows_the_loaded_cudnn(monkeypatch):
    """A row's caveat is asked after it ran, in the same process: the plan and the loaded cuDNN decide."""
    problem = _problem("causal_document", sinks=True)
    for version, fused in ((None, True), (91200, False), (91900, False), (92600, True)):
        monkeypatch.setattr(frontend, "backend_version", lambda v=version: v)
        assert (hooks.frontend_caveat(problem) is None) == fused, version
        assert hooks.frontend_caveat(problem.with_(direction="fwd")) is None or version == 91200
