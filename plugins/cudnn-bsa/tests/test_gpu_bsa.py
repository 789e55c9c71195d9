"""cudnn-bsa on an SM90 GPU (`pytest -m longca_gpu plugins/cudnn-bsa`): the real library against longca's
float32 reference, every path of the plugin (64- and 128-token tiles, q padded at its end, blocks of
several tiles, variable blocks scattered into padded tiles with `block_sizes`, variable counts per row),
forward and backward, GQA forward, fp16 forward, V of its own head dim; the plugin's output against a
direct call of the library written here; one library call per timed forward. Skipped without a CUDA GPU
or without the library (the skip says which); refused (skipped, with the reason) on a GPU other than SM90.
"""
from __future__ import annotations

import pytest
import torch

from longca.plugin import Problem, make_inputs, problem_mask
from longca_plugin_cudnn_bsa import hooks, kernel
from longca_testing import RunOptions, rel_err, run_problem

pytestmark = [pytest.mark.longca_gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
OPTIONS = RunOptions(warmup=1, repeat=3, samples=1, check=True)


def _need_kernel(p: Problem) -> None:
    reason = hooks.available()
    if reason:
        pytest.skip(f"unavailable: {reason}")
    refused = hooks.supports(p)
    if refused and "sm_" in refused:
        pytest.skip(refused)


def _problem(mask, seqlen, block, heads=(4, 4), head_dim=128, head_dim_v=None, dtype="bfloat16", batch=1,
             direction="fwd", density=0.4) -> Problem:
    return Problem(kernel="cudnn-bsa", mask=mask, seqlen=seqlen, heads_q=heads[0], heads_kv=heads[1],
                   head_dim=head_dim, head_dim_v=head_dim_v, dtype=dtype, batch=batch, direction=direction,
                   device="cuda", seed=5, mask_params={"block": block, "density": density})


# mask, S, block, heads, head dims (Q/K, V), dtype, batch, directions: what each exercises
CASES = [
    ("block_sparse_uniform", 1024, 64, (4, 4), (128, None), "bfloat16", 1, ("fwd", "bwd")),  # 64-token tiles as is
    ("block_sparse_uniform", 1000, 64, (4, 4), (128, None), "bfloat16", 1, ("fwd", "bwd")),  # q padded to 1024
    ("block_sparse_uniform", 1024, 128, (4, 4), (128, None), "bfloat16", 1, ("fwd", "bwd")),  # 128-token tiles
    ("block_sparse_uniform", 1000, 128, (4, 4), (128, None), "bfloat16", 1, ("fwd", "bwd")),  # their q and kv tails
    ("block_sparse_uniform", 2048, 256, (4, 4), (128, None), "bfloat16", 1, ("fwd", "bwd")),  # 2 tiles a block
    ("block_sparse_uniform", 1152, 192, (4, 4), (128, None), "bfloat16", 1, ("fwd", "bwd")),  # 3 tiles a block
    ("block_sparse_variable", 1000, 64, (4, 4), (128, None), "bfloat16", 1, ("fwd", "bwd")),  # scattered, sizes
    ("block_sparse_variable", 1000, 128, (4, 4), (128, None), "bfloat16", 1, ("fwd", "bwd")),
    ("block_sparse_variable", 1500, 192, (4, 4), (128, None), "bfloat16", 1, ("fwd", "bwd")),  # counts per row
    ("block_sparse_uniform", 1024, 64, (4, 4), (128, None), "bfloat16", 2, ("fwd", "bwd")),  # batch 2
    ("block_sparse_uniform", 1024, 64, (8, 2), (64, None), "bfloat16", 1, ("fwd",)),  # GQA
    ("block_sparse_uniform", 1024, 128, (8, 2), (96, None), "bfloat16", 1, ("fwd",)),
    ("block_sparse_variable", 1000, 64, (8, 2), (128, None), "bfloat16", 1, ("fwd",)),
    ("block_sparse_uniform", 1024, 64, (4, 4), (64, None), "float16", 1, ("fwd",)),
    ("block_sparse_uniform", 1024, 128, (4, 4), (128, 64), "bfloat16", 1, ("fwd",)),  # V of its own head dim
]


def _params():
    for mask, seqlen, block, heads, dims, dtype, batch, directions in CASES:
        for direction in directions:
            label = f"{dims[0]}" + (f"-{dims[1]}" if dims[1] else "")
            yield pytest.param(mask, seqlen, block, heads, dims, dtype, batch, direction,
                               id=f"{mask}-S{seqlen}-b{block}-{heads[0]}:{heads[1]}-d{label}-{dtype}-B{batch}-{direction}")


@pytest.mark.parametrize("mask,seqlen,block,heads,dims,dtype,batch,direction", list(_params()))
def test_matches_reference(mask, seqlen, block, heads, dims, dtype, batch, direction):
    p = _problem(mask, seqlen, block, heads, *dims, dtype=dtype, batch=batch, direction=direction)
    _need_kernel(p)
    row = run_problem(p, OPTIONS)
    assert row["status"] == "ok", f"{row['status']}: {row['reason']} (errors {row.get('rel_err_detail')})"
    assert row["checked"] == "full" and row["tflops"] and row["peak_mem_bytes"]
    assert "cudnn.block_sparse_attention" in row["backend"]


def _direct_index(mask, batch: int, heads: int, device) -> tuple[torch.Tensor, int]:
    """q2k_block_index as a user writes it for uniform blocks of 64 or 128 (the tile): each query block's kept
    key blocks, ascending (torch.nonzero's order), one list per query head; every row keeps the same number."""
    keep = torch.from_numpy(mask.layout.keep)  # (groups, query blocks, key blocks)
    kept = int(mask.params["kept_per_row"])
    cols = torch.nonzero(keep)[:, 2].view(*keep.shape[:2], kept)
    per_head = cols.repeat_interleave(heads // keep.shape[0], dim=0)
    return per_head[None].expand(batch, -1, -1, -1).to(torch.int32).contiguous().to(device), kept


@pytest.mark.parametrize("block", (64, 128))
def test_plugin_is_the_direct_library_call(block):
    """The plugin's forward is bit for bit a hand-written call of block_sparse_attention_forward on the same
    tensors, and its gradients those of block_sparse_attention_backward given that call's out and lse (up to
    the order of the backward's float32 accumulation)."""
    from cudnn.block_sparse_attention import block_sparse_attention_backward, block_sparse_attention_forward

    p = _problem("block_sparse_uniform", 2048, block, heads=(4, 4), batch=2, direction="bwd")
    _need_kernel(p)
    mask = problem_mask(p)
    q, k, v = make_inputs(p, requires_grad=True)
    index, kept = _direct_index(mask, 2, 4, q.device)
    res = block_sparse_attention_forward(q.detach(), k.detach(), v.detach(), index, kept, sparse_block_size=block,
                                         layout="bshd")
    out_direct, lse = res["o_tensor"], res["lse_tensor"]
    dout = torch.randn_like(out_direct)
    grads_direct = block_sparse_attention_backward(dout, q.detach(), k.detach(), v.detach(), out_direct, lse, index,
                                                   kept, sparse_block_size=block, layout="bshd")
    prepared = kernel.prepare(p, mask, q, k, v)
    assert prepared.meta.nums is None and prepared.meta.num == kept and torch.equal(prepared.meta.index, index)
    out = kernel.run(prepared, q, k, v)
    assert torch.equal(out, out_direct)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    for name, got, want in zip(("dq", "dk", "dv"), grads, grads_direct.values(), strict=True):
        assert rel_err(got, want) < 5e-3, name  # not bitwise: the backward accumulates in float32 atomics


def test_the_timed_forward_is_one_library_call_on_the_inputs():
    p = _problem("block_sparse_uniform", 1024, 64)
    _need_kernel(p)
    mask = problem_mask(p)
    q, k, v = make_inputs(p)
    prepared = kernel.prepare(p, mask, q, k, v)
    calls = []
    library_forward = prepared.forward

    def spy(q_, k_, v_, index, *args, **kwargs):
        calls.append((q_.data_ptr(), k_.data_ptr(), v_.data_ptr(), index.data_ptr()))
        return library_forward(q_, k_, v_, index, *args, **kwargs)

    prepared.forward = spy
    with torch.no_grad():
        kernel.run(prepared, q, k, v)
    assert calls == [(q.data_ptr(), k.data_ptr(), v.data_ptr(), prepared.meta.index.data_ptr())]
