"""The core's block-sparse layouts in the forms FlashInfer's sparse wrappers take.

`BlockSparseAttentionWrapper` plans one BSR pattern (row pointers, column indices) shared by
every head. The core's masks differ per KV group, so each group becomes its own diagonal band
of one larger BSR matrix: the tokens of group g occupy rows and columns [g*S, (g+1)*S), its
queries the `rep = Hq / Hkv` heads of one KV head (`fold`). This is the layout FlashInfer's
`VariableBlockSparseAttentionWrapper` builds internally (KV heads folded into the sequence).
`VariableBlockSparseAttentionWrapper` takes the per-KV-head bool map and block sizes as they are.
"""
from __future__ import annotations

from typing import Any

import numpy as np

INT32_MAX = 2**31 - 1


def bsr(keep: Any) -> tuple[Any, Any]:
    """(indptr, indices) int32 of the folded BSR matrix of a (groups, nqb, nkb) bool tensor."""
    import torch

    groups, rows, cols = keep.shape
    group, _, col = keep.nonzero(as_tuple=True)  # row-major: by group, then row, then column
    indices = (group * cols + col).to(torch.int32)
    counts = keep.reshape(groups * rows, cols).sum(dim=1)
    indptr = torch.zeros(groups * rows + 1, dtype=torch.int64, device=keep.device)
    indptr[1:] = counts.cumsum(0)
    return indptr.to(torch.int32), indices


def fold_q(q: Any, groups: int) -> Any:
    """(1, S, Hq, D) -> (groups * S, Hq / groups, D): each KV group's queries as one sequence."""
    _, seqlen, heads, dim = q.shape
    return q[0].reshape(seqlen, groups, heads // groups, dim).transpose(0, 1).reshape(groups * seqlen, -1, dim)


def fold_kv(x: Any) -> Any:
    """(1, S, Hkv, D) -> (Hkv * S, 1, D)."""
    _, seqlen, heads, dim = x.shape
    return x[0].transpose(0, 1).reshape(heads * seqlen, 1, dim)


def unfold_out(out: Any, groups: int, seqlen: int) -> Any:
    """(groups * S, rep, D) -> (1, S, groups * rep, D)."""
    _, rep, dim = out.shape
    return out.view(groups, seqlen, rep, dim).permute(1, 0, 2, 3).reshape(1, seqlen, groups * rep, dim)


def variable_tokens(keep: np.ndarray, col_sizes: np.ndarray) -> int:
    """Key tokens the variable wrapper lists (one int32 index each): kept columns' sizes, summed."""
    return int((keep.sum(axis=1) * col_sizes[None, :]).sum())


def variable_tokens_estimate(groups: int, seqlen: int, block: int, density: float) -> float:
    """The same count before the mask is drawn: blocks average 3/4 of `block` tokens."""
    rows = seqlen / (0.75 * block)
    return groups * rows * density * seqlen
