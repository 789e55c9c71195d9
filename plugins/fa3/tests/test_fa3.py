"""fa3 on a machine without FlashAttention-3 or a GPU: listed, unavailable with the reason, nothing imported."""
from __future__ import annotations

import sys

import pytest
import torch

from longca.plugin import get_registry, kernel_rows


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only listing")
def test_listed_unavailable_without_importing_the_library():
    rows = {r["name"]: r for r in kernel_rows(get_registry())}
    assert rows["fa3"]["available"] is False
    assert "CUDA GPU" in rows["fa3"]["reason"]
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
