"""The metadata prepare hands cuDNN's block-sparse attention, checked on a CPU against the mask itself, and
the whole plugin (scatter, padding, lists, gather, autograd) through a float32 emulation of the library.

The library needs an SM90 GPU (tests/test_gpu_bsa.py runs it); here its arguments are read back the
way its documentation reads them (independently of the plugin's code) and compared with
`mask.dense()`, and `emulate.py` computes what those arguments mean, so that out, dq, dk, dv can be
compared with longca's reference.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from longca.plugin import Problem, UnsupportedError, make_inputs, problem_mask, reference_attention
from longca_plugin_cudnn_bsa import kernel, metadata
from longca_testing import assert_close

pytestmark = pytest.mark.numerics  # float results: CI runs these again under another ATEN_CPU_CAPABILITY


def problem(mask, seqlen, block, heads=(4, 4), batch=1, direction="fwd", head_dim=16, head_dim_v=None, density=0.4):
    return Problem(kernel="cudnn-bsa", mask=mask, seqlen=seqlen, heads_q=heads[0], heads_kv=heads[1],
                   head_dim=head_dim, head_dim_v=head_dim_v, batch=batch, dtype="float32", direction=direction,
                   mask_params={"block": block, "density": density})


def read_back(meta, heads_q):
    """bool (Hq, S, S) of the token pairs the arguments let the kernel attend, in the problem's tokens: query
    tile i attends the first count(i) listed key tiles; keys past a key tile's block_sizes entry are padding."""
    tile, s = meta.tile, meta.seqlen
    q_pos = meta.q_dest if meta.q_dest is not None else torch.arange(s)
    k_pos = meta.k_dest if meta.k_dest is not None else torch.arange(s)
    index = meta.index[0].long()
    counts = meta.nums[0].long() if meta.nums is not None else torch.full(index.shape[:2], meta.num)
    key_tiles = -(-meta.k_len // tile)
    allowed = torch.zeros(heads_q, index.shape[1], key_tiles, dtype=torch.bool)
    for h in range(heads_q):
        for i in range(index.shape[1]):
            allowed[h, i, index[h, i, :counts[h, i]]] = True
    real = torch.ones(meta.k_len, dtype=torch.bool)
    if meta.block_sizes is not None:
        positions = torch.arange(meta.k_len)
        real = (positions % tile) < meta.block_sizes.long()[positions // tile]
    return allowed[:, q_pos // tile][:, :, k_pos // tile] & real[k_pos][None, None, :]


# mask, S, block, heads, batch, tile, scattered (variable blocks), fixed count (one count for every row)
LAYOUTS = [
    ("block_sparse_uniform", 256, 64, (4, 4), 1, 64, False, True),
    ("block_sparse_uniform", 200, 64, (4, 2), 2, 64, False, True),  # q padded to 256 for the 64-token forward
    ("block_sparse_uniform", 300, 128, (4, 4), 1, 128, False, True),  # last tile cut at S: the kernel's own tail
    ("block_sparse_uniform", 384, 192, (2, 2), 1, 64, False, True),  # three 64-token tiles per block
    ("block_sparse_uniform", 512, 256, (4, 2), 1, 128, False, True),  # two 128-token tiles per block
    ("block_sparse_uniform", 1000, 128, (2, 1), 1, 128, False, True),
    ("block_sparse_variable", 300, 64, (4, 2), 1, 64, True, True),  # blocks of 32-64 tokens, one tile each
    ("block_sparse_variable", 700, 128, (2, 2), 2, 128, True, True),
    ("block_sparse_variable", 500, 192, (2, 2), 1, 64, True, False),  # blocks of 96-192: 2 or 3 tiles each
]


@pytest.mark.parametrize("mask,seqlen,block,heads,batch,tile,scattered,fixed", LAYOUTS)
def test_metadata_is_the_mask(mask, seqlen, block, heads, batch, tile, scattered, fixed):
    p = problem(mask, seqlen, block, heads, batch)
    m = problem_mask(p)
    meta = metadata.build(m.layout, block, batch, heads[0], "cpu")
    assert meta.tile == tile and meta.scattered == scattered and (meta.nums is None) == fixed
    index = meta.index
    assert index.dtype == torch.int32 and index.is_contiguous() and index.shape[:3] == (batch, heads[0],
                                                                                        -(-meta.q_len // tile))
    assert all(torch.equal(index[b], index[0]) for b in range(batch))  # one mask for every batch entry
    counts = meta.nums.long() if meta.nums is not None else torch.full(index.shape[:3], meta.num)
    listed = torch.arange(index.shape[-1]) < counts[..., None]
    ordered = torch.where(listed, index.long(), -1)
    assert bool(((ordered[..., 1:] > ordered[..., :-1]) | ~listed[..., 1:]).all())  # ascending, no repeats
    assert 1 <= meta.num <= index.shape[-1] and not meta.allow_empty
    if tile == 64:
        assert meta.q_len % 64 == 0  # the SM90 64-token forward's seqlen_q rule
    if scattered:
        dest = meta.k_dest
        assert dest.unique().numel() == seqlen and meta.k_len % tile == 0
        per_tile = torch.bincount(dest // tile, minlength=meta.k_len // tile)
        assert torch.equal(per_tile.int(), meta.block_sizes)  # block_sizes: the real keys of each tile ...
        assert bool(((dest % tile) < meta.block_sizes.long()[dest // tile]).all())  # ... its first positions
    else:
        assert meta.block_sizes is None and meta.k_len == seqlen and meta.q_dest is None
        assert meta.q_len == (-(-seqlen // 64) * 64 if tile == 64 else seqlen)
    want = torch.from_numpy(m.dense()).repeat_interleave(heads[0] // m.layout.groups, dim=0)
    assert torch.equal(read_back(meta, heads[0]), want)


def test_block_rule():
    assert [metadata.tile_for_block(b) for b in (64, 128, 192, 256, 320, 384)] == [64, 128, 64, 128, 64, 128]
    for bad in (16, 32, 96, 100, 200):
        assert "multiple of 64" in metadata.block_reason(bad)
    assert all(metadata.block_reason(b) is None for b in (64, 128, 192, 256))


def test_tiling_of_variable_blocks():
    t = metadata.tiling(np.array([0, 40, 104, 200, 230]), 64)  # blocks of 40, 64, 96, 30 tokens
    assert t.tile_block.tolist() == [0, 1, 2, 2, 3] and t.tile_valid.tolist() == [40, 64, 64, 32, 30]
    assert t.dest.tolist()[:41] == [*range(40), 64] and t.dest[-1] == 4 * 64 + 29 and t.padded_len == 320
    assert metadata.tiling(np.array([0, 128, 256, 300]), 64).dest is None  # whole tiles: tokens stay put


def test_a_causal_layout_is_refused(emulated):
    p = Problem(kernel="cudnn-bsa", mask="topk_sparse", seqlen=256, heads_q=2, heads_kv=2, head_dim=16,
                dtype="float32", mask_params={"block": 64, "topk": 2})
    m = problem_mask(p)
    q, _, _ = make_inputs(p)
    with pytest.raises(UnsupportedError, match="non-causal"):
        kernel.prepare_with(p, m, q, (emulated.forward, emulated.backward))


# mask, S, block, heads, batch, head dims (Q/K, V), directions
PLUGIN_CASES = [
    ("block_sparse_uniform", 256, 64, (4, 4), 1, (32, None), ("fwd", "bwd")),
    ("block_sparse_uniform", 200, 64, (4, 4), 2, (32, None), ("fwd", "bwd")),  # q padded at its end
    ("block_sparse_uniform", 300, 128, (2, 2), 1, (32, None), ("fwd", "bwd")),
    ("block_sparse_uniform", 512, 256, (4, 2), 1, (32, 16), ("fwd",)),  # GQA, V of its own head dim
    ("block_sparse_variable", 300, 64, (2, 2), 1, (32, None), ("fwd", "bwd")),
    ("block_sparse_variable", 700, 128, (4, 2), 2, (32, None), ("fwd",)),
    ("block_sparse_variable", 500, 192, (2, 2), 1, (32, None), ("fwd", "bwd")),  # variable counts per row
]


@pytest.mark.parametrize("mask,seqlen,block,heads,batch,dims,directions", PLUGIN_CASES)
def test_plugin_through_the_emulated_library_matches_reference(emulated, mask, seqlen, block, heads, batch, dims,
                                                               directions):
    for direction in directions:
        p = problem(mask, seqlen, block, heads, batch, direction, *dims)
        m = problem_mask(p)
        q, k, v = make_inputs(p, requires_grad=direction != "fwd")
        prepared = kernel.prepare_with(p, m, q, (emulated.forward, emulated.backward))
        out = kernel.run(prepared, q, k, v)
        ref = reference_attention(q, k, v, m)
        assert out.shape == ref.shape and out.dtype == q.dtype
        assert_close(out, ref, 1e-5, f"{direction} out")
        if direction == "fwd":
            continue
        dout = torch.randn_like(out)
        got = torch.autograd.grad(out, (q, k, v), dout)
        want = torch.autograd.grad(ref, (q, k, v), dout)
        for name, g, w in zip("qkv", got, want, strict=True):
            assert_close(g, w, 1e-5, f"d{name}")


def test_the_timed_call_is_one_library_call_on_the_given_tensors(emulated, monkeypatch):
    """Uniform blocks of whole tiles: run() makes one forward call on q, k, v themselves (no copy) with the
    metadata prepare made; the backward one backward call; nothing is rebuilt after prepare."""
    p = problem("block_sparse_uniform", 256, 64, direction="bwd")
    m = problem_mask(p)
    q, k, v = make_inputs(p, requires_grad=True)
    seen = []

    def forward(q_, k_, v_, index, *args, **kwargs):
        seen.append((q_.data_ptr(), k_.data_ptr(), v_.data_ptr(), index.data_ptr()))
        return emulated.forward(q_, k_, v_, index, *args, **kwargs)

    prepared = kernel.prepare_with(p, m, q, (forward, emulated.backward))
    monkeypatch.setattr(metadata, "build", lambda *a, **kw: pytest.fail("metadata rebuilt after prepare"))
    emulated.CALLS.clear()
    out = kernel.run(prepared, q, k, v)
    assert emulated.CALLS == ["forward"]
    assert seen == [(q.data_ptr(), k.data_ptr(), v.data_ptr(), prepared.meta.index.data_ptr())]
    torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert emulated.CALLS == ["forward", "backward"]
