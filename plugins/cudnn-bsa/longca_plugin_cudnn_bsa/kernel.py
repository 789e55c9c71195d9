"""prepare and run: the metadata once (untimed), then cuDNN's forward, with its explicit backward for autograd.

The library gives `block_sparse_attention_forward(q, k, v, q2k_block_index, block_sparse_num,
block_sizes, q2k_block_nums, *, sparse_block_size, allow_empty_block_nums, layout, ...)` -> {o_tensor,
lse_tensor} and `block_sparse_attention_backward(do, q, k, v, o, lse, <the same metadata>, *,
sparse_block_size, layout)` -> {dq_tensor, dk_tensor, dv_tensor}, no autograd of its own: the two
are joined by `longca.plugin.lse_attention`, as a user of the library joins them. longca's
(B, S, H, D) tensors are the library's layout "bshd", so they are passed without a copy.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from longca.plugin import UnsupportedError

from . import metadata


def library() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """cuDNN's (forward, backward) block-sparse attention functions."""
    from cudnn.block_sparse_attention import block_sparse_attention_backward, block_sparse_attention_forward

    return block_sparse_attention_forward, block_sparse_attention_backward


@dataclass
class Prepared:
    meta: metadata.Metadata
    forward: Callable[..., Any]  # block_sparse_attention_forward
    backward: Callable[..., Any]  # block_sparse_attention_backward

    def attention(self, q: Any, k: Any, v: Any) -> tuple[Any, Any]:
        m = self.meta
        res = self.forward(q, k, v, m.index, m.num, m.block_sizes, m.nums, sparse_block_size=m.tile,
                           allow_empty_block_nums=m.allow_empty, layout="bshd")
        return res["o_tensor"], res["lse_tensor"]

    def gradients(self, dout: Any, q: Any, k: Any, v: Any, out: Any, lse: Any) -> tuple[Any, Any, Any]:
        m = self.meta
        res = self.backward(dout.contiguous(), q, k, v, out, lse, m.index, m.num, m.block_sizes, m.nums,
                            sparse_block_size=m.tile, layout="bshd")
        return res["dq_tensor"], res["dk_tensor"], res["dv_tensor"]


def prepare_with(problem: Any, mask: Any, q: Any, functions: tuple[Callable[..., Any], Callable[..., Any]]) -> Prepared:
    """The metadata on q's device, for the given (forward, backward) functions."""
    block = int(mask.params.get("block", 0) or 0)
    reason = metadata.block_reason(block)
    if reason:
        raise UnsupportedError(reason)
    try:
        meta = metadata.build(mask.layout, block, q.shape[0], q.shape[2], q.device)
    except ValueError as exc:
        raise UnsupportedError(f"mask {mask.name!r}: {exc}") from None
    return Prepared(meta, *functions)


def prepare(problem: Any, mask: Any, q: Any, k: Any, v: Any) -> Prepared:
    return prepare_with(problem, mask, q, library())


def _scatter(x: Any, dest: Any, length: int) -> Any:
    """(B, S, H, D) -> (B, length, H, D), token t at dest[t], zeros elsewhere; differentiable."""
    padded = x.new_zeros(x.shape[0], length, *x.shape[2:])
    return padded.index_copy(1, dest, x)


def run(prepared: Prepared, q: Any, k: Any, v: Any) -> Any:
    """The timed call: the library's forward (and, through autograd, its backward). Uniform blocks that
    are whole tiles: q, k, v as they are (q padded at its end to a multiple of 64 for the 64-token
    forward when S is not). Other layouts: q, k, v scattered into padded tiles first, the output gathered
    back, as a user with variable blocks does."""
    from longca.plugin import lse_attention  # torch: loaded on first use, never at registration

    m = prepared.meta
    if m.scattered:
        q, k, v = _scatter(q, m.q_dest, m.q_len), _scatter(k, m.k_dest, m.k_len), _scatter(v, m.k_dest, m.k_len)
    elif m.q_pad:
        import torch.nn.functional as F

        q = F.pad(q, (0, 0, 0, 0, 0, m.q_pad))
    out = lse_attention(prepared.attention, prepared.gradients, q, k, v)
    if m.scattered:
        return out.index_select(1, m.q_dest)
    return out[:, :m.seqlen] if m.q_pad else out
