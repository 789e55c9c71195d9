"""fa3 on a machine without FlashAttention-3 or a GPU: listed, unavailable with the reason, nothing imported."""
from __future__ import annotations

import sys

import pytest
import torch

from longca.plugin import get_registry


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only listing")
def test_listed_unavailable_without_importing_the_library():
    spec = get_registry().kernel("fa3")  # what list-kernels shows: available() says why not
    reason = spec.available()
    assert reason and "CUDA GPU" in reason
    assert not any(m == "flash_attn_interface" or m.startswith("flash_attn_3") for m in sys.modules)


def test_claims():
    spec = get_registry().kernel("fa3")
    assert spec.forward_lse is not None and spec.backward_lse is not None
    assert spec.head_dims[0] == 128 and spec.devices == ("cuda",)


def test_cut_down_build_refuses_what_it_lacks():
    """A build without fp16 or other head dims refuses them instead of crashing the process."""
    from longca.plugin import Problem
    from longca_plugin_fa3.hooks import build_reason

    flags = {f"FLASHATTENTION_DISABLE_{n}": True for n in ("FP16", "HDIM64", "LOCAL")}
    base = dict(kernel="fa3", seqlen=2048, head_dim=128, dtype="bfloat16")
    assert build_reason(Problem(mask="causal", **base), flags) is None
    assert "float16" in build_reason(Problem(mask="causal", **{**base, "dtype": "float16"}), flags)
    assert "head_dim 64" in build_reason(Problem(mask="causal", **{**base, "head_dim": 64}), flags)
    assert "sliding windows" in build_reason(Problem(mask="sliding_window", **base), flags)
    assert build_reason(Problem(mask="causal_document", **base), flags) is None


class FakeFA3:
    """`flash_attn_interface` as FA3 spells it, computed by the reference on a CPU; records each call."""

    def __init__(self):
        self.calls: list[dict] = []

    def flash_attn_func(self, q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1), q_descale=None,
                        k_descale=None, v_descale=None, deterministic=False):
        from longca.plugin import reference_attention
        from longca_flashplan.plugin import window_slices

        self.calls.append(dict(dtype=q.dtype, descales=[d.shape if d is not None else None
                                                        for d in (q_descale, k_descale, v_descale)],
                               causal=causal, deterministic=deterministic))
        if q.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            q, k, v = (x.float() * d[0, 0] for x, d in ((q, q_descale), (k, k_descale), (v, v_descale)))
            out_dtype = torch.bfloat16  # FA3 writes an FP8 call's output in bfloat16
        else:
            out_dtype = q.dtype
        left, right = (-1, 0) if causal else window_size
        out = reference_attention(q.float(), k.float(), v.float(), window_slices(q.shape[1], k.shape[1], left, right),
                                  softmax_scale)
        return out.to(out_dtype)

    def flash_attn_varlen_func(self, *args, **kwargs):
        raise AssertionError("not used by these tests")


@pytest.fixture
def fake_fa3(monkeypatch):
    import types

    fake = FakeFA3()
    module = types.ModuleType("flash_attn_interface")
    module.flash_attn_func = fake.flash_attn_func
    module.flash_attn_varlen_func = fake.flash_attn_varlen_func
    monkeypatch.setitem(sys.modules, "flash_attn_interface", module)
    return fake


def test_fp8_forward_quantizes_in_prepare_and_passes_descales(fake_fa3):
    """FP8: prepare makes e4m3 copies and (batch, heads_kv) descales; run calls flash_attn_func with them and
    returns bfloat16 of q's layout, within the FP8 tolerance of the reference on the bfloat16 inputs."""
    from longca.plugin import Problem, UnsupportedError, make_inputs, problem_mask, reference_attention
    from longca_plugin_fa3 import hooks
    from longca_testing import rel_err, tolerance_for

    problem = Problem(kernel="fa3", mask="causal", seqlen=256, heads_q=4, heads_kv=2, head_dim=64, dtype="fp8")
    mask = problem_mask(problem)
    q, k, v = make_inputs(problem)
    prepared = hooks.prepare(problem, mask, q, k, v)
    assert isinstance(prepared, hooks.Fp8Prepared) and prepared.q.dtype == torch.float8_e4m3fn
    out = hooks.run(prepared, q, k, v)
    assert fake_fa3.calls[-1]["dtype"] == torch.float8_e4m3fn and fake_fa3.calls[-1]["causal"] is True
    assert fake_fa3.calls[-1]["descales"] == [torch.Size([1, 2])] * 3
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    err = rel_err(out, reference_attention(q.float(), k.float(), v.float(), mask))
    assert 0.005 < err < tolerance_for(problem)  # FP8 rounding shows, within the tolerance
    assert "forward only" in hooks.supports(problem.with_(direction="bwd"))
    several = problem.with_(mask="causal_blockwise", sampler="uniform")  # documents of a few blocks: several calls
    with pytest.raises(UnsupportedError, match="several calls"):
        hooks.prepare(several, problem_mask(several), q, k, v)


def test_deterministic_reaches_the_library(fake_fa3):
    from longca.plugin import Problem, make_inputs, problem_mask
    from longca_plugin_fa3 import hooks

    problem = Problem(kernel="fa3", mask="causal", seqlen=128, heads_q=2, heads_kv=2, head_dim=64,
                      dtype="float32", direction="bwd", deterministic=True)
    q, k, v = make_inputs(problem)
    hooks.run(hooks.prepare(problem, problem_mask(problem), q, k, v), q, k, v)
    assert fake_fa3.calls[-1]["deterministic"] is True
    hooks.run(hooks.prepare(problem.with_(deterministic=False), problem_mask(problem), q, k, v), q, k, v)
    assert fake_fa3.calls[-1]["deterministic"] is False
    assert "head dim 256" in hooks.supports(problem.with_(head_dim=256))
