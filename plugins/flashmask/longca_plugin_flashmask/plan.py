"""From FlashMask column bounds to what the kernels walk: bounds on the device, per-block
min/max tables, and compacted lists of partial and full tiles.

This is FlashMask's block skipping: for a key block, the min and max over its columns of LTS,
LTE, UTS and UTE decide for a whole row block whether every pair is masked (skip the tile),
no pair is (skip the per-element mask), or some may be (compute the mask). The decision is
made here once, in torch on the device, and compacted into per-row-block (forward, dQ) and
per-column-block (dK/dV) lists, so the Triton loops run over indices without branches and stay
software-pipelined. Memory is O(Sk) for the bounds and O(blocks²) int32 for the lists.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

SKIP, PARTIAL, FULL = 0, 1, 2


@dataclass
class TileLists:
    """Tiles of one (row block, column block) size, listed per outer block of the kernel's grid.

    `cnt[i, 0]` partial tiles of outer block i, listed in `idx[i, 0, :cnt[i, 0]]` (the inner
    blocks that need the mask); `cnt[i, 1]` full tiles in `idx[i, 1, :cnt[i, 1]]` (no mask).
    `order` lists outer blocks heaviest first, the launch order, so that long programs do not
    end up in the last wave.
    """

    cnt: torch.Tensor
    idx: torch.Tensor
    order: torch.Tensor

    @property
    def inner(self) -> int:
        return self.idx.shape[2]


@dataclass
class BlockMinMax:
    """Per key block of width `block`: min and max over its columns of each bound, int32 (nkb,)."""

    block: int
    lts_min: torch.Tensor
    lts_max: torch.Tensor
    lte_min: torch.Tensor
    lte_max: torch.Tensor
    uts_min: torch.Tensor
    uts_max: torch.Tensor
    ute_min: torch.Tensor
    ute_max: torch.Tensor


@dataclass
class Plan:
    """Everything the kernels need for one mask: bounds (4, Sk) int32 and the tile lists."""

    seqlen_q: int
    seqlen_k: int
    bounds: torch.Tensor
    minmax: dict[int, BlockMinMax] = field(default_factory=dict)
    lists: dict[tuple[str, int, int], TileLists] = field(default_factory=dict)

    def tiles(self, axis: str, block_m: int, block_n: int) -> TileLists:
        """Tile lists by row block (`axis="rows"`) or by column block (`axis="cols"`), built once."""
        key = (axis, block_m, block_n)
        if key not in self.lists:
            cls = classify(self, block_m, block_n)
            self.lists[key] = compact(cls if axis == "rows" else cls.t())
        return self.lists[key]

    def tile_counts(self, block_m: int, block_n: int) -> dict[str, int]:
        """How many tiles are skipped, partial and full (for reports)."""
        cls = classify(self, block_m, block_n)
        return {name: int((cls == v).sum()) for name, v in (("skip", SKIP), ("partial", PARTIAL), ("full", FULL))}


def device_bounds(bounds: Mapping[str, np.ndarray], seqlen_q: int, device) -> torch.Tensor:
    """(4, Sk) int32 rows LTS, LTE, UTS, UTE; empty intervals normalised to (Sq, Sq) and (0, 0)."""
    lts, lte, uts, ute = (np.asarray(bounds[n], dtype=np.int64) for n in ("LTS", "LTE", "UTS", "UTE"))
    lower_empty, upper_empty = lte <= lts, ute <= uts
    lts, lte = np.where(lower_empty, seqlen_q, lts), np.where(lower_empty, seqlen_q, lte)
    uts, ute = np.where(upper_empty, 0, uts), np.where(upper_empty, 0, ute)
    if seqlen_q >= 2**31:
        raise ValueError(f"seqlen_q {seqlen_q} does not fit the int32 bounds")
    arr = np.stack([lts, lte, uts, ute]).astype(np.int32)
    return torch.from_numpy(arr).to(device)


def make_plan(bounds: Mapping[str, np.ndarray], seqlen_q: int, seqlen_k: int, device) -> Plan:
    """A plan over FlashMask bounds (dict of LTS, LTE, UTS, UTE arrays of length seqlen_k)."""
    if len(bounds["LTS"]) != seqlen_k:
        raise ValueError(f"bounds cover {len(bounds['LTS'])} key columns, expected {seqlen_k}")
    return Plan(seqlen_q, seqlen_k, device_bounds(bounds, seqlen_q, device))


def block_minmax(plan: Plan, block: int) -> BlockMinMax:
    """Min and max of each bound over every key block of width `block` (padding columns ignored)."""
    if block not in plan.minmax:
        sk = plan.seqlen_k
        nkb = -(-sk // block)
        pad = nkb * block - sk
        big = torch.iinfo(torch.int32).max
        lo = torch.nn.functional.pad(plan.bounds, (0, pad), value=big).view(4, nkb, block).amin(-1)
        hi = torch.nn.functional.pad(plan.bounds, (0, pad), value=-big).view(4, nkb, block).amax(-1)
        plan.minmax[block] = BlockMinMax(block, lo[0], hi[0], lo[1], hi[1], lo[2], hi[2], lo[3], hi[3])
    return plan.minmax[block]


def classify(plan: Plan, block_m: int, block_n: int) -> torch.Tensor:
    """int8 (row blocks, column blocks): SKIP, PARTIAL or FULL, from the block min/max tables.

    A tile is skipped when its rows lie inside the upper (or the lower) interval of every one of
    its columns, full when they miss both intervals of every column. Tail tiles are never full.
    """
    mm = block_minmax(plan, block_n)
    sq, sk = plan.seqlen_q, plan.seqlen_k
    nqb, nkb = -(-sq // block_m), -(-sk // block_n)
    dev = plan.bounds.device
    r0 = (torch.arange(nqb, device=dev, dtype=torch.int32) * block_m)[:, None]
    r1 = torch.clamp(r0 + block_m, max=sq)
    skip = ((r0 >= mm.uts_max) & (r1 <= mm.ute_min)) | ((r0 >= mm.lts_max) & (r1 <= mm.lte_min))
    full = ((r1 <= mm.uts_min) | (r0 >= mm.ute_max)) & ((r1 <= mm.lts_min) | (r0 >= mm.lte_max))
    full &= (r0 + block_m <= sq)
    full &= (torch.arange(1, nkb + 1, device=dev) * block_n <= sk)[None, :]
    out = torch.full((nqb, nkb), PARTIAL, dtype=torch.int8, device=dev)
    out[full] = FULL
    out[skip] = SKIP
    return refine(plan, out, block_m, block_n)


def refine(plan: Plan, cls: torch.Tensor, block_m: int, block_n: int) -> torch.Tensor:
    """Re-examine the PARTIAL tiles column by column: some are in fact empty or unmasked.

    The min/max test is conservative where the columns of one key block have different bounds
    (a block across a document boundary, say). For each such tile this checks every column's
    two intervals against the tile's rows, so the result is exact; the cost is one small
    (partial tiles x block_n) computation, since partial tiles are few.
    """
    sq, sk = plan.seqlen_q, plan.seqlen_k
    qb, kb = torch.nonzero(cls == PARTIAL, as_tuple=True)
    if qb.numel() == 0:
        return cls
    cols = kb[:, None] * block_n + torch.arange(block_n, device=cls.device)
    inside = cols < sk
    lts, lte, uts, ute = plan.bounds[:, cols.clamp(max=sk - 1)].long()
    r0 = (qb * block_m)[:, None]
    r1 = torch.clamp(r0 + block_m, max=sq)
    joined = (torch.maximum(uts, lts) <= torch.minimum(ute, lte)) & (lte > lts) & (ute > uts)  # one masked run
    covered = (((r0 >= uts) & (r1 <= ute)) | ((r0 >= lts) & (r1 <= lte))
               | (joined & (r0 >= torch.minimum(uts, lts)) & (r1 <= torch.maximum(ute, lte))))
    clear = ((r1 <= uts) | (r0 >= ute)) & ((r1 <= lts) | (r0 >= lte))
    empty = (covered | ~inside).all(1)
    full = (clear & inside).all(1) & (r0[:, 0] + block_m <= sq)
    out = cls.clone()
    out[qb[empty], kb[empty]] = SKIP
    out[qb[full], kb[full]] = FULL
    return out


def compact(cls: torch.Tensor, partial_cost: float = 1.15) -> TileLists:
    """Per outer block (row of `cls`): ascending indices of its partial and full inner blocks."""
    flags = torch.stack([cls == PARTIAL, cls == FULL], dim=1)  # (outer, 2, inner)
    cnt = flags.sum(2).to(torch.int32).contiguous()
    idx = torch.argsort((~flags).to(torch.int8), dim=2, stable=True).to(torch.int32).contiguous()
    cost = cnt[:, 0].float() * partial_cost + cnt[:, 1].float()
    order = torch.argsort(cost, descending=True, stable=True).to(torch.int32).contiguous()
    return TileLists(cnt, idx, order)


def plan_from_slices(slices, seqlen_q: int, seqlen_k: int, device) -> Plan:
    """A plan straight from mask slices in local coordinates (for the CP primitives)."""
    from longca.plugin import flashmask_bounds

    return make_plan(flashmask_bounds(slices, seqlen_q, seqlen_k), seqlen_q, seqlen_k, device)


