"""FlexAttention on a CPU: every static mask, forward, checked against the reference (eager flex)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from longca.measure import RunOptions, run_problem
from longca.masks.catalog import STATIC_MASKS
from longca.problem import Problem, build_mask

from longca_plugin_flex.blockmask import block_mask_from_slices

pytestmark = pytest.mark.numerics  # float results: CI runs these again under another ATEN_CPU_CAPABILITY


def problem(mask: str, direction: str = "fwd") -> Problem:
    seqlen = 2048 if mask == "block_causal_document" else 256
    return Problem(kernel="flex", mask=mask, seqlen=seqlen, heads_q=4, heads_kv=2, head_dim=32, dtype="float32",
                   device="cpu", direction=direction, sampler="uniform",
                   sampler_params={"min_len": 16, "max_len": 128} if seqlen == 256 else {},
                   mask_params={"window": 40} if "window" in mask else {})


@pytest.mark.parametrize("mask", STATIC_MASKS)
def test_forward_matches_reference(mask):
    row = run_problem(problem(mask), RunOptions(warmup=0, repeat=1, samples=1, check=True))
    assert row["status"] == "ok", row["reason"]
    assert row["rel_err"] < 1e-5


def test_cpu_backward_is_unsupported_with_reason():
    row = run_problem(problem("causal", "bwd"), RunOptions(warmup=0, repeat=1, samples=1))
    assert row["status"] == "unsupported" and "no backward on CPU" in row["reason"]


@pytest.mark.parametrize("mask", ["causal_document", "share_question", "global_sliding_window"])
def test_block_mask_matches_dense_mask(mask):
    """The BlockMask from slices, expanded to pairs, is exactly the mask."""
    m = build_mask(problem(mask))
    bm = block_mask_from_slices(m.slices, m.seqlen, m.seqlen, "cpu")
    dense = bm.to_dense()[0, 0].numpy().astype(bool)  # block level
    bmap = m.block_map(128)
    assert np.array_equal(dense, bmap > 0)
    q = torch.arange(m.seqlen)[:, None]
    kv = torch.arange(m.seqlen)[None, :]
    assert np.array_equal(bm.mask_mod(0, 0, q, kv).numpy(), m.dense())


@pytest.mark.parametrize("mask", ["causal_document", "prefix_lm_document", "global_sliding_window"])
def test_user_block_mask_is_the_mask(mask):
    """prepare's BlockMask (create_block_mask over the natural mask_mod) has the exact block map and pairs."""
    from longca_plugin_flex.kernel import block_mask_for

    m = build_mask(problem(mask))
    bm = block_mask_for(m, "cpu")
    assert np.array_equal(bm.to_dense()[0, 0].numpy().astype(bool), m.block_map(128) > 0)
    q = torch.arange(m.seqlen)[:, None]
    kv = torch.arange(m.seqlen)[None, :]
    assert np.array_equal(bm.mask_mod(0, 0, q, kv).expand(m.seqlen, m.seqlen).numpy(), m.dense())
