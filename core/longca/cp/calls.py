"""Inner-kernel calls: the (query run, key run) rectangles of a mask that hold work, in local coordinates.

A strategy holds queries of some global runs and keys of others (see `layout`). For every pair of
runs the global mask is cropped (`longca.masks.slices.crop`) to that rectangle; empty pairs are
skipped, and the rectangle is shrunk to the bounding box of its slices so the inner kernel sees
no rows or keys that do nothing. Because every call is a rectangle of the global mask, the inner
kernel receives the same kind of slices it handles for the whole mask (cut documents included).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..masks import slices as sl
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


def _offsets(runs: Sequence[Run]) -> list[tuple[int, int, int]]:
    out, offset = [], 0
    for a, b in runs:
        out.append((offset, a, b))
        offset += b - a
    return out


def pair_calls(mask_slices: np.ndarray, q_runs: Sequence[Run], k_runs: Sequence[Run]) -> list[Call]:
    """The non-empty calls between a query buffer made of `q_runs` and a key buffer made of `k_runs`."""
    arr = sl.as_array(mask_slices)
    calls: list[Call] = []
    for qo, qa, qb in _offsets(q_runs):
        rows = arr[(arr[:, 0] < qb) & (arr[:, 1] > qa)]
        for ko, ka, kb in _offsets(k_runs):
            near = rows[(rows[:, 2] < kb) & (rows[:, 3] > ka)]
            if not len(near):
                continue
            part = sl.crop(near, (qa, qb), (ka, kb))
            if not len(part):
                continue
            gq0, gq1 = int(part[:, 0].min()), int(part[:, 1].max())
            gk0, gk1 = int(part[:, 2].min()), int(part[:, 3].max())
            rel = part.copy()
            rel[:, 0:2] -= gq0
            rel[:, 2:4] -= gk0
            calls.append(Call(qo + gq0 - qa, qo + gq1 - qa, ko + gk0 - ka, ko + gk1 - ka, rel))
    return calls
