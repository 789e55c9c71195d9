"""The SageAttention plugin on a CPU: what it claims and refuses, and the documents' offsets it passes."""
from __future__ import annotations

import numpy as np

from longca.plugin import Problem, get_registry
from longca_plugin_sage import hooks


def _problem(**kw) -> Problem:
    return Problem(**{**dict(kernel="sage", mask="causal", seqlen=1024, heads_q=8, heads_kv=2, head_dim=128,
                             device="cuda"), **kw})


def test_it_is_a_quantized_forward_only_kernel_of_four_masks():
    spec = get_registry().kernel("sage")
    assert spec.quantized == hooks.QUANTIZED and spec.backward is False and spec.devices == ("cuda",)
    assert set(spec.masks) == {"full", "causal", "full_document", "causal_document"}
    assert spec.head_dims == (64, 96, 128) and spec.compiles


def test_documents_take_the_varlen_head_dims_only():
    assert hooks.supports(_problem(mask="causal_document", head_dim=96)).startswith("head_dim 96 with documents")
    assert hooks.supports(_problem(mask="causal", head_dim=96)) is None
    assert hooks.supports(_problem(mask="full_document", head_dim=64)) is None


def test_the_offsets_pack_every_sequence_of_the_batch():
    cu = hooks.document_offsets([3, 5, 8], batch=2)
    assert cu.dtype == np.int32 and cu.tolist() == [0, 3, 8, 16, 19, 24, 32]


def test_without_the_library_it_says_how_to_install_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sageattention" else real(name))
    assert "pip install sageattention==1.0.6" in hooks.available()
