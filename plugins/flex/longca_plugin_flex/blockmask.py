"""A FlexAttention BlockMask built directly from mask slices, without evaluating S² positions.

`create_block_mask` evaluates a mask function at every (query, key) pair to classify blocks.
The slice representation already knows its geometry: `block_map` classifies every 128 x 128
block as empty, partial or full in time proportional to the number of slices times blocks, and
the FlashMask column bounds give one vectorised `mask_mod` valid for all 12 static masks: key k
is masked for rows in [UTS[k], UTE[k]) and [LTS[k], LTE[k]) (a crop that needs more intervals
a key gets one pair of tables per interval). The kernel evaluates that `mask_mod` only inside
partial blocks.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from longca import plugin

if TYPE_CHECKING:  # pragma: no cover - torch is imported where a mask is built: the plugin registers without it
    import torch

BLOCK = 128


def flashmask_mask_mod(slices: np.ndarray, seqlen_q: int, seqlen_k: int, device) -> Callable:
    """mask_mod(b, h, q_idx, kv_idx) -> may attend, from the FlashMask column bounds of `slices`.

    Key k may be seen by row q unless UTS[k] <= q < UTE[k] or LTS[k] <= q < LTE[k]. A bound that
    is the same for every key is a constant and one that is `kv_idx + c` (clipped) is arithmetic,
    so only the bounds that are neither are gathered: a causal crop reads `q_idx >= kv_idx`, a
    causal-document one gathers one bound, where the four gathers of the plain form cost the
    kernel its speed (a CP strategy's crops are all given in this form).
    """
    try:
        bounds = plugin.flashmask_bounds(slices, seqlen_q, seqlen_k)
        pairs = [(bounds[start], bounds[end]) for start, end in (("UTS", "UTE"), ("LTS", "LTE"))]
    except ValueError:  # a column masked in more than two intervals (a crop of a blockwise mask)
        pairs = column_interval_tables(slices, seqlen_q, seqlen_k)
    intervals = [(_bound(start, device), _bound(end, device))
                 for start, end in pairs if not np.array_equal(start, end)]  # empty for every key: drops out

    def mask_mod(b, h, q_idx, kv_idx):
        allowed: Any = True
        for start, end in intervals:  # outside [start, end): q < start or q >= end
            allowed = _and(allowed, _or(start.below(q_idx, kv_idx, seqlen_q), end.at_or_above(q_idx, kv_idx, seqlen_q)))
        if isinstance(allowed, bool):
            return q_idx >= 0 if allowed else q_idx < 0
        return allowed

    return mask_mod


def column_interval_tables(slices: np.ndarray, seqlen_q: int, seqlen_k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The i-th masked row interval of every key column as a (starts, ends) pair of per-key tables, for
    i up to the most any column has; a column with fewer gets empty ones (start == end)."""
    cols, starts, ends = plugin.masked_row_intervals(slices, seqlen_q, seqlen_k)
    rank = np.arange(len(cols)) - np.searchsorted(cols, cols)  # which interval of its column
    tables = []
    for i in range(int(rank.max()) + 1 if len(rank) else 0):
        start = np.full(seqlen_k, seqlen_q, dtype=np.int64)
        end = start.copy()
        start[cols[rank == i]], end[cols[rank == i]] = starts[rank == i], ends[rank == i]
        tables.append((start, end))
    return tables


class _Bound:
    """One per-key bound B[k] of the mask_mod: the comparisons `q < B[k]` and `q >= B[k]`."""

    def __init__(self, const: int | None = None, shift: tuple[int, int | None, int | None] | None = None,
                 table: torch.Tensor | None = None):
        self.const, self.shift, self.table = const, shift, table

    def below(self, q, kv, seqlen_q: int) -> Any:
        if self.const is not None:  # rows are 0 <= q < seqlen_q
            return False if self.const <= 0 else True if self.const >= seqlen_q else q < self.const
        if self.shift is not None:  # B = min(max(kv + c, lo), hi), lo / hi None where no key is clipped
            c, lo, hi = self.shift
            term: Any = q < (kv + c if c else kv)
            if lo is not None:
                term = _or(term, q < lo)
            return _and(term, q < hi) if hi is not None else term
        assert self.table is not None
        return q < self.table[kv]

    def at_or_above(self, q, kv, seqlen_q: int) -> Any:
        if self.const is not None:
            return True if self.const <= 0 else False if self.const >= seqlen_q else q >= self.const
        if self.shift is not None:
            c, lo, hi = self.shift
            term: Any = q >= (kv + c if c else kv)
            if lo is not None:
                term = _and(term, q >= lo)
            return _or(term, q >= hi) if hi is not None else term
        assert self.table is not None
        return q >= self.table[kv]


def _bound(values: np.ndarray, device) -> _Bound:
    """The cheapest exact form of a per-key bound: a constant, `kv + c` clipped to [lo, hi], or a table."""
    lo, hi = int(values.min()), int(values.max())
    if lo == hi:
        return _Bound(const=lo)
    keys = np.arange(len(values))
    inside = np.flatnonzero((values > lo) & (values < hi))
    candidates = {int(values[inside[0]] - inside[0])} if len(inside) else {lo, hi - len(values) + 1}
    for c in candidates:
        if np.array_equal(values, np.clip(keys + c, lo, hi)):
            return _Bound(shift=(c, lo if lo > c else None, hi if hi < c + len(values) - 1 else None))
    import torch

    return _Bound(table=torch.from_numpy(values.astype(np.int32)).to(device))


def _and(a: Any, b: Any) -> Any:
    """`a & b` where either may be a Python bool (a term known for every pair)."""
    if a is False or b is False:
        return False
    return b if a is True else a if b is True else a & b


def _or(a: Any, b: Any) -> Any:
    if a is True or b is True:
        return True
    return b if a is False else a if b is False else a | b


def _block_lists(selected: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(counts (nqb,), indices (nqb, nkb)) with each row's selected key blocks first, in order."""
    import torch

    counts = selected.sum(axis=1).astype(np.int32)
    order = np.argsort(~selected, axis=1, kind="stable").astype(np.int32)
    return torch.from_numpy(counts), torch.from_numpy(order)


def block_mask_from_slices(slices: np.ndarray, seqlen_q: int, seqlen_k: int, device, block: int = BLOCK):
    """The BlockMask of `slices` (shared by every batch and head), via `BlockMask.from_kv_blocks`."""
    from torch.nn.attention.flex_attention import BlockMask

    slices = plugin.slices_array(slices)
    bmap = plugin.block_map(slices, seqlen_q, seqlen_k, block, block)
    kv_num, kv_idx = _block_lists(bmap == plugin.PARTIAL)
    full_num, full_idx = _block_lists(bmap == plugin.FULL_BLOCK)
    put = lambda t: t[None, None].to(device)  # noqa: E731 - (B=1, H=1, ...) broadcast over batch and heads
    return BlockMask.from_kv_blocks(put(kv_num), put(kv_idx), put(full_num), put(full_idx), BLOCK_SIZE=block,
                                    mask_mod=flashmask_mask_mod(slices, seqlen_q, seqlen_k, device),
                                    seq_lengths=(seqlen_q, seqlen_k))
