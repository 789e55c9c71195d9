"""fa2 without a GPU: listed unavailable with the reason; which implementation it would use."""
from __future__ import annotations

import pytest
import torch

from longca.plugin import get_registry
from longca_plugin_fa2 import backends


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only listing")
def test_listed_unavailable():
    spec = get_registry().kernel("fa2")  # what list-kernels shows: available() says why not
    reason = spec.available()
    assert reason and "CUDA GPU" in reason
    assert spec.forward_lse is not None and spec.backward_lse is not None


def test_backend_choice(monkeypatch):
    monkeypatch.setenv(backends.ENV_BACKEND, "torch")
    assert backends.chosen() == "torch" and isinstance(backends.adapter(), backends.TorchFlash)
    monkeypatch.setenv(backends.ENV_BACKEND, "flash_attn")
    assert isinstance(backends.adapter(), backends.FlashAttn2)
    monkeypatch.delenv(backends.ENV_BACKEND)
    assert backends.chosen() == ("flash_attn" if backends.flash_attn_installed() else "torch")


def test_deterministic_reaches_flash_attn_and_torch_s_copy_refuses_it(monkeypatch):
    """With flash_attn, `deterministic=True` goes to flash_attn_func (a stand-in module records it); torch's
    bundled FlashAttention-2 has no such flag, so the case is refused with that reason."""
    import sys
    import types

    from longca.plugin import Problem, make_inputs, problem_mask, reference_attention
    from longca_plugin_fa2 import hooks

    seen: list[bool] = []

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1), deterministic=False):
        seen.append(deterministic)
        return reference_attention(q, k, v, problem_mask(problem))

    module = types.ModuleType("flash_attn")
    module.flash_attn_func, module.flash_attn_varlen_func = flash_attn_func, None
    monkeypatch.setitem(sys.modules, "flash_attn", module)
    monkeypatch.setenv(backends.ENV_BACKEND, "flash_attn")
    problem = Problem(kernel="fa2", mask="causal", seqlen=128, heads_q=2, heads_kv=2, head_dim=64, dtype="float32",
                      direction="bwd", deterministic=True)
    q, k, v = make_inputs(problem)
    prepared = hooks.SPEC.prepare(problem, problem_mask(problem), q, k, v)
    hooks.SPEC.run(prepared, q, k, v)
    assert seen == [True] and hooks.supports(problem) is None
    assert backends.path_name(prepared.adapter, prepared.ex.single, prepared.public) == "flash_attn_func"
    monkeypatch.setenv(backends.ENV_BACKEND, "torch")
    assert hooks.supports(problem) == hooks.TORCH_DETERMINISTIC
    assert not hooks.SPEC.takes_head_dims(192, 128) and hooks.SPEC.takes_head_dims(256)



def test_window_rule_keeps_tall_crops_exact():
    """FA2 resets a right window edge >= len_k to unbounded; the rule must never plan such a call.

    A stand-in with FA2's clamp (computed by the reference) runs the executor on a causal crop of
    171 query rows against 86 keys (the CP piece where the H200 gave relative error 0.29): with the
    plain any-window rule the clamp makes it wrong, with fa2's rule it equals the reference."""
    import numpy as np

    from longca.plugin import reference_forward_lse
    from longca_flashplan.plugin import lse_primitives, window_slices

    class ClampingFlash:
        name = "fa2-clamp"

        def __init__(self, window_ok):
            self.window_ok = window_ok

        def fwd(self, q, k, v, args):
            right = -1 if args.right >= k.shape[1] else args.right  # what FA2's mha_fwd does
            return reference_forward_lse(q, k, v, window_slices(q.shape[1], k.shape[1], args.left, right), args.scale)

        def bwd(self, *a):
            raise AssertionError("forward only")

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, n, 2, 16, generator=gen) for n in (171, 86, 86))
    slices = np.ascontiguousarray(window_slices(171, 86, -1, 127))  # k - q <= 42 in local coordinates
    want, _ = reference_forward_lse(q, k, v, slices, None)

    def err(window_ok):
        out, _ = lse_primitives(lambda: ClampingFlash(window_ok))[0](q, k, v, slices, None)
        return ((out - want).norm() / want.norm()).item()

    assert err(lambda *a: True) > 0.05  # the fault: the clamp drops the window
    assert err(backends.fa2_window) < 1e-5
