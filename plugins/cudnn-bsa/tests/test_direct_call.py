"""benchmarks/plugin_vs_direct.py's hand-written cudnn-bsa call (a checkout's script, not part of this
distribution), on a CPU through the float32 emulation of the library: it computes longca's reference
on the mask, forward and backward, so a GPU run compares the plugin with a call of the same attention."""
from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest
import torch

from longca.plugin import Problem, make_inputs, problem_mask, reference_attention
from longca_testing import assert_close

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "plugin_vs_direct.py"
pytestmark = [pytest.mark.numerics,
              pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/plugin_vs_direct.py: not in a checkout")]


class Unpacks(dict):
    """A dict that unpacks as its values, as cuDNN's TupleDict does."""

    def __iter__(self):
        return iter(list(self.values()))


@pytest.fixture
def script(emulated, monkeypatch):
    library = types.ModuleType("cudnn.block_sparse_attention")
    library.block_sparse_attention_forward = lambda *a, **kw: Unpacks(emulated.forward(*a, **kw))
    library.block_sparse_attention_backward = lambda *a, **kw: Unpacks(emulated.backward(*a, **kw))
    package = types.ModuleType("cudnn")
    package.block_sparse_attention = library
    monkeypatch.setitem(sys.modules, "cudnn", package)
    monkeypatch.setitem(sys.modules, "cudnn.block_sparse_attention", library)
    spec = importlib.util.spec_from_file_location("plugin_vs_direct_cudnn_bsa", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("block,heads", [(64, (4, 4)), (128, (4, 2))])
def test_direct_call_is_the_mask(script, block, heads):
    p = Problem(kernel="cudnn-bsa", mask="block_sparse_uniform", seqlen=512, heads_q=heads[0], heads_kv=heads[1],
                head_dim=16, batch=2, dtype="float32", mask_params={"block": block, "density": 0.4})
    mask = problem_mask(p)
    assert script.direct_refusal("cudnn-bsa", mask) is None
    q, k, v = make_inputs(p, requires_grad=heads[0] == heads[1])
    out = script.make_direct("cudnn-bsa", mask, q, k, v, p)(q, k, v)
    ref = reference_attention(q, k, v, mask)
    assert_close(out, ref, 1e-5, "out")
    if heads[0] == heads[1]:  # the library's backward is MHA only
        dout = torch.randn_like(out)
        for name, g, w in zip("qkv", torch.autograd.grad(out, (q, k, v), dout),
                              torch.autograd.grad(ref, (q, k, v), dout), strict=True):
            assert_close(g, w, 1e-5, f"d{name}")


def test_direct_call_refusals(script):
    def mask(name, block, seqlen=512):
        return problem_mask(Problem(kernel="cudnn-bsa", mask=name, seqlen=seqlen, heads_q=2, heads_kv=2,
                                    mask_params={"block": block}))

    for refused in (mask("block_sparse_variable", 64), mask("block_sparse_uniform", 256),
                    mask("block_sparse_uniform", 64, 500)):
        assert script.direct_refusal("cudnn-bsa", refused).startswith("n/a: hand-written here for block_sparse_uniform")
