"""Published single-GPU numbers (`data/published_anchors.json`, each with its source) set beside
longca's best measured cell of the same shape, so a reader sees at once whether a run is near the
best anyone has published, or whether something (a slow build, a throttled GPU) holds it back.

A row matches an anchor on mask, direction, head_dim, dtype and, where the source gives them,
heads and length; single-GPU measured CUDA rows only. Where the anchor's length was not measured
the nearest measured length stands in, and says so.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from longca.errors import LongcaError

Row = dict[str, Any]


@dataclass(frozen=True)
class Anchor:
    """One published number: who measured what shape on which GPU, and where it was published."""

    kernel: str
    mask: str
    direction: str
    tflops: float
    head_dim: int
    dtype: str
    gpu: str
    source: str
    seqlen: int | None = None  # None: the source gives no length
    heads: str | None = None  # "64:8"; None: the source gives none
    note: str = ""


# package data beside this module (by file: from the checkout root `longca_cli` is also a folder there)
SHIPPED = Path(__file__).resolve().parent / "data" / "published_anchors.json"


def load_anchors(path: str | Path | None = None) -> list[Anchor]:
    """The anchors shipped with longca-cli, or those of another file of the same layout."""
    try:
        text = Path(path if path is not None else SHIPPED).read_text()
        return [Anchor(**entry) for entry in json.loads(text)["anchors"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LongcaError(f"published anchors {path or 'longca_cli/data/published_anchors.json'}: {exc}") from None


def _matches(row: Row, anchor: Anchor) -> bool:
    return (row.get("status") == "ok" and bool(row.get("tflops")) and not row.get("strategy")
            and not row.get("simulated") and row.get("measured") is not False
            and str(row.get("device") or "").startswith("cuda") and row.get("mask") == anchor.mask
            and not row.get("mask_params") and row.get("direction") == anchor.direction
            and row.get("head_dim") == anchor.head_dim and row.get("dtype") == anchor.dtype
            and (anchor.heads is None or f"{row.get('heads_q')}:{row.get('heads_kv')}" == anchor.heads))


def _length(seqlens: set[int], wanted: int | None) -> tuple[int | None, str]:
    """The measured length to compare at, and how it was chosen: exact, nearest (log scale; the
    longer on a tie) or, when the source gives none, every length."""
    if wanted is None:
        return None, "any"
    if wanted in seqlens:
        return wanted, "exact"
    nearest = min(seqlens, key=lambda s: (abs(math.log2(s / wanted)), -s))
    return nearest, "nearest"


def beside(rows: list[Row], anchors: list[Anchor] | None = None) -> list[dict[str, Any]]:
    """Per anchor: longca's best matching row (`row`, None when none matches), the length it was
    taken at (`match`: exact, nearest or any) and `ratio` = its TFLOP/s over the published one."""
    out = []
    for anchor in load_anchors() if anchors is None else anchors:
        candidates = [r for r in rows if _matches(r, anchor)]
        entry: dict[str, Any] = {"anchor": asdict(anchor), "row": None, "match": None, "ratio": None}
        if candidates:
            seqlen, how = _length({r["seqlen"] for r in candidates}, anchor.seqlen)
            top = max((r for r in candidates if seqlen is None or r["seqlen"] == seqlen), key=lambda r: r["tflops"])
            entry.update(row=top, match=how, ratio=top["tflops"] / anchor.tflops)
        out.append(entry)
    return out
