"""Sequence layouts: which global token ranges each rank holds, in its local order.

A layout is a tuple, per rank, of *runs*: half-open global ranges `(g0, g1)` that the rank
stores one after another. Adjacent runs are merged, so a run is always a maximal piece that is
contiguous both in the global sequence and in the local buffer; the inner kernel is called once
per (query run, key run) pair (see `calls`).

Zigzag (for ring-based strategies) is *sequence-level*: the global sequence is cut into 2R
equal chunks and ring rank i holds chunks i and 2R-1-i, whatever the documents are. Documents
that cross a chunk edge are cut there; their mask is cropped exactly by `longca.masks.slices.crop`,
so any document lengths are correct. The sequence length must be a multiple of 2R (and of the
world size), which `zigzag` checks.

Document zigzag (`doc_zigzag`) is the *per-document* layout of TransformerEngine's THD format, which
the ring baselines of MagiAttention's CP benchmark use: every document (an independent block of
the mask, `document_bounds`) is cut into 2R equal pieces and ring rank i holds pieces i and 2R-1-i
of each, so every rank gets the same share of every document's work. Where TE pads each document
to a multiple of 2R, longca cannot add tokens: the < 2R tokens a document leaves over are laid out
by a sequence-level zigzag of their own, so every rank still holds S / R tokens.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from longca.errors import UnsupportedError
from longca.masks import slices as sl

Run = tuple[int, int]


def merge_runs(runs: Sequence[Run]) -> tuple[Run, ...]:
    """Drop empty runs and join a run to the previous one when it continues it."""
    out: list[list[int]] = []
    for g0, g1 in runs:
        if g1 <= g0:
            continue
        if out and out[-1][1] == g0:
            out[-1][1] = g1
        else:
            out.append([g0, g1])
    return tuple((a, b) for a, b in out)


@dataclass(frozen=True)
class Layout:
    """Per rank, the global runs it holds in local order; every rank holds the same number of tokens."""

    seqlen: int
    runs: tuple[tuple[Run, ...], ...]

    def __post_init__(self) -> None:
        lengths = {sum(b - a for a, b in r) for r in self.runs}
        covered = sorted(run for r in self.runs for run in r)
        if len(lengths) != 1 or merge_runs(covered) != ((0, self.seqlen),):
            raise ValueError(f"not a balanced partition of [0, {self.seqlen}): {self.runs}")

    @property
    def world_size(self) -> int:
        return len(self.runs)

    @property
    def local_len(self) -> int:
        return sum(b - a for a, b in self.runs[0])

    @property
    def rank_major(self) -> bool:
        """True when concatenating the ranks' buffers in rank order gives the global order."""
        return merge_runs([run for r in self.runs for run in r]) == ((0, self.seqlen),)

    def take(self, x: torch.Tensor, rank: int, dim: int = 1) -> torch.Tensor:
        """The rank's local part of a global tensor (a view when it is one run)."""
        parts = [x.narrow(dim, a, b - a) for a, b in self.runs[rank]]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim)

    def assemble(self, parts: Sequence[torch.Tensor], dim: int = 1) -> torch.Tensor:
        """The global tensor from every rank's local buffer (in rank order)."""
        if self.rank_major:
            return parts[0] if len(parts) == 1 else torch.cat(list(parts), dim)
        pieces: list[tuple[int, torch.Tensor]] = []
        for rank_runs, part in zip(self.runs, parts, strict=False):
            offset = 0
            for a, b in rank_runs:
                pieces.append((a, part.narrow(dim, offset, b - a)))
                offset += b - a
        return torch.cat([p for _, p in sorted(pieces, key=lambda item: item[0])], dim)

    def split(self, x: torch.Tensor, dim: int = 1) -> list[torch.Tensor]:
        """Every rank's local part of a global tensor, in rank order (the inverse of `assemble`)."""
        return [self.take(x, r, dim) for r in range(self.world_size)]


def contiguous(seqlen: int, parts: int) -> Layout:
    """Rank r holds [r*S/W, (r+1)*S/W)."""
    if seqlen % parts:
        raise UnsupportedError(f"sequence length {seqlen} is not a multiple of {parts} ranks")
    n = seqlen // parts
    return Layout(seqlen, tuple(((r * n, (r + 1) * n),) for r in range(parts)))


def zigzag(seqlen: int, parts: int) -> Layout:
    """Rank r holds chunks r and 2W-1-r of 2W equal chunks (balances causal work on a ring)."""
    if seqlen % (2 * parts):
        raise UnsupportedError(f"zigzag layout: sequence length {seqlen} is not a multiple of 2 x {parts} "
                               f"ring ranks; use a multiple of {2 * parts} or the contiguous layout")
    c = seqlen // (2 * parts)
    return Layout(seqlen, tuple(merge_runs([(r * c, (r + 1) * c), ((2 * parts - 1 - r) * c, (2 * parts - r) * c)])
                                for r in range(parts)))


def subdivide(layout: Layout, parts: int) -> Layout:
    """Each rank's buffer cut into `parts` equal contiguous pieces: rank i becomes ranks i*parts+u.

    This is how a head-parallel group shares one ring rank's sequence: after the all-to-all,
    every member of the group holds the whole buffer of ring rank i, in order.
    """
    n = layout.local_len
    if n % parts:
        raise UnsupportedError(f"{n} tokens per ring rank cannot be split over {parts} head-parallel ranks")
    step = n // parts
    out: list[tuple[Run, ...]] = []
    for rank_runs in layout.runs:
        starts, offset = [], 0
        for a, b in rank_runs:
            starts.append((offset, a, b))
            offset += b - a
        for u in range(parts):
            lo, hi = u * step, (u + 1) * step
            pieces = [(a + max(lo, o) - o, a + min(hi, o + b - a) - o) for o, a, b in starts
                      if o < hi and o + b - a > lo]
            out.append(merge_runs(pieces))
    return Layout(layout.seqlen, tuple(out))


def document_bounds(mask_slices: np.ndarray, seqlen: int) -> np.ndarray:
    """The edges of the mask's independent blocks: 0, every p where no query of [0, p) sees a key of
    [p, S) or the reverse, and S. For document masks these are the documents; full and causal are one."""
    arr = sl.as_array(mask_slices)
    if not len(arr):
        return np.array([0, seqlen], dtype=np.int64)
    lo, hi = np.minimum(arr[:, 0], arr[:, 2]), np.maximum(arr[:, 1], arr[:, 3])  # the rows and keys a slice spans
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    reach = np.maximum.accumulate(hi)  # the furthest any slice starting at or before lo[i] spans
    cuts = lo[1:][lo[1:] >= reach[:-1]]  # a slice starts where none before it reaches past
    return np.unique(np.concatenate([[0], cuts, [seqlen]]).astype(np.int64))


def doc_zigzag(seqlen: int, parts: int, bounds: Sequence[int] | np.ndarray) -> Layout:
    """Per document: 2R equal pieces, rank r holds pieces r and 2R-1-r; the leftovers zigzagged together."""
    if seqlen % (2 * parts):
        raise UnsupportedError(f"doc_zigzag layout: sequence length {seqlen} is not a multiple of 2 x {parts} "
                               f"ring ranks; use a multiple of {2 * parts} or the contiguous layout")
    edges = np.asarray(bounds, dtype=np.int64)
    starts, lengths = edges[:-1], np.diff(edges)
    piece = lengths // (2 * parts)
    runs: list[list[Run]] = [[] for _ in range(parts)]
    for r in range(parts):
        for j in (r, 2 * parts - 1 - r):
            a = starts + j * piece
            runs[r] += [(int(x), int(y)) for x, y in zip(a[piece > 0], (a + piece)[piece > 0], strict=True)]
    # the leftover tokens of every document (its last L mod 2R), one after another, zigzagged over the ranks
    left0, left1 = starts + 2 * parts * piece, starts + lengths
    keep = left1 > left0
    left0, left1 = left0[keep], left1[keep]
    offsets = np.concatenate([[0], np.cumsum(left1 - left0)])
    chunk = int(offsets[-1]) // (2 * parts)
    for r in range(parts):
        for j in (r, 2 * parts - 1 - r):
            lo, hi = j * chunk, (j + 1) * chunk  # a range of the leftovers' own sequence, back to global runs
            first, last = np.searchsorted(offsets, lo, "right") - 1, np.searchsorted(offsets, hi, "left")
            for d in range(max(int(first), 0), min(int(last), len(left0))):
                a = max(lo, offsets[d]) - offsets[d] + left0[d]
                b = min(hi, offsets[d + 1]) - offsets[d] + left0[d]
                runs[r].append((int(a), int(b)))
    return Layout(seqlen, tuple(merge_runs(sorted(r)) for r in runs))


LAYOUTS = ("zigzag", "contiguous", "doc_zigzag")


def make_layout(kind: str, seqlen: int, parts: int, mask_slices: np.ndarray | None = None) -> Layout:
    """`zigzag`, `contiguous` or `doc_zigzag` (which needs the mask's slices to find its documents)."""
    if kind == "zigzag":
        return zigzag(seqlen, parts)
    if kind == "contiguous":
        return contiguous(seqlen, parts)
    if kind == "doc_zigzag":
        if mask_slices is None:
            raise ValueError("the doc_zigzag layout needs the mask's slices")
        return doc_zigzag(seqlen, parts, document_bounds(mask_slices, seqlen))
    raise UnsupportedError(f"unknown layout {kind!r}; known: {', '.join(LAYOUTS)}")
