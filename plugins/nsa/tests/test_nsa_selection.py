"""The selection handed to fla (per-token block indices) against the mask, and fla's own reference of
NSA's selected attention (`naive_nsa_selection`, plain torch) fed with it against longca's reference."""
import numpy as np
import pytest
import torch

from longca.plugin import TOKEN_SPARSE_MASKS, KernelSpec, Problem, get_registry, problem_mask, reference_forward_lse
from longca_plugin_nsa import hooks, selection

pytestmark = pytest.mark.numerics  # float results: CI runs these again under another ATEN_CPU_CAPABILITY


def problem(seqlen=1000, heads=(32, 2), block=64, topk=4, **changes):
    return Problem(kernel="nsa", mask="topk_sparse", seqlen=seqlen, heads_q=heads[0], heads_kv=heads[1],
                   head_dim=64, dtype="bfloat16", device="cuda", mask_params={"block": block, "topk": topk}, **changes)


def dense_of(picked: selection.Selection, seqlen: int) -> np.ndarray:
    """Bool (groups, seqlen, seqlen) of the pairs the selection attends (batch 0), written out token by token."""
    idx = picked.indices[0].numpy()
    counts = picked.counts[0].numpy()
    out = np.zeros((idx.shape[1], seqlen, seqlen), dtype=bool)
    for t in range(seqlen):
        for g in range(idx.shape[1]):
            assert (idx[t, g, counts[t, g]:] == -1).all()
            for b in idx[t, g, :counts[t, g]]:
                out[g, t, b * picked.block:min(seqlen, (b + 1) * picked.block)] = True
    return out & np.tril(np.ones((seqlen, seqlen), dtype=bool))[None]


@pytest.mark.parametrize("seqlen,block,topk", [(1000, 64, 4), (512, 32, 3), (256, 64, 16), (1024, 16, 5)])
def test_selection_is_the_mask(seqlen, block, topk):
    mask = problem_mask(problem(seqlen, block=block, topk=topk))
    picked = selection.from_layout(mask.layout, 2, "cpu")
    nb = -(-seqlen // block)
    width = picked.indices.shape[-1]
    assert picked.indices.shape == (2, seqlen, 2, width) and picked.counts.shape == (2, seqlen, 2)
    assert width == selection.width(min(topk, nb)) and width & (width - 1) == 0  # a power of two
    assert torch.equal(picked.indices[0], picked.indices[1])  # one mask for every sequence of the batch
    assert np.array_equal(dense_of(picked, seqlen), mask.dense())


def test_width_is_the_next_power_of_two():
    assert [selection.width(n) for n in (1, 2, 3, 4, 5, 16, 17)] == [1, 2, 4, 4, 8, 16, 32]


def test_selection_refuses_a_layout_without_causal_uniform_blocks():
    other = Problem(kernel="nsa", mask="block_sparse_variable", seqlen=500, heads_q=32, heads_kv=2)
    with pytest.raises(ValueError, match="causal layout of uniform blocks"):
        selection.from_layout(problem_mask(other).layout, 1, "cpu")


@pytest.mark.filterwarnings("ignore:Triton is not supported:UserWarning")  # fla on a CPU machine
def test_fla_reference_on_the_selection_matches_longca_reference():
    """fla's plain-torch NSA selection with our indices computes longca's reference on the mask."""
    from fla.ops.nsa.naive import naive_nsa_selection

    p = problem(seqlen=200, heads=(16, 1), block=16, topk=3)
    mask = problem_mask(p)
    picked = selection.from_layout(mask.layout, 1, "cpu")
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 200, h, 32, generator=gen, dtype=torch.float64) for h in (16, 1, 1))
    got = naive_nsa_selection(q, k, v, picked.indices, block_size=16)
    want, _ = reference_forward_lse(q.float(), k.float(), v.float(), mask)
    assert float((got.float() - want).norm() / want.norm()) < 1e-5


def test_spec_and_refusals():
    spec = get_registry().kernel("nsa")
    assert isinstance(spec, KernelSpec) and spec.masks == TOKEN_SPARSE_MASKS == ("topk_sparse",)
    assert spec.devices == ("cuda",) and spec.backward and spec.head_dims == (64, 128)
    assert hooks.supports(problem()) is None
    assert hooks.supports(problem(heads=(64, 4))) is None
    for heads in ((64, 8), (32, 32), (48, 2)):
        assert "power-of-two number of query heads per KV head, at least 16" in hooks.supports(problem(heads=heads))
    assert "blocks of 16, 32, 64 tokens" in hooks.supports(problem(block=128))


def test_unavailable_on_this_machine_says_why():
    reason = hooks.available()
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible: the conformance suite runs the kernel")
    assert reason is not None and "no CUDA GPU is visible" in reason and "Triton" in reason
