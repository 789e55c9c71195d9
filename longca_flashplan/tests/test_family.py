"""The FlashAttention-family base (fa2, fa3, fa4): the spec it makes and the public single-call path, on a CPU."""
from __future__ import annotations

import pytest
import torch

from longca import reference
from longca.problem import Problem, build_mask
from longca_flashplan.emulated import EmulatedFlash, window_slices
from longca_flashplan.family import FlashAdapter, flash_kernel

pytestmark = pytest.mark.numerics  # float results: CI runs these again under another ATEN_CPU_CAPABILITY


class Emulated(FlashAdapter):
    """A library whose primitives and public functions are the reference (CPU), recording the public calls."""

    name = "emulated-family"
    public: list[dict] = []
    none_for_unbounded = False

    def window(self, args):
        if not self.none_for_unbounded:
            return super().window(args)
        return args.causal, None if args.left < 0 else args.left, None if args.right < 0 else args.right

    def fwd(self, q, k, v, args):
        return EmulatedFlash().fwd(q, k, v, args)

    def bwd(self, dout, q, k, v, out, lse, args):
        return EmulatedFlash().bwd(dout, q, k, v, out, lse, args)

    def public_functions(self):
        def bound(x):
            return -1 if x is None else x

        def func(q, k, v, softmax_scale, causal, window_size):
            Emulated.public.append({"varlen": False, "causal": causal, "window": window_size})
            left, right = bound(window_size[0]), bound(window_size[1])
            return reference.forward_lse(q, k, v, window_slices(q.shape[1], k.shape[1], left, right), softmax_scale)

        def varlen_func(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                        window_size):
            Emulated.public.append({"varlen": True, "causal": causal, "window": window_size})
            outs = []
            cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
            for i in range(len(cq) - 1):
                left, right = bound(window_size[0]), bound(window_size[1])
                outs.append(reference.forward_lse(q[None, cq[i]:cq[i + 1]], k[None, ck[i]:ck[i + 1]],
                                                  v[None, ck[i]:ck[i + 1]],
                                                  window_slices(cq[i + 1] - cq[i], ck[i + 1] - ck[i], left, right),
                                                  softmax_scale)[0][0])
            return torch.cat(outs)  # the output alone, as flash_attn_varlen_func returns it

        return func, varlen_func


def _run(spec, mask_name: str, **params):
    problem = Problem(kernel="reference", mask=mask_name, seqlen=192, heads_q=4, heads_kv=2, head_dim=16,
                      dtype="float32", sampler="uniform", seed=2, mask_params=params)
    mask = build_mask(problem)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 192, h, 16, generator=gen) for h in (4, 2, 2))
    out = spec.run(spec.prepare(problem, mask, q, k, v), q, k, v)
    return float((out - reference.attention(q, k, v, mask)).norm() / out.norm())


@pytest.mark.parametrize("none_for_unbounded", [False, True])
def test_public_path_for_one_call_masks_and_primitives_for_the_rest(none_for_unbounded, monkeypatch):
    monkeypatch.setattr(Emulated, "none_for_unbounded", none_for_unbounded)
    monkeypatch.setattr(Emulated, "public", [])
    spec = flash_kernel("emulated-family", "test", Emulated, url="", backend=lambda: "emulated",
                        library_reason=lambda: "not here")
    unbounded = None if none_for_unbounded else -1
    assert _run(spec, "causal") < 1e-5
    assert Emulated.public[-1] == {"varlen": False, "causal": True, "window": (unbounded, 0)}
    assert _run(spec, "causal_document") < 1e-5
    assert Emulated.public[-1] == {"varlen": True, "causal": True, "window": (unbounded, 0)}
    assert _run(spec, "sliding_window", window=24) < 1e-5
    assert Emulated.public[-1]["window"] == (24, 24) and len(Emulated.public) == 3
    assert _run(spec, "share_question") < 1e-5  # several calls: the primitives, merged by lse
    assert len(Emulated.public) == 3


def test_spec_defaults():
    spec = flash_kernel("emulated-family", "test", Emulated, url="u", backend=lambda: "b",
                        library_reason=lambda: "library missing")
    assert spec.available().startswith("library missing; ")  # then the GPU's reason on this CPU machine
    assert spec.head_dims[0] == 128 and spec.min_compute_capability == (9, 0) and spec.devices == ("cuda",)
    assert spec.forward_lse is not None and spec.backward_lse is not None
    problem = Problem(kernel="fa3", mask="causal", seqlen=256, head_dim=12)
    assert "multiple of 8" in spec.supports(problem)


class EmulatedSinks(Emulated):
    """A library whose public function takes `learnable_sink` (flash-attn-4's argument)."""

    name = "emulated-sinks"

    def public_functions(self):
        plain, varlen = super().public_functions()

        def func(q, k, v, softmax_scale, causal, window_size, learnable_sink=None):
            out, lse = plain(q, k, v, softmax_scale, causal, window_size)
            Emulated.public[-1]["sinks"] = learnable_sink is not None
            return (out, lse) if learnable_sink is None else reference.with_sinks(out, lse, learnable_sink)

        return func, varlen


def test_sinks_go_to_a_public_call_that_takes_them_and_else_through_the_merged_lse(monkeypatch):
    monkeypatch.setattr(Emulated, "public", [])
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 192, h, 16, generator=gen, requires_grad=True) for h in (4, 2, 2))
    sinks = torch.randn(4, generator=gen, requires_grad=True)
    dout = torch.randn(1, 192, 4, 16, generator=gen)
    for adapter, public_sinks in ((EmulatedSinks, True), (Emulated, False)):
        monkeypatch.setattr(adapter, "public_sinks", public_sinks)
        spec = flash_kernel(adapter.name, "test", adapter, url="", backend=lambda: "emulated", sinks=True)
        assert spec.sinks is True
        for mask_name, one_call in (("causal", True), ("share_question", False)):  # several calls: the merged lse
            problem = Problem(kernel="reference", mask=mask_name, seqlen=192, heads_q=4, heads_kv=2, head_dim=16,
                              dtype="float32", sampler="uniform", seed=2, sinks=True)
            mask = build_mask(problem)
            calls = len(Emulated.public)
            out = spec.run(spec.prepare(problem, mask, q, k, v), q, k, v, sinks=sinks)
            assert len(Emulated.public) == calls + (1 if public_sinks and one_call else 0)
            want = reference.attention(q, k, v, mask, sinks=sinks)
            assert float((out - want).detach().norm() / want.detach().norm()) < 1e-5
            if not public_sinks:  # the emulated public call has no backward; the plan's has, dsinks included
                got, expected = (torch.autograd.grad(x, (q, k, v, sinks), dout) for x in (out, want))
                for g, w in zip(got, expected, strict=True):
                    assert float((g - w).norm() / w.norm()) < 1e-5
