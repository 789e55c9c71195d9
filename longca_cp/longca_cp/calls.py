"""Inner-kernel calls: the (query run, key run) rectangles of a mask that hold work, in local coordinates.

A strategy holds queries of some global runs and keys of others (see `layout`). For every pair of
runs the global mask is cropped (`longca.masks.slices.crop`) to that rectangle; empty pairs are
skipped, and the rectangle is shrunk to the bounding box of its slices so the inner kernel sees
no rows or keys that do nothing. Because every call is a rectangle of the global mask, the inner
kernel receives the same kind of slices it handles for the whole mask (cut documents included).

`pair_table` computes all pairs of a query buffer against many key runs at once, vectorised over
(slice, query run, key run) candidates, so the per-rank accounting of a 1,024-rank ring stays fast;
its result is exactly what `slices.crop` gives pair by pair (tests/test_cp_schedule.py). The real
strategies turn the table into `Call`s (`CallTable.calls`); the accounting reads its columns.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from longca.masks import slices as sl

from .layout import Run


@dataclass(frozen=True)
class Call:
    """Query rows [q0, q1) of the local query buffer against keys [k0, k1) of the key buffer.

    `slices` are in the coordinates of that rectangle (its top-left corner is (0, 0)).
    """

    q0: int
    q1: int
    k0: int
    k1: int
    slices: np.ndarray

    @property
    def area(self) -> int:
        return sl.area(self.slices)


@dataclass(frozen=True)
class CallTable:
    """Calls as columns: call i is key run `ki[i]` (of the given key runs) against query run `qi[i]`.

    `q0..k1` are local buffer coordinates (key coordinates inside the buffer of that key run's
    owner, see `pair_table`), `area` the exact unmasked pairs, and the call's slices are
    `slices[start[i]:start[i + 1]]`, relative to its rectangle.
    """

    qi: np.ndarray
    ki: np.ndarray
    q0: np.ndarray
    q1: np.ndarray
    k0: np.ndarray
    k1: np.ndarray
    area: np.ndarray
    start: np.ndarray  # len(calls) + 1 offsets into `slices`
    slices: np.ndarray

    def __len__(self) -> int:
        return len(self.qi)

    def calls(self, where: np.ndarray | None = None) -> list[Call]:
        idx = range(len(self)) if where is None else np.flatnonzero(where)
        return [Call(int(self.q0[i]), int(self.q1[i]), int(self.k0[i]), int(self.k1[i]),
                     self.slices[self.start[i]:self.start[i + 1]]) for i in idx]


def _offsets(runs: Sequence[Run]) -> np.ndarray:
    """(n, 3): local offset, global start, global end of each run."""
    arr = np.asarray(runs, dtype=np.int64).reshape(-1, 2)
    local = np.concatenate([[0], np.cumsum(arr[:, 1] - arr[:, 0])[:-1]]).astype(np.int64)
    return np.column_stack([local, arr])


def _overlapping(bounds: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i, j): item i of [lo, hi) overlaps run j of `bounds` (disjoint runs, any order)."""
    order = np.argsort(bounds[:, 0], kind="stable")
    starts, ends = bounds[order, 0], bounds[order, 1]
    first = np.searchsorted(ends, lo, side="right")
    last = np.searchsorted(starts, hi, side="left")
    count = np.maximum(last - first, 0)
    i = np.repeat(np.arange(len(lo)), count)
    j = first[i] + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
    return i, order[j]


def _typed_area(q0, q1, k0, k1, t) -> np.ndarray:
    lq, lk = q1 - q0, k1 - k0
    tri = lq * (lk - lq) + lq * (lq + 1) // 2
    return np.where(t == sl.FULL, lq * lk, np.where(t == sl.BI_CAUSAL, lq * (lk - lq + 1), tri))


def band_pieces(q0, q1, k0, k1, dlo, dhi) -> tuple[np.ndarray, np.ndarray]:
    """`slices.band_to_slices` of many bands at once: (band index per piece, pieces (n, 5)), in order."""
    lo, hi = np.maximum(q0, k0 - dhi), np.minimum(q1, k1 - dlo)
    ok = (q1 > q0) & (k1 > k0) & (dlo <= dhi) & (lo < hi)  # the bands that hold work
    idx = np.flatnonzero(ok)
    if len(idx) < len(ok):
        lo, hi, k0, k1, dlo, dhi = (x[idx] for x in (lo, hi, k0, k1, dlo, dhi))
    c1, c2 = k0 - dlo, k1 - dhi  # rows from c1 on start on the diagonal; rows up to c2 end at k1
    inside = lambda c: np.where((lo < c) & (c < hi), c, hi)  # noqa: E731 - absent cuts collapse onto hi
    i1, i2 = inside(c1), inside(c2)
    m1, m2 = np.minimum(i1, i2), np.maximum(i1, i2)  # the cuts in order: lo <= m1 <= m2 <= hi
    slots = ((lo, m1), (m1, m2), (m2, hi))  # each band's three pieces; the empty ones are dropped
    keeps = [b > a for a, b in slots]
    count = keeps[0].astype(np.int64) + keeps[1] + keeps[2]
    at = np.cumsum(count) - count  # where each band's first piece goes
    band, pieces = np.empty(int(count.sum()), dtype=np.int64), np.empty((int(count.sum()), 5), dtype=np.int64)
    one = not (keeps[1].any() or keeps[2].any())  # every band one piece (full blocks, triangles): no scattering
    for (a, b), keep in zip(slots, keeps, strict=True):
        if one and keep is not keeps[0]:
            break
        sel: slice | np.ndarray = slice(None) if keep.all() else np.flatnonzero(keep)
        pos: slice | np.ndarray = slice(None) if one else at[sel]
        a, b = a[sel], b[sel]
        start_diag, end_diag = a >= c1[sel], b <= c2[sel]
        band[pos] = idx[sel]
        pieces[pos, 0], pieces[pos, 1] = a, b
        pieces[pos, 2] = np.where(start_diag, a + dlo[sel], k0[sel])
        pieces[pos, 3] = np.where(end_diag, b + dhi[sel], k1[sel])
        pieces[pos, 4] = np.where(start_diag, np.where(end_diag, sl.BI_CAUSAL, sl.INV_CAUSAL),
                                  np.where(end_diag, sl.CAUSAL, sl.FULL))
        at = at + keep
    return band, pieces


def pair_table(mask_slices: np.ndarray, q_runs: Sequence[Run], k_runs: Sequence[Run],
               merged: bool = False) -> CallTable:
    """The non-empty calls of a query buffer made of `q_runs` against a key buffer made of `k_runs`.

    One call per (query run, key run) pair; with `merged`, one call for the two buffers, its slices in
    their local coordinates (a varlen call over every document, as TransformerEngine's THD path makes).
    """
    k = _offsets(k_runs)
    return _table(mask_slices, _offsets(q_runs), k, np.zeros(len(k), dtype=np.int64), merged)


def _row_pairs(mask_slices: np.ndarray, qo: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every (slice, query run) pair that shares rows: slice and run indices, the slice, the shared rows
    [q0, q1), the slice's band (row r sees keys r + dlo to r + dhi) and the keys [klo, khi) those rows see,
    so that only the key runs holding some of them become candidates."""
    arr = sl.as_array(mask_slices)
    si, qi = _overlapping(qo[:, 1:], arr[:, 0], arr[:, 1])
    s = arr[si]
    t = s[:, 4]
    dlo = np.where((t == sl.INV_CAUSAL) | (t == sl.BI_CAUSAL), s[:, 2] - s[:, 0], -sl._INF)
    dhi = np.where((t == sl.CAUSAL) | (t == sl.BI_CAUSAL), s[:, 3] - s[:, 1], sl._INF)
    q0, q1 = np.maximum(s[:, 0], qo[qi, 1]), np.minimum(s[:, 1], qo[qi, 2])
    return si, qi, s, q0, q1, dlo, dhi, np.maximum(s[:, 2], q0 + dlo), np.minimum(s[:, 3], q1 + dhi)


def buffer_passes(mask_slices: np.ndarray, q_buffers: Sequence[Sequence[Run]], buffers: tuple[np.ndarray, np.ndarray],
                  budget: int) -> list[range]:
    """Consecutive query buffers cut into passes of at most about `budget` candidate (slice, query run, key run)
    triples each (at least one buffer a pass): what `buffers_table` of a pass holds in memory grows with them."""
    ko = buffers[0]
    qo, q_owner = key_buffers(q_buffers)
    _, qi, *_, klo, khi = _row_pairs(mask_slices, qo)
    starts, ends = np.sort(ko[:, 1]), np.sort(ko[:, 2])  # (disjoint runs: both in the runs' order)
    count = np.maximum(np.searchsorted(starts, khi, "left") - np.searchsorted(ends, klo, "right"), 0)
    per_buffer = np.bincount(q_owner[qi], weights=count, minlength=len(q_buffers))
    out, lo, held = [], 0, 0.0
    for b, c in enumerate(per_buffer):
        if b > lo and held + c > budget:
            out.append(range(lo, b))
            lo, held = b, 0.0
        held += c
    out.append(range(lo, len(q_buffers)))
    return out


def _table(mask_slices: np.ndarray, qo: np.ndarray, ko: np.ndarray, owner: np.ndarray,
           merged: bool = False, q_owner: np.ndarray | None = None) -> CallTable:
    """The calls of query runs `qo` against key runs `ko` (`owner`: each key run's buffer). `q_owner` gives each
    query run's buffer when several query buffers are computed at once (`buffers_table`): the calls come out
    buffer after buffer, each buffer's exactly as a table of it alone would list them."""
    q_owner = np.zeros(len(qo), dtype=np.int64) if q_owner is None else q_owner
    si, qi, s, q0, q1, dlo, dhi, klo, khi = _row_pairs(mask_slices, qo)
    cand, kj = _overlapping(ko[:, 1:], klo, khi)
    si, qi = si[cand], qi[cand]
    band, pieces = band_pieces(q0[cand], q1[cand], np.maximum(s[cand, 2], ko[kj, 1]),
                               np.minimum(s[cand, 3], ko[kj, 2]), dlo[cand], dhi[cand])
    pq, pk, ps = qi[band], kj[band], si[band]
    if merged:  # one call per (query buffer, key buffer): pieces in local coordinates of the buffers, rows in order
        for col, shift in ((0, qo[pq, 0] - qo[pq, 1]), (2, ko[pk, 0] - ko[pk, 1])):  # (column by column: fast)
            pieces[:, col] += shift
            pieces[:, col + 1] += shift
        width = int(owner.max()) + 1 if len(owner) else 1
        pair = q_owner[pq] * width + owner[pk]  # (query buffer, key buffer)
        span = int(max(pieces[:, 1].max(), pieces[:, 3].max())) + 1 if len(pieces) else 1
        if len(pieces) and (int(pair.max()) + 1) * span * span < 2**62:  # one sort of one key: 2.5x faster
            order = np.argsort((pair * span + pieces[:, 0]) * span + pieces[:, 2], kind="stable")
        else:
            order = np.lexsort((pieces[:, 2], pieces[:, 0], pair))
        pair, pieces = _coalesce(pair[order], pieces[order])
        pk = _first_run_of(owner, pair % width)
        pq = _first_run_of(q_owner, pair // width)
        new = np.ones(len(pq), dtype=bool)
        new[1:] = pair[1:] != pair[:-1]
        return _grouped(pq, pk, pieces, new, np.zeros((len(qo), 3), dtype=np.int64),
                        np.zeros((len(ko), 3), dtype=np.int64))
    # query buffer, key buffer, query run, key run, slice, piece
    order = np.lexsort((np.arange(len(band)), ps, pk, pq, owner[pk], q_owner[pq]))
    pq, pk, pieces = pq[order], pk[order], pieces[order]
    new = np.ones(len(pq), dtype=bool)
    new[1:] = (pq[1:] != pq[:-1]) | (pk[1:] != pk[:-1])  # (a key run belongs to one buffer)
    return _grouped(pq, pk, pieces, new, qo, ko)


def _coalesce(buffer: np.ndarray, pieces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Join pieces on the same rows whose keys continue each other (full, full, ..., full or causal):
    the key pieces of a block that lie side by side in its buffer become the one band they are (as
    flashplan's `merge_bands` joins them for the kernel). Pieces sorted by buffer, rows, keys."""
    if len(pieces) < 2:
        return buffer, pieces
    prev, cur = pieces[:-1], pieces[1:]
    joins = ((buffer[1:] == buffer[:-1]) & (cur[:, 0] == prev[:, 0]) & (cur[:, 1] == prev[:, 1])
             & (cur[:, 2] == prev[:, 3]) & (prev[:, 4] == sl.FULL)
             & ((cur[:, 4] == sl.FULL) | (cur[:, 4] == sl.CAUSAL)))
    if not joins.any():
        return buffer, pieces
    starts = np.flatnonzero(np.r_[True, ~joins])
    ends = np.r_[starts[1:], len(pieces)] - 1
    out = pieces[starts]  # (a copy: an index array)
    out[:, 3], out[:, 4] = pieces[ends, 3], pieces[ends, 4]
    return buffer[starts], out


def _first_run_of(owner: np.ndarray, buffers: np.ndarray) -> np.ndarray:
    """The index of each buffer's first key run (a merged call names its buffer through it)."""
    first = np.full(int(owner.max()) + 1 if len(owner) else 0, -1, dtype=np.int64)
    first[owner[::-1]] = np.arange(len(owner))[::-1]
    return first[buffers]


def _grouped(pq: np.ndarray, pk: np.ndarray, pieces: np.ndarray, new: np.ndarray, qo: np.ndarray,
             ko: np.ndarray) -> CallTable:
    """The calls of pieces sorted by call (`new` marks each call's first piece); `qo`/`ko` shift a
    run's piece coordinates to its buffer's (zeros when they are in buffer coordinates already)."""
    first = np.flatnonzero(new)
    start = np.append(first, len(pq)).astype(np.int64)
    group = np.cumsum(new) - 1
    gq0 = np.minimum.reduceat(pieces[:, 0], first) if len(first) else first
    gq1 = np.maximum.reduceat(pieces[:, 1], first) if len(first) else first
    gk0 = np.minimum.reduceat(pieces[:, 2], first) if len(first) else first
    gk1 = np.maximum.reduceat(pieces[:, 3], first) if len(first) else first
    areas = _typed_area(*pieces.T)
    area = np.add.reduceat(areas, first) if len(first) else first
    rel = pieces.copy()
    for col, shift in ((0, gq0[group]), (2, gk0[group])):  # (column by column: fast)
        rel[:, col] -= shift
        rel[:, col + 1] -= shift
    cq, ck = pq[first], pk[first]
    return CallTable(cq, ck, qo[cq, 0] + gq0 - qo[cq, 1], qo[cq, 0] + gq1 - qo[cq, 1],
                     ko[ck, 0] + gk0 - ko[ck, 1], ko[ck, 0] + gk1 - ko[ck, 1], area.astype(np.int64), start, rel)


def pair_calls(mask_slices: np.ndarray, q_runs: Sequence[Run], k_runs: Sequence[Run]) -> list[Call]:
    """The non-empty calls between a query buffer made of `q_runs` and a key buffer made of `k_runs`."""
    return pair_table(mask_slices, q_runs, k_runs).calls()


def key_buffers(sources: Sequence[Sequence[Run]]) -> tuple[np.ndarray, np.ndarray]:
    """The runs of several key buffers (local offset, global start, end) and the buffer of each run."""
    if not sources:
        return np.zeros((0, 3), np.int64), np.zeros(0, np.int64)
    arr = [np.asarray(runs, dtype=np.int64).reshape(-1, 2) for runs in sources]
    flat = np.concatenate(arr)
    owner = np.repeat(np.arange(len(arr)), [len(a) for a in arr])
    lengths = flat[:, 1] - flat[:, 0]
    ends = np.cumsum(lengths)
    first = np.concatenate([[0], np.cumsum([len(a) for a in arr])[:-1]])
    local = ends - lengths - np.repeat((ends - lengths)[first], [len(a) for a in arr])
    return np.column_stack([local, flat]), owner


def sources_table(mask_slices: np.ndarray, q_runs: Sequence[Run], sources: Sequence[Sequence[Run]],
                  buffers: tuple[np.ndarray, np.ndarray] | None = None,
                  merged: bool = False) -> tuple[CallTable, np.ndarray]:
    """Calls of one query buffer against several key buffers at once (a ring's blocks).

    Returns the table and, per call, the index of its source buffer; key coordinates are local
    to that source's buffer, exactly as `pair_calls(mask, q_runs, sources[j])` gives them.
    `buffers` is `key_buffers(sources)`, to compute once when many query buffers use the same sources.
    `merged`: one call per source buffer (see `pair_table`).
    """
    ko, owner = buffers if buffers is not None else key_buffers(sources)
    table = _table(mask_slices, _offsets(q_runs), ko, owner, merged)
    return table, owner[table.ki]


def buffers_table(mask_slices: np.ndarray, q_buffers: Sequence[Sequence[Run]], sources: Sequence[Sequence[Run]],
                  buffers: tuple[np.ndarray, np.ndarray] | None = None,
                  merged: bool = False) -> tuple[CallTable, np.ndarray, np.ndarray]:
    """`sources_table` of several query buffers in one pass (every ring position, or every rank of a gather):
    the table, each call's query buffer (index into `q_buffers`) and its source. Call for call the same as
    `sources_table` of each query buffer in turn, one buffer's calls after another (`qi` then indexes the
    query runs of all buffers together). Its memory is that of all the calls: pass buffers a chunk at a time."""
    ko, owner = buffers if buffers is not None else key_buffers(sources)
    qo, q_owner = key_buffers(q_buffers)
    table = _table(mask_slices, qo, ko, owner, merged, q_owner)
    return table, q_owner[table.qi], owner[table.ki]
