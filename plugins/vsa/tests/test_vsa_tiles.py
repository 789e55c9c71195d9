"""The tile mapping of longca-plugin-vsa, checked on CPU against the float32 reference.

VSA's kernels need CUDA; what runs here is the documented semantics of their inputs (block i
on tile i, keys beyond `variable_block_sizes[i]` masked, padding rows dropped), applied by
`emulate` to the tensors `prepare` builds. The GPU suite runs the real kernels.
"""
import math

import pytest
import torch

from longca.plugin import Problem, make_inputs, problem_mask, reference_attention
from longca_plugin_vsa import kernel, library, tiles
from longca_plugin_vsa.hooks import supports
from longca_testing import assert_close

pytestmark = pytest.mark.numerics  # float results: CI runs these again under another ATEN_CPU_CAPABILITY


def emulate(q, k, v, block_map, block_sizes):
    """Block-sparse attention on (B, H, S_pad, D) tiles as VSA defines it, in float32."""
    tile = tiles.TILE
    padded = q.shape[2]
    token_tile = torch.arange(padded) // tile
    real_key = (torch.arange(padded) % tile) < block_sizes.long()[token_tile]
    allowed = block_map[:, :, token_tile][:, :, :, token_tile] & real_key
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    probs = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1).nan_to_num(0.0)
    return probs @ v.float(), None


def problem(mask, seqlen, direction="fwd", heads=(2, 2), **params):
    return Problem(kernel="vsa", mask=mask, seqlen=seqlen, heads_q=heads[0], heads_kv=heads[1], head_dim=16,
                   dtype="float32", direction=direction, mask_params={"block": 64, "density": 0.4, **params})


@pytest.mark.parametrize("mask,seqlen", [("block_sparse_uniform", 256), ("block_sparse_uniform", 200),
                                         ("block_sparse_variable", 300)])
def test_tiles_match_reference(mask, seqlen):
    p = problem(mask, seqlen, "bwd")
    m = problem_mask(p)
    q, k, v = make_inputs(p, requires_grad=True)
    t = tiles.make_tiles(m.layout, "cpu")
    assert (t.dest is None) == (mask == "block_sparse_uniform" and seqlen % 64 == 0)
    bmap = tiles.block_map(m.layout, 1, 2, "cpu")
    assert all(tiles.to_tiles(x, t).is_contiguous() for x in (q, k, v))  # vsa 0.0.3's sm90 backward needs it
    out, _ = emulate(tiles.to_tiles(q, t), tiles.to_tiles(k, t), tiles.to_tiles(v, t), bmap, t.block_sizes)
    out = tiles.from_tiles(out, t)
    ref = reference_attention(q, k, v, m)
    assert out.shape == q.shape
    assert_close(out, ref, 1e-5, "out")
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), dout)
    want = torch.autograd.grad(ref, (q, k, v), dout)
    for name, g, w in zip("qkv", got, want, strict=True):
        assert_close(g, w, 1e-5, f"d{name}")


def test_block_sizes_and_padding():
    m = problem_mask(problem("block_sparse_variable", 500))
    t = tiles.make_tiles(m.layout, "cpu")
    sizes = torch.from_numpy(m.layout.q_bounds).diff()
    assert t.block_sizes.dtype == torch.int32 and torch.equal(t.block_sizes.long(), sizes)
    assert t.padded_len == 64 * len(sizes) and int(sizes[:-1].min()) >= 32  # the last block is cut at S
    assert t.dest.unique().numel() == 500 and int(t.dest.max()) < t.padded_len


def test_layout_that_does_not_fit_is_refused():
    m = problem_mask(problem("block_sparse_variable", 512, block=128))
    with pytest.raises(ValueError, match="does not fit"):
        tiles.make_tiles(m.layout, "cpu")


def test_supports_reasons():
    assert "block must be 64" in supports(problem("block_sparse_uniform", 256, block=128))
    assert "block must be 64" in supports(Problem(kernel="vsa", mask="block_sparse_uniform", seqlen=256))
    assert "batch" in supports(problem("block_sparse_uniform", 256).with_(batch=2))
    assert supports(problem("block_sparse_variable", 256)) is None


def test_available_reasons(monkeypatch):
    """Library missing, or present without CUDA: each says so; prepare refuses with the reason."""
    monkeypatch.setattr(library, "installed", lambda: [])
    library.find.cache_clear()
    assert "neither fastvideo-kernel" in library.find("tk")[1]
    p = problem("block_sparse_uniform", 256)
    q, _, _ = make_inputs(p)
    with pytest.raises(RuntimeError, match="unavailable: neither"):
        kernel.prepare("tk", p, problem_mask(p), q)
    monkeypatch.setattr(library, "installed", lambda: ["vsa"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    library.find.cache_clear()
    assert "vsa installed, but no CUDA GPU is visible" in library.find("triton")[1]
    library.find.cache_clear()


FASTVIDEO_LAYOUT = {  # fastvideo-kernel 0.3.5's layout, cut to the names longca uses
    "fastvideo_kernel/__init__.py": "from fastvideo_kernel.block_sparse_attn import block_sparse_attn, "
                                    "block_sparse_attn_from_indices\n",
    "fastvideo_kernel/block_sparse_attn.py": "def block_sparse_attn(*a): pass\n"
                                             "def block_sparse_attn_from_indices(*a): pass\n"
                                             "def block_sparse_attn_triton(*a): return 'triton'\n",
    "fastvideo_kernel/triton_kernels/__init__.py": "",
    "fastvideo_kernel/triton_kernels/index.py": "def map_to_index(m): return (m,)\n",
}


def test_finds_the_triton_kernel_in_a_package_that_reexports_the_module_name(tmp_path, monkeypatch):
    """fastvideo_kernel re-exports the function block_sparse_attn under its module's name (seen on the H200)."""
    import sys

    for path, text in FASTVIDEO_LAYOUT.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("fastvideo_kernel")]:
        monkeypatch.delitem(sys.modules, name)
    backend, why = library._fastvideo("triton")
    assert why == "" and backend.kind == "triton" and backend.attn() == "triton"
    for name in [m for m in sys.modules if m.startswith("fastvideo_kernel")]:
        monkeypatch.delitem(sys.modules, name)
