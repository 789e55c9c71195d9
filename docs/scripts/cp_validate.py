"""Check `longca simulate` against measured rows and published figures, under a protocol fixed before the numbers.

    python docs/scripts/cp_validate.py            # compute, write the tables, check docs/cp-simulator.md
    python docs/scripts/cp_validate.py --write-doc   # the same, and put the summary into docs/cp-simulator.md
    python docs/scripts/cp_validate.py --quick --output DIR   # a small form (CI): a few rows and cells
    python docs/scripts/cp_validate.py --held-out docs/results/h200x8 --output DIR   # held-out rows only (below)

The protocol (what is fitted on what):
- inner-kernel fits: one-GPU rows only (the H200 dense sweep and, when present, the short-segment
  microbenchmark), `docs/scripts/cp_fit.py`;
- CP-specific constants (the per-call overhead of a CP step): only full and causal CP rows of
  longca's own two-GPU runs; each of those rows is predicted with the constant fitted on the others;
- test data, never fitted on: every document CP row, every fa2-alone row, every world-size-1 row,
  every published cell (docs/cp-simulator/anchors-*.md, each file naming its setting on its first line),
  the published one-GPU kernel figures of the kernel check (docs/cp-simulator/kernel-h100.md) and the
  H200 rows of Ulysses' inner call at the published shapes (docs/results/h200/ulysses-shapes);
- held-out rows (`--held-out PATH`, e.g. the 8-GPU rows of docs/results/h200x8, issue 41): each priced with
  the per-call overhead fitted on the two-GPU rows above and nothing else, written to
  validation-held-out.md alone; they never enter a fit, a band or docs/cp-simulator.md.

Writes docs/cp-simulator/validation-own.md, validation-published-NAME.md, validation-summary.md,
validation.json and longca_sim/longca_sim/data/validation_bands.json (the out-of-sample error per regime
that `longca recommend` reports); exits 1 when a generated block of docs/cp-simulator.md (the summary, the
goals, the kernel fit, the kernel checks, the tables, the residual) differs from what it computes
(`--write-doc` rewrites them), or when the prose of its validation section or changelog holds a percentage
or an `N of M` count or a ratio (`0.72x`) that no generated block prints.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from longca.errors import LongcaError
from longca.problem import Problem, build_mask
from longca_cp.accounting import schedule_of
from longca_sim.baselines import PublishedBaselines
from longca_sim.calibrate import OVERHEAD_MASKS, call_overhead_misses, fit_call_overhead, row_problem, simulate_row
from longca_sim.costmodel import DECLARED_SPEEDS, kernel_fit, load_fits, pair_table, read_rows, table_features
from longca_sim.simulate import MERGE_BYTES_MEASURED_ROWS, Grid, Pricing, default_pricing, harness_memory, simulate_grid
from longca_sim.topology import preset

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "cp-simulator"
DOC = ROOT / "docs" / "cp-simulator.md"
BANDS = ROOT / "longca_sim" / "longca_sim" / "data" / "validation_bands.json"
OWN = [ROOT / "docs/context-parallel/h200-overhead-fa2.jsonl", ROOT / "docs/results/h200x2/cp/results.jsonl"]
SHAPES = ROOT / "docs/results/h200/ulysses-shapes"  # one-GPU rows of Ulysses' inner call at the published shapes
STRATEGY = {"Ulysses": ["ulysses"], "Ring-AllGather": ["ring-allgather"], "USP": ["usp"], "LoongTrain": ["loongtrain"],
            "USP / LoongTrain": ["usp", "loongtrain"], "Ring-P2P": ["ring-p2p"]}
WORLDS = (8, 16, 32, 64)
# the published protocol (exps/dist_attn/benchmark_conf.py `SAMPLE_CONFIG.pack_num`, run_benchmark.py): a cell is
# the mean over the source's first 20 packs of each pack's TFLOP/s (slowest rank); the anchors' sampler,
# `magi-packs`, gives those packs as draws 0-19, and each prediction is made the same way
DRAWS, AGGREGATE = 20, "mean"
# the held-out half, named before any model change of issue 39 (docs/cp-simulator.md, section 3): its cells are
# reported apart and never used to choose anything
HELD_OUT = (32, 64)
STRATEGIES = ["ulysses", "ring-p2p", "ring-allgather", "usp", "loongtrain"]
VARIANT = " (baseline variant)"  # the name suffix of a published set priced by `longca_sim.baselines`
BEGIN, END = "<!-- validation-summary:begin -->", "<!-- validation-summary:end -->"
FIT_BEGIN, FIT_END = "<!-- kernel-fit:begin -->", "<!-- kernel-fit:end -->"
GOALS_BEGIN, GOALS_END = "<!-- validation-goals:begin -->", "<!-- validation-goals:end -->"
KERNEL_BEGIN, KERNEL_END = "<!-- kernel-check:begin -->", "<!-- kernel-check:end -->"
SHAPES_BEGIN, SHAPES_END = "<!-- kernel-shapes:begin -->", "<!-- kernel-shapes:end -->"
TABLES_BEGIN, TABLES_END = "<!-- validation-tables:begin -->", "<!-- validation-tables:end -->"
VARIANT_BEGIN, VARIANT_END = "<!-- baseline-variant:begin -->", "<!-- baseline-variant:end -->"
EMPTY_BEGIN, EMPTY_END = "<!-- empty-blocks:begin -->", "<!-- empty-blocks:end -->"
RESID_BEGIN, RESID_END = "<!-- residual:begin -->", "<!-- residual:end -->"
# sections of docs/cp-simulator.md whose prose may hold no validation figure the script does not print
CHECKED_SECTIONS = ("## 3. Validation", "## Changelog")
FIGURE = re.compile(r"\d[\d,]*(?:\.\d+)?\s?%|\b\d+ of \d+\b|\b\d+\.\d+x\b")


def pct(a: float, b: float) -> float:
    return 100.0 * (a - b) / b


def med(values) -> float:
    return float(np.median(values)) if len(values) else float("nan")


def draw_price(fit, problem: Problem, sample: int) -> tuple[float, float]:
    """The kernel fit's ms for one call over the whole of mask draw `sample` of `problem`, and that draw's
    FLOPs (4 x area x heads x head dim, 2.5x that backward, as `longca.flops` counts a row's)."""
    m = build_mask(problem, sample)
    n = problem.seqlen
    ms = float(fit.price(table_features(pair_table(m.slices, [(0, n)], [(0, n)]), problem.heads_q)).sum())
    flops = 4.0 * m.area * problem.heads_q * problem.head_dim * (2.5 if problem.direction == "bwd" else 1.0)
    return ms, flops


def draw_tflops(fit, problem: Problem, sample: int) -> float:
    ms, flops = draw_price(fit, problem, sample)
    return flops / (ms * 1e-3) / 1e12


def parse_anchors(path: Path) -> list[dict]:
    """Cells of the published table: mask, direction, strategy, world size, value or (low, high) range."""
    cells = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if len(parts) != 6 or "," not in parts[0] or parts[1] not in STRATEGY:
            continue
        mask, direction = (p.strip() for p in parts[0].split(","))
        for world, text in zip(WORLDS, parts[2:], strict=False):
            span = re.search(r"(\d+)\s*[–-]\s*(\d+)", text)
            if span and "over" not in text:  # a range of this cell alone (a reading error)
                cells.append(dict(mask=mask, direction=direction, strategy=parts[1], world=world,
                                  low=float(span.group(1)), high=float(span.group(2))))
                continue
            if span:  # "a-b over 8-64": one range for every world size of the row
                for w in WORLDS:
                    cells.append(dict(mask=mask, direction=direction, strategy=parts[1], world=w,
                                      low=float(span.group(1)), high=float(span.group(2))))
                break
            if text:
                cells.append(dict(mask=mask, direction=direction, strategy=parts[1], world=world,
                                  low=float(text), high=float(text)))
    return cells


def loongtrain_windows(ring: int) -> int:
    """The double ring's window count of the source's LoongTrain runs (exps/dist_attn/run_benchmark.py,
    init_dist_environment): the largest divisor i of the ring with i <= ring / i, one when that is the ring."""
    best = max(i for i in range(1, ring + 1) if ring % i == 0 and i * i <= ring)
    return 1 if best >= ring else best


def published_options(strategy: str, world: int) -> dict:
    """The options of the source's baselines (exps/dist_attn/run_benchmark.py CP_GROUP_META, baselines/shard.py):
    every ring dispatched per document (TE's THD zigzag: each document cut into 2 x ring pieces), USP and
    LoongTrain with the all-to-all over the 8 GPUs of a node and the ring across nodes."""
    if strategy == "ulysses":
        return {}
    options: dict = {"layout": "doc_zigzag"}
    if strategy == "usp":
        options["ulysses_degree"] = min(world, 8)
    if strategy == "loongtrain":
        options.update(head_degree=min(world, 8), windows=loongtrain_windows(max(1, world // 8)))
    return options


STRATEGIES = ["ulysses", "ring-p2p", "ring-allgather", "usp", "loongtrain"]


def own_rows(quick: bool) -> tuple[list[str], dict[str, Any], list[dict[str, Any]]]:
    """longca's own measured rows re-simulated; the per-call overhead from full/causal two-GPU rows only."""
    rows = [r for r in read_rows(OWN) if r.get("status") == "ok" and r.get("direction") in ("fwd", "bwd")]
    if quick:
        rows = [r for r in rows if r.get("mask") in ("causal", "causal_document")][:8]
    pricing = default_pricing("fa2", preset("h200-sxm"))
    pricing.merge_bytes = MERGE_BYTES_MEASURED_ROWS  # these rows were measured before the merge was compiled
    misses = call_overhead_misses(rows, pricing)  # full and causal rows only (OVERHEAD_MASKS)
    fitted_on = {id(r) for r, _ in misses}
    fits, _ = load_fits()
    out = []
    for row in rows:
        world = row.get("world_size") or 1
        entry: dict[str, Any] = {"world": world, "strategy": row.get("strategy") or row["kernel"] + " alone",
                                 "mask": row["mask"], "direction": row["direction"], "measured_ms": row["ms_median"]}
        if row.get("strategy"):
            loo = fit_call_overhead(misses, leave_out=row if id(row) in fitted_on else None)
            sim = simulate_row(row, Pricing(pricing.fwd, pricing.bwd, pricing.topology, False, loo,
                                            pricing.merge_bytes))
            entry["out_ms"] = sim["ms_median"]
            if id(row) in fitted_on:  # its own miss inside the constant: the in-sample figure
                full = fit_call_overhead(misses)
                entry["in_ms"] = simulate_row(row, Pricing(pricing.fwd, pricing.bwd, pricing.topology, False, full,
                                                           pricing.merge_bytes))["ms_median"]
            if row.get("peak_mem_bytes") and sim["peak_mem_bytes"]:
                problem = row_problem(row)
                held = harness_memory(schedule_of(problem, build_mask(problem, 0), problem.strategy_options),
                                      row["direction"])
                entry["mem_err"] = pct(sim["peak_mem_bytes"] + held, row["peak_mem_bytes"])
        else:  # the inner kernel alone: one call over the whole mask, each of the row's draws
            fit = fits[row["kernel"]][row["direction"]]
            problem = row_problem(row)
            entry["out_ms"] = med([draw_price(fit, problem, i)[0] for i in range(max(1, row.get("samples") or 1))])
        entry["err"] = pct(entry["out_ms"], row["ms_median"])
        if "in_ms" in entry:
            entry["in_err"] = pct(entry["in_ms"], row["ms_median"])
        out.append(entry)
    lines = ["# Validation (a): longca's own measured rows (generated by docs/scripts/cp_validate.py; do not edit)", "",
             "fa2 inside, H200, h200-sxm preset; each row re-simulated with its own mask draws, options and "
             "direction. `out-of-sample`: nothing of the row in any fit (the per-call overhead fitted on the other "
             f"{'/'.join(OVERHEAD_MASKS)} two-GPU rows). `in-sample`: the same rows with the overhead fitted on all "
             "of them, itself included (only the rows the overhead is fitted on have one).", "",
             "| W | strategy | mask | dir | measured ms | simulated ms (out of sample) | error | in-sample error "
             "| peak memory error |", "|---|---|---|---|---|---|---|---|---|"]
    for e in out:
        lines.append(f"| {e['world']} | {e['strategy']} | {e['mask']} | {e['direction']} | {e['measured_ms']:.3f} | "
                     f"{e['out_ms']:.3f} | {e['err']:+.1f} % | "
                     f"{format(e['in_err'], '+.1f') + ' %' if 'in_err' in e else '-'} | "
                     f"{format(e['mem_err'], '+.0f') + ' %' if 'mem_err' in e else '-'} |")
    w2 = [e for e in out if e["world"] == 2 and not e["strategy"].endswith(" alone")]
    summary = {"rows": len(out), "within_10_out": sum(abs(e["err"]) <= 10 for e in out),
               "w2_rows": len(w2), "w2_within_10_out": sum(abs(e["err"]) <= 10 for e in w2),
               "w2_median_out": med([abs(e["err"]) for e in w2]),
               "in_sample_rows": sum("in_err" in e for e in out),
               "in_sample_median": med([abs(e["in_err"]) for e in out if "in_err" in e]),
               "out_median": med([abs(e["err"]) for e in out]),
               "memory_median_err_pct": med([e["mem_err"] for e in out if "mem_err" in e])}
    lines += ["", f"Out of sample: {summary['within_10_out']} of {summary['rows']} rows within 10 % (two-GPU rows: "
              f"{summary['w2_within_10_out']} of {summary['w2_rows']}, median abs error "
              f"{summary['w2_median_out']:.1f} %). "
              f"In sample ({summary['in_sample_rows']} rows): median abs error "
              f"{summary['in_sample_median']:.1f} %.", ""]
    return lines, summary, out


def held_out_rows(paths: list[Path], calibration: Path | None = None, fit_kernel: str | None = None,
                  topology: str = "h200-sxm") -> tuple[list[str], dict[str, Any], list[dict[str, Any]]]:
    """Rows held out of every model choice (issue 41's 8-GPU rows) against the simulator: each CP row priced
    with its inner kernel's one-GPU fit and the per-call overhead fitted on the two-GPU rows of `OWN` only, each
    kernel-alone row by its fit; `calibration`: a `longca comm-bench` file of the same machine for the links;
    `fit_kernel`: price every row with that kernel's fit instead (a dry run on CPU rows, whose kernel has none)."""
    fits, _ = load_fits()
    dev = [r for r in read_rows(OWN) if r.get("status") == "ok" and r.get("direction") in ("fwd", "bwd")]
    dev_pricing = default_pricing("fa2", preset(topology))
    dev_pricing.merge_bytes = MERGE_BYTES_MEASURED_ROWS
    overhead = fit_call_overhead(call_overhead_misses(dev, dev_pricing))  # the held-out rows take no part
    topo = preset(topology).with_calibration(calibration) if calibration else preset(topology)
    rows = [r for r in read_rows(paths) if r.get("status") == "ok" and r.get("direction") in ("fwd", "bwd")]
    out: list[dict[str, Any]] = []
    for row in rows:
        kernel = fit_kernel or row["kernel"]
        entry: dict[str, Any] = {"world": row.get("world_size") or 1, "kernel": row["kernel"], "fit": kernel,
                                 "strategy": row.get("strategy") or "alone", "mask": row["mask"],
                                 "seqlen": row["seqlen"], "direction": row["direction"],
                                 "measured_ms": row["ms_median"]}
        if kernel not in fits:
            entry["reason"] = f"no fit for {kernel} (fitted: {', '.join(sorted(fits))})"
        elif row.get("strategy"):
            pricing = Pricing(kernel_fit(fits, kernel, "fwd"), kernel_fit(fits, kernel, "bwd"), topo,
                              calibration is not None, overhead)
            entry["sim_ms"] = simulate_row({**row, "kernel": kernel}, pricing)["ms_median"]
        else:
            problem = row_problem({**row, "kernel": kernel})
            fit = fits[kernel][row["direction"]]
            entry["sim_ms"] = med([draw_price(fit, problem, i)[0] for i in range(max(1, row.get("samples") or 1))])
        if "sim_ms" in entry:
            entry["err"] = pct(entry["sim_ms"], row["ms_median"])
        out.append(entry)
    priced = [e for e in out if "err" in e]
    summary = {"rows": len(out), "priced": len(priced), "within_10": sum(abs(e["err"]) <= 10 for e in priced),
               "median_abs_err": med([abs(e["err"]) for e in priced]),
               "comm": f"calibrated ({calibration})" if calibration else f"preset {topology}",
               "call_overhead_ms": overhead, "fit_kernel": fit_kernel}
    lines = ["# Validation (held out): measured rows no model was chosen on (generated by docs/scripts/cp_validate.py "
             "--held-out; do not edit)", "",
             f"Sources: {', '.join(str(p) for p in paths)}. Links: {summary['comm']}. Each CP row priced with its "
             "inner kernel's one-GPU fit" + (f" (here every row with {fit_kernel}'s: a dry run)" if fit_kernel else "")
             + ", its own mask draws, options and direction, and the per-call overhead fitted on longca's two-GPU "
             f"full/causal rows only (fwd {overhead['fwd']:.4f} ms, bwd {overhead['bwd']:.4f} ms); these rows are "
             "fitted on nothing.", "",
             "| W | strategy | kernel | mask | S | dir | measured ms | simulated ms | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in out:
        sim = f"{e['sim_ms']:.3f}" if "sim_ms" in e else e["reason"]
        err = f"{e['err']:+.1f} %" if "err" in e else "-"
        lines.append(f"| {e['world']} | {e['strategy']} | {e['kernel']} | {e['mask']} | {e['seqlen']} | "
                     f"{e['direction']} | {e['measured_ms']:.3f} | {sim} | {err} |")
    lines += ["", f"{summary['within_10']} of {summary['priced']} priced rows within 10 %, median abs error "
              f"{summary['median_abs_err']:.1f} % ({summary['rows'] - summary['priced']} rows not priced).", ""]
    return lines, summary, out


def read_setting(path: Path) -> dict[str, Any]:
    m = re.search(r"<!-- setting: (.*?) -->", path.read_text())
    if not m:
        raise SystemExit(f"cp_validate: {path} has no '<!-- setting: ... -->' line naming its setting")
    setting = dict(kv.split("=", 1) for kv in m.group(1).split())
    setting["seqlen_per_rank"] = int(setting["seqlen_per_rank"])
    return setting


def simulate_cells(cells: list[dict], setting: dict[str, Any], samples: int, variant: bool = False,
                   empty: bool = True) -> dict:
    """Simulated rows of the cells; `variant`: priced with the published baselines' own copies and Ring
    All-Gather calls (`longca_sim.baselines`, the backend the anchor file's `baseline=` names); `empty`: False
    prices the backward without its launch grid's empty blocks (`costmodel.EMPTY_GRID_KERNELS`), as before
    issue 39's model change, for the before / after block."""
    pricing = default_pricing(setting["inner"], preset(setting["topology"]))
    if not empty:
        pricing = dataclasses.replace(pricing, bwd=dataclasses.replace(pricing.bwd, empty_block_ms=0.0))
    if variant:
        if "baseline" not in setting:
            raise SystemExit("cp_validate: the anchors' setting line names no baseline= (the source's inner path: "
                             "fa3 or te)")
        pricing = dataclasses.replace(pricing, baseline=PublishedBaselines(setting["baseline"]))
    # a GPU longca has no rows of: its preset prices the kernel at the declared speed (costmodel.DECLARED_SPEEDS)
    if setting.get("speed") and pricing.fwd.kernel != f"{setting['inner']}@{setting['speed']}":
        raise SystemExit(f"cp_validate: topology {setting['topology']} does not give the declared {setting['speed']} "
                         f"speed its anchors name")
    sims: dict = {}
    wanted = {(c["mask"], c["world"], s) for c in cells for s in STRATEGY[c["strategy"]]}
    for mask, world, strategy in sorted(wanted):
        grid = Grid([strategy], [world], mask, setting["inner"], 64, 8, 128,
                    seqlen_per_rank=setting["seqlen_per_rank"], direction="fwdbwd", sampler=setting["sampler"],
                    samples=samples, options=published_options(strategy, world), aggregate=AGGREGATE)
        sims[(mask, world, strategy)] = simulate_grid(grid, pricing)[0]
    return sims


def published(path: Path, quick: bool, variant: bool = False,
              empty: bool = True) -> tuple[list[str], dict[str, Any], list[dict[str, Any]]]:
    """One published set against the plain model (longca's own pricing) or, with `variant`, against the
    published-baselines variant (`longca_sim.baselines`); `empty`: see `simulate_cells` (False: causal_document
    cells only)."""
    setting = read_setting(path)
    cells = parse_anchors(path)
    if not empty:
        cells = [c for c in cells if c["mask"] == "causal_document"]
    if quick:
        cells = [c for c in cells if c["world"] in (8, 64) and c["strategy"] in ("Ring-P2P", "Ulysses",
                                                                                  "Ring-AllGather")
                 and c["mask"] == "causal_document"]
    draws = 2 if quick else DRAWS
    sims = simulate_cells(cells, setting, draws, variant, empty)
    out, seen = [], set()
    for c in cells:
        for name in STRATEGY[c["strategy"]]:
            row = sims[(c["mask"], c["world"], name)]
            got = row["sim"][c["direction"]]["tflops_slowest"] if row["status"] == "ok" else float("nan")
            key = (c["mask"], c["direction"], c["world"], c["low"], c["high"], round(got, 6))
            if key in seen:  # one published cell against one prediction, counted once
                continue
            seen.add(key)
            ref = c["low"] if got < c["low"] else c["high"] if got > c["high"] else got
            # the simulated phase's parts, kept for the residual block (what the published figure leaves over)
            parts = ({k: row["sim"][c["direction"]][k] for k in ("ms_max", "compute_ms", "exposed_ms")}
                     if row["status"] == "ok" else {})
            out.append({**c, "sim_strategy": name, "simulated": got, "err": pct(got, ref), "parts": parts,
                        "flags": row["sim"].get("flags", []) if row["status"] == "ok" else []})
    name = path.stem.replace("anchors-", "") + (VARIANT if variant else "")
    declared = DECLARED_SPEEDS.get(setting.get("speed", ""))
    speed = (f" at the declared {setting['speed']} kernel speed (its work terms divided by {declared['fwd']:.3f} "
             f"forward, {declared['bwd']:.3f} backward: {declared['source']})" if declared else "")
    lines = [f"# Validation (b): published figures, {name} (generated by docs/scripts/cp_validate.py; do not edit)", "",
             f"Source and setting: {path.relative_to(ROOT)} ({setting['topology']} preset, inner {setting['inner']}"
             f"{speed}, "
             f"{setting['seqlen_per_rank']} tokens per GPU, documents from the `{setting['sampler']}` sampler, "
             f"{draws} draws, each figure the {AGGREGATE} over draws of the draw's own, as the source reports a "
             f"cell; held-out half: W = {' and '.join(map(str, HELD_OUT))}). "
             + (f"Priced with the published-baselines variant (`longca_sim.baselines`, backend "
                f"`{setting['baseline']}`): the copies the source's code makes around each kernel call and Ring "
                "All-Gather's full-length dK/dV and key-block backward, counted from its code, nothing fitted. "
                if variant else "Plain model (longca's own pricing). ")
             + "The source's baselines as its benchmark code runs them: rings dispatched "
             "per document (`layout=doc_zigzag`), USP and LoongTrain with the all-to-all over the 8 GPUs of a node. "
             "Every cell is test data. A cell given as a range counts as 0 % inside it, else the distance to the "
             "nearer end; a cell compared with the same prediction twice (a range row naming two strategies that "
             "the model prices alike) is counted once.", "",
             "| mask, dir | strategy | W | published | simulated | error | flags |", "|---|---|---|---|---|---|---|"]
    for e in out:
        shown = f"{e['low']:.0f}" if e["low"] == e["high"] else f"{e['low']:.0f}-{e['high']:.0f}"
        lines.append(f"| {e['mask']}, {e['direction']} | {e['sim_strategy']} | {e['world']} | {shown} | "
                     f"{e['simulated']:.0f} | {e['err']:+.1f} % | {'; '.join(e['flags'])} |")
    doc = [e for e in out if e["mask"] == "causal_document"]
    dense = [e for e in out if e["mask"] in ("full", "causal")]
    series = {}
    for e in doc:
        series.setdefault((e["sim_strategy"], e["direction"]), {})[e["world"]] = e
    trends = []
    for (strategy, direction), by in sorted(series.items()):
        lo, hi = min(by), max(by)
        if lo == hi:
            continue
        pub_sign = np.sign(by[hi]["high"] - by[lo]["high"])
        sim_sign = np.sign(by[hi]["simulated"] - by[lo]["simulated"])
        trends.append({"strategy": strategy, "direction": direction, "worlds": [lo, hi],
                       "right": bool(pub_sign == sim_sign),
                       "published": [by[lo]["high"], by[hi]["high"]], "simulated": [by[lo]["simulated"],
                                                                                    by[hi]["simulated"]]})
    halves = {half: [e for e in doc if (e["world"] in HELD_OUT) == (half == "held_out")]
              for half in ("development", "held_out")}
    summary = {"setting": setting, "cells": len(out), "median_abs_err_pct": med([abs(e["err"]) for e in out]),
               "causal_document_median": med([abs(e["err"]) for e in doc]), "causal_document_cells": len(doc),
               "causal_document_max": max((abs(e["err"]) for e in doc), default=float("nan")),
               "causal_document_within_50": sum(abs(e["err"]) <= 50 for e in doc),
               "halves": {half: {"cells": len(c), "median": med([abs(e["err"]) for e in c]),
                                 "max": max((abs(e["err"]) for e in c), default=float("nan")),
                                 "within_50": sum(abs(e["err"]) <= 50 for e in c)} for half, c in halves.items()},
               "dense_median": med([abs(e["err"]) for e in dense]), "dense_cells": len(dense),
               "trend_right": sum(t["right"] for t in trends), "trend_series": len(trends), "trends": trends}
    lines += ["", "Trend from the smallest to the largest world size of each causal_document series:", "",
              "| strategy | dir | published | simulated | same sign |", "|---|---|---|---|---|"]
    lines += [f"| {t['strategy']} | {t['direction']} | {t['published'][0]:.0f} -> {t['published'][1]:.0f} | "
              f"{t['simulated'][0]:.0f} -> {t['simulated'][1]:.0f} | {'yes' if t['right'] else 'no'} |" for t in trends]
    lines += ["", f"causal_document: median abs error {summary['causal_document_median']:.1f} % over "
              f"{len(doc)} cells, trend sign right in {summary['trend_right']} of {len(trends)} series; full and "
              f"causal: median abs error {summary['dense_median']:.1f} % over {len(dense)} cells.", ""]
    return lines, summary, out


BAND_QUANTILE = 0.8  # a regime's band: this quantile of its cells' abs errors (`recommend`'s ±%)
EXCLUDED = ("b200",)  # published sets excluded from claims (and so from the bands): section 3 says why


def bands(own: list[dict[str, Any]], pub: dict[str, list[dict[str, Any]]], gpus_per_node: int = 8) -> list[dict]:
    """Per regime (mask class x world sizes x one node or several), from out-of-sample errors only: the
    `BAND_QUANTILE` quantile and the median of the abs errors, and each strategy's median abs error and cells
    there (what `recommend` warns with when its first choice is the strategy the data contradict most)."""
    groups: dict[tuple, list[tuple[str, float]]] = {}
    sources: dict[tuple, set] = {}

    def add(cls: str, world: int, strategy: str, err: float, source: str) -> None:
        key = (cls, world > gpus_per_node, world <= gpus_per_node and world > 2)
        groups.setdefault(key, []).append((strategy, abs(err)))
        sources.setdefault(key, set()).add(f"{source} W={world}")

    for e in own:
        if not e["strategy"].endswith(" alone"):
            add("dense" if e["mask"] in ("full", "causal") else "document", e["world"], e["strategy"], e["err"],
                "own H200 rows")
    for name, cells in pub.items():
        for e in cells:
            add("dense" if e["mask"] in ("full", "causal") else "document", e["world"], e["sim_strategy"], e["err"],
                f"published {name}")
    out = []
    for key, items in sorted(groups.items()):
        errs = [err for _, err in items]
        worlds = sorted({int(s.rsplit("W=", 1)[1]) for s in sources[key]})
        per = {}
        for strategy in sorted({s for s, _ in items}):
            mine = [err for s, err in items if s == strategy]
            per[strategy] = {"median_abs_err_pct": round(med(mine), 1), "cells": len(mine)}
        out.append({"mask_class": key[0], "multi_node": key[1], "worlds": [worlds[0], worlds[-1]],
                    "quantile": BAND_QUANTILE,
                    "quantile_abs_err_pct": round(float(np.quantile(errs, BAND_QUANTILE)), 1),
                    "median_abs_err_pct": round(med(errs), 1), "cells": len(errs),
                    "source": ", ".join(sorted({s.rsplit(" W=", 1)[0] for s in sources[key]})),
                    "strategies": per})
    return out


def empty_block(before: dict[str, tuple[dict, list]], after: dict[str, tuple[dict, list]]) -> str:
    """Issue 39's model change, before and after: each claimed published set's causal_document cells priced
    without the backward's empty grid blocks and with them, by half, and the ring backward cells one by one."""
    lines = [EMPTY_BEGIN, "", "causal_document, without -> with the empty blocks of the backward's launch grid "
             "(median / largest abs error, cells within 50 %; the held-out half chose nothing):", "",
             "| set | development W = 8, 16 | held out W = " + ", ".join(map(str, HELD_OUT)) + " | every W |",
             "|---|---|---|---|"]

    def half(summary: dict, which: str) -> str:
        if which == "all":
            return (f"{summary['causal_document_median']:.1f} % / {summary['causal_document_max']:.1f} %, "
                    f"{summary['causal_document_within_50']} of {summary['causal_document_cells']}")
        h = summary["halves"][which]
        return f"{h['median']:.1f} % / {h['max']:.1f} %, {h['within_50']} of {h['cells']}"

    for name in after:
        lines.append(f"| published {name} | " + " | ".join(
            f"{half(before[name][0], w)} -> {half(after[name][0], w)}" for w in ("development", "held_out", "all"))
            + " |")
    lines += ["", "The ring backward cells (error, without -> with):", "",
              "| set | strategy | " + " | ".join(f"W={w}" for w in (8, 16, *HELD_OUT)) + " |",
              "|---|---|" + "---|" * (2 + len(HELD_OUT))]
    for name in after:
        for strategy in ("ring-allgather", "ring-p2p"):
            def err(cells: list, world: int, strategy: str = strategy) -> str:
                got = [e["err"] for e in cells if e["mask"] == "causal_document" and e["direction"] == "bwd"
                       and e["sim_strategy"] == strategy and e["world"] == world]
                return f"{got[0]:+.1f} %" if got else "-"
            lines.append(f"| published {name} | {strategy} | " + " | ".join(
                f"{err(before[name][1], w)} -> {err(after[name][1], w)}" for w in (8, 16, *HELD_OUT)) + " |")
    return "\n".join([*lines, "", EMPTY_END])


def summary_block(own: dict[str, Any], pubs: dict[str, dict[str, Any]], band_list: list[dict]) -> str:
    lines = [BEGIN, "", "| set | in sample | out of sample |", "|---|---|---|",
             f"| longca's own rows, H200 (fa2) | {own['in_sample_rows']} full/causal two-GPU rows the per-call "
             f"overhead "
             f"is fitted on: median abs error {own['in_sample_median']:.1f} % | {own['within_10_out']} of "
             f"{own['rows']} "
             f"rows within 10 %; two-GPU rows {own['w2_within_10_out']} of {own['w2_rows']} (median "
             f"{own['w2_median_out']:.1f} %) |"]
    for name, p in pubs.items():
        lines.append(f"| published {name} ({p['cells']} cells) | none | causal_document median abs error "
                     f"{p['causal_document_median']:.1f} % ({p['causal_document_cells']} cells), trend sign right in "
                     f"{p['trend_right']} of {p['trend_series']} series; full/causal "
                     + (f"{p['dense_median']:.1f} % ({p['dense_cells']} cells) |" if p["dense_cells"]
                        else "none published |"))
    lines += ["", f"causal_document by half (development W = 8, 16; held out W = {', '.join(map(str, HELD_OUT))}, "
              "named before any model change of issue 39 and used to choose nothing): median / largest abs error, "
              "cells within 50 %:", "", "| set | development | held out |", "|---|---|---|"]
    for name, p in pubs.items():
        lines.append(f"| published {name} | " + " | ".join(
            f"{h['median']:.1f} % / {h['max']:.1f} %, {h['within_50']} of {h['cells']}"
            for h in (p["halves"]["development"], p["halves"]["held_out"])) + " |")
    q = f"{BAND_QUANTILE * 100:.0f} %"
    lines += ["", f"Bands `longca recommend` reports (per regime, from out-of-sample errors only; ±% is the {q} "
              f"quantile of the abs errors; the strategy the data contradict most is the one with the largest median "
              f"abs error there; B200 excluded):", "",
              f"| mask class | nodes | world sizes | {q} of abs errors within | median abs error | "
              f"cells | worst strategy (median abs error, cells) | from |", "|---|---|---|---|---|---|---|---|"]
    for b in band_list:
        worst = max(b["strategies"].items(), key=lambda kv: kv[1]["median_abs_err_pct"])
        lines.append(f"| {b['mask_class']} | {'several' if b['multi_node'] else 'one'} | "
                     f"{b['worlds'][0]}-{b['worlds'][1]} | {b['quantile_abs_err_pct']:.1f} % | "
                     f"{b['median_abs_err_pct']:.1f} % | {b['cells']} | {worst[0]} "
                     f"({worst[1]['median_abs_err_pct']:.1f} %, {worst[1]['cells']}) | {b['source']} |")
    lines += ["", END]
    return "\n".join(lines)


def fit_block() -> str:
    """The shipped kernel fit: rows, error over its own rows and on held-out one-GPU rows, the form its rule chose."""
    fits, meta = load_fits()
    proxies = meta.get("segment_proxies", {})
    lines = [FIT_BEGIN, "", "| kernel | dir | rows | in-sample median / max abs error | held out: dense / short rows "
             "| form chosen | short-segment rows | shortest segment, most segments counted as measured |",
             "|---|---|---|---|---|---|---|---|"]
    for kernel, by in fits.items():
        for direction, fit in by.items():
            sel = fit.selection
            held = sel.get("heldout_err_pct", {})
            form = (f"floor {sel.get('floor', 'tile')}, " + (sel.get("segment_model") or "dense")
                    + (" + diagonal" if sel.get("diagonal") else ""))
            seg = ("rows of " + proxies[kernel].split("rows of ")[1].split(" (")[0] if kernel in proxies
                   else "own" if sel.get("segment_model") else "none")
            lo, n_hi = (fit.segment_len_range or (float("nan"),))[0], (fit.segment_count_range or (0, float("nan")))[1]
            lines.append(f"| {kernel} | {direction} | {fit.rows} | {fit.median_err_pct:.1f} % / "
                         f"{fit.max_err_pct:.1f} % | {held.get('dense', float('nan')):.1f} % / "
                         + (f"{held['short']:.1f} % | " if "short" in held else "- | ")
                         + f"{form} | {seg} | {lo:.0f} tokens, {n_hi:.0f} |")
    for kernel, by in fits.items():
        empty = by.get("bwd")
        info = empty.selection.get("empty_blocks", {}) if empty else {}
        if info.get("rows"):
            lines += ["", f"{kernel} backward, empty blocks of the launch grid: {empty.empty_block_ms * 1e6:.2f} ns "
                      f"each, fitted on the residuals of {info['rows']} one-GPU rows that have them (their median "
                      f"abs error {info['median_err_pct_before']:.1f} % -> {info['median_err_pct_after']:.1f} %)."]
    overhead = meta.get("call_overhead_ms", {})
    lines += ["", f"Per-call overhead of CP steps (fitted on {overhead.get('rows', 0)} full/causal two-GPU rows): "
              f"{overhead.get('fwd', 0):.3f} ms forward, {overhead.get('bwd', 0):.3f} ms backward.", "", FIT_END]
    return "\n".join(lines)


def kernel_check(path: Path, draws: int) -> tuple[str, list[dict[str, Any]]]:
    """The kernel model alone, one GPU, against published one-GPU figures of the same kernel on the published
    setting's documents (`kernel-*.md`): each length's TFLOP/s the mean over `draws` mask draws of the draw's
    TFLOP/s (the source averages per pack)."""
    setting = dict(kv.split("=", 1) for kv in re.search(r"<!-- kernel: (.*?) -->", path.read_text()).group(1).split())
    hq, hkv = (int(h) for h in setting["heads"].split(":"))
    pricing = default_pricing(setting["inner"], preset(setting["topology"]))
    cells = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if len(parts) != 5 or "," not in parts[0] or parts[0].startswith("mask"):
            continue
        mask, direction = (p.strip() for p in parts[0].split(","))
        fit = pricing.fwd if direction == "fwd" else pricing.bwd
        for seqlen, text in zip((8192, 16384, 32768, 65536), parts[1:], strict=True):
            if not text:
                continue
            problem = Problem(kernel=setting["inner"], mask=mask, seqlen=seqlen, heads_q=hq, heads_kv=hkv,
                              head_dim=int(setting["head_dim"]), sampler=setting["sampler"], seed=0,
                              direction=direction)
            got = [draw_tflops(fit, problem, i) for i in range(draws)]
            cells.append({"mask": mask, "direction": direction, "seqlen": seqlen, "published": float(text),
                          "simulated": float(np.mean(got)), "err": pct(float(np.mean(got)), float(text))})
    lines = [KERNEL_BEGIN, "", f"One GPU, {setting['inner']} priced by the shipped fit, against "
             f"[{path.name}](cp-simulator/{path.name}) ({draws} draws of the `{setting['sampler']}` documents):", "",
             "| mask, dir | 8K | 16K | 32K | 64K |", "|---|---|---|---|---|"]
    for (mask, direction) in dict.fromkeys((c["mask"], c["direction"]) for c in cells):
        by = {c["seqlen"]: c for c in cells if (c["mask"], c["direction"]) == (mask, direction)}
        lines.append(f"| {mask}, {direction} | " + " | ".join(
            f"{by[n]['simulated']:.0f} vs {by[n]['published']:.0f} ({by[n]['err']:+.1f} %)" if n in by else "-"
            for n in (8192, 16384, 32768, 65536)) + " |")
    doc = [abs(c["err"]) for c in cells if c["mask"] != "full"]
    lines += ["", f"Median abs error: causal_document {med(doc):.1f} % ({len(doc)} cells), full "
              f"{med([abs(c['err']) for c in cells if c['mask'] == 'full']):.1f} %.", "", KERNEL_END]
    return "\n".join(lines), cells


def kernel_shapes(folder: Path) -> tuple[str, list[dict[str, Any]]]:
    """The kernel model alone against measured one-GPU rows of Ulysses' inner call at the published shapes
    (W GPUs: 64/W query heads, max(8/W, 1) KV heads, W x 8K tokens; `folder`, an H200): each row priced
    with the h200-sxm preset's fit of its own kernel and direction, over the same mask draws the row was
    measured on. `longca run --samples N` measures draw i = `build_mask(problem, i)` for i < N
    (`longca_runner.measure.case`, from the row's seed, sampler and shape) and reports the median over draws of
    each draw's FLOPs over its time (`longca_runner.measure.samples.summarize_samples`); the prediction is the
    median over the same draws of each draw's FLOPs over its priced time."""
    cells = []
    for row in read_rows([folder]):
        if row.get("status") != "ok" or not row.get("tflops"):
            continue
        problem = row_problem(row)
        pricing = default_pricing(row["kernel"], preset("h200-sxm"))
        fit = pricing.fwd if problem.direction == "fwd" else pricing.bwd
        got = med([draw_tflops(fit, problem, i) for i in range(max(1, row.get("samples") or 1))])
        throttled = bool((row.get("gpu_state_after") or {}).get("throttle"))
        cells.append({"kernel": row["kernel"], "direction": problem.direction, "world": 64 // problem.heads_q,
                      "heads": f"{problem.heads_q}:{problem.heads_kv}", "seqlen": problem.seqlen,
                      "measured": float(row["tflops"]), "simulated": got, "err": pct(got, float(row["tflops"])),
                      "sampler": problem.sampler, "throttled": throttled})
    shapes = sorted({(c["world"], c["heads"], c["seqlen"]) for c in cells})
    kernels = sorted({c["kernel"] for c in cells})
    lines = [SHAPES_BEGIN, "", f"One H200, each kernel priced by the shipped fit against its measured rows in "
             f"[{folder.relative_to(ROOT)}]({folder.relative_to(DOC.parent)}/README.md) (TFLOP/s, model vs "
             "measured, median over the row's own draws of the "
             + ", ".join(f"`{x}`" for x in sorted({c["sampler"] for c in cells}))
             + " documents; `*`: the GPU reported throttling after the row, report.md):", "",
             "| kernel | dir | " + " | ".join(f"W={w}: {h}, {n // 1024}K" for w, h, n in shapes) + " |",
             "|---|---|" + "---|" * len(shapes)]
    for kernel in kernels:
        for direction in ("fwd", "bwd"):
            by = {(c["world"], c["heads"], c["seqlen"]): c for c in cells
                  if (c["kernel"], c["direction"]) == (kernel, direction)}
            if by:
                lines.append(f"| {kernel} | {direction} | " + " | ".join(
                    f"{by[s]['simulated']:.0f} vs {by[s]['measured']:.0f}{'*' if by[s]['throttled'] else ''} "
                    f"({by[s]['err']:+.1f} %)" if s in by else "-" for s in shapes) + " |")
    errs = {k: [abs(c["err"]) for c in cells if c["kernel"] == k] for k in kernels}
    lines += ["", "Median / largest abs error: " + ", ".join(
        f"{k} {med(e):.1f} % / {max(e):.1f} % ({len(e)} rows)" for k, e in errs.items()) + ".", "", SHAPES_END]
    return "\n".join(lines), cells


def _cell(e: dict[str, Any]) -> str:
    shown = f"{e['low']:.0f}" if e["low"] == e["high"] else f"{e['low']:.0f}-{e['high']:.0f}"
    return f"{e['simulated']:.0f} vs {shown} ({e['err']:+.1f} %)"


def _by_world(cells: list[dict[str, Any]], worlds: list[int], strategy_key: str, show) -> list[str]:
    """A markdown table, one row per strategy and direction, one column per world size; `-` where none."""
    lines = ["| strategy | dir | " + " | ".join(f"W={w}" for w in worlds) + " |", "|---|---|" + "---|" * len(worlds)]
    for strategy, direction in dict.fromkeys((c[strategy_key], c["direction"]) for c in cells):
        by = {c["world"]: c for c in cells if (c[strategy_key], c["direction"]) == (strategy, direction)}
        lines.append(f"| {strategy} | {direction} | " + " | ".join(show(by[w]) if w in by else "-" for w in worlds)
                     + " |")
    return lines


def tables_block(own: list[dict[str, Any]], pub: dict[str, list[dict[str, Any]]]) -> str:
    """The three validation tables, compact: own two-GPU rows (error by strategy and mask, out of sample) and,
    per published set, the causal_document error by strategy, direction and world size."""
    lines = [TABLES_BEGIN, "", "**Own rows** (H200, two GPUs, fa2 inside; out of sample; fwd / bwd):", ""]
    masks = list(dict.fromkeys(e["mask"] for e in own))
    w2 = [e for e in own if e["world"] == 2 and not e["strategy"].endswith(" alone")]
    lines += ["| strategy | " + " | ".join(masks) + " |", "|---|" + "---|" * len(masks)]
    for strategy in dict.fromkeys(e["strategy"] for e in w2):
        cells = []
        for mask in masks:
            by = {e["direction"]: e["err"] for e in w2 if (e["strategy"], e["mask"]) == (strategy, mask)}
            cells.append(" / ".join(f"{by[d]:+.1f} %" if d in by else "-" for d in ("fwd", "bwd")))
        lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
    for name, cells in pub.items():
        doc = [e for e in cells if e["mask"] == "causal_document"]
        worlds = sorted({e["world"] for e in doc})
        lines += ["", f"**Published {name}, causal_document** (simulated vs published, error; `-`: the cell is "
                  "counted once, under the strategy the model prices alike):", ""]
        lines += _by_world(doc, worlds, "sim_strategy", _cell)
    return "\n".join([*lines, "", TABLES_END])


def variant_block(pub: dict[str, list[dict[str, Any]]]) -> str:
    """Which published cells the published-baselines variant changes, and how: per set, strategy and direction,
    the cells whose prediction moves by more than 0.5 %, the range of that move, and the median abs error of
    the series, plain model and variant."""
    lines = [VARIANT_BEGIN, "", "| set | strategy | dir | cells changed | simulated figure, variant vs plain "
             "| median abs error, plain -> variant |", "|---|---|---|---|---|---|"]
    for name, cells in pub.items():
        if name.endswith(VARIANT) or name + VARIANT not in pub:
            continue
        plain = {(e["mask"], e["direction"], e["sim_strategy"], e["world"]): e for e in cells}
        variant = {(e["mask"], e["direction"], e["sim_strategy"], e["world"]): e for e in pub[name + VARIANT]}
        series: dict[tuple, list[tuple[dict, dict]]] = {}
        for key, e in plain.items():
            if key in variant:
                series.setdefault((key[0], key[2], key[1]), []).append((e, variant[key]))
        for (mask, strategy, direction), pairs in series.items():
            moves = [pct(v["simulated"], e["simulated"]) for e, v in pairs]
            changed = sum(abs(m) > 0.5 for m in moves)
            lines.append(f"| {name} {mask} | {strategy} | {direction} | {changed} of {len(pairs)} | "
                         f"{min(moves):+.1f} % to {max(moves):+.1f} % | "
                         f"{med([abs(e['err']) for e, _ in pairs]):.1f} % -> "
                         f"{med([abs(v['err']) for _, v in pairs]):.1f} % |")
    return "\n".join([*lines, "", VARIANT_END])


def residual_cells(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per causal_document cell of a set, the time the published figure implies (the simulated critical-rank
    time x simulated / published TFLOP/s, the same FLOPs; a range cell at its midpoint) and what is left
    over, against the simulated compute and exposed parts of that time. Analysis of test data: nothing is
    fitted on it."""
    out = []
    for e in cells:
        if e["mask"] != "causal_document" or not e["parts"]:
            continue
        published_tflops = (e["low"] + e["high"]) / 2
        ms, compute, exposed = e["parts"]["ms_max"], e["parts"]["compute_ms"], e["parts"]["exposed_ms"]
        implied = ms * e["simulated"] / published_tflops
        residual = implied - ms
        out.append({"strategy": e["sim_strategy"], "direction": e["direction"], "world": e["world"],
                    "published_tflops": published_tflops, "simulated_tflops": e["simulated"],
                    "range": e["low"] != e["high"],
                    "implied_ms": implied, "simulated_ms": ms, "compute_ms": compute, "exposed_ms": exposed,
                    "residual_ms": residual, "per_compute": residual / compute if compute > 0 else float("nan"),
                    "per_exposed": residual / exposed if exposed > 1e-6 else None})  # nothing exposed: no ratio
    return out


def residual_table(res: list[dict[str, Any]]) -> list[str]:
    """Every figure of `residual_cells`, one row a cell, for the set's own validation file."""
    lines = ["", "Residual of each causal_document cell (what the published figure implies beyond the simulated "
             "critical-rank time; a range cell at its midpoint; nothing fitted on it):", "",
             "| strategy | dir | W | published TFLOP/s | implied ms | simulated ms | compute ms | exposed ms "
             "| residual ms | residual / compute | residual / exposed |", "|---" * 11 + "|"]
    lines += [f"| {r['strategy']} | {r['direction']} | {r['world']} | {r['published_tflops']:.1f}"
              f"{' (midpoint)' if r['range'] else ''} | {r['implied_ms']:.3f} | {r['simulated_ms']:.3f} | "
              f"{r['compute_ms']:.3f} | {r['exposed_ms']:.3f} | {r['residual_ms']:+.3f} | {r['per_compute']:.2f} | "
              + ("- |" if r["per_exposed"] is None else f"{r['per_exposed']:.2f} |") for r in res]
    return [*lines, ""]


def _spread(values: list[float | None]) -> dict[str, float]:
    """Median, middle half, range and coefficient of variation (standard deviation / |mean|) of the finite
    values."""
    v = np.array([x for x in values if x is not None and np.isfinite(x)])
    if not len(v):
        return {"cells": 0}
    q1, q3 = np.percentile(v, [25, 75])
    return {"cells": int(len(v)), "median": med(v), "q1": float(q1), "q3": float(q3), "min": float(v.min()),
            "max": float(v.max()), "cv": float(v.std() / abs(v.mean()))}


def _spread_text(s: dict[str, float]) -> str:
    return (f"median {s['median']:.2f}x, middle half {s['q1']:.2f}x to {s['q3']:.2f}x, all {s['min']:.2f}x to "
            f"{s['max']:.2f}x, coefficient of variation {s['cv']:.2f} ({s['cells']} cells)")


def _resid_cell(r: dict[str, Any]) -> str:
    exposed = "no e" if r["per_exposed"] is None else f"{r['per_exposed']:.2f}x e"
    return f"{r['residual_ms']:+.2f} ({r['per_compute']:.2f}x c, {exposed})"


def residual_block(pub: dict[str, list[dict[str, Any]]]) -> tuple[str, dict[str, Any]]:
    """Issue 28 item 4: does the time the model misses on the published causal_document cells follow the
    simulated compute or the simulated exposed transfers? Per plain-model set, strategy, direction and world
    size the residual and its two ratios; per set the median and spread of each ratio."""
    lines = [RESID_BEGIN, ""]
    summary: dict[str, Any] = {}
    for name, cells in pub.items():
        if name.endswith(VARIANT):
            continue
        res = residual_cells(cells)
        if not res:
            continue
        worlds = sorted({r["world"] for r in res})
        per_c, per_e = _spread([r["per_compute"] for r in res]), _spread([r["per_exposed"] for r in res])
        summary[name] = {"per_compute": per_c, "per_exposed": per_e, "cells": res}
        lines += [f"**Published {name}, causal_document, plain model**: residual ms (residual / compute, residual "
                  "/ exposed) per critical rank; `-`: the cell is counted once, under the strategy the model "
                  "prices alike:", ""]
        lines += _by_world(res, worlds, "strategy", _resid_cell)
        lines += ["", f"{name}: residual / compute {_spread_text(per_c)}; residual / exposed {_spread_text(per_e)}.",
                  ""]
    lines += ["Residual: the time the published figure implies (simulated critical-rank ms x simulated / published "
              "TFLOP/s, the same FLOPs; a cell given as a range at its midpoint) minus the simulated ms; negative "
              "where the model is too slow. c: the simulated compute of the critical rank, e: its exposed time "
              "(transfers and waits not hidden behind compute); `no e`: nothing exposed, no ratio. Each part is its "
              "median over the draws, so c + e can differ a little from the simulated ms. "
              "Test data: nothing is fitted on these cells.", "",
              RESID_END]
    return "\n".join(lines), summary


def goals_block(own: dict[str, Any], pubs: dict[str, dict[str, Any]]) -> str:
    """Issue 28's goals, each with its target, today's figure and whether it is met."""
    rows: list[tuple[str, str, str, bool | None]] = []  # met None: excluded from claims (section 3)
    for name, p in pubs.items():
        rows.append((f"published {name}: causal_document median abs error", "<= 25 %",
                     f"{p['causal_document_median']:.1f} %",
                     None if name.startswith(EXCLUDED) else p["causal_document_median"] <= 25))
        rows.append((f"published {name}: causal_document 8 -> 64 GPU trend sign right", "at least 8 of 10 series",
                     f"{p['trend_right']} of {p['trend_series']}",
                     None if name.startswith(EXCLUDED) else p["trend_right"] >= 8))
        if p["dense_cells"]:
            rows.append((f"published {name}: full/causal median abs error", "<= 10 %", f"{p['dense_median']:.1f} %",
                         p["dense_median"] <= 10))
    for name, p in pubs.items():  # issue 39, on the source's protocol; B200 is excluded from claims (section 3)
        if not name.startswith("h100"):
            continue
        held = "held out, W = " + ", ".join(map(str, HELD_OUT))
        for half, label in (("all", "every W"), ("development", "W = 8, 16"), ("held_out", held)):
            h = p if half == "all" else p["halves"][half]
            within = h["causal_document_within_50"] if half == "all" else h["within_50"]
            cells = h["causal_document_cells"] if half == "all" else h["cells"]
            median = h["causal_document_median"] if half == "all" else h["median"]
            rows.append((f"issue 39, published {name}, {label}: causal_document cells within 50 %", "all",
                         f"{within} of {cells}", within == cells))
            rows.append((f"issue 39, published {name}, {label}: causal_document median abs error", "<= 20 %",
                         f"{median:.1f} %", median <= 20))
    rows.append(("own two-GPU rows within 10 %, out of sample", "at least 34 of 40",
                 f"{own['w2_within_10_out']} of {own['w2_rows']}", own["w2_within_10_out"] >= 34))
    lines = [GOALS_BEGIN, "", "| goal (issue 28, or 39 where it says so) | target | now | met |", "|---|---|---|---|"]
    lines += [f"| {goal} | {target} | {now} | {'excluded' if met is None else 'yes' if met else '**no**'} |"
              for goal, target, now, met in rows]
    return "\n".join([*lines, "", GOALS_END])


def check_doc(text: str, blocks: dict[tuple[str, str], str]) -> tuple[str, list[str]]:
    """The doc with its generated blocks put in, and what is wrong with it: a missing block, or a validation
    figure (a percentage, an `N of M` count or a ratio such as `0.72x`) in the prose of a checked section
    (`CHECKED_SECTIONS`) that none of the generated blocks prints."""
    problems, new = [], text
    for (begin, end), wanted in blocks.items():
        if begin not in new or end not in new:
            problems.append(f"no generated block ({begin} ... {end})")
            continue
        new = new.replace(new[new.index(begin):new.index(end) + len(end)], wanted)
    printed = "\n".join(blocks.values())
    prose = new
    for (begin, end) in blocks:
        while begin in prose and end in prose:
            prose = prose[:prose.index(begin)] + prose[prose.index(end) + len(end):]
    for heading in CHECKED_SECTIONS:
        if heading not in prose:
            problems.append(f"no section {heading!r}")
            continue
        section = prose[prose.index(heading):]
        section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
        for line in section.splitlines():
            for figure in FIGURE.findall(line):
                if not re.search(r"(?<![\d.,])" + re.escape(figure) + r"(?![\d.,]\d)", printed):
                    problems.append(f"{heading[3:]}: {figure!r} is not a figure this script prints: {line.strip()}")
    return new, problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few rows and cells (CI); no doc check")
    parser.add_argument("--output", type=Path, default=None, help="folder for the tables (default docs/cp-simulator)")
    parser.add_argument("--write-doc", action="store_true", help="put the summary block into docs/cp-simulator.md")
    parser.add_argument("--held-out", type=Path, action="append", default=None,
                        help="results folders held out of every model choice: only validation-held-out.md is written")
    parser.add_argument("--calibration", type=Path, default=None,
                        help="with --held-out: a comm-bench file of the same machine for the links")
    parser.add_argument("--fit-kernel", default=None, help="with --held-out: price every row with this kernel's fit")
    args = parser.parse_args()
    out_dir = args.output or DOCS
    if args.held_out:
        try:
            lines, summary, _ = held_out_rows(args.held_out, args.calibration, args.fit_kernel)
        except LongcaError as exc:
            raise SystemExit(f"cp_validate: {exc}") from None
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "validation-held-out.md").write_text("\n".join(lines) + "\n")
        print(json.dumps(summary, indent=1, default=str))
        return
    anchors = sorted(DOCS.glob("anchors-*.md"))
    if not anchors:
        raise SystemExit(f"cp_validate: no published figures (anchors-*.md) in {DOCS}")
    start = time.time()
    own_lines, own_summary, own = own_rows(args.quick)
    pub_lines, pub_summary, pub_cells = {}, {}, {}
    for path in anchors:
        name = path.stem.replace("anchors-", "")
        pub_lines[name], pub_summary[name], pub_cells[name] = published(path, args.quick)
    # the published-baselines variant of each set, printed beside the plain model (the bands, which price
    # longca's own strategies, come from the plain model only)
    for path in anchors:
        name = path.stem.replace("anchors-", "") + VARIANT
        pub_lines[name], pub_summary[name], pub_cells[name] = published(path, args.quick, variant=True)
    before = {}  # issue 39's model change: the claimed sets without the backward's empty grid blocks
    for path in anchors:
        base = path.stem.replace("anchors-", "")
        if base.startswith(EXCLUDED):
            continue
        for variant in (False, True):
            _, summary_, cells_ = published(path, args.quick, variant=variant, empty=False)
            before[base + (VARIANT if variant else "")] = (summary_, cells_)
    empty_text = empty_block(before, {k: (pub_summary[k], pub_cells[k]) for k in before})
    band_list = bands(own, {k: v for k, v in pub_cells.items()
                            if not k.endswith(VARIANT) and not k.startswith(EXCLUDED)})
    kernel_path = DOCS / "kernel-h100.md"
    kernel_block, kernel_cells = kernel_check(kernel_path, 2 if args.quick else 5)
    shapes_block, shapes_cells = kernel_shapes(SHAPES)
    block = summary_block(own_summary, pub_summary, band_list)
    resid_block, resid = residual_block(pub_cells)
    for name, r in resid.items():
        pub_lines[name] += residual_table(r["cells"])
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "validation-own.md").write_text("\n".join(own_lines) + "\n")
    for name, lines in pub_lines.items():
        stem = name.replace(VARIANT, "-baselines")
        (out_dir / f"validation-published-{stem}.md").write_text("\n".join(lines) + "\n")
    (out_dir / "validation-summary.md").write_text(
        "# Validation summary (generated by docs/scripts/cp_validate.py; do not edit)\n\n" + block + "\n")
    summary = {"own": own_summary, "published": pub_summary, "bands": band_list, "kernel_check": kernel_cells,
               "kernel_shapes": shapes_cells, "residual": resid}
    # the committed file holds only what the data decides: a run time in it would change on every run
    (out_dir / "validation.json").write_text(json.dumps(summary, indent=1) + "\n")
    quiet = ("bands", "kernel_check", "kernel_shapes", "residual")  # long: in validation.json and the blocks
    print(json.dumps({k: v for k, v in summary.items() if k not in quiet}, indent=1, default=str))
    print(f"cp_validate: {time.time() - start:.0f} s")
    print(block)
    print(goals_block(own_summary, pub_summary))
    print(variant_block(pub_cells))
    print(kernel_block)
    print(shapes_block)
    print(fit_block())
    print(resid_block)
    print(empty_text)
    if args.quick:
        return
    BANDS.write_text(json.dumps({"source": "docs/scripts/cp_validate.py", "regimes": band_list}, indent=1) + "\n")
    text = DOC.read_text()
    blocks = {(BEGIN, END): block, (FIT_BEGIN, FIT_END): fit_block(),
              (GOALS_BEGIN, GOALS_END): goals_block(own_summary, pub_summary), (KERNEL_BEGIN, KERNEL_END): kernel_block,
              (SHAPES_BEGIN, SHAPES_END): shapes_block,
              (TABLES_BEGIN, TABLES_END): tables_block(own, pub_cells),
              (VARIANT_BEGIN, VARIANT_END): variant_block(pub_cells), (RESID_BEGIN, RESID_END): resid_block,
              (EMPTY_BEGIN, EMPTY_END): empty_text}
    new, problems = check_doc(text, blocks)
    if args.write_doc and not any(p.startswith("no ") for p in problems):
        DOC.write_text(new)
        problems = check_doc(new, blocks)[1]
    elif new != text:
        problems.insert(0, "the generated blocks differ from what this computes (--write-doc puts them in)")
    if problems:
        for problem in problems:
            print(f"cp_validate: {DOC.relative_to(ROOT)}: {problem}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
