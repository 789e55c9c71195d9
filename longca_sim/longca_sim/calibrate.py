"""Measured CP rows against the simulator: re-simulating a row, and the per-call overhead fitted from rows.

The inner kernel's fit comes from one-GPU rows, where every case is one call. What a CP step adds
per extra call (the crop's packing, the Python of the loop, small launches) shows only in CP rows
with several calls per rank; `fit_call_overhead` takes, per direction, the median over such rows
of (measured - simulated without it) / calls of the busiest rank. docs/scripts/cp_fit.py stores
it next to the kernel fits; docs/scripts/cp_validate.py checks every row with the overhead
fitted on the other rows only (leave one out).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from longca.problem import Problem
from longca.results import ResultRow

from .simulate import Pricing, simulate


def row_problem(row: dict[str, Any]) -> Problem:
    """The Problem a measured row describes (a CP row or a one-GPU row)."""
    return Problem(kernel=row["kernel"], mask=row["mask"], seqlen=row["seqlen"], heads_q=row["heads_q"],
                   heads_kv=row["heads_kv"], head_dim=row["head_dim"], batch=row.get("batch") or 1,
                   dtype=row["dtype"], direction=row["direction"], device="cuda", sampler=row.get("sampler") or "auto",
                   sampler_params=row.get("sampler_params") or {}, seed=row.get("seed") or 0,
                   mask_params=row.get("mask_params") or {}, strategy=row.get("strategy"),
                   world_size=row.get("world_size") or 1, strategy_options=row.get("strategy_options") or {})


def simulate_row(row: dict[str, Any], pricing: Pricing) -> ResultRow:
    """The simulated twin of a measured CP row (same mask draws, options and direction)."""
    problem = row_problem(row)
    return simulate(problem, dict(problem.strategy_options), pricing, max(1, row.get("samples") or 1))


def cp_rows(rows: Iterable[dict[str, Any]], world_above: int = 1) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "ok" and r.get("strategy")
            and (r.get("world_size") or 1) > world_above and r.get("direction") in ("fwd", "bwd")]


# the CP-specific constants are fitted on these masks only: every document CP row stays test data
OVERHEAD_MASKS = ("full", "causal")


def call_overhead_misses(rows: Iterable[dict[str, Any]], pricing: Pricing,
                         masks: tuple[str, ...] = OVERHEAD_MASKS) -> list[tuple[dict, float]]:
    """(row, missing ms per call of the busiest rank) for CP rows of `masks` with more than one call per rank."""
    bare = Pricing(pricing.fwd, pricing.bwd, pricing.topology, pricing.calibrated, None, pricing.merge_bytes)
    out = []
    for row in cp_rows(rows):
        if row.get("mask") not in masks:
            continue
        sim = simulate_row(row, bare)
        calls = sim["balance"]["calls_max"] if sim["status"] == "ok" else 0
        if calls > 1:
            out.append((row, (row["ms_median"] - sim["ms_median"]) / calls))
    return out


def fit_call_overhead(misses: list[tuple[dict, float]], leave_out: dict | None = None) -> dict[str, float]:
    """Per direction, the median missing ms per call over the rows (but `leave_out`); never negative."""
    out = {}
    for direction in ("fwd", "bwd"):
        values = [m for r, m in misses if r["direction"] == direction and r is not leave_out]
        out[direction] = max(0.0, float(np.median(values))) if values else 0.0
    return out
