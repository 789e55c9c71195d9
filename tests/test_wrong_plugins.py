"""Wrong plugins of every kind, each failing its conformance suite with a message naming the fault.

Each plugin here is correct except for one fault; the suites must catch it (the honest versions
pass: tests/test_plugin_conformance.py and the suites' own tests).
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from longca import plugin, reference
from longca.plugins import PluginInfo, load_registry


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def _add(registry, kind: str, spec) -> None:
    registry.entries[kind].pop(spec.name, None)
    registry._add(kind, spec, PluginInfo(spec.name, "longca-plugin-wrong", "0", "tests"))


def _reference_kernel(name: str, **changes) -> plugin.KernelSpec:
    spec = plugin.KernelSpec(name=name, family="dense", description="the reference, with one fault",
                             masks=("causal", "causal_document"), prepare=lambda problem, mask, q, k, v: mask,
                             run=lambda mask, q, k, v: reference.attention(q, k, v, mask), dtypes=("float32",),
                             devices=("cpu",), forward_lse=reference.forward_lse, backward_lse=reference.backward_lse)
    return replace(spec, **changes)


def _own_forward_backward(dout, q, k, v, out, lse, slices, softmax_scale=None):
    """The template's old bug: recompute this piece's forward instead of using the out and lse given."""
    own_out, own_lse = reference.forward_lse(q, k, v, slices, softmax_scale)
    return reference.backward_lse(dout, q, k, v, own_out, own_lse, slices, softmax_scale)


def test_kernel_ignoring_merged_out_and_lse(registry):
    _add(registry, "kernels", _reference_kernel("ignores_lse", backward_lse=_own_forward_backward))
    report = plugin.check_kernel("ignores_lse", "cpu", registry=registry)
    assert set(report.failures) == {"cp_merge-cpu"}, report.summary()
    assert "backward_lse ignores the merged out and lse it is given" in report.failures["cp_merge-cpu"]
