"""The canonical mask representation: disjoint typed slices, and what is derived from them.

A slice is `(q_start, q_end, k_start, k_end, type)` over half-open ranges. Inside its rectangle,
with local indices i = q - q_start, j = k - k_start, Lq and Lk the rectangle's sides:

- FULL:       every pair.
- CAUSAL:     j <= i + (Lk - Lq)   (diagonal aligned bottom-right)
- INV_CAUSAL: j >= i               (diagonal aligned top-left)
- BI_CAUSAL:  both at once         (a band)

This is MagiAttention's `q_ranges / k_ranges / attn_type_map`. Its size grows with the number of
documents, not with S², so every function here runs in time proportional to the number of
slices (or of blocks / columns asked for), never to S².

Internally each slice is also a *band*: rows [q0, q1), keys [k0, k1) intersected with
q + dlo <= k <= q + dhi, where an absent bound is infinite. `band_to_slices` turns any band
back into normalised typed slices (no empty rows, each of one of the four shapes), which is how
cropping (needed by context parallelism and blocking) stays exact.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

FULL, CAUSAL, INV_CAUSAL, BI_CAUSAL = 0, 1, 2, 3
TYPE_NAMES = {FULL: "full", CAUSAL: "causal", INV_CAUSAL: "inv_causal", BI_CAUSAL: "bi_causal"}
_INF = 1 << 62

Slice = tuple[int, int, int, int, int]


def as_array(slices: Iterable[Sequence[int]] | np.ndarray) -> np.ndarray:
    """Slices as an (n, 5) int64 array."""
    arr = np.asarray(list(slices) if not isinstance(slices, np.ndarray) else slices, dtype=np.int64)
    return arr.reshape(-1, 5)


def to_band(q0: int, q1: int, k0: int, k1: int, t: int) -> tuple[int, int]:
    """The diagonal bounds (dlo, dhi) of a typed slice: k - q must lie in [dlo, dhi]."""
    dlo = k0 - q0 if t in (INV_CAUSAL, BI_CAUSAL) else -_INF
    dhi = k1 - q1 if t in (CAUSAL, BI_CAUSAL) else _INF
    return dlo, dhi


def band_to_slices(q0: int, q1: int, k0: int, k1: int, dlo: int, dhi: int) -> list[Slice]:
    """Normalised typed slices covering exactly {q in [q0,q1), k in [k0,k1), dlo <= k-q <= dhi}."""
    if q1 <= q0 or k1 <= k0 or dlo > dhi:
        return []
    # rows whose key interval [max(k0, q+dlo), min(k1-1, q+dhi)] is non-empty
    lo, hi = max(q0, k0 - dhi), min(q1, k1 - dlo)
    if lo >= hi:
        return []
    start_diag_from, end_const_from = k0 - dlo, k1 - dhi
    cuts = sorted({lo, hi} | {c for c in (start_diag_from, end_const_from) if lo < c < hi})
    out: list[Slice] = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        start_diag, end_diag = a >= start_diag_from, b <= end_const_from
        if not start_diag and not end_diag:
            out.append((a, b, k0, k1, FULL))
        elif not start_diag:
            out.append((a, b, k0, b + dhi, CAUSAL))
        elif not end_diag:
            out.append((a, b, a + dlo, k1, INV_CAUSAL))
        else:
            out.append((a, b, a + dlo, b + dhi, BI_CAUSAL))
    return out


def normalize(slices: Iterable[Sequence[int]]) -> np.ndarray:
    """Every slice rewritten in normalised form (no empty rows), as an (n, 5) array."""
    out: list[Slice] = []
    for q0, q1, k0, k1, t in as_array(slices).tolist():
        out.extend(band_to_slices(q0, q1, k0, k1, *to_band(q0, q1, k0, k1, t)))
    return as_array(out)


def crop(slices: Iterable[Sequence[int]], q_range: tuple[int, int], k_range: tuple[int, int],
         relative: bool = False) -> np.ndarray:
    """The part of the mask inside rows `q_range` x keys `k_range`, as normalised slices.

    With `relative`, coordinates are shifted so the crop's top-left corner is (0, 0).
    """
    (qa, qb), (ka, kb) = q_range, k_range
    out: list[Slice] = []
    for q0, q1, k0, k1, t in as_array(slices).tolist():
        if q1 <= qa or q0 >= qb or k1 <= ka or k0 >= kb:
            continue
        dlo, dhi = to_band(q0, q1, k0, k1, t)
        out.extend(band_to_slices(max(q0, qa), min(q1, qb), max(k0, ka), min(k1, kb), dlo, dhi))
    arr = as_array(out)
    if relative and len(arr):
        arr[:, 0:2] -= qa
        arr[:, 2:4] -= ka
    return arr


def _typed_area(q0: int, q1: int, k0: int, k1: int, t: int) -> int:
    lq, lk = q1 - q0, k1 - k0
    if t == FULL:
        return lq * lk
    if t in (CAUSAL, INV_CAUSAL):
        return lq * (lk - lq) + lq * (lq + 1) // 2
    return lq * (lk - lq + 1)


def area(slices: Iterable[Sequence[int]]) -> int:
    """Exact number of unmasked (query, key) pairs."""
    return sum(_typed_area(*s) for s in normalize(slices).tolist())


def row_bounds(s: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a normalised slice: its rows and the first and last key (inclusive) of each row."""
    q0, q1, k0, k1, t = (int(x) for x in s)
    rows = np.arange(q0, q1, dtype=np.int64)
    start = rows + (k0 - q0) if t in (INV_CAUSAL, BI_CAUSAL) else np.full_like(rows, k0)
    end = rows + (k1 - q1) if t in (CAUSAL, BI_CAUSAL) else np.full_like(rows, k1 - 1)
    return rows, start, end


def col_bounds(s: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a normalised slice: its key columns and the first and last row (inclusive) of each."""
    q0, q1, k0, k1, t = (int(x) for x in s)
    cols = np.arange(k0, k1, dtype=np.int64)
    first = np.maximum(q0, cols - (k1 - q1)) if t in (CAUSAL, BI_CAUSAL) else np.full_like(cols, q0)
    last = np.minimum(q1 - 1, cols - (k0 - q0)) if t in (INV_CAUSAL, BI_CAUSAL) else np.full_like(cols, q1 - 1)
    return cols, first, last


def dense(slices: Iterable[Sequence[int]], rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
    """Boolean matrix of the window rows x cols (True = may attend). Memory rows*cols: small sizes only."""
    (r0, r1), (c0, c1) = rows, cols
    out = np.zeros((r1 - r0, c1 - c0), dtype=bool)
    for s in crop(slices, rows, cols, relative=True).tolist():
        q0, q1, k0, k1, _ = s
        rr, start, end = row_bounds(s)
        keys = np.arange(k0, k1)
        out[q0:q1, k0:k1] |= (keys[None, :] >= start[:, None]) & (keys[None, :] <= end[:, None])
    return out


EMPTY, PARTIAL, FULL_BLOCK = 0, 1, 2


def block_map(slices: Iterable[Sequence[int]], seqlen_q: int, seqlen_k: int,
              block_q: int, block_k: int) -> np.ndarray:
    """Block-level map, int8 (ceil(Sq/bq), ceil(Sk/bk)): EMPTY, PARTIAL or FULL_BLOCK.

    Exact: a block is FULL_BLOCK iff every pair of it (clipped to the sequence) is unmasked,
    EMPTY iff none is. Blocks whose rows span several slices are settled by their exact area.
    """
    nqb, nkb = -(-seqlen_q // block_q), -(-seqlen_k // block_k)
    out = np.zeros((nqb, nkb), dtype=np.int8)
    touches = np.zeros((nqb, nkb), dtype=np.int16)  # how many slices touch each block
    fulls: list[tuple[slice, int, int]] = []
    norm = normalize(slices)

    def full_range(lo_key: int, hi_key: int) -> tuple[int, int]:
        """Key blocks lying inside [lo_key, hi_key] (inclusive)."""
        hi = nkb - 1 if hi_key == seqlen_k - 1 else (hi_key + 1) // block_k - 1
        return -(-lo_key // block_k), hi

    for s in norm.tolist():
        q0, q1, k0, k1, t = s
        first_qb, last_qb = q0 // block_q, (q1 - 1) // block_q
        if t == FULL:  # every row alike: mark the whole run of q blocks at once
            rows = slice(first_qb, last_qb + 1)
            out[rows, k0 // block_k:(k1 - 1) // block_k + 1] = np.maximum(
                out[rows, k0 // block_k:(k1 - 1) // block_k + 1], PARTIAL)
            touches[rows, k0 // block_k:(k1 - 1) // block_k + 1] += 1
            inner_lo = first_qb + (q0 % block_q != 0)
            inner_hi = last_qb if q1 == seqlen_q or q1 % block_q == 0 else last_qb - 1
            lo, hi = full_range(k0, k1 - 1)
            if inner_hi >= inner_lo and hi >= lo:
                fulls.append((slice(inner_lo, inner_hi + 1), lo, hi))
            continue
        _, start, end = row_bounds(s)
        for qb in range(first_qb, last_qb + 1):
            a, b = max(q0, qb * block_q), min(q1, (qb + 1) * block_q)
            sa, eb = start[a - q0], end[b - 1 - q0]
            row = out[qb, sa // block_k: eb // block_k + 1]
            np.maximum(row, PARTIAL, out=row)
            touches[qb, sa // block_k: eb // block_k + 1] += 1
            if a == qb * block_q and b == min((qb + 1) * block_q, seqlen_q):
                lo, hi = full_range(start[b - 1 - q0], end[a - q0])
                if hi >= lo:
                    fulls.append((slice(qb, qb + 1), lo, hi))
    for rows, lo, hi in fulls:
        out[rows, lo:hi + 1] = FULL_BLOCK
    # blocks touched by several slices: their union may fill them, settle by exact area
    for qb, kb in zip(*np.nonzero((out == PARTIAL) & (touches > 1)), strict=True):
        q_win = (int(qb) * block_q, min((int(qb) + 1) * block_q, seqlen_q))
        k_win = (int(kb) * block_k, min((int(kb) + 1) * block_k, seqlen_k))
        (qa, qb_end), (ka, kb_end) = q_win, k_win
        near = norm[(norm[:, 0] < qb_end) & (norm[:, 1] > qa) & (norm[:, 2] < kb_end) & (norm[:, 3] > ka)]
        if area(crop(near, q_win, k_win)) == (q_win[1] - q_win[0]) * (k_win[1] - k_win[0]):
            out[qb, kb] = FULL_BLOCK
    return out


def visible_key_intervals(slices: Iterable[Sequence[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every visible key interval of every query row, as arrays (rows, starts, ends) sorted by row,
    then start: row rows[i] sees keys starts[i] <= k < ends[i]; intervals of one row that touch are
    merged (interval-mask kernels, such as cuDNN's flex attention, take a row's intervals)."""
    parts = [row_bounds(s) for s in normalize(slices).tolist()]
    if not parts:
        return (np.zeros(0, dtype=np.int64),) * 3
    rows, first, last = (np.concatenate(x) for x in zip(*parts, strict=True))
    order = np.lexsort((first, rows))
    rows, first, last = rows[order], first[order], last[order]
    new = np.ones(len(rows), dtype=bool)
    new[1:] = (rows[1:] != rows[:-1]) | (first[1:] > last[:-1] + 1)
    starts = np.flatnonzero(new)
    return rows[starts], first[starts], np.maximum.reduceat(last, starts) + 1


def masked_row_intervals(slices: Iterable[Sequence[int]], seqlen_q: int,
                         seqlen_k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every masked row interval of every key column, as arrays (cols, starts, ends) sorted by
    column, then start: key column cols[i] is masked for rows starts[i] <= q < ends[i].

    FlashMask's bounds are the case of at most two a column; a crop of a blockwise mask (a CP
    piece) can need more, and a kernel that takes any number still reads them from here.
    """
    parts = [col_bounds(s) for s in normalize(slices).tolist()]
    if parts:
        cols, first, last = (np.concatenate(x) for x in zip(*parts, strict=True))
    else:
        cols = first = last = np.zeros(0, dtype=np.int64)
    order = np.lexsort((first, cols))
    cols, first, last = cols[order], first[order], last[order]
    # merge intervals of one column that touch (they come from adjacent slices)
    new = np.ones(len(cols), dtype=bool)
    new[1:] = (cols[1:] != cols[:-1]) | (first[1:] > last[:-1] + 1)
    starts = np.flatnonzero(new)
    mcols, mfirst = cols[starts], first[starts]
    mlast = np.maximum.reduceat(last, starts) if len(starts) else last[:0]
    # gaps = masked rows: before the first interval, between intervals, after the last
    col_start = np.ones(len(mcols), dtype=bool)
    col_start[1:] = mcols[1:] != mcols[:-1]
    col_end = np.ones(len(mcols), dtype=bool)
    col_end[:-1] = mcols[1:] != mcols[:-1]
    prev_last = np.where(col_start, -1, np.concatenate([[-1], mlast[:-1]]))
    gap_cols = [mcols, mcols[col_end]]
    gap_lo = [prev_last + 1, mlast[col_end] + 1]
    gap_hi = [mfirst, np.full(int(col_end.sum()), seqlen_q)]
    seen = np.zeros(seqlen_k, dtype=bool)
    seen[mcols] = True
    empty_cols = np.flatnonzero(~seen)
    gap_cols.append(empty_cols)
    gap_lo.append(np.zeros(len(empty_cols), dtype=np.int64))
    gap_hi.append(np.full(len(empty_cols), seqlen_q))
    gcols, glo, ghi = (np.concatenate(x).astype(np.int64) for x in (gap_cols, gap_lo, gap_hi))
    keep = ghi > glo
    gcols, glo, ghi = gcols[keep], glo[keep], ghi[keep]
    order = np.lexsort((glo, gcols))
    return gcols[order], glo[order], ghi[order]


def flashmask_bounds(slices: Iterable[Sequence[int]], seqlen_q: int, seqlen_k: int) -> dict[str, np.ndarray]:
    """FlashMask column bounds: per key column, at most two masked row intervals.

    Key column k is masked for rows q with UTS[k] <= q < UTE[k] (the upper interval) or
    LTS[k] <= q < LTE[k] (the lower one); an empty interval has start == end. Raises
    ValueError when a column would need more than two masked intervals.
    """
    gcols, glo, ghi = masked_row_intervals(slices, seqlen_q, seqlen_k)
    count = np.bincount(gcols, minlength=seqlen_k)
    if (count > 2).any():
        bad = int(np.flatnonzero(count > 2)[0])
        raise ValueError(f"key column {bad} has {int(count[bad])} masked row intervals; FlashMask allows two")
    rank = np.arange(len(gcols)) - np.searchsorted(gcols, gcols)
    uts = np.zeros(seqlen_k, dtype=np.int64)
    ute = np.zeros(seqlen_k, dtype=np.int64)
    lts = np.full(seqlen_k, seqlen_q, dtype=np.int64)
    lte = np.full(seqlen_k, seqlen_q, dtype=np.int64)
    two = count[gcols] == 2
    # the lower interval: the second of two, or a single one that reaches the bottom but not the top
    lower = (two & (rank == 1)) | (~two & (ghi == seqlen_q) & (glo > 0))
    uts[gcols[~lower]], ute[gcols[~lower]] = glo[~lower], ghi[~lower]
    lts[gcols[lower]], lte[gcols[lower]] = glo[lower], ghi[lower]
    return {"LTS": lts, "LTE": lte, "UTS": uts, "UTE": ute}
