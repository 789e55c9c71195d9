"""Short-segment varlen calls: the cases of `benchmarks/varlen_segments.py` and reading its rows back.

A case is one inner-kernel call (the `forward_lse` / `backward_lse` primitives a CP step calls) whose
slices are many short segments: `segments` documents of `seg_len` tokens each, every one a causal
(or full) block on the diagonal, or a crop that the per-document layout (`doc_zigzag`) gives a ring
rank at one step. The benchmark stores the crops' slices in `crops.json` beside `rows.jsonl`, so the
rows can be priced again by any later form of the cost model (`segment_rows`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from longca.errors import LongcaError
from longca.masks import slices as sl

KINDS = ("causal", "full")


def segment_slices(seg_len: int, segments: int, kind: str) -> np.ndarray:
    """`segments` diagonal blocks of `seg_len` tokens, each causal or full: the slices of one varlen call."""
    if kind not in KINDS:
        raise LongcaError(f"unknown segment kind {kind!r}; known: {', '.join(KINDS)}")
    if seg_len < 1 or segments < 1:
        raise LongcaError(f"segment length and count must be positive, got {seg_len} and {segments}")
    starts = np.arange(segments, dtype=np.int64) * seg_len
    t = sl.CAUSAL if kind == "causal" else sl.FULL
    return np.column_stack([starts, starts + seg_len, starts, starts + seg_len, np.full(segments, t)])


def case_slices(row: dict[str, Any], crops: dict[str, Any]) -> tuple[np.ndarray, int, int]:
    """(slices, query rows, key rows) of a row of the benchmark."""
    if row.get("case") == "segments":
        n = int(row["seg_len"]) * int(row["segments"])
        return segment_slices(int(row["seg_len"]), int(row["segments"]), row["kind"]), n, n
    crop = crops.get(row.get("crop_id", ""))
    if crop is None:
        raise LongcaError(f"row {row.get('id')!r}: crop {row.get('crop_id')!r} is not in crops.json")
    return sl.as_array(crop["slices"]), int(crop["q_len"]), int(crop["k_len"])


def read_segment_rows(folder: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows and crops of a benchmark folder (rows.jsonl, crops.json)."""
    folder = Path(folder)
    rows_path = folder / "rows.jsonl"
    if not rows_path.is_file():
        raise LongcaError(f"no rows.jsonl in {folder} (made by benchmarks/varlen_segments.py)")
    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
    crops_path = folder / "crops.json"
    crops = json.loads(crops_path.read_text()) if crops_path.is_file() else {}
    return rows, crops


def segment_rows(folder: Path, kernel: str | None = None) -> list[dict[str, Any]]:
    """ok rows of a benchmark folder as dicts with `slices`, `q_len`, `k_len` added (for fitting)."""
    rows, crops = read_segment_rows(folder)
    out = []
    for row in rows:
        if row.get("status") != "ok" or (kernel and row.get("kernel") != kernel):
            continue
        slices, q_len, k_len = case_slices(row, crops)
        out.append({**row, "slices": slices, "q_len": q_len, "k_len": k_len})
    return out
