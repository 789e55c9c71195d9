"""The price of inner-kernel calls, fitted from longca's own single-GPU result rows.

A call is priced from its slices with a tile model (tile T = 128 rows x 128 keys):

    ms = launch + row * heads * sum(ceil(Lq / T)) + tile * heads * sum(padded area) + segment * heads * slices
         + diagonal * heads * sum(diagonal row blocks)

`padded area` counts what a tiled kernel computes: a full slice rounded up to whole tiles, a
triangle's area plus half a tile per row block on its diagonal. `launch` is the fixed cost of a
call, `row` the cost of a row block (load Q, write O and lse), `tile` the cost per unmasked pair,
`segment` the cost of each slice (a varlen segment: one per document piece), `diagonal` the
extra cost of a row block that crosses a causal diagonal (two for a bi-causal slice): those tiles
are computed with the mask applied element by element (FlashAttention-2 runs
`ceil(kBlockM / kBlockN) + 1` masked key steps there), so a causal document of a few row blocks
costs more per pair than its padded area says. The coefficients are fitted per kernel and
direction by least squares on relative error over the rows of the masks CP calls are made of
(full, causal, full_document, causal_document), each row's features averaged over its own mask
draws (rebuilt from its sampler and seed), together with the short-segment microbenchmark's rows where a
kernel has them. Which form is fitted (the diagonal term or not; the short-segment rows fitted jointly or
only into the per-segment and per-token terms) is chosen per kernel and direction by one fixed rule on
those one-GPU rows alone: the lowest leave-one-out error (`_choose_form`).

Outside the data the rule is the model itself: linear in tiles above the largest measured call
(constant throughput, the flat TFLOP/s of 24K-48K rows supports it) and dominated by the launch
and row-block terms below the smallest; `measured_share` in a simulation says how much of the
compute time falls inside the fitted range. Calls on fewer heads scale linearly with the heads
(occupancy of small calls is not modelled).
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from longca.errors import LongcaError
from longca.masks import slices as sl
from longca_cp.calls import CallTable, pair_table

TILE = 128
FIT_MASKS = ("full", "causal", "full_document", "causal_document")
FIT_PATH = Path(__file__).resolve().parent / "data" / "cp_kernel_fit.json"
NAMES = ("launch_ms", "row_ms", "tile_ms", "segment_ms", "diagonal_ms", "token_ms")
# The least work a row block is priced at (`floor` of a fit, chosen with its form, `_choose_form`): "tile", a
# whole tile whatever its rows (a segment of 8 tokens runs one tile); "rows M", M tiles' worth of work per
# 128 valid rows (a short row block costs a fixed latency per row it loads and writes, which a long row
# block hides under its tiles). Each is a feature column: the work a slice falls short of that floor.
FLOORS = ("tile", "rows 2", "rows 4", "rows 8")
FEATURES = (*NAMES, *(f"floor {f}" for f in FLOORS))
# Kernels whose varlen backward launches one thread block per (key block of TILE keys, query head, segment) over
# the longest segment's keys (`max_seqlen_k`), a block past its own segment's keys exiting at once: launched, never
# working. A call whose segments differ in key length pays for those empty blocks, which none of the tile model's
# terms counts (its forward, a persistent scheduler over valid tiles only, does not). Read from flash-attention
# at 0251105a; their coefficient (`KernelFit.empty_block_ms`) is fitted on the kernel's own one-GPU rows.
EMPTY_GRID_KERNELS = {
    "fa2": "csrc/flash_attn/src/flash_bwd_launch_template.h: grid_n(ceil(max_seqlen_k / kBlockN), b, h)",
    "fa3": "hopper/flash_bwd_launch_template.h: SingleTileScheduler, grid (ceil(max_seqlen_k / 128), h, b); "
           "tile_scheduler.hpp: a block past its segment's keys is not valid",
}


def slice_features(slices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row blocks, padded area, row blocks on a diagonal) of each slice, the padded area with a whole tile
    per row block at least (`slice_floors` gives the other floors; `slice_tokens` the fourth feature)."""
    nq, base, diagonal, floors = _slice_work(slices)
    return nq, base + floors[:, 0], diagonal


def _slice_work(slices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row blocks, the work a tiled kernel computes with no floor (key tiles whole, valid rows only, half a
    tile per row block on a diagonal), diagonal row blocks, and (slices, FLOORS) the work short of each floor."""
    s = sl.as_array(slices)
    lq, lk, kind = s[:, 1] - s[:, 0], s[:, 3] - s[:, 2], s[:, 4]
    nq, nk = -(-lq // TILE), -(-lk // TILE)
    exact = np.where(kind == sl.FULL, lq * lk,
                     np.where(kind == sl.BI_CAUSAL, lq * (lk - lq + 1), lq * (lk - lq) + lq * (lq + 1) // 2))
    diagonal = np.where(kind == sl.FULL, 0, np.where(kind == sl.BI_CAUSAL, 2, 1)) * nq
    base = np.minimum(exact + diagonal * (TILE * TILE // 2), nq * nk * TILE * TILE)
    base = np.where(kind == sl.FULL, lq * nk * TILE, base).astype(float)
    # "tile": every row block computes at least one whole tile, a full slice whole tiles
    tile = np.maximum(base, nq * TILE * TILE)
    tile = np.where(kind == sl.FULL, nq * nk * TILE * TILE, tile)
    floors = [tile - base] + [np.maximum(0.0, int(f.split()[1]) * lq * TILE - base) for f in FLOORS[1:]]
    return nq.astype(float), base, diagonal.astype(float), np.column_stack(floors).astype(float)


def slice_tokens(slices: np.ndarray) -> np.ndarray:
    """Query plus key rows of each slice: the rows a varlen call loads (and writes) for it, whatever its tiles."""
    s = sl.as_array(slices)
    return ((s[:, 1] - s[:, 0]) + (s[:, 3] - s[:, 2])).astype(float)


def slice_feature_rows(slices: np.ndarray) -> np.ndarray:
    """(slices, FEATURES[1:]) of each slice on one head: row blocks, work (no floor), one segment, diagonal row
    blocks, tokens (query plus key rows) and the work short of each floor (FLOORS). Whole numbers: sums of them
    are exact in any order."""
    nq, base, diagonal, floors = _slice_work(slices)
    tokens = slice_tokens(slices)
    per_slice = np.empty((len(nq), len(FEATURES) - 1))
    for col, value in enumerate((nq, base, np.ones(len(nq)), diagonal, tokens)):
        per_slice[:, col] = value
    per_slice[:, 5:] = floors
    return per_slice


def table_features(table: CallTable, heads: int) -> np.ndarray:
    """(calls, FEATURES): launches, head row blocks, head work (no floor), head segments, head diagonal row
    blocks, head tokens (query plus key rows of each slice), and the head work short of each floor (FLOORS)
    of every call of a table."""
    if not len(table):
        return np.zeros((0, len(FEATURES)))
    summed = np.add.reduceat(slice_feature_rows(table.slices), table.start[:-1], axis=0) * heads
    return np.column_stack([np.ones(len(table)), summed])


def call_shapes(table: CallTable) -> np.ndarray:
    """(calls, 5): shortest and longest query run of a slice (a varlen segment) and the slice count of every
    call of a table: what `KernelFit.inside` checks against the measured rows' ranges; then the most key blocks
    (of TILE) of a slice and their sum over the call's slices, what `empty_of` counts a backward's grid from."""
    if not len(table):
        return np.zeros((0, 5))
    s = sl.as_array(table.slices)
    lq = (s[:, 1] - s[:, 0]).astype(float)
    nb = -(-(s[:, 3] - s[:, 2]).astype(np.int64) // TILE)
    first = table.start[:-1]
    return np.column_stack([np.minimum.reduceat(lq, first), np.maximum.reduceat(lq, first),
                            np.diff(table.start).astype(float), np.maximum.reduceat(nb, first).astype(float),
                            np.add.reduceat(nb, first).astype(float)])


@dataclass
class KernelFit:
    """The fitted coefficients of one kernel and direction, and how well they fit."""

    kernel: str
    direction: str
    launch_ms: float
    row_ms: float
    tile_ms: float
    segment_ms: float
    rows: int
    median_err_pct: float
    max_err_pct: float
    work_range: tuple[float, float]  # smallest and largest head padded area of a fitted row
    residuals: list[dict[str, Any]] = field(default_factory=list)
    diagonal_ms: float = 0.0  # last, with defaults: fit files written before they existed still load
    # the form chosen and every candidate's leave-one-out error over the fitted rows (`_choose_form`)
    selection: dict[str, Any] = field(default_factory=dict)
    token_ms: float = 0.0  # cost per head query-plus-key row of a slice (short-segment rows fit it)
    # shortest and longest segment (query rows of a slice) and fewest and most segments of a call in the fitted
    # rows; empty in fit files written before them (then only the work is checked)
    segment_len_range: tuple[float, ...] = ()
    segment_count_range: tuple[float, ...] = ()
    floor: str = "tile"  # the least work a row block is priced at (FLOORS); fit files before it: "tile"
    # ms per empty thread block of the backward's launch grid (EMPTY_GRID_KERNELS; `empty_blocks`), fitted on the
    # residuals of the kernel's own one-GPU rows (`_fit_empty`); 0 for other kernels and older fit files
    empty_block_ms: float = 0.0

    @property
    def coef(self) -> np.ndarray:
        """Coefficients of the FEATURES columns: the floor's shortfall priced per tile like the work."""
        return np.array([self.launch_ms, self.row_ms, self.tile_ms, self.segment_ms, self.diagonal_ms, self.token_ms,
                         *(self.tile_ms if f == self.floor else 0.0 for f in FLOORS)])

    def price(self, features: np.ndarray) -> np.ndarray:
        """Milliseconds of each call (features from `table_features`)."""
        return features @ self.coef

    def inside(self, features: np.ndarray, shapes: np.ndarray | None = None) -> np.ndarray:
        """Calls inside measured data: their work within the fitted rows' range (x 0.5 to x 1.5) and, given
        their `call_shapes`, every segment's length and their segment count within the fitted rows' ranges."""
        lo, hi = self.work_range
        ok = (features[:, 2] >= lo * 0.5) & (features[:, 2] <= hi * 1.5)
        if shapes is not None and self.segment_len_range and self.segment_count_range:
            (len_lo, len_hi), (n_lo, n_hi) = self.segment_len_range, self.segment_count_range
            ok &= (shapes[:, 0] >= len_lo) & (shapes[:, 1] <= len_hi) & (shapes[:, 2] >= n_lo) & (shapes[:, 2] <= n_hi)
        return ok


# Declared, not measured: inner-kernel speeds of GPUs longca has no rows of, as the H200 fit (H200 = H100
# compute, NVIDIA datasheets) with its work terms (per row block, per tile, per diagonal block) divided by a
# published single-GPU ratio of that GPU to the H100 at one shape; the per-call floor, the per-segment and
# the per-token terms are kept as measured on the H200 (an assumption: nothing published measures them).
DECLARED_SPEEDS: dict[str, dict[str, Any]] = {
    "b200": {
        "fwd": 1534.8 / 662.8, "bwd": 1247.5 / 574.9,
        "source": "B200: FlashAttention-4 forward 1534.8 and backward (1 CTA) 1247.5 TFLOP/s, non-causal, hd 128, "
                  "seqlen 8192, batch 4, MHA 16:16 (Dao-AILab/flash-attention PR #2280); H100: FA3 full-mask 662.8 "
                  "forward and 574.9 backward TFLOP/s at 8K, GQA 64:8, hd 128 (SandAI-org/MagiAttention commit "
                  "2d9d89c6, assets/magi_attn/exp/kernel/attn_with_full_mask/*/flops_report.csv). The shapes differ "
                  "(heads, batch); the published B200 CP baselines ran cuDNN, which FlashAttention-4's paper "
                  "(arXiv 2603.05451) reports up to 1.3x slower than FA4: both make the declared speed an upper bound"},
}


def empty_of(shapes: np.ndarray, heads: int) -> np.ndarray:
    """Per call (its `call_shapes`), the empty thread blocks of an EMPTY_GRID_KERNELS backward launched over it,
    one segment per slice: heads x (segments x key blocks of the longest segment - key blocks of every segment)."""
    return heads * (shapes[:, 2] * shapes[:, 3] - shapes[:, 4])


def empty_blocks(table: CallTable, heads: int) -> np.ndarray:
    """`empty_of` the calls of a table."""
    return empty_of(call_shapes(table), heads)


def grid_empty_blocks(q_lens: np.ndarray, k_lens: np.ndarray, heads: int) -> float:
    """`empty_blocks` of one varlen call given its segments' query and key lengths, as a caller that keeps
    zero-length segments in the batch makes it (they launch blocks too)."""
    q, k = np.asarray(q_lens, dtype=np.int64), np.asarray(k_lens, dtype=np.int64)
    nb = np.where((q > 0) & (k > 0), -(-k // TILE), 0)
    return float(heads * (len(nb) * nb.max() - nb.sum())) if len(nb) else 0.0


def _fit_empty(empty: np.ndarray, t: np.ndarray, pred: np.ndarray) -> tuple[float, dict[str, Any]]:
    """The one coefficient of the empty blocks, on the residuals of the chosen form (its coefficients kept):
    least squares on relative error, non-negative; and the error of the rows that have empty blocks, before
    and after."""
    has = empty > 0
    if not has.any():
        return 0.0, {"rows": 0}
    a, r = empty[has] / t[has], (t[has] - pred[has]) / t[has]
    coef = max(0.0, float(a @ r / (a @ a)))
    before = 100 * np.abs(pred[has] - t[has]) / t[has]
    after = 100 * np.abs(pred[has] + coef * empty[has] - t[has]) / t[has]
    return coef, {"rows": int(has.sum()), "median_err_pct_before": float(np.median(before)),
                  "median_err_pct_after": float(np.median(after))}


def declared_fit(fit: KernelFit, gpu: str) -> KernelFit:
    """`fit` priced at the declared speed of another GPU (`DECLARED_SPEEDS`)."""
    if gpu not in DECLARED_SPEEDS:
        raise LongcaError(f"no declared kernel speed for {gpu!r}; known: {', '.join(DECLARED_SPEEDS)}")
    ratio = float(DECLARED_SPEEDS[gpu][fit.direction])
    return replace(fit, row_ms=fit.row_ms / ratio, tile_ms=fit.tile_ms / ratio, diagonal_ms=fit.diagonal_ms / ratio,
                   kernel=f"{fit.kernel}@{gpu}")


def _nonneg_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with coefficients >= 0 (drops negative ones and refits; a handful of unknowns)."""
    active = list(range(a.shape[1]))
    while True:
        x = np.zeros(a.shape[1])
        x[active] = np.linalg.lstsq(a[:, active], b, rcond=None)[0]
        if (x >= 0).all() or not active:
            return np.maximum(x, 0)
        active.remove(int(np.argmin(np.where(np.isin(np.arange(len(x)), active), x, np.inf))))


# Candidate model forms, simplest first: (floor of a row block's work, how the short-segment rows enter,
# diagonal term kept). The form is chosen per kernel and direction by its error on held-out one-GPU rows
# (`_choose_form`); no CP row and no published figure is seen by the choice or by the fit.
FORMS = tuple((floor, how, diagonal) for floor in FLOORS for diagonal in (False, True)
              for how in ("dense + short terms", "joint"))
# the terms the short-segment rows fit on top of the dense sweep's coefficients (per slice and per row it loads)
SHORT_TERMS = ("segment_ms", "token_ms")


def _design(x: np.ndarray, floor: str, diagonal: bool) -> np.ndarray:
    """The (rows, NAMES) columns one form fits: the work with the floor's shortfall added (priced per tile),
    the diagonal column zero without the diagonal term."""
    d = x[:, :len(NAMES)].copy()
    d[:, NAMES.index("tile_ms")] += x[:, len(NAMES) + FLOORS.index(floor)]
    if not diagonal:
        d[:, NAMES.index("diagonal_ms")] = 0.0
    return d


def _nonneg_rel_fit(x: np.ndarray, t: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Coefficients >= 0 minimising the relative error of each row, rows weighted by `w`."""
    root = np.sqrt(w)
    return _nonneg_lstsq(x / t[:, None] * root[:, None], root)


def _fit_form(x: np.ndarray, t: np.ndarray, short: np.ndarray, how: str) -> np.ndarray:
    """Coefficients of one form on its design `x` (`_design`). Without short-segment rows both ways are the
    dense fit. `joint`: every term fitted on both sets, each set weighing half. `dense + short terms`: the
    dense rows' fit, then only the per-segment and per-token terms fitted, non-negative, on the short rows'
    relative residuals (the launch, row, tile and diagonal coefficients stay the dense sweep's, so the long
    calls keep their price)."""
    if not short.any() or short.all():
        return _nonneg_rel_fit(x, t, np.ones(len(t)))
    if how == "joint":
        return _nonneg_rel_fit(x, t, np.where(short, 0.5 / short.sum(), 0.5 / (~short).sum()))
    dense = _nonneg_rel_fit(x[~short], t[~short], np.ones(int((~short).sum())))
    cols = [NAMES.index(n) for n in SHORT_TERMS]
    resid = t[short] - x[short] @ dense
    dense[cols] += _nonneg_lstsq(x[short][:, cols] / t[short, None], resid / t[short])
    return dense


def _heldout_score(x: np.ndarray, t: np.ndarray, short: np.ndarray, how: str) -> dict[str, float]:
    """Each row predicted by the form fitted on the other rows (leave one out): the median |error| % over the
    dense rows and over the short-segment rows, and their mean (each set weighing half), the `score`."""
    errs = np.empty(len(t))
    for i in range(len(t)):
        keep = np.arange(len(t)) != i
        errs[i] = abs(x[i] @ _fit_form(x[keep], t[keep], short[keep], how) - t[i]) / t[i]
    parts = {name: 100 * float(np.median(errs[sel])) for name, sel in (("dense", ~short), ("short", short))
             if sel.any()}
    return {**parts, "score": float(np.mean(list(parts.values())))}


def _choose_form(x: np.ndarray, t: np.ndarray, short: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """The form (`FORMS`) with the lowest held-out score on the kernel's own one-GPU rows (`x`: FEATURES
    columns), fitted on all of them; a tie keeps the simpler (earlier) form. Without short-segment rows the
    two ways they enter are one. Returns the NAMES coefficients and the selection (with `floor`)."""
    both = bool(short.any() and (~short).any())
    forms = FORMS if both else tuple(f for f in FORMS if f[1] == FORMS[0][1])
    scores = {f: _heldout_score(_design(x, f[0], f[2]), t, short, f[1]) for f in forms}
    floor, how, diagonal = min(forms, key=lambda f: scores[f]["score"])  # min keeps the first of equal scores
    selection: dict[str, Any] = {
        "rule": "lowest leave-one-out median |error| over the one-GPU rows (dense and short-segment rows "
                "weighing half each); a tie keeps the simpler form",
        "floor": floor, "segment_model": how if short.any() else None, "diagonal": diagonal,
        "heldout_err_pct": scores[(floor, how, diagonal)],
        "candidates": [{"floor": f, "segment_model": h if short.any() else None, "diagonal": d, **scores[(f, h, d)]}
                       for f, h, d in forms]}
    return _fit_form(_design(x, floor, diagonal), t, short, how), selection


def _shape_ranges(items: list, short: np.ndarray) -> tuple[tuple[float, float], tuple[float, float]]:
    """(shortest, longest segment), (fewest, most segments a call) that count as measured. The shortest
    segment and the most segments come from the short-segment rows where the kernel has them (the rows that
    time calls of many short segments one by one); a dense-sweep row's documents are mixed lengths in one
    call, so without segment rows they come from the dense rows."""
    shapes = [r["_shape"] for _, _, r in items]
    pick = [s for s, is_short in zip(shapes, short, strict=True) if is_short] or shapes
    return ((min(s[0] for s in pick), max(s[1] for s in shapes)), (1.0, max(s[3] for s in pick)))


def row_features(row: dict[str, Any], registry=None) -> np.ndarray:
    """The mean features of the single call a one-GPU row made, over its mask draws."""
    from longca.problem import Problem, build_mask

    problem = Problem(kernel=row["kernel"], mask=row["mask"], seqlen=row["seqlen"], heads_q=row["heads_q"],
                      heads_kv=row["heads_kv"], head_dim=row["head_dim"], sampler=row.get("sampler") or "auto",
                      seed=row.get("seed") or 0, mask_params=row.get("mask_params") or {})
    feats, shapes, empty = [], [], []
    for sample in range(max(1, row.get("samples") or 1)):
        mask = build_mask(problem, sample, registry)
        table = pair_table(mask.static_slices(), [(0, problem.seqlen)], [(0, problem.seqlen)])
        feats.append(table_features(table, problem.heads_q).sum(axis=0))
        shapes.append(call_shapes(table)[0])
        empty.append(empty_blocks(table, problem.heads_q).sum())
    row["_empty"] = float(np.mean(empty))
    row["_shape"] = [min(s[0] for s in shapes), max(s[1] for s in shapes), min(s[2] for s in shapes),
                     max(s[2] for s in shapes)]
    return np.mean(feats, axis=0)


def segment_items(rows: Iterable[dict[str, Any]]) -> list[tuple[str, str, np.ndarray, float, dict[str, Any]]]:
    """(kernel, direction, features, ms, row) of short-segment microbenchmark rows (`segments.segment_rows`:
    one call each, its slices given)."""
    out = []
    for row in rows:
        table = pair_table(row["slices"], [(0, row["q_len"])], [(0, row["k_len"])])
        shape = call_shapes(table)[0]
        meta = {"mask": f"segments:{row.get('kind')}", "seqlen": row["q_len"], "id": row.get("id"),
                "_shape": [shape[0], shape[1], shape[2], shape[2]],
                "_empty": float(empty_blocks(table, row["heads_q"]).sum())}
        out.append((row["kernel"], row["direction"], table_features(table, row["heads_q"]).sum(axis=0),
                    float(row["ms_median"]), meta))
    return out


def fit_rows(rows: Iterable[dict[str, Any]], registry=None,
             segments: Iterable[dict[str, Any]] = ()) -> dict[str, dict[str, KernelFit]]:
    """Fits per kernel and direction from ok single-GPU rows of the FIT_MASKS (fwd and bwd rows) and, if
    given, short-segment microbenchmark rows (`benchmarks/varlen_segments.py`, read by `segments.segment_rows`)."""
    groups: dict[tuple[str, str], list[tuple[np.ndarray, float, dict]]] = {}
    for kernel, direction, feats, ms, meta in segment_items(segments):
        groups.setdefault((kernel, direction), []).append((feats, ms, meta))
    for row in rows:
        if (row.get("status") != "ok" or row.get("strategy") or row.get("mask") not in FIT_MASKS
                or row.get("direction") not in ("fwd", "bwd") or not row.get("ms_median") or row.get("batch", 1) != 1):
            continue
        groups.setdefault((row["kernel"], row["direction"]), []).append(
            (row_features(row, registry), float(row["ms_median"]), row))
    fits: dict[str, dict[str, KernelFit]] = {}
    for (kernel, direction), items in sorted(groups.items()):
        if len(items) < 4:
            continue
        x = np.array([f for f, _, _ in items])
        t = np.array([ms for _, ms, _ in items])
        short = np.array([str(r.get("mask", "")).startswith("segments:") for _, _, r in items])
        coef, selection = _choose_form(x, t, short)
        pred = _design(x, selection["floor"], True) @ coef
        err = 100 * (pred - t) / t
        residuals = [{"mask": r["mask"], "seqlen": r["seqlen"], "measured_ms": ms, "model_ms": float(p),
                      "err_pct": float(e)} for (_, ms, r), p, e in zip(items, pred, err, strict=True)]
        launch_ms, row_ms, tile_ms, segment_ms, diagonal_ms, token_ms = (float(c) for c in coef)
        empty_ms = 0.0
        if direction == "bwd" and kernel in EMPTY_GRID_KERNELS:
            empty_ms, selection["empty_blocks"] = _fit_empty(np.array([r.get("_empty", 0.0) for _, _, r in items]),
                                                             t, pred)
        fits.setdefault(kernel, {})[direction] = KernelFit(
            kernel, direction, launch_ms, row_ms, tile_ms, segment_ms, len(items), float(np.median(np.abs(err))),
            float(np.max(np.abs(err))), (float(x[:, 2].min()), float(x[:, 2].max())), residuals, diagonal_ms,
            selection, token_ms, *_shape_ranges(items, short), floor=selection["floor"], empty_block_ms=empty_ms)
    return fits


def read_rows(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Rows of results.jsonl files (or folders holding one, searched recursively)."""
    out: list[dict[str, Any]] = []
    for path in paths:
        path = Path(path)
        files = [path] if path.is_file() else sorted(path.rglob("results.jsonl"))
        if not files:
            raise LongcaError(f"no results.jsonl in {path}")
        for f in files:
            out.extend(json.loads(line) for line in f.read_text().splitlines() if line.strip())
    return out


def save_fits(fits: dict[str, dict[str, KernelFit]], path: Path, sources: list[str],
              call_overhead: dict[str, Any] | None = None, proxies: dict[str, str] | None = None) -> None:
    doc = {"tile": TILE, "masks": list(FIT_MASKS), "sources": sources, "call_overhead_ms": call_overhead or {},
           "segment_proxies": proxies or {},
           "kernels": {k: {d: asdict(f) for d, f in by.items()} for k, by in fits.items()}}
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")


def load_fits(path: Path | None = None) -> tuple[dict[str, dict[str, KernelFit]], dict[str, Any]]:
    """The fits shipped with longca (from docs/results/h200, `docs/scripts/cp_fit.py`) or another file,
    and the file's other fields (sources, the per-call overhead of CP steps)."""
    try:
        doc = json.loads(Path(path or FIT_PATH).read_text())
        fits = {k: {d: KernelFit(**{**f, "work_range": tuple(f["work_range"]),
                                    "segment_len_range": tuple(f.get("segment_len_range", ())),
                                    "segment_count_range": tuple(f.get("segment_count_range", ()))})
                    for d, f in by.items()}
                for k, by in doc["kernels"].items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LongcaError(f"cannot read kernel fit {path or FIT_PATH}: {exc}") from None
    return fits, {k: v for k, v in doc.items() if k != "kernels"}


def kernel_fit(fits: dict[str, dict[str, KernelFit]], kernel: str, direction: str) -> KernelFit:
    if kernel not in fits or direction not in fits[kernel]:
        known = ", ".join(sorted(fits)) or "none"
        raise LongcaError(f"no measured rows to price inner kernel {kernel!r} ({direction}); fitted kernels: {known}"
                          f" (add rows with --results)")
    return fits[kernel][direction]


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12 if ms > 0 and math.isfinite(ms) else 0.0
