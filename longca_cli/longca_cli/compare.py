"""Two runs compared case by case, so a kernel author can tell a real change from noise and use
`longca compare` as a performance gate.

For each case measured ok in both runs: the speed ratio NEW/BASE (= base time / new time; above 1
is faster) with a confidence interval. With per-iteration times in the rows (`iter_times_ms`) the
interval is a bootstrap: each run's times are resampled with replacement (within each mask sample)
and the statistic the report uses, the median over samples of the median time, is recomputed.
Older rows carry only the p20, median and p80 of their times; their interval is then the ratio of
those ranges (base p20 / new p80 to base p80 / new p20), wider than a confidence interval, and
said so in `method`. Labels: `faster` / `slower` when the whole interval is above / below 1, else
`same within noise`; the gate fails on a case whose interval lies wholly below 1 - threshold, and
on a case that was ok in BASE and errs, runs out of memory, times out or is wrong in NEW.
A control (each run's bf16 matmul peak) tells a machine change from a kernel change.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from longca.results import is_unavailable
from longca_cli import analysis
from longca_cli.analysis import Results, Row

BROKEN = ("error", "oom", "timeout", "incorrect")  # ok in BASE, one of these in NEW: fails the gate


@dataclass
class CaseComparison:
    base: Row
    new: Row
    ratio: float | None  # NEW speed / BASE speed
    low: float | None
    high: float | None
    method: str
    label: str  # faster | slower | same within noise | no spread recorded | broken | now runs | now refused | ...
    gate: bool = False  # this case fails the gate
    normalised: float | None = None  # ratio / the control's ratio

    def as_dict(self) -> dict[str, Any]:
        r = self.new
        return {"kernel": r["column"], "mask": analysis.mask_label(r), "seqlen": r["seqlen"],
                "direction": r["direction"], "heads": analysis.heads_label(r), "head_dim": r["head_dim"],
                "dtype": r["dtype"], "world_size": r.get("world_size") or 1,
                "base_status": self.base.get("status"), "new_status": r.get("status"),
                "base_tflops": self.base.get("tflops"), "new_tflops": r.get("tflops"), "ratio": self.ratio,
                "ci_low": self.low, "ci_high": self.high, "method": self.method, "label": self.label,
                "gate": self.gate, "normalised_ratio": self.normalised,
                "base_ms_median": self.base.get("ms_median"), "new_ms_median": r.get("ms_median")}


@dataclass
class Comparison:
    cases: list[CaseComparison]
    only_base: list[Row]
    only_new: list[Row]
    threshold: float
    confidence: float
    control: dict[str, Any]
    environments: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def failed(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.gate]

    def geomeans(self, by: str) -> dict[str, dict[str, Any]]:
        """Geometric mean of the ratios per kernel (`by="kernel"`) or mask, with the labels' counts."""
        groups: dict[str, list[CaseComparison]] = {}
        for c in self.cases:
            if c.ratio:
                key = c.new["column"] if by == "kernel" else analysis.mask_label(c.new)
                groups.setdefault(key, []).append(c)
        out = {}
        for key, cs in sorted(groups.items()):
            counts: dict[str, int] = {}
            for c in cs:
                counts[c.label] = counts.get(c.label, 0) + 1
            out[key] = {"geomean": geomean([c.ratio for c in cs if c.ratio]), "cases": len(cs), "labels": counts}
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "confidence": self.confidence, "control": self.control,
                "failed": len(self.failed), "cases": [c.as_dict() for c in self.cases],
                "geomean_by_kernel": self.geomeans("kernel"), "geomean_by_mask": self.geomeans("mask"),
                "geomean_all": geomean([c.ratio for c in self.cases if c.ratio]),
                "only_in_base": len(self.only_base), "only_in_new": len(self.only_new),
                "environments": self.environments}


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _samples(row: Row) -> list[np.ndarray] | None:
    """The row's per-iteration times as one array per mask sample (a flat list is one sample)."""
    times = row.get("iter_times_ms")
    if not times:
        return None
    groups = times if isinstance(times[0], (list, tuple)) else [times]
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g)]
    return arrays or None


def _statistic(samples: list[np.ndarray]) -> float:
    return float(np.median([np.median(s) for s in samples]))


def _bootstrap(samples: list[np.ndarray], rng: np.random.Generator, n: int) -> np.ndarray:
    """n bootstrap replicates of the median over samples of each sample's median time."""
    per_sample = [np.median(s[rng.integers(0, len(s), size=(n, len(s)))], axis=1) for s in samples]
    return np.median(np.stack(per_sample), axis=0)


def compare_rows(base: Row, new: Row, threshold: float, confidence: float, rng: np.random.Generator,
                 resamples: int = 2000) -> CaseComparison:
    b_ok, n_ok = base.get("status") == "ok", new.get("status") == "ok"
    if not (b_ok and n_ok):
        if b_ok and new.get("status") in BROKEN:
            return CaseComparison(base, new, None, None, None, "status", "broken", gate=True)
        label = ("now runs" if n_ok else "not installed in NEW" if is_unavailable(new) else "now refused" if b_ok
                 else "runs in neither")
        return CaseComparison(base, new, None, None, None, "status", label)
    bs, ns = _samples(base), _samples(new)
    if bs and ns:
        b_stat, n_stat = _statistic(bs), _statistic(ns)
        ratios = _bootstrap(bs, rng, resamples) / _bootstrap(ns, rng, resamples)
        tail = (1 - confidence) / 2 * 100
        low, high = (float(v) for v in np.percentile(ratios, [tail, 100 - tail]))
        ratio, method = b_stat / n_stat, f"bootstrap ({resamples} resamples, {confidence:.0%})"
    elif all(r.get(k) for r in (base, new) for k in ("ms_p20", "ms_median", "ms_p80")):
        ratio = base["ms_median"] / new["ms_median"]
        low, high = base["ms_p20"] / new["ms_p80"], base["ms_p80"] / new["ms_p20"]
        method = "p20-p80 ranges (no per-iteration times in the rows; wider than a confidence interval)"
    elif base.get("ms_median") and new.get("ms_median"):
        ratio = base["ms_median"] / new["ms_median"]
        return CaseComparison(base, new, ratio, None, None, "medians only", "no spread recorded")
    else:
        return CaseComparison(base, new, None, None, None, "no times", "no times recorded")
    label = "faster" if low > 1 else "slower" if high < 1 else "same within noise"
    return CaseComparison(base, new, ratio, low, high, method, label, gate=high < 1 - threshold)


def _peak(results: Results) -> float | None:
    peaks = [r.peak for r in results.runs if r.peak] or [row["matmul_peak_tflops"] for row in results.rows
                                                          if row.get("matmul_peak_tflops")]
    return analysis.median(peaks)


def compare(base: Results, new: Results, threshold: float = 0.03, confidence: float = 0.95,
            seed: int = 0) -> Comparison:
    """Every case of NEW matched with the same case of BASE: the same problem fields (kernel,
    mask, sizes, dtype, direction, sampler, seed, strategy...), whatever the longca version."""
    if not 0 <= threshold < 1:
        raise ValueError("threshold is a fraction in [0, 1)")
    rng = np.random.default_rng(seed)
    base_by = {analysis.problem_key(r): r for r in base.rows}
    new_by = {analysis.problem_key(r): r for r in new.rows}
    cases = [compare_rows(base_by[k], r, threshold, confidence, rng) for k, r in new_by.items() if k in base_by]
    b_peak, n_peak = _peak(base), _peak(new)
    control: dict[str, Any] = {"what": "bf16 matmul peak (TFLOP/s) of each run", "base": b_peak, "new": n_peak,
                               "ratio": n_peak / b_peak if b_peak and n_peak else None}
    if control["ratio"]:
        control["machine_changed"] = abs(control["ratio"] - 1) > threshold
        for c in cases:
            c.normalised = c.ratio / control["ratio"] if c.ratio else None
    return Comparison(cases, [r for k, r in base_by.items() if k not in new_by],
                      [r for k, r in new_by.items() if k not in base_by], threshold, confidence, control,
                      {"base": analysis.environments(base), "new": analysis.environments(new)})
