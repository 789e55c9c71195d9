"""What every built mask must satisfy, checked on every build (cheap: O(n log n) in the slices).

A static mask's slices are typed rectangles that must be *pair-disjoint*: no (query, key) pair
may lie in two slices (their rectangles may overlap where one slice's triangle leaves room for
the other's). Then the area, and FLOPs from it, is the exact count of attended pairs. A
block-sparse layout needs bounds from 0 to S and a keep array of matching shape.
"""
from __future__ import annotations

import numpy as np

from . import slices as sl
from .mask import BlockSparseLayout, Mask


def slice_problem(slices: np.ndarray, seqlen_q: int, seqlen_k: int) -> str | None:
    """Why an (n, 5) slice array is malformed (type, shape, ranges), or None. O(n)."""
    if not isinstance(slices, np.ndarray) or slices.ndim != 2 or slices.shape[1] != 5:
        shape = getattr(slices, "shape", None)
        return (f"slices must be an (n, 5) integer numpy array (q0, q1, k0, k1, type), got "
                f"{type(slices).__name__}{f' of shape {shape}' if shape is not None else ''}; "
                f"build it with longca.plugin.slices_array(...)")
    if not np.issubdtype(slices.dtype, np.integer):
        return f"slices must hold integers, got dtype {slices.dtype}"
    q0, q1, k0, k1, t = slices.T
    bad_type = ~np.isin(t, list(sl.TYPE_NAMES))
    if bad_type.any():
        i = int(np.flatnonzero(bad_type)[0])
        return (f"slice {i} {slices[i].tolist()} has type {int(t[i])}; types are "
                + ", ".join(f"{k} {v.upper()}" for k, v in sl.TYPE_NAMES.items()))
    bad = (q0 < 0) | (q1 < q0) | (q1 > seqlen_q) | (k0 < 0) | (k1 < k0) | (k1 > seqlen_k)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return (f"slice {i} {slices[i].tolist()} has ranges outside 0 <= q0 <= q1 <= {seqlen_q}, "
                f"0 <= k0 <= k1 <= {seqlen_k}")
    return None


def overlap(slices: np.ndarray) -> str | None:
    """Where two slices share a (query, key) pair, or None. Exact, O(n log n) per row run.

    Rows are cut where any slice starts or ends; inside a run every slice's first and last key
    move by 0 or 1 per row, so two slices in start order at the run's first row stay apart
    through the run iff they are apart at its first and last rows (the gap is linear in the row).
    """
    norm = sl.normalize(slices)
    if len(norm) < 2:
        return None
    q0, q1, k0, k1, t = (norm[:, i] for i in range(5))
    moving_start = np.isin(t, (sl.INV_CAUSAL, sl.BI_CAUSAL))
    moving_end = np.isin(t, (sl.CAUSAL, sl.BI_CAUSAL))

    def bounds(idx: np.ndarray, row: int) -> tuple[np.ndarray, np.ndarray]:
        start = np.where(moving_start[idx], k0[idx] + (row - q0[idx]), k0[idx])
        end = np.where(moving_end[idx], k1[idx] - q1[idx] + row, k1[idx] - 1)
        return start, end

    cuts = np.unique(np.concatenate([q0, q1]))
    by_start = np.argsort(q0, kind="stable")
    starts_sorted = q0[by_start]
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        # slices whose rows cover the run [a, b): started at or before a, ending after a
        upto = by_start[: np.searchsorted(starts_sorted, a, side="right")]
        active = upto[q1[upto] > a]
        if len(active) < 2:
            continue
        start, end = bounds(active, a)
        order = np.lexsort((end, start))
        active, start, end = active[order], start[order], end[order]
        hit = np.flatnonzero(start[1:] <= end[:-1])
        row = a
        if not len(hit):  # apart at row a; still apart at the run's last row?
            last_start, last_end = bounds(active, b - 1)
            hit = np.flatnonzero(last_start[1:] <= last_end[:-1])
            if not len(hit):
                continue
            # the gap start[j] - end[i] falls by one per row: it first reaches 0 at row a + gap
            h = hit[0]
            row = a + int(start[h + 1] - end[h])
        h = hit[0]
        i, j = active[h], active[h + 1]
        key = int(bounds(np.array([j]), row)[0][0])
        return (f"slices {norm[i].tolist()} and {norm[j].tolist()} (normalised) both contain the pair "
                f"(query {row}, key {key}); slices must be disjoint as sets of (query, key) pairs, or the "
                f"area (and FLOPs) counts pairs twice")
    return None


def layout_problem(layout: BlockSparseLayout, seqlen: int, heads_q: int) -> str | None:
    """Why a block-sparse layout is malformed, or None."""
    for name, b in (("q_bounds", layout.q_bounds), ("k_bounds", layout.k_bounds)):
        b = np.asarray(b)
        if b.ndim != 1 or len(b) < 2 or b[0] != 0 or b[-1] != seqlen or (np.diff(b) <= 0).any():
            return f"layout.{name} must rise strictly from 0 to {seqlen}, got {b[:4].tolist()}...{b[-2:].tolist()}"
    keep = np.asarray(layout.keep)
    want = (len(layout.q_bounds) - 1, len(layout.k_bounds) - 1)
    if keep.dtype != bool or keep.ndim != 3 or keep.shape[1:] != want:
        return f"layout.keep must be bool (groups, {want[0]}, {want[1]}), got {keep.dtype} {keep.shape}"
    if keep.shape[0] < 1 or heads_q % keep.shape[0]:
        return f"layout.keep has {keep.shape[0]} mask groups, which does not divide {heads_q} query heads"
    if layout.causal:
        if not np.array_equal(layout.q_bounds, layout.k_bounds):
            return "a causal layout needs one block partition for queries and keys (q_bounds == k_bounds)"
        above = np.triu(np.ones(want, dtype=bool), 1) & keep
        if above.any():
            g, i, j = (int(x[0]) for x in np.nonzero(above))
            return (f"a causal layout keeps no block above the diagonal, but group {g} keeps key block {j} "
                    f"for query block {i}")
    return None


def mask_problem(mask: object, seqlen: int, heads_q: int = 1, name: str | None = None) -> str | None:
    """Why a built mask is unusable (what it is, its length, its slices or layout), or None."""
    if not isinstance(mask, Mask):
        return f"build returned a {type(mask).__name__}, expected a longca Mask"
    if name is not None and mask.name != name:
        return f"build returned a Mask named {mask.name!r}, expected {name!r}"
    if mask.seqlen != seqlen:
        return f"build returned a Mask of seqlen {mask.seqlen} for a sequence of {seqlen}"
    if (mask.slices is None) == (mask.layout is None):
        return "a Mask carries either slices (static) or a layout (block-sparse), exactly one of them"
    if mask.layout is not None:
        return layout_problem(mask.layout, seqlen, heads_q)
    assert mask.slices is not None  # one of the two, checked above
    return slice_problem(mask.slices, seqlen, seqlen) or overlap(mask.slices)
