"""FlexAttention on a CPU: every static mask, forward, checked against the reference (eager flex)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from longca.plugin import STATIC_MASKS, Problem, problem_mask
from longca_plugin_flex.blockmask import block_mask_from_slices
from longca_testing import RunOptions, run_problem

pytestmark = pytest.mark.numerics  # float results: CI runs these again under another ATEN_CPU_CAPABILITY


def problem(mask: str, direction: str = "fwd") -> Problem:
    seqlen = 2048 if mask == "block_causal_document" else 256
    return Problem(kernel="flex", mask=mask, seqlen=seqlen, heads_q=4, heads_kv=2, head_dim=32, dtype="float32",
                   device="cpu", direction=direction, sampler="uniform",
                   sampler_params={"min_len": 16, "max_len": 128} if seqlen == 256 else {},
                   mask_params={"window": 40} if "window" in mask else {})


@pytest.mark.parametrize("mask", STATIC_MASKS)
def test_forward_matches_reference(mask):
    row = run_problem(problem(mask), RunOptions(warmup=0, repeat=1, samples=1, check=True))
    assert row["status"] == "ok", row["reason"]
    assert row["rel_err"] < 1e-5


def test_cpu_backward_is_unsupported_with_reason():
    row = run_problem(problem("causal", "bwd"), RunOptions(warmup=0, repeat=1, samples=1))
    assert row["status"] == "unsupported" and "no backward on CPU" in row["reason"]


@pytest.mark.parametrize("mask", ["causal_document", "share_question", "global_sliding_window"])
def test_block_mask_matches_dense_mask(mask):
    """The BlockMask from slices, expanded to pairs, is exactly the mask."""
    m = problem_mask(problem(mask))
    bm = block_mask_from_slices(m.slices, m.seqlen, m.seqlen, "cpu")
    dense = bm.to_dense()[0, 0].numpy().astype(bool)  # block level
    bmap = m.block_map(128)
    assert np.array_equal(dense, bmap > 0)
    q = torch.arange(m.seqlen)[:, None]
    kv = torch.arange(m.seqlen)[None, :]
    assert np.array_equal(bm.mask_mod(0, 0, q, kv).numpy(), m.dense())


@pytest.mark.parametrize("mask", ["full", "causal_document", "prefix_lm_document", "global_sliding_window"])
def test_user_block_mask_is_the_mask(mask):
    """prepare's BlockMask (create_block_mask over the natural mask_mod) has the exact block map and pairs."""
    from longca_plugin_flex.kernel import block_mask_for

    m = problem_mask(problem(mask))
    bm = block_mask_for(m, "cpu")
    assert np.array_equal(bm.to_dense()[0, 0].numpy().astype(bool), m.block_map(128) > 0)
    q = torch.arange(m.seqlen)[:, None]
    kv = torch.arange(m.seqlen)[None, :]
    assert np.array_equal(bm.mask_mod(0, 0, q, kv).expand(m.seqlen, m.seqlen).numpy(), m.dense())


def test_lse_primitives_reuse_the_block_mask_of_a_crop():
    """A CP strategy passes the same crops every step: their BlockMask is built once, not per call."""
    from longca_plugin_flex.kernel import BlockMaskCache

    a, b = problem_mask(problem("causal_document")), problem_mask(problem("causal"))
    cache = BlockMaskCache(size=1)
    first = cache.get(a.slices, a.seqlen, a.seqlen, "cpu")
    assert cache.get(np.array(a.slices).tolist(), a.seqlen, a.seqlen, "cpu") is first  # same crop, any form
    other = cache.get(b.slices, b.seqlen, b.seqlen, "cpu")
    assert other is not first and np.array_equal(other.to_dense()[0, 0].numpy() > 0, b.block_map(128) > 0)
    assert cache.get(a.slices, a.seqlen, a.seqlen, "cpu") is not first  # size 1: the first was dropped


def test_backward_lse_refused_by_the_backend_is_unsupported(monkeypatch):
    """A backend without the gradient through lse (FLASH in torch 2.11) makes backward_lse `unsupported`
    with the backend's own sentence; any other failure stays an error."""
    from longca.plugin import UnsupportedError
    from longca_plugin_flex.kernel import FlexKernel

    message = ("LoweringException: NotImplementedError: FLASH backend backward does not support differentiating "
               "through logsumexp (dLSE). Use BACKEND='TRITON'")

    class Refusing(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            return q * 1.0, q.sum(-1).transpose(1, 2) * 1.0

        @staticmethod
        def backward(ctx, g_out, g_lse):
            raise RuntimeError(text)

    kernel = FlexKernel({"BACKEND": "FLASH"})
    monkeypatch.setattr(kernel, "call", lambda q, k, v, bm, scale=None, lse=False: Refusing.apply(q, k, v))
    m = problem_mask(problem("causal"))
    q, k, v = (torch.randn(1, m.seqlen, 2, 8) for _ in range(3))
    out, lse = torch.randn(1, m.seqlen, 2, 8), torch.zeros(1, 2, m.seqlen)
    text = message
    with pytest.raises(UnsupportedError, match=r"refuses: FLASH backend backward does not support .*dLSE"):
        kernel.backward_lse(torch.randn_like(out), q, k, v, out, lse, m.slices)
    text = "some other failure"
    with pytest.raises(RuntimeError, match="some other failure"):
        kernel.backward_lse(torch.randn_like(out), q, k, v, out, lse, m.slices)


def _pairs(mask_mod, seqlen_q: int, seqlen_k: int) -> np.ndarray:
    q, kv = torch.arange(seqlen_q)[:, None], torch.arange(seqlen_k)[None, :]
    return torch.as_tensor(mask_mod(0, 0, q, kv)).expand(seqlen_q, seqlen_k).numpy()


@pytest.mark.parametrize("mask", STATIC_MASKS)
def test_bounds_mask_mod_is_exact_on_every_mask_and_on_crops_of_it(mask):
    """The generic mask_mod (constants, shifted keys or gathered bounds, whichever is exact) gives
    exactly the mask's pairs, for whole masks and for the crops a CP strategy passes."""
    from longca import plugin
    from longca_plugin_flex.blockmask import flashmask_mask_mod

    for sample in range(2):
        m = problem_mask(problem(mask), sample)
        s = m.seqlen
        assert np.array_equal(_pairs(flashmask_mask_mod(m.slices, s, s, "cpu"), s, s), m.dense()), sample
        rng = np.random.default_rng(sample)
        for _ in range(6):
            q0, q1 = sorted(rng.choice(s + 1, 2, replace=False).tolist())
            k0, k1 = sorted(rng.choice(s + 1, 2, replace=False).tolist())
            crop = plugin.crop(m.slices, (q0, q1), (k0, k1), relative=True)
            if len(crop) == 0:
                continue
            got = _pairs(flashmask_mask_mod(crop, q1 - q0, k1 - k0, "cpu"), q1 - q0, k1 - k0)
            assert np.array_equal(got, m.dense()[q0:q1, k0:k1]), (sample, q0, q1, k0, k1)


def test_bounds_mask_mod_gathers_only_what_is_not_arithmetic():
    """full, causal and the causal window need no table (a causal mask reads `q >= kv`, as its natural
    mask_mod does); a causal document mask or prefix-LM needs one, not four."""
    from longca import plugin
    from longca_plugin_flex.blockmask import _bound

    def tables(name):
        m = problem_mask(problem(name))
        bounds = plugin.flashmask_bounds(m.slices, m.seqlen, m.seqlen)
        return sum(_bound(values, "cpu").table is not None for values in bounds.values())

    assert tables("full") == tables("causal") == tables("sliding_window_causal") == 0
    assert tables("causal_document") == tables("prefix_lm_causal") == 1
    shifted = _bound(np.clip(np.arange(10) + 3, 5, 9), "cpu")
    assert shifted.table is None and shifted.shift == (3, 5, 9)


def _attention(q, k, v):
    """Plain differentiable attention on (B, S, H, D): out and lse (B, H, S), -inf where a row sees no key."""
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / q.shape[-1] ** 0.5
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), v)
    return out, lse


def test_split_softmax_grads_give_the_merged_attentions_gradient():
    """Two key parts, each back-propagated with its split-softmax terms, sum to the whole attention's gradient
    (what backward_lse relies on; on a CPU flex has no backward, so the terms are checked alone)."""
    from longca_plugin_flex.kernel import split_softmax_grads

    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 24, 2, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    dout = torch.randn(1, 24, 2, 8, generator=gen, dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = _attention(*leaves)
    want = torch.autograd.grad(out, leaves, dout)

    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for part in (slice(0, 10), slice(10, 24)):
        local = [t.clone().requires_grad_() for t in (q, k[:, part], v[:, part])]
        out_l, lse_l = _attention(*local)
        terms = split_softmax_grads(dout, out_l.detach(), out.detach(), lse_l.detach(), lse.detach())
        g_q, g_k, g_v = torch.autograd.grad((out_l, lse_l), local, terms)
        dq += g_q
        dk[:, part], dv[:, part] = g_k, g_v
    for got, ref in zip((dq, dk, dv), want, strict=True):
        assert torch.allclose(got, ref, atol=1e-6), (got - ref).abs().max()  # the terms are computed in float32


def test_split_softmax_grads_of_rows_with_no_key_here_are_zero():
    from longca_plugin_flex.kernel import split_softmax_grads

    dout, out_l, out = (torch.ones(1, 3, 1, 4) for _ in range(3))
    lse_l = torch.tensor([[[0.0, float("-inf"), float("-inf")]]])
    lse = torch.tensor([[[0.5, 0.5, float("-inf")]]])
    d_out, d_lse = split_softmax_grads(dout, out_l, out, lse_l, lse)
    assert d_out[0, 1:].abs().sum() == 0 and d_lse[0, 0, 1:].abs().sum() == 0
    assert torch.isfinite(d_out).all() and torch.isfinite(d_lse).all()


def test_odd_crops_are_padded_to_blocks_and_stay_exact():
    """forward_lse pads an 85 x 43 crop to 128 x 128 (Inductor finds no flex config for such shapes on the
    H200) and cuts the padding off again: same rows as the reference, lse -inf only on rows with no key."""
    from longca.plugin import reference_forward_lse
    from longca_flashplan.plugin import window_slices
    from longca_plugin_flex.hooks import SPEC
    from longca_plugin_flex.kernel import BLOCK, pad_rows

    assert pad_rows(torch.zeros(1, 85, 2, 8)).shape[1] == BLOCK and pad_rows(torch.zeros(1, 256, 2, 8)).shape[1] == 256
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, n, 2, 16, generator=gen) for n in (85, 43, 43))
    slices = np.ascontiguousarray(window_slices(85, 43, -1, 0))
    out, lse = SPEC.forward_lse(q, k, v, slices, None)
    want, want_lse = reference_forward_lse(q, k, v, slices, None)
    assert out.shape == want.shape and lse.shape == want_lse.shape
    assert ((out - want).norm() / want.norm()).item() < 1e-5
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse))


def test_a_padded_crop_with_three_masked_intervals_a_key_stays_exact():
    """The cp_merge crop (rows 85:256, keys 43:129) of causal_blockwise, padded to 256 x 128 blocks: the
    padded rows add a third masked interval to some keys, more than FlashMask's bounds hold (the H200
    suite's `forward_lse raised ValueError`). The generic mask_mod takes any number: same rows as the
    reference."""
    from longca import plugin
    from longca.plugin import reference_forward_lse
    from longca_plugin_flex.hooks import SPEC

    m = problem_mask(problem("causal_blockwise"), 0)
    crop = np.ascontiguousarray(m.crop((85, 256), (43, 129)))
    with pytest.raises(ValueError, match="masked row intervals"):
        plugin.flashmask_bounds(crop, 256, 128)  # the padded shape
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, n, 2, 16, generator=gen) for n in (171, 86, 86))
    out, lse = SPEC.forward_lse(q, k, v, crop, None)
    want, want_lse = reference_forward_lse(q, k, v, crop, None)
    seen = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), seen)
    assert ((out - want).norm() / want.norm()).item() < 1e-5
    assert torch.allclose(lse[seen], want_lse[seen], atol=1e-5)


def test_flash_lse_is_divided_by_ln2_only_where_torch_multiplied_it(monkeypatch):
    """torch before the fix of pytorch issue 181645 returns FLASH's natural-log lse times ln 2."""
    import math
    from types import SimpleNamespace

    from longca_plugin_flex import kernel as flex_kernel

    lse = torch.full((1, 2, 4), 3.0)
    fake = lambda *args, **kwargs: (torch.zeros(1, 2, 4, 8), SimpleNamespace(lse=lse * math.log(2.0)))  # noqa: E731
    flash, triton = flex_kernel.FlexKernel({"BACKEND": "FLASH"}), flex_kernel.FlexKernel()
    for k in (flash, triton):
        monkeypatch.setattr(k, "fn", lambda device: fake)
    q = torch.zeros(1, 4, 2, 8)
    monkeypatch.setattr(flex_kernel, "flash_lse_scaled_by_ln2", lambda: True)
    assert torch.allclose(flash.call(q, q, q, None, lse=True)[1], lse)
    assert torch.allclose(triton.call(q, q, q, None, lse=True)[1], lse * math.log(2.0))  # Triton's: torch's own
    monkeypatch.setattr(flex_kernel, "flash_lse_scaled_by_ln2", lambda: False)
    assert torch.allclose(flash.call(q, q, q, None, lse=True)[1], lse * math.log(2.0))


@pytest.mark.parametrize("seqlen, compiled", [(4096, False), (16384, False), (32768, True)])
def test_create_block_mask_is_eager_up_to_16k(monkeypatch, seqlen, compiled):
    """A compiled create_block_mask's first build of a process took minutes at 16K on the H200; eager
    (its default) it took 15 ms, so prepare compiles it only past EAGER_BLOCK_MASK_MAX_SEQLEN."""
    from types import SimpleNamespace

    import torch.nn.attention.flex_attention as fa

    from longca_plugin_flex import kernel

    seen = {}
    monkeypatch.setattr(kernel, "compile_wanted", lambda device: True)
    monkeypatch.setattr(kernel, "natural_mask_mod", lambda mask, device: lambda b, h, q, kv: q >= kv)
    monkeypatch.setattr(fa, "create_block_mask",
                        lambda *args, _compile=False, **kw: seen.setdefault("compiled", _compile))
    kernel.block_mask_for(SimpleNamespace(slices=[], seqlen=seqlen, name="causal"), "cpu")
    assert seen["compiled"] is compiled
