"""flex-sparse on CPU: tile classification, the BlockMask, one compiled forward against the reference.

torch 2.13 runs FlexAttention's forward on CPU (compiled C++ kernel) but has no CPU backward.
The conformance suite runs here on CUDA only: its CPU cases compile four kernels (about 95 s on
two cores, measured), so the CPU forward is checked once below instead (about 36 s).
"""
import numpy as np
import pytest
import torch

from longca.plugin import Problem, problem_mask
from longca_plugin_flex_sparse import blockmask, hooks
from longca_testing import RunOptions, conformance_tests, run_problem

pytestmark = pytest.mark.numerics  # float results: CI runs these again under another ATEN_CPU_CAPABILITY


def problem(mask, seqlen=256, heads=(4, 2), block=64, direction="fwd", device="cpu"):
    params = {"block": block, "topk": 3} if mask == "topk_sparse" else {"block": block, "density": 0.5}
    return Problem(kernel="flex-sparse", mask=mask, seqlen=seqlen, heads_q=heads[0], heads_kv=heads[1],
                   head_dim=32, dtype="float32", direction=direction, device=device, mask_params=params)


def brute_force(mask, tile):
    """(full, partial) per (group, query tile, key tile) from the dense mask."""
    dense = mask.dense()
    groups, seqlen, _ = dense.shape
    n = -(-seqlen // tile)
    full = np.zeros((groups, n, n), dtype=bool)
    partial = np.zeros_like(full)
    for i in range(n):
        for j in range(n):
            cell = dense[:, i * tile:(i + 1) * tile, j * tile:(j + 1) * tile]
            full[:, i, j] = cell.all(axis=(1, 2))
            partial[:, i, j] = cell.any(axis=(1, 2)) & ~full[:, i, j]
    return full, partial


@pytest.mark.parametrize("mask,seqlen,block", [
    ("block_sparse_uniform", 512, 64), ("block_sparse_uniform", 500, 128), ("block_sparse_uniform", 512, 256),
    ("block_sparse_variable", 700, 64), ("block_sparse_variable", 700, 128), ("block_sparse_variable", 300, 16),
    ("topk_sparse", 1000, 64), ("topk_sparse", 700, 32), ("topk_sparse", 700, 256),
])
def test_classify_matches_dense_mask(mask, seqlen, block):
    m = problem_mask(problem(mask, seqlen, block=block))
    tile = blockmask.tile_size(mask, block)
    assert tile == (block if mask == "block_sparse_uniform" and block % 128 == 0 else 128)
    full, partial = blockmask.classify(m.layout, tile, "cpu")
    want_full, want_partial = brute_force(m, tile)
    assert np.array_equal(full.numpy(), want_full) and np.array_equal(partial.numpy(), want_partial)
    if mask == "block_sparse_uniform" and tile == block:
        assert not partial.any()  # the map itself: every kept block is a full tile


@pytest.mark.parametrize("mask", ["block_sparse_variable", "topk_sparse"])
def test_block_mask_layout(mask):
    m = problem_mask(problem(mask, 700, heads=(4, 2)))
    built = blockmask.build(m.layout, 4, 128, "cpu")
    full, partial = brute_force(m, 128)
    assert (built.full_tiles, built.partial_tiles) == (int(full.sum()), int(partial.sum()))
    present = built.block_mask.to_dense()[0].bool()  # (heads, tiles, tiles): full or partial
    assert torch.equal(present, torch.from_numpy(full | partial).repeat_interleave(2, 0))
    mask_mod = blockmask.lookup_mask_mod(m.layout, 4, "cpu")
    q, k = torch.arange(700)[:, None], torch.arange(700)[None, :]
    for head in range(4):
        got = mask_mod(0, torch.tensor(head), q, k)
        assert torch.equal(got, torch.from_numpy(m.dense()[head // 2]))


@pytest.mark.parametrize("mask", ["block_sparse_variable", "topk_sparse"])
def test_forward_on_cpu_matches_reference(mask):
    from longca_plugin_flex_sparse.hooks import cpu_compile_refusal

    refused = cpu_compile_refusal()
    if refused:  # CI runs these again under ATEN_CPU_CAPABILITY=default on a CPU without AVX-512
        pytest.skip(refused)
    row = run_problem(problem(mask, seqlen=512, heads=(4, 2)), RunOptions(warmup=0, repeat=1, samples=1, check=True))
    assert row["status"] == "ok", row["reason"]
    assert row["rel_err"] < 1e-4


def test_a_cpu_torch_cannot_compile_flex_on_is_refused(monkeypatch):
    import torch._inductor.kernel.flex.flex_cpu as flex_cpu

    monkeypatch.setattr(flex_cpu, "check_cpu_supported", lambda: False)
    row = run_problem(problem("block_sparse_uniform"), RunOptions(check=True))
    assert row["status"] == "unsupported" and "check_cpu_supported() needs AVX2" in row["reason"]


def test_backward_on_cpu_is_refused():
    row = run_problem(problem("block_sparse_uniform", direction="bwd"), RunOptions(check=True))
    assert row["status"] == "unsupported" and "no backward on CPU" in row["reason"]


test_conformance_cuda = conformance_tests("flex-sparse", devices=("cuda",))  # one test per case; skipped without a GPU


def test_supports():
    assert hooks.supports(problem("block_sparse_uniform", device="cuda", direction="bwd")) is None
