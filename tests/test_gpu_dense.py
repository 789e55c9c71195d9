"""GPU suite of the dense kernel plugins (fa2, fa3, fa4, cudnn, flex): `pytest -m longca_gpu`.

bf16 at a moderately larger size than the conformance suite's with GQA and head_dim 128, then the
context-parallel primitives (`forward_lse` / `backward_lse`) on crops of masks. A kernel
whose library is missing is skipped with its reason. With `LONGCA_GPU_TEST_OUT=file.jsonl` every
result row is appended there. The conformance suite itself (every claimed mask, forward and
backward, small sizes) runs in each plugin's own tests, one test per case (`conformance_tests`):
running it here again, one test per kernel, repeated every case: flex's was the last of its group to
finish on the H200 (2026-12-04: the group took 401 s; 2026-12-06: unfinished at 270 s).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from longca import reference
from longca.plugins import get_registry
from longca.problem import Problem, build_mask
from longca_runner.measure import RunOptions, rel_err, run_problem

pytestmark = [pytest.mark.longca_gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

KERNELS = ("fa2", "fa3", "fa4", "cudnn", "flex")
LARGER_MASKS = ("causal", "causal_document", "sliding_window", "share_question", "global_sliding_window",
                "block_causal_document")


def claims(spec, mask: str) -> bool:
    """Whether the kernel claims `mask`, wildcards (`ANY_STATIC`, as fa3, fa4, cudnn, flex declare) expanded."""
    return mask in get_registry().claimed_masks(spec.masks)


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("mask", LARGER_MASKS)
def test_bf16_larger(name, mask, available_kernel, record_rows):
    """8 KV heads shared by 16 query heads, head_dim 128, 4K tokens."""
    spec = available_kernel(name)
    if not claims(spec, mask):
        pytest.skip(f"{name} does not claim {mask}")
    problem = Problem(kernel=name, mask=mask, seqlen=4096, heads_q=16, heads_kv=8, head_dim=128,
                      dtype="bfloat16", direction="bwd", device="cuda", seed=1, sampler="auto")
    if spec.supports and spec.supports(problem):  # a backward refused with its reason: check the forward
        problem = problem.with_(direction="fwd")
    row = run_problem(problem, RunOptions(warmup=1, repeat=3, samples=1, check=True))
    record_rows([row])
    assert row["status"] == "ok", f"{name} {mask}: {row['status']}: {row['reason']}"
    assert row["rel_err"] < 1e-2


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("mask", ("causal_document", "share_question", "global_sliding_window"))
def test_lse_primitives_on_crops(name, mask, available_kernel, record_rows):
    """forward_lse / backward_lse (where declared) on a crop of a mask, as a ring-attention inner kernel sees it."""
    spec = available_kernel(name)
    if spec.forward_lse is None or not claims(spec, mask):
        pytest.skip(f"{name}: no lse primitives for {mask}")
    m = build_mask(Problem(kernel=name, mask=mask, seqlen=4096, sampler="auto", seed=2))
    qr, kr = (1024, 3072), (512, 2560)
    part = m.crop(qr, kr)
    gen = torch.Generator(device="cuda").manual_seed(0)
    make = lambda s, h: torch.randn(1, s, h, 128, device="cuda", dtype=torch.bfloat16, generator=gen)  # noqa: E731
    q, k, v = make(2048, 16), make(2048, 8), make(2048, 8)
    out, lse = spec.forward_lse(q, k, v, part)
    want, want_lse = reference.forward_lse(q, k, v, part)
    finite = torch.isfinite(want_lse)
    assert torch.equal(finite, torch.isfinite(lse))
    assert rel_err(out, want) < 1e-2
    assert torch.allclose(lse[finite], want_lse[finite], atol=2e-2)
    record_rows([{"kernel": name, "test": "forward_lse", "mask": mask, "rel_err_out": rel_err(out, want)}])
    if spec.backward_lse is None:
        return
    dout = torch.randn_like(q)
    got = spec.backward_lse(dout, q, k, v, want, want_lse, part)
    ref = reference.backward_lse(dout, q, k, v, want, want_lse, part)
    errors = [rel_err(g, r) for g, r in zip(got, ref, strict=False)]
    record_rows([{"kernel": name, "test": "backward_lse", "mask": mask, "rel_err_dq_dk_dv": errors}])
    assert max(errors) < 1e-2, errors


def test_flex_block_mask_matches_create_block_mask(available_kernel):
    """The BlockMask built from slices equals create_block_mask's, block by block and pair by pair."""
    available_kernel("flex")
    from torch.nn.attention.flex_attention import create_block_mask

    from longca_plugin_flex.blockmask import block_mask_from_slices, flashmask_mask_mod

    for mask in ("causal_document", "share_question", "global_sliding_window", "block_causal_document"):
        m = build_mask(Problem(kernel="flex", mask=mask, seqlen=8192, sampler="auto", seed=4))
        ours = block_mask_from_slices(m.slices, m.seqlen, m.seqlen, "cuda")
        theirs = create_block_mask(flashmask_mask_mod(m.slices, m.seqlen, m.seqlen, "cuda"), None, None,
                                   m.seqlen, m.seqlen, device="cuda")
        assert torch.equal(ours.to_dense() > 0, theirs.to_dense() > 0), mask
        dense = torch.from_numpy(m.dense((0, 512), (0, m.seqlen))).cuda()
        rows = torch.arange(512, device="cuda")[:, None]
        cols = torch.arange(m.seqlen, device="cuda")[None, :]
        assert torch.equal(ours.mask_mod(0, 0, rows, cols), dense), mask
        assert np.isfinite(m.area)
