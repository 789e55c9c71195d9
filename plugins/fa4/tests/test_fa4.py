"""fa4 on a machine without flash-attn-4 or a GPU: listed, unavailable with the reason, nothing imported."""
from __future__ import annotations

import sys

import pytest
import torch

from longca.plugin import get_registry, kernel_rows


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only listing")
def test_listed_unavailable_without_importing_the_library():
    rows = {r["name"]: r for r in kernel_rows(get_registry())}
    assert rows["fa4"]["available"] is False
    assert "CUDA GPU" in rows["fa4"]["reason"]
    assert not any(m == "cutlass" or m.startswith(("flash_attn.", "cutlass.")) for m in sys.modules)


def test_claims():
    spec = get_registry().kernel("fa4")
    assert spec.forward_lse is not None and spec.backward_lse is not None
    assert spec.head_dims[0] == 128 and spec.devices == ("cuda",)
