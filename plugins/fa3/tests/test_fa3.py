"""fa3 on a machine without FlashAttention-3 or a GPU: listed, unavailable with the reason, nothing imported."""
from __future__ import annotations

import sys

import pytest
import torch
from longca.inventory import kernel_rows
from longca.plugins import get_registry


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
