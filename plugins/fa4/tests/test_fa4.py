"""fa4 on a machine without flash-attn-4 or a GPU: listed, unavailable with the reason, nothing imported."""
from __future__ import annotations

import sys

import pytest
import torch

from longca.plugin import get_registry


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only listing")
def test_listed_unavailable_without_importing_the_library():
    spec = get_registry().kernel("fa4")  # what list-kernels shows: available() says why not
    reason = spec.available()
    assert reason and "CUDA GPU" in reason
    assert not any(m == "cutlass" or m.startswith(("flash_attn.", "cutlass.")) for m in sys.modules)


def test_claims():
    spec = get_registry().kernel("fa4")
    assert spec.forward_lse is not None and spec.backward_lse is not None
    assert spec.head_dims[0] == 128 and spec.devices == ("cuda",)


def test_gqa_backward_with_v_of_its_own_head_dim_is_refused():
    """flash-attn-4 asserts in a GQA backward with head_dim != head_dim_v (seen on the H200): refused up front."""
    from longca.plugin import Problem
    from longca_plugin_fa4.hooks import SPEC

    base = Problem(kernel="fa4", mask="causal", seqlen=1024, heads_q=8, heads_kv=2, head_dim=192, head_dim_v=128,
                   device="cuda")
    assert "GQA" in SPEC.supports(base.with_(direction="bwd"))
    assert SPEC.supports(base) is None  # forward runs
    assert SPEC.supports(base.with_(direction="bwd", heads_kv=8)) is None  # MHA backward runs
    assert SPEC.supports(base.with_(head_dim=100, head_dim_v=None)) is not None  # the head-dim rule still holds
