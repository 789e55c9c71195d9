"""fa2 without a GPU: listed unavailable with the reason; which implementation it would use."""
from __future__ import annotations

import pytest
import torch

from longca.plugin import get_registry, kernel_rows
from longca_plugin_fa2 import backends


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only listing")
def test_listed_unavailable():
    rows = {r["name"]: r for r in kernel_rows(get_registry())}
    assert rows["fa2"]["available"] is False and "CUDA GPU" in rows["fa2"]["reason"]
    assert rows["fa2"]["lse_primitives"] is True


def test_backend_choice(monkeypatch):
    monkeypatch.setenv(backends.ENV_BACKEND, "torch")
    assert backends.chosen() == "torch" and isinstance(backends.adapter(), backends.TorchFlash)
    monkeypatch.setenv(backends.ENV_BACKEND, "flash_attn")
    assert isinstance(backends.adapter(), backends.FlashAttn2)
    monkeypatch.delenv(backends.ENV_BACKEND)
    assert backends.chosen() == ("flash_attn" if backends.flash_attn_installed() else "torch")
