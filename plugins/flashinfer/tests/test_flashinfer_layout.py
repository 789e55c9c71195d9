"""The inputs longca builds for FlashInfer's sparse wrappers, checked on CPU against the reference.

FlashInfer needs CUDA; `bsr_attention` and `variable_attention` apply the wrappers' documented
semantics (BSR rows of R queries attend the listed C-key blocks; per-KV-head block maps over
blocks of the given sizes) to what longca passes them. The GPU suite runs the real kernels.
"""
import math
import sys
import types

import numpy as np
import pytest
import torch

from longca.plugin import Problem, make_inputs, problem_mask, reference_attention
from longca_plugin_flashinfer import hooks, layout
from longca_testing import assert_close

pytestmark = pytest.mark.numerics  # float results: CI runs these again under another ATEN_CPU_CAPABILITY


def attend(q, k, v, allowed):
    """q (Hq, Sq, D), k/v (Hkv, Sk, D), allowed (Hq or 1, Sq, Sk) -> (Hq, Sq, D) float32."""
    rep = q.shape[0] // k.shape[0]
    k, v = k.float().repeat_interleave(rep, 0), v.float().repeat_interleave(rep, 0)
    scores = q.float() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~allowed, -math.inf), -1).nan_to_num(0.0) @ v


def bsr_attention(indptr, indices, block, q, k, v):
    """BlockSparseAttentionWrapper semantics on NHD q (M, Hq, D), k/v (N, Hkv, D)."""
    m, n = q.shape[0], k.shape[0]
    allowed = torch.zeros(m, n, dtype=torch.bool)
    for row in range(len(indptr) - 1):
        for col in indices[indptr[row]:indptr[row + 1]].tolist():
            allowed[row * block:(row + 1) * block, col * block:(col + 1) * block] = True
    return attend(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), allowed[None]).transpose(0, 1)


def variable_attention(block_map, row_sizes, col_sizes, q, k, v):
    """VariableBlockSparseAttentionWrapper semantics on HND q (Hq, S, D), k/v (Hkv, S, D)."""
    rows = torch.repeat_interleave(torch.arange(block_map.shape[1]), row_sizes[0].long())
    cols = torch.repeat_interleave(torch.arange(block_map.shape[2]), col_sizes[0].long())
    allowed = block_map[:, rows][:, :, cols].repeat_interleave(q.shape[0] // k.shape[0], 0)
    return attend(q, k, v, allowed)


def problem(mask, heads, seqlen=256, block=64):
    return Problem(kernel="flashinfer", mask=mask, seqlen=seqlen, heads_q=heads[0], heads_kv=heads[1],
                   head_dim=16, dtype="float32", mask_params={"block": block, "density": 0.4})


@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (4, 1)])
def test_folded_bsr_matches_reference(heads):
    p = problem("block_sparse_uniform", heads)
    m = problem_mask(p)
    q, k, v = make_inputs(p)
    indptr, indices = layout.bsr(torch.from_numpy(m.layout.keep))
    assert indptr.dtype == indices.dtype == torch.int32
    groups = heads[1]
    out = bsr_attention(indptr, indices, 64, layout.fold_q(q, groups), layout.fold_kv(k), layout.fold_kv(v))
    out = layout.unfold_out(out, groups, p.seqlen)
    assert_close(out, reference_attention(q, k, v, m), 1e-5)


class VariableWrapper:
    """FlashInfer's VariableBlockSparseAttentionWrapper as documented: `plan` takes the block map and
    the row and column block sizes per KV head, `run` attends HND views (`variable_attention`)."""

    def __init__(self, workspace):
        self.planned = None

    def plan(self, block_map, row_sizes, col_sizes, heads_q, heads_kv, head_dim, **kwargs):
        assert block_map.shape[0] == row_sizes.shape[0] == col_sizes.shape[0] == heads_kv
        assert row_sizes.dtype == col_sizes.dtype == torch.int32
        self.planned = (block_map, row_sizes, col_sizes)

    def run(self, q, k, v):
        return variable_attention(*self.planned, q, k, v)


@pytest.mark.parametrize("heads", [(4, 4), (4, 2)])
def test_variable_prepare_and_run_match_reference(heads, monkeypatch):
    """The plugin's own prepare and run (block sizes, layouts, views) on a stand-in for the wrapper."""
    flashinfer, sparse = types.ModuleType("flashinfer"), types.ModuleType("flashinfer.sparse")
    sparse.VariableBlockSparseAttentionWrapper = VariableWrapper
    flashinfer.sparse = sparse
    monkeypatch.setitem(sys.modules, "flashinfer", flashinfer)
    monkeypatch.setitem(sys.modules, "flashinfer.sparse", sparse)
    monkeypatch.setattr(hooks, "WORKSPACE_BYTES", 1)
    p = problem("block_sparse_variable", heads, seqlen=300)
    m = problem_mask(p)
    q, k, v = make_inputs(p)
    prepared = hooks.prepare(p, m, q, k, v)
    assert prepared.variable
    assert_close(hooks.run(prepared, q, k, v), reference_attention(q, k, v, m), 1e-5)


def test_variable_token_count_and_estimate():
    p = problem("block_sparse_variable", (8, 8), seqlen=8192)
    m = problem_mask(p)
    exact = layout.variable_tokens(m.layout.keep, np.diff(m.layout.q_bounds))
    # one index per kept key token of every (KV head, row block): count the first row of each block
    want = sum(int(m.dense((int(r), int(r) + 1)).sum()) for r in m.layout.q_bounds[:-1])
    assert exact == want
    estimate = layout.variable_tokens_estimate(8, 8192, 64, 0.4)
    assert 0.8 < estimate / exact < 1.25


def test_supports_reasons():
    assert "batch" in hooks.supports(problem("block_sparse_uniform", (4, 4)).with_(batch=2))
    assert "multiple of block 64" in hooks.supports(problem("block_sparse_uniform", (4, 4), seqlen=300))
    assert hooks.supports(problem("block_sparse_uniform", (4, 2))) is None


def test_plan_kwargs_pass_the_output_dtype_where_taken():
    def bsr_plan(indptr, indices, M, N, R, C, q_data_type="float16", kv_data_type=None, o_data_type="float16"):
        pass

    def variable_plan(block_mask_map, q_data_type="float16", kv_data_type=None):
        pass

    assert hooks._plan_kwargs(bsr_plan, torch.bfloat16)["o_data_type"] is torch.bfloat16
    assert "o_data_type" not in hooks._plan_kwargs(variable_plan, torch.bfloat16)
