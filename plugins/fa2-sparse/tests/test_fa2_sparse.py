"""fa2-sparse on CPU: what prepare hands Block-Sparse-Attention, and the refusals.

The kernel itself needs CUDA (tests/test_gpu_sparse.py, 128-token blocks): the conformance
suite's GPU mask cases use 64-token blocks, which this kernel refuses, so they are skipped.
"""
import importlib.util

import pytest
import torch

from longca.plugin import Problem, make_inputs, problem_mask
from longca_plugin_fa2_sparse import hooks
from longca_testing import conformance_tests


def problem(seqlen=384, heads=(4, 2), block=128, batch=2):
    return Problem(kernel="fa2-sparse", mask="block_sparse_uniform", seqlen=seqlen, heads_q=heads[0],
                   heads_kv=heads[1], head_dim=32, batch=batch, dtype="float32",
                   mask_params={"block": block, "density": 0.5})


@pytest.mark.parametrize("seqlen,heads", [(384, (4, 2)), (300, (4, 4))])
def test_prepared_mask_expands_to_the_core_mask(seqlen, heads):
    p = problem(seqlen, heads)
    m = problem_mask(p)
    q, k, v = make_inputs(p)
    prep = hooks.prepare(p, m, q, k, v)
    blocks = -(-seqlen // 128)
    assert prep.blockmask.shape == (2, heads[0], blocks, blocks) and prep.blockmask.dtype == torch.bool
    assert prep.cu_seqlens.tolist() == [0, seqlen, 2 * seqlen] and prep.cu_seqlens.dtype == torch.int32
    assert prep.head_mask_type.tolist() == [1] * heads[0]
    token_block = torch.arange(seqlen) // 128
    expanded = prep.blockmask[:, :, token_block][:, :, :, token_block]
    dense = torch.from_numpy(m.dense()).repeat_interleave(heads[0] // m.layout.groups, 0)
    assert torch.equal(expanded[0], dense) and torch.equal(expanded[1], dense)


def test_supports_reasons():
    assert "128x128" in hooks.supports(problem(block=64))
    assert hooks.supports(problem()) is None


def test_available_reason():
    if importlib.util.find_spec("block_sparse_attn") is not None:
        pytest.skip("block_sparse_attn is installed")
    assert "block_sparse_attn is not installed" in hooks.available()


test_conformance = conformance_tests("fa2-sparse")
