"""Turn mask slices into the calls a FlashAttention-style kernel can make.

FlashAttention-family kernels (FA2, FA3, FA4, cuDNN) accept one rectangle of queries x keys per
sequence, optionally restricted to a diagonal band given as `window_size=(left, right)`, aligned
bottom-right: local query i sees local keys j with
`i + Lk - Lq - left <= j <= i + Lk - Lq + right` (-1 = unbounded). Varlen entry points take many
such rectangles in one call, all with the same window.

A mask is a set of disjoint typed slices (`longca.masks.slices`). This module:

1. normalises the slices and reads each as a *band* `(q0, q1, k0, k1, dlo, dhi)`: rows [q0, q1),
   keys [k0, k1), and dlo <= k - q <= dhi;
2. merges neighbouring bands whose union is exactly one band (a sliding window, cut into three
   slices by the catalog, becomes one band again), checked by counting pairs, so merging is
   always exact;
3. turns each band into a window `(left, right)` and groups bands with the same window into
   calls, so that no query row appears twice in one call.

When a query row is covered by more than one call (share_question, global_sliding_window, or a
context-parallel crop), the outputs must be merged through their log-sum-exp
(`Plan.needs_merge`). Everything here is numpy and costs time proportional to the number of
slices, never to S².
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from longca.masks import slices as sl

INF = 1 << 62

# window_ok(len_q, len_k, left, right) -> can the kernel run this rectangle with this window?
WindowCheck = Callable[[int, int, int, int], bool]


class PlanError(ValueError):
    """The mask needs a shape the kernel cannot express."""


@dataclass(frozen=True)
class Band:
    """Rows [q0, q1) x keys [k0, k1) with dlo <= k - q <= dhi (±INF: unbounded)."""

    q0: int
    q1: int
    k0: int
    k1: int
    dlo: int = -INF
    dhi: int = INF

    @property
    def len_q(self) -> int:
        return self.q1 - self.q0

    @property
    def len_k(self) -> int:
        return self.k1 - self.k0

    def diag_range(self) -> tuple[int, int]:
        """The smallest and largest k - q over the band's pairs."""
        return max(self.dlo, self.k0 - (self.q1 - 1)), min(self.dhi, (self.k1 - 1) - self.q0)

    def area(self) -> int:
        return sl.area(sl.band_to_slices(self.q0, self.q1, self.k0, self.k1, self.dlo, self.dhi))

    def window(self) -> tuple[int, int]:
        """(left, right) in bottom-right aligned FlashAttention convention; -1 = unbounded."""
        lo, hi = self.diag_range()
        shift = self.k1 - self.q1  # diagonal of the bottom-right corner
        left = -1 if lo <= self.k0 - (self.q1 - 1) else shift - lo
        right = -1 if hi >= (self.k1 - 1) - self.q0 else hi - shift
        return left, right


@dataclass
class FlashCall:
    """One kernel call: bands with one window, no query row twice."""

    window: tuple[int, int]
    bands: list[Band] = field(default_factory=list)

    @property
    def causal(self) -> bool:
        return self.window == (-1, 0)

    @property
    def max_q(self) -> int:
        return max(b.len_q for b in self.bands)

    @property
    def max_k(self) -> int:
        return max(b.len_k for b in self.bands)


@dataclass
class Plan:
    """The calls that together compute one mask over seqlen_q x seqlen_k."""

    seqlen_q: int
    seqlen_k: int
    calls: list[FlashCall]
    coverage: np.ndarray  # per query row: how many calls see it

    @property
    def needs_merge(self) -> bool:
        """Some query row is covered by more than one call: outputs merge through their lse."""
        return bool((self.coverage > 1).any())

    @property
    def covers_all_rows(self) -> bool:
        return bool((self.coverage > 0).all())

    def describe(self) -> str:
        parts = [f"{len(c.bands)}x{c.window}" for c in self.calls]
        return f"{len(self.calls)} call(s) [{', '.join(parts)}]" + (" + lse merge" if self.needs_merge else "")


def any_window(len_q: int, len_k: int, left: int, right: int) -> bool:
    """FlashAttention 2/3/4: any bottom-right aligned window."""
    return True


def full_or_square_causal(len_q: int, len_k: int, left: int, right: int) -> bool:
    """Kernels with only `is_causal` (top-left): full rectangles, causal squares."""
    return (left, right) == (-1, -1) or ((left, right) == (-1, 0) and len_q == len_k)


def bands_of(slices: np.ndarray) -> list[Band]:
    """Each normalised slice as a band, sorted by rows then keys."""
    out = []
    for q0, q1, k0, k1, t in sl.normalize(slices).tolist():
        dlo, dhi = sl.to_band(q0, q1, k0, k1, t)
        out.append(Band(q0, q1, k0, k1, dlo, dhi))
    return sorted(out, key=lambda b: (b.q0, b.k0))


def _try_merge(a: Band, b: Band, area_a: int, area_b: int) -> tuple[Band, int] | None:
    """The band equal to a ∪ b, if there is one (a and b disjoint)."""
    lo_a, hi_a = a.diag_range()
    lo_b, hi_b = b.diag_range()
    cand = Band(min(a.q0, b.q0), max(a.q1, b.q1), min(a.k0, b.k0), max(a.k1, b.k1),
                min(lo_a, lo_b), max(hi_a, hi_b))
    area = cand.area()
    return (cand, area) if area == area_a + area_b else None


def merge_bands(bands: list[Band], window_ok: WindowCheck) -> list[Band]:
    """Greedily merge each band into the previous one when their union is one expressible band."""
    out: list[tuple[Band, int]] = []
    for band in bands:
        area = band.area()
        if out:
            merged = _try_merge(out[-1][0], band, out[-1][1], area)
            if merged is not None and window_ok(merged[0].len_q, merged[0].len_k, *merged[0].window()):
                out[-1] = merged
                continue
        out.append((band, area))
    return [b for b, _ in out]


def _split_for(band: Band, window_ok: WindowCheck) -> list[Band]:
    """A band the kernel cannot run as is, cut into pieces it can (full blocks and causal squares)."""
    if window_ok(band.len_q, band.len_k, *band.window()):
        return [band]
    pieces: list[Band] = []
    for q0, q1, k0, k1, t in sl.band_to_slices(band.q0, band.q1, band.k0, band.k1, band.dlo, band.dhi):
        lq, lk = q1 - q0, k1 - k0
        if t == sl.FULL:
            pieces.append(Band(q0, q1, k0, k1))
        elif t == sl.CAUSAL and window_ok(lq, lq, -1, 0):
            if lk > lq:
                pieces.append(Band(q0, q1, k0, k1 - lq))
            pieces.append(Band(q0, q1, k1 - lq, k1, -INF, k1 - q1))
        else:
            kind = sl.TYPE_NAMES[t]
            window = Band(q0, q1, k0, k1, *sl.to_band(q0, q1, k0, k1, t)).window()
            raise PlanError(f"a {kind} slice ({lq}x{lk}, window {window}) "
                            "needs a diagonal band this kernel cannot express")
    return pieces


def make_plan(slices: np.ndarray, seqlen_q: int, seqlen_k: int,
              window_ok: WindowCheck = any_window) -> Plan:
    """The calls computing attention under `slices` (local coordinates of q rows and k columns)."""
    bands = merge_bands(bands_of(slices), window_ok)
    bands = [p for b in bands for p in _split_for(b, window_ok)]
    groups: dict[tuple[int, int], list[FlashCall]] = {}
    for band in sorted(bands, key=lambda b: (b.q0, b.k0)):
        window = band.window()
        calls = groups.setdefault(window, [])
        for call in calls:  # first call of this window whose rows end before this band starts
            if call.bands[-1].q1 <= band.q0:
                call.bands.append(band)
                break
        else:
            calls.append(FlashCall(window, [band]))
    calls = [c for cs in groups.values() for c in cs]
    diff = np.zeros(seqlen_q + 1, dtype=np.int64)
    for call in calls:
        for b in call.bands:
            diff[b.q0] += 1
            diff[b.q1] -= 1
    return Plan(seqlen_q, seqlen_k, calls, np.cumsum(diff[:-1]))
