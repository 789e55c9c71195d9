"""The calls of ring positions against every source block, as the cost model prices them.

Per call: its position and source, its query-run group (merges are ordered per query run), the rows and keys
it spans in its buffers, its exact area, its features (`costmodel.table_features`) and shapes
(`costmodel.call_shapes`). They come from the exact call tables (`calls.buffers_table`), or, for the
per-document zigzag (`doc_zigzag`) over causal documents, mostly in closed form:

Every document of length L is cut into 2R pieces of p = L // 2R tokens and ring position r holds pieces r and
2R-1-r (a < b); position R-1 holds the two as one run. Query piece a sees source k's first piece (k < a) whole, or
its triangle (k = a); query piece b sees source k's two pieces (adjacent in k's buffer, so one call slice)
whole (k > q), as one causal band (k = q), or the first alone (k < q). Whatever the positions, the slices
a document adds to a call are one of five sets that depend only on p and on whether k < q, k = q or k > q
(and q = R-1): summed over the documents once, each call's features are one of five rows. What the closed
form leaves out goes through the exact tables: the rows of each document's last L mod 2R tokens (laid
out by a zigzag of their own), documents shorter than 2R, and a document whose pieces share a run with its
own leftover rows. A call's slices never mix documents or a document's piece rows with its leftover rows
(the slices are per document and joined only on the same rows), so the two parts add up exactly: the
features are sums of whole numbers, the shapes minima, maxima, counts and sums (tests/test_ringcalls.py checks it).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from longca.masks import slices as sl
from longca_cp.calls import CallTable, buffer_passes, buffers_table, key_buffers
from longca_cp.layout import Run, document_bounds
from longca_cp.schedule import merged_calls

from .costmodel import FEATURES, TILE, call_shapes, slice_feature_rows, table_features


@dataclass
class FeaturedCalls:
    """Calls of a pass of positions, grouped by position (index into the pass) then source."""

    buf: np.ndarray
    source: np.ndarray
    qi: np.ndarray  # calls on the same query run share it (increasing with the position)
    q0: np.ndarray  # rows [q0, q1) of the position's buffer and keys [k0, k1) of the source's it spans
    q1: np.ndarray
    k0: np.ndarray
    k1: np.ndarray
    area: np.ndarray  # exact unmasked pairs
    unit: np.ndarray  # `table_features(table, 1)`
    shapes: np.ndarray  # `call_shapes(table)`

    def __len__(self) -> int:
        return len(self.buf)


def from_table(table: CallTable, buf: np.ndarray, source: np.ndarray) -> FeaturedCalls:
    """The calls of an exact table (`calls.buffers_table`)."""
    return FeaturedCalls(buf, source, table.qi, table.q0, table.q1, table.k0, table.k1, table.area,
                         table_features(table, 1), call_shapes(table))


# the five sets of slices a document of piece length p adds to a call (query position q, source k), as
# (query rows, keys, type) in units of p: k < q < R-1; k = q < R-1; k > q; k < q = R-1; k = q = R-1
_CASES = (((1, 1, sl.FULL), (1, 1, sl.FULL)), ((1, 1, sl.CAUSAL), (1, 2, sl.CAUSAL)), ((1, 2, sl.FULL),),
          ((2, 1, sl.FULL),), ((2, 2, sl.CAUSAL),))


@dataclass(frozen=True)
class DocZigzag:
    """A doc_zigzag ring over causal documents, split: the documents priced in closed form (their five case
    sums) and the slices left to the exact tables (`rest`)."""

    ring_size: int
    seqlen: int
    rest: np.ndarray
    unit: np.ndarray  # (5, FEATURES): each case's features summed over the closed-form documents
    shapes: np.ndarray  # (5, 5): shortest and longest slice rows, slice count, most and all key blocks
    area: np.ndarray  # (5,)
    ends: tuple[tuple[int, int], tuple[int, int]]  # (start, piece length) of the first and last such document


def doc_zigzag_split(mask_slices: np.ndarray, seqlen: int, runs: Sequence[Sequence[Run]]) -> DocZigzag | None:
    """The split of a doc_zigzag ring of these runs; None where the closed form does not apply (a mask other than
    one causal slice per document tiling the sequence, a ring of one, or no document of 2R tokens or more)."""
    r = len(runs)
    arr = sl.as_array(mask_slices)
    if r < 2 or not len(arr) or not (arr[:, 4] == sl.CAUSAL).all():
        return None
    edges = np.append(arr[:, 0], arr[-1, 1])
    if ((arr[:, 0] != arr[:, 2]).any() or (arr[:, 1] != arr[:, 3]).any() or (arr[1:, 0] != arr[:-1, 1]).any()
            or edges[0] != 0 or edges[-1] != seqlen or not np.array_equal(document_bounds(arr, seqlen), edges)):
        return None
    start, length = arr[:, 0], arr[:, 1] - arr[:, 0]
    piece = length // (2 * r)
    cut = start + 2 * r * piece  # where the document's leftover rows begin
    flat = np.concatenate([np.asarray(x, dtype=np.int64).reshape(-1, 2) for x in runs])
    flat = flat[np.argsort(flat[:, 0])]
    at = np.searchsorted(flat[:, 0], cut, "left") - 1  # the run holding the token before the cut
    joined = (cut < arr[:, 1]) & (flat[np.maximum(at, 0), 1] > cut)  # a run goes on from a piece into leftovers
    closed = (piece > 0) & ~joined
    if not closed.any():
        return None
    tail = closed & (cut < arr[:, 1])
    rest = arr[~closed | tail].copy()
    rest[tail[~closed | tail], 0] = cut[tail]  # a closed document's leftover rows: its slice from the cut on
    p = piece[closed]
    unit, shapes, area = np.zeros((len(_CASES), len(FEATURES))), np.zeros((len(_CASES), 5)), np.zeros(len(_CASES))
    for c, parts in enumerate(_CASES):
        s = np.concatenate([np.column_stack([np.zeros_like(p), rows * p, np.zeros_like(p), keys * p,
                                             np.full_like(p, kind)]) for rows, keys, kind in parts])
        unit[c, 0] = 1.0
        unit[c, 1:] = slice_feature_rows(s).sum(axis=0)
        lq = (s[:, 1] - s[:, 0]).astype(float)
        nb = -(-(s[:, 3] - s[:, 2]) // TILE)
        shapes[c] = lq.min(), lq.max(), float(len(s)), float(nb.max()), float(nb.sum())
        area[c] = sl.area(s)
    first, last = np.flatnonzero(closed)[[0, -1]]
    return DocZigzag(r, seqlen, rest, unit, shapes, area.astype(np.int64),
                     ((int(start[first]), int(piece[first])), (int(start[last]), int(piece[last]))))


def _local(buffers: tuple[np.ndarray, np.ndarray], seqlen: int, rank: np.ndarray, g: np.ndarray,
           end: bool) -> np.ndarray:
    """Where global token g (or, with `end`, the end of a piece at g) lies in each rank's buffer."""
    ko, owner = buffers
    keys = owner * (seqlen + 1) + ko[:, 1]
    j = np.searchsorted(keys, rank * (seqlen + 1) + g, "left" if end else "right") - 1
    return ko[j, 0] + g - ko[j, 1]


def _closed_form(split: DocZigzag, positions: np.ndarray, buffers: tuple[np.ndarray, np.ndarray]) -> FeaturedCalls:
    """The closed-form part of every (position, source) call, positions then sources."""
    r, s = split.ring_size, split.seqlen
    ranks = np.arange(r)
    (s0, p0), (s1, p1) = split.ends
    a0 = _local(buffers, s, ranks, s0 + ranks * p0, False)  # the first document's piece a (and c)
    b0 = _local(buffers, s, ranks, s0 + (2 * r - 1 - ranks) * p0, False)  # its piece b
    b1 = _local(buffers, s, ranks, s1 + (2 * r - ranks) * p1, True)  # the end of the last one's piece b (and d)
    c1 = _local(buffers, s, ranks, s1 + (ranks + 1) * p1, True)  # the end of its piece c
    q, k = np.broadcast_arrays(positions[:, None], ranks[None, :])
    q, k = q.reshape(-1), k.reshape(-1)
    case = np.where(q == r - 1, np.where(k < q, 3, 4), np.where(k < q, 0, np.where(k == q, 1, 2)))
    buf = np.repeat(np.arange(len(positions)), r)
    return FeaturedCalls(buf, k, buf, np.where(k > q, b0[q], a0[q]), b1[q], a0[k], np.where(k < q, c1[k], b1[k]),
                     split.area[case], split.unit[case], split.shapes[case])


def _add(calls: FeaturedCalls, exact: FeaturedCalls, nsources: int) -> FeaturedCalls:
    """The closed-form calls (every pair) with an exact table's calls of the same pairs added in."""
    i = exact.buf * nsources + exact.source  # (one call per pair: merged calls)
    for name, join in (("q0", np.minimum), ("k0", np.minimum), ("q1", np.maximum), ("k1", np.maximum)):
        getattr(calls, name)[i] = join(getattr(calls, name)[i], getattr(exact, name))
    calls.area[i] += exact.area
    calls.unit[i, 1:] += exact.unit[:, 1:]
    calls.shapes[i, 0] = np.minimum(calls.shapes[i, 0], exact.shapes[:, 0])
    calls.shapes[i, 1] = np.maximum(calls.shapes[i, 1], exact.shapes[:, 1])
    calls.shapes[i, 2] += exact.shapes[:, 2]
    calls.shapes[i, 3] = np.maximum(calls.shapes[i, 3], exact.shapes[:, 3])
    calls.shapes[i, 4] += exact.shapes[:, 4]
    return calls


def ring_passes(mask_slices: np.ndarray, layout_kind: str, seqlen: int, runs: Sequence[Sequence[Run]],
                budget: int) -> Iterator[tuple[np.ndarray, FeaturedCalls]]:
    """Every position's calls against every source, a pass of positions at a time (about `budget` candidates or
    calls a pass): (positions, their calls). The same calls as `calls.buffers_table` of each pass, featured."""
    buffers = key_buffers(runs)
    split = doc_zigzag_split(mask_slices, seqlen, runs) if layout_kind == "doc_zigzag" else None
    exact_slices = mask_slices if split is None else split.rest
    merged = merged_calls(layout_kind)
    per_pass = len(runs) if split is None else max(1, budget // len(runs))
    for chunk in buffer_passes(exact_slices, runs, buffers, budget):
        for lo in range(chunk.start, chunk.stop, per_pass):
            positions = np.arange(lo, min(lo + per_pass, chunk.stop))
            exact = from_table(*buffers_table(exact_slices, [runs[int(p)] for p in positions], runs, buffers, merged))
            yield positions, exact if split is None else _add(_closed_form(split, positions, buffers), exact,
                                                              len(runs))
