"""CPU tests of the flashmask kernels in Triton's interpreter, at small sizes.

The full conformance suite is too slow in the interpreter (about 30 s per mask on two cores),
so it runs on a GPU (`test_flashmask_gpu.py`); here every static mask is checked forward and
backward against `longca.reference` on tiles small enough to mix skipped, partial and full
tiles, plus the plan's classification, the CP primitives with Sq != Sk and empty rows, and a
few conformance cases through `run_problem`.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from longca import plugin  # noqa: E402
from longca.plugin import (
    STATIC_MASKS,
    Problem,
    problem_mask,
    reference_attention,
    reference_backward_lse,
    reference_forward_lse,
)
from longca_plugin_flashmask import hooks  # noqa: E402
from longca_plugin_flashmask.attention import attention, backward_lse, forward_lse  # noqa: E402
from longca_plugin_flashmask.plan import FULL, SKIP, classify, make_plan  # noqa: E402
from longca_testing import assert_close, rel_err

pytestmark = pytest.mark.numerics  # float results: CI runs these again under another ATEN_CPU_CAPABILITY

if not hooks.interpreting():
    pytest.skip("Triton's interpreter is off (conftest.py sets TRITON_INTERPRET=1 only without a GPU)",
                allow_module_level=True)
if hooks.interpreter_problem():
    pytest.skip(hooks.interpreter_problem(), allow_module_level=True)

S = 128
TOL = 1e-2


def small_slices(name: str, seqlen: int = S) -> np.ndarray:
    """The mask's slices at a small length; block_causal_document with blocks of 32, not 1024."""
    if name == "block_causal_document":
        out = []
        for a, b in ((0, 64), (64, seqlen)):
            out += [(c, c + 32, a, c + 32, plugin.FULL) for c in range(a, b, 32)]
        return plugin.slices_array(out)
    params = {"window": 24} if "window" in name else {}
    if name == "global_sliding_window":
        params["global_tokens"] = 8
    problem = Problem(kernel="reference", mask=name, seqlen=seqlen, sampler="uniform",
                      sampler_params={"min_len": 16, "max_len": 64}, mask_params=params)
    return problem_mask(problem).slices


def inputs(batch, sq, sk, hq, hkv, dim, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, sq, hq, dim, generator=gen).to(dtype)
    k = torch.randn(batch, sk, hkv, dim, generator=gen).to(dtype)
    v = torch.randn(batch, sk, hkv, dim, generator=gen).to(dtype)
    return q, k, v


def compare(slices, q, k, v, sq, sk):
    """Relative errors of out, dq, dk, dv against the float32 reference."""
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    plan = make_plan(plugin.flashmask_bounds(slices, sq, sk), sq, sk, q.device)
    out = attention(q, k, v, plan)
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), dout)
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = reference_attention(qf, kf, vf, slices)
    want = torch.autograd.grad(ref, (qf, kf, vf), dout.float())
    return {"out": rel_err(out, ref), **{f"d{n}": rel_err(g, w) for n, g, w in zip("qkv", got, want, strict=False)}}


@pytest.mark.parametrize("name", STATIC_MASKS)
def test_mask_forward_backward(name):
    slices = small_slices(name)
    errors = compare(slices, *inputs(1, S, S, 2, 1, 64, torch.bfloat16), S, S)
    assert max(errors.values()) < TOL, errors


def test_fp16_batch_two_ragged_length():
    """fp16, batch 2, a length that is not a multiple of the tiles, MHA, head_dim 128."""
    n = 100
    slices = plugin.slices_array([(0, 40, 0, 40, plugin.CAUSAL), (40, n, 0, 40, plugin.FULL),
                                  (40, n, 40, n, plugin.CAUSAL)])
    errors = compare(slices, *inputs(2, n, n, 2, 2, 128, torch.float16, seed=1), n, n)
    assert max(errors.values()) < TOL, errors


def test_head_minor_backward_order():
    """The dK/dV loop order used on the H200 (the heads of a query block back to back), GQA 4:1."""
    from longca_plugin_flashmask import configs

    with configs.override(dkv_head_minor=1):
        errors = compare(small_slices("prefix_lm_document"), *inputs(1, S, S, 4, 1, 64, torch.bfloat16, 3), S, S)
    assert max(errors.values()) < TOL, errors


@pytest.fixture
def fused(monkeypatch):
    """The fused backward (dQ by atomics in the dK/dV pass), with the split path's dQ kernel gone,
    so a test that passes cannot have run it."""
    from longca_plugin_flashmask import configs, kernels

    def no_dq_kernel(*args, **kwargs):
        raise AssertionError("the fused backward launched the separate dQ kernel")

    monkeypatch.setattr(kernels, "bwd_dq_kernel", no_dq_kernel)
    with configs.override(bwd_fused=1):
        yield


@pytest.mark.parametrize("name", STATIC_MASKS)
def test_fused_backward(name, fused):
    """Every static mask through the fused backward, GQA 2:1 (two query heads add to each dK/dV;
    several KV heads: the CP test below)."""
    errors = compare(small_slices(name), *inputs(1, S, S, 2, 1, 64, torch.bfloat16, seed=4), S, S)
    assert max(errors.values()) < TOL, errors


@pytest.mark.parametrize(("head_minor", "rotate"), ((0, 1), (1, 0)))
def test_fused_backward_ragged_gqa(head_minor, rotate, fused):
    """Fused: fp16, batch 2, a ragged length (masked atomics on the tail rows), GQA 4:1, both loop
    orders, walks rotated or not."""
    from longca_plugin_flashmask import configs

    n = 100
    slices = plugin.slices_array([(0, 40, 0, 40, plugin.CAUSAL), (40, n, 0, 40, plugin.FULL),
                                  (40, n, 40, n, plugin.CAUSAL)])
    with configs.override(dkv_head_minor=head_minor, fused_rotate=rotate):
        errors = compare(slices, *inputs(2, n, n, 4, 1, 64, torch.float16, seed=5), n, n)
    assert max(errors.values()) < TOL, errors


def test_fused_cp_primitive_empty_rows(fused):
    """backward_lse through the fused path on a crop with Sq != Sk and rows that see nothing (dQ 0)."""
    part = plugin.crop(small_slices("causal_document", 192), (64, 160), (0, 128), relative=True)
    empty = plugin.slices_array([s for s in plugin.crop(part, (0, 96), (0, 128), relative=True).tolist() if s[0] >= 16])
    q, k, v = inputs(1, 96, 128, 4, 2, 64, torch.bfloat16, seed=6)
    out, lse = reference_forward_lse(q, k, v, empty)
    dout = torch.randn_like(out)
    got = backward_lse(dout, q, k, v, out, lse, empty)
    want = reference_backward_lse(dout, q, k, v, out, lse, empty)
    assert got[0][:, :16].abs().max() == 0
    for g, w in zip(got, want, strict=False):
        assert rel_err(g, w) < TOL


def test_fused_tma_refused_in_interpreter(fused):
    """TMA reductions exist only on the GPU: asked for in the interpreter, one clear error, no silent fallback."""
    from longca_plugin_flashmask import configs

    with configs.override(fused_tma=1), pytest.raises(RuntimeError, match="compute capability >= 9.0"):
        compare(small_slices("causal"), *inputs(1, S, S, 2, 1, 64, torch.bfloat16), S, S)


def test_backward_mode_from_environment(monkeypatch):
    from longca_plugin_flashmask import configs

    monkeypatch.delenv(configs.ENV_BWD, raising=False)
    assert configs.config(128, "cuda", 16384).bwd_fused == configs.GPU[128].bwd_fused
    monkeypatch.setenv(configs.ENV_BWD, "fused")
    assert configs.config(128, "cuda", 16384).bwd_fused == 1
    assert configs.config(64, "interpreter", 128).bwd_fused == 1
    with configs.override(bwd_fused=0):  # a tuning script's override wins over the environment
        assert configs.config(128, "cuda", 16384).bwd_fused == 0
    monkeypatch.setenv(configs.ENV_BWD, "Split")
    assert configs.config(128, "cuda", 16384).bwd_fused == 0
    monkeypatch.setenv(configs.ENV_BWD, "atomic")
    with pytest.raises(ValueError, match="LONGCA_FLASHMASK_BWD='atomic': expected one of split, fused"):
        configs.config(128, "cuda", 16384)


def test_plan_classification_is_exact():
    """Skipped tiles are exactly the empty ones and full tiles exactly the unmasked ones."""
    for name in STATIC_MASKS:
        slices = small_slices(name, 512)
        plan = make_plan(plugin.flashmask_bounds(slices, 512, 512), 512, 512, "cpu")
        for bm, bn in ((32, 32), (64, 32), (32, 64)):
            cls = classify(plan, bm, bn).numpy()
            exact = plugin.block_map(slices, 512, 512, bm, bn)
            dense = plugin.dense(slices, (0, 512), (0, 512)).reshape(512 // bm, bm, 512 // bn, bn)
            assert np.array_equal(cls == SKIP, ~dense.any(axis=(1, 3))), name
            assert np.array_equal(cls == FULL, dense.all(axis=(1, 3))), name
            assert ((cls != FULL) | (exact != plugin.PARTIAL)).all(), name


def test_plan_lists_cover_every_tile():
    slices = small_slices("share_question", 256)
    plan = make_plan(plugin.flashmask_bounds(slices, 256, 256), 256, 256, "cpu")
    cls = classify(plan, 32, 64)
    tiles = plan.tiles("rows", 32, 64)
    for i in range(cls.shape[0]):
        for phase, kind in ((0, 1), (1, FULL)):
            listed = tiles.idx[i, phase, :tiles.cnt[i, phase]].tolist()
            assert listed == torch.nonzero(cls[i] == kind).flatten().tolist()
    cost = tiles.cnt[:, 0] + tiles.cnt[:, 1]
    assert (cost[tiles.order.long()].diff() <= 1).all()  # heaviest first, up to the partial weight


def test_cp_primitives_rectangular_and_empty_rows():
    """forward_lse / backward_lse on a crop (Sq != Sk) with rows that see nothing."""
    whole = small_slices("causal_document", 192)
    part = plugin.crop(whole, (64, 160), (0, 128), relative=True)
    part = plugin.crop(part, (0, 96), (0, 128), relative=True)
    sq, sk = 96, 128
    q, k, v = inputs(1, sq, sk, 4, 2, 64, torch.bfloat16, seed=2)
    empty = plugin.slices_array([s for s in part.tolist() if s[0] >= 16])  # rows 0..15 see nothing
    out, lse = forward_lse(q, k, v, empty)
    ref_out, ref_lse = reference_forward_lse(q, k, v, empty)
    assert rel_err(out, ref_out) < TOL
    assert torch.isinf(ref_lse).any()
    assert_close(lse, ref_lse, 1e-4, "lse")  # float32 lse of bf16 inputs, both ways; -inf rows exactly
    assert out[:, :16].abs().max() == 0
    dout = torch.randn_like(out)
    got = backward_lse(dout, q, k, v, ref_out, ref_lse, empty)
    want = reference_backward_lse(dout, q, k, v, ref_out, ref_lse, empty)
    for g, w in zip(got, want, strict=False):
        assert rel_err(g, w) < TOL


@pytest.fixture
def interpreter_registry(monkeypatch):
    """A registry loaded with TRITON_INTERPRET=1, so the spec claims the CPU."""
    from longca.plugin import get_registry

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    yield get_registry(reload=True)
    get_registry(reload=True)


def test_some_conformance_cases(interpreter_registry):
    """A subset of longca's conformance suite (the rest is too slow in the interpreter)."""
    from longca_testing import Settings, conformance_cases

    always = {"registered", "spec", "available", "refusals-cpu"}
    some = ("mask-prefix_lm_causal-", "dtype-float16-")
    cases = [c for c in conformance_cases("flashmask", registry=interpreter_registry, devices=("cpu",),
                                          settings=Settings(seqlen=128))
             if c.id in always or c.id.startswith(some)]
    assert always <= {c.id for c in cases} and len(cases) > len(always)
    for case in cases:
        case.run(interpreter_registry)


def test_refusals_without_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    problem = Problem(kernel="flashmask", mask="causal", seqlen=128, device="cpu")
    assert "TRITON_INTERPRET" in hooks.supports(problem)
    assert hooks.devices() == ("cuda",)
    if not torch.cuda.is_available():
        assert "TRITON_INTERPRET" in hooks.available()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert hooks.devices() == ("cpu", "cuda") and hooks.supports(problem) is None
