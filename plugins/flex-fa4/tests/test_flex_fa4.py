"""flex-fa4 on any machine: what it registers, why it refuses, and that it runs the flex user code."""
from __future__ import annotations

import pytest
import torch

from longca.plugin import STATIC_MASKS, Problem, get_registry
from longca_plugin_flex_fa4 import hooks
from longca_testing import RunOptions, run_problem


def test_registers_every_static_mask_with_the_lse_primitives():
    registry = get_registry()
    spec = registry.kernel("flex-fa4")
    assert set(STATIC_MASKS) <= set(registry.claimed_masks(spec.masks))
    assert spec.forward_lse is not None and spec.backward_lse is not None
    assert hooks.KERNEL.kernel_options == {"BACKEND": "FLASH"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_without_a_gpu_the_row_is_unsupported_with_the_reason():
    problem = Problem(kernel="flex-fa4", mask="causal", seqlen=256, heads_q=2, heads_kv=2, head_dim=64,
                      dtype="bfloat16", device="cpu")
    row = run_problem(problem, RunOptions(warmup=0, repeat=1))
    assert row.status == "unsupported"
    assert "cuda" in (row.reason or "").lower()
    assert hooks.available() is not None and "GPU" in hooks.available()


def test_torch_reason_names_what_is_missing():
    reason = hooks.torch_reason()
    assert reason is None or "flash" in reason.lower() or "torch" in reason.lower()


@pytest.mark.parametrize("has_message", [True, False])
def test_torch_reason_without_flash_attn_4_says_so_in_any_torch(monkeypatch, has_message):
    """torch 2.11 has no `_flash_attention_unavailable_message` (seen on the H200): the reason must
    still say that flash-attn-4 is missing, not that an attribute is."""
    import types

    from torch._inductor.kernel.flex import flex_flash_attention as real

    fake = types.ModuleType(real.__name__)
    fake.ensure_flash_available = lambda: False  # type: ignore[attr-defined]
    if has_message:
        fake._flash_attention_unavailable_message = lambda: "torch says: install flash-attn-4"  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, real.__name__, fake)
    monkeypatch.setattr(__import__(real.__name__.rsplit(".", 1)[0], fromlist=["x"]), "flex_flash_attention", fake)
    reason = hooks.torch_reason()
    if has_message:
        assert reason == "torch says: install flash-attn-4"
    else:
        assert "flash-attn-4" in reason and "not importable" in reason and "AttributeError" not in reason


def test_sm90_backward_at_head_dim_192_is_refused_with_the_measured_reason():
    """flash-attn-4's SM90 backward at head dim 192 rejected the plugin's 128-wide block mask on the H200."""
    from longca.plugin import Problem
    from longca_plugin_flex_fa4 import hooks

    problem = Problem(kernel="flex-fa4", mask="causal", seqlen=8192, head_dim=192, head_dim_v=128, direction="bwd")
    assert "sparse_block_size[1]=96" in hooks._sm90_backward_reason(problem, 9)
    assert hooks._sm90_backward_reason(problem.with_(direction="fwd"), 9) is None
    assert hooks._sm90_backward_reason(problem, 10) is None
    assert hooks._sm90_backward_reason(problem.with_(head_dim=128, head_dim_v=None), 9) is None
