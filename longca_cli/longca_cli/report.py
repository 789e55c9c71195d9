"""Reports from result folders: a self-describing markdown report, CSV, plots and an HTML page.
Everything computed comes from `longca_cli.analysis`; this module only lays it out."""
from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from longca.results import FIELDS
from longca.sizes import format_size
from longca_cli import analysis
from longca_cli.analysis import Results, Row, Table

UNCHECKED = "†"
OF_PEAK = "of matmul peak"  # over the run's measured best matmul
OF_SHEET = "of datasheet"  # over the GPU model's dense datasheet figure
SIMULATED = "~"
CAVEAT = "‡"
LEGEND = ("unsup = unsupported (reason in the CSV), n/a = the kernel's library was not installed in that run, "
          "oom = out of memory, err = error, wrong = failed the correctness check, timeout = killed after its "
          "time limit, suspect = faster than the datasheet or over 5 % above the run's matmul peak (not a result; "
          "reason in the CSV and above), "
          f"empty = not run; `±N%` = half the p20-p80 range of the times over the median, shown "
          f"where p80/p20 > {analysis.SPREAD_SHOWN}; `{SIMULATED}` and `(sim)` = simulated, not measured; "
          f"`{UNCHECKED}` = not checked against the reference; `{CAVEAT}` = the row carries a caveat (its `caveat` "
          f"field, listed under **Caveats** above): read the number with it.")


def _num(value: float) -> str:
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def _md_table(header: list[str], lines: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(line) + " |" for line in lines), ""]


def _value_cell(row: Row, text: str, mark_unchecked: bool) -> str:
    s = analysis.spread(row)
    if s is not None and s > analysis.SPREAD_SHOWN:
        text += f" ±{(s - 1) / 2 * 100:.0f}%"
    if row.get("caveat"):
        text += CAVEAT
    if analysis.is_simulated(row):
        text = SIMULATED + text
    elif mark_unchecked and analysis.is_unchecked(row):
        text += UNCHECKED
    return text


def _grid(table: Table, value: Callable[[Row], float | None], fmt: Callable[[float], str], best_name: str,
          lowest: bool, mark_unchecked: bool, extra: Sequence[tuple[str, Callable[[Row], str]]] = ()) -> list[str]:
    header = ["mask", "seqlen", *table.columns, best_name] + [name for name, _ in extra]
    lines = []
    for (mask, seqlen), by_col in table.cells.items():
        line = [mask, format_size(seqlen)]
        for c in table.columns:
            r = by_col.get(c)
            v = value(r) if r is not None and r.get("status") == "ok" else None
            line.append(_value_cell(r, fmt(v), mark_unchecked) if r is not None and v is not None
                        else analysis.cell_state(r) if r is not None and r.get("status") != "ok" else "")
        top = analysis.best(by_col, value, lowest=lowest)
        line.append(top["column"] if top else "")
        for _, cell in extra:
            line.append(cell(top) if top else "")
        lines.append(line)
    return [f"### {table.title}\n", *_md_table(header, lines)]


def _fraction(p: float | None) -> str:
    return "" if p is None else f"{p:.0%}" if p >= 0.1 else f"{p:.2g}" if p == 0 else f"{p * 100:.2g}%"


def _pct(row: Row) -> str:
    return _fraction(analysis.of_peak(row))


def _pct_sheet(row: Row) -> str:
    return _fraction(analysis.of_datasheet(row))


def header(results: Results) -> list[str]:
    """Where and how every contributing run measured, the peak, the sampler, the check."""
    rows = results.rows
    out = ["# longca report\n",
           "**TFLOP/s, higher is better**: FLOPs of the unmasked area only (forward 4·area·heads·head_dim, "
           "backward 2.5× that) over the median time of the timed calls; document masks: the median over "
           "mask samples. Raw rows: `results.jsonl` beside each run; every row with its reason: `report.csv`.\n",
           f"{len(rows)} cases ({_status_counts(rows)})"
           + (f"; {results.replaced} earlier rows of re-measured cases left out (the last row per case wins)"
              if results.replaced else "") + ".\n"]
    if results.unreadable:
        out.append(f"**Left out**: {len(results.unreadable)} lines that are not result rows: "
                   + "; ".join(results.unreadable[:5]) + (" ..." if len(results.unreadable) > 5 else "") + "\n")
    envs = analysis.environments(results)
    if envs:
        out.append("## Runs\n")
        cols = ["results", "date", "device", "driver", "torch", "cuda", "cudnn", "python", "longca", "commit",
                "host", "matmul_peak_tflops"]
        names = {"matmul_peak_tflops": "matmul peak (TFLOP/s)", "cuda": "CUDA", "cudnn": "cuDNN"}
        out += _md_table([names.get(c, c) for c in cols],
                         [[_plain(e.get(c)) for c in cols] for e in envs])
    out += time_lines(results)
    out += peak_lines(results, envs)
    out += suspect_lines(rows)
    out += caveat_lines(rows)
    out += gpu_state_lines(rows)
    proto = analysis.protocol(results)
    if proto:
        out.append("## Protocol\n")
        cols = ["results", "warmup", "repeat", "samples", "check", "l2_flush", "sampler", "sampler_params", "seed"]
        names = {"warmup": "warm-up calls", "repeat": "timed calls", "samples": "mask samples (documents)",
                 "l2_flush": "L2 flush", "sampler_params": "sampler params"}
        out += _md_table([names.get(c, c) for c in cols], [[_plain(p.get(c)) for c in cols] for p in proto])
    used = analysis.samplers([r for r in rows if "document" in r.get("mask", "")])
    if used:
        out.append("**Sampler** of the document masks (rows): "
                   + ", ".join(f"`{k}` ({n})" for k, n in used.items())
                   + " (`longca list-samplers` says what each draws).\n")
    counts = analysis.checked_counts(rows)
    if counts["unchecked"] and not counts["checked"]:
        out.append(f"**Check**: none of the {counts['unchecked']} measured ok cells was compared with the "
                   "reference in these runs (the kernels' conformance suites check them separately).\n")
    elif counts["unchecked"]:
        out.append(f"**Check**: {counts['checked']} ok cells checked against the reference, "
                   f"{counts['unchecked']} not (marked {UNCHECKED}).\n")
    elif counts["checked"]:
        out.append(f"**Check**: every one of the {counts['checked']} ok cells was checked against the reference.\n")
    return out


def time_lines(results: Results) -> list[str]:
    """Each run's wall time and where it went (compile, reference, check, timed, other)."""
    from .render import duration

    out = []
    for t in analysis.run_times(results):
        parts = ", ".join(f"{kind} {duration(s)}" for kind, s in t["phases_s"].items())
        cases = f" ({t['cases_run']} cases measured)" if t.get("cases_run") is not None else ""
        out.append(f"**Time** of {t['results']}: {duration(t['wall_s'])} wall{cases}" + (f": {parts}" if parts else "")
                   + ".\n")
        slowest = sorted(t["kernels_s"].items(), key=lambda item: -item[1].get("wall", 0.0))
        if slowest:
            out.append("By kernel, slowest first: " + "; ".join(
                f"{name} {duration(p.get('wall', 0.0))} over {p.get('cases', 0)} "
                f"case{'' if p.get('cases') == 1 else 's'} (timed "
                f"{duration(p.get('timed', 0.0))}, compile {duration(p.get('compile', 0.0))})"
                for name, p in slowest) + ".\n")
    return out


def peak_lines(results: Results, envs: list[dict[str, Any]]) -> list[str]:
    """What the two fractions of a table divide by: the run's measured matmul, the datasheet."""
    out = []
    peaks = [e["matmul_peak_tflops"] for e in envs if e.get("matmul_peak_tflops")]
    shapes = [f"{e['results']}: {e['matmul_peaks']}" for e in envs if e.get("matmul_peaks")]
    if shapes:
        out.append(f"**{OF_PEAK}**: the fastest cell over the best `torch.matmul` its run measured in the row's "
                   f"dtype, the best median of several square shapes ({'; '.join(dict.fromkeys(shapes))}).\n")
    elif peaks:
        out.append(f"**{OF_PEAK}**: the fastest cell over a bf16 8192³ `torch.matmul` measured at the start of each "
                   f"run ({min(peaks):.0f}-{max(peaks):.0f} TFLOP/s here; one shape only, older runs: not a "
                   f"ceiling, smaller shapes ran faster on the H200).\n")
    sheets = sorted({(r.get("gpu"), r.get("dtype"), r.get("datasheet_peak_tflops")) for r in results.rows
                     if r.get("datasheet_peak_tflops")}, key=str)
    if sheets:
        out.append(f"**{OF_SHEET}**: the fastest cell over the GPU model's dense (not sparse) datasheet figure: "
                   + "; ".join(f"{gpu} {dtype} {value:g} TFLOP/s" for gpu, dtype, value in sheets)
                   + " (sources: `longca_runner.peaks.DATASHEET`).\n")
    return out


def gpu_state_lines(rows: list[Row]) -> list[str]:
    """The GPU's clocks, temperature, power and throttling during the timed calls, per run, and a
    warning where they moved; `unknown` where NVML could not be read."""
    states = analysis.gpu_states(rows)
    if not states:
        return []

    def span(pair: Any) -> str:
        return "unknown" if not pair else f"{pair[0]:.0f}" if pair[0] == pair[1] else f"{pair[0]:.0f}-{pair[1]:.0f}"

    def value(v: Any, unit: str) -> str:
        return "unknown" if v is None else f"{v:.0f} {unit}"

    out = ["## GPU state\n", "NVML readings when each case's timed calls started and ended (`gpu_state_before`, "
           "`gpu_state_after`); how to lock clocks for a publication run: docs/reading-results.md.\n"]
    out += _md_table(["results", "readings", "SM clock (MHz)", "memory clock (MHz)", "max temperature",
                      "max power", "power limit", "throttle reasons"],
                     [[s["results"], str(s["readings"]), span(s["sm_clock_mhz"]), span(s["mem_clock_mhz"]),
                       value(s["temp_c_max"], "C"), value(s["power_w_max"], "W"), value(s["power_limit_w"], "W"),
                       ", ".join(s["throttle"]) or ("unknown" if s["unknown"] else "none")] for s in states])
    for s in states:
        if s["unknown"]:
            out.append(f"GPU state of {s['results']}: unknown ({'; '.join(s['unknown'])}).\n")
        for warning in s["warnings"]:
            out.append(f"**Warning** ({s['results']}): {warning}; its rows do not compare at one clock.\n")
    return out


def caveat_lines(rows: list[Row]) -> list[str]:
    """Each column's caveats (a fallback path, ...): its cells are marked with CAVEAT."""
    seen: dict[tuple[str, str], int] = {}
    for r in rows:
        if r.get("caveat"):
            key = (r.get("column") or analysis.base_label(r), str(r["caveat"]))
            seen[key] = seen.get(key, 0) + 1
    if not seen:
        return []
    return [f"**Caveats** (cells marked `{CAVEAT}`): " + "; ".join(f"{column} ({n} rows): {text}"
                                                               for (column, text), n in seen.items()) + "\n"]


def suspect_lines(rows: list[Row]) -> list[str]:
    """Every row the plausibility gate refused, with its reason: none of them is ever "fastest"."""
    bad = analysis.suspects(rows)
    if not bad:
        return []
    listed = "; ".join(f"{r['column']} {analysis.mask_label(r)} {format_size(r['seqlen'])} {r['direction']}: "
                       f"{r.get('reason')}" for r in bad[:10])
    return [f"**Suspect**: {len(bad)} rows faster than possible, shown as `suspect` and never fastest: {listed}"
            + (" ..." if len(bad) > 10 else "") + "\n"]


def _status_counts(rows: list[Row]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        state = analysis.cell_state(r) + (" simulated" if analysis.is_simulated(r) else "")
        counts[state] = counts.get(state, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _plain(value: Any) -> str:
    if value is None or value == {}:
        return ""
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 10 else f"{value:.3g}"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value).replace("|", "/")


def variation_markdown(cells: list[dict[str, Any]]) -> str:
    """Run-to-run variation: each cell's coefficient of variation over the runs, and a summary."""
    if not cells:
        return ""
    summary = analysis.variation_summary(cells)
    long = format_size(analysis.LONG_SEQLEN)
    share = ("no cell of " + long + " or more" if summary["steady_share"] is None
             else f"{summary['steady_long']} of {summary['long']} cells of {long} or more "
                  f"({summary['steady_share']:.0%}) have a CV of at most {analysis.CV_STEADY:.0%}")
    out = ["## Run-to-run variation\n",
           "Cases measured ok in more than one of the runs (folders) of this report: CV = sample standard "
           "deviation / mean of the cell's TFLOP/s over the runs (each run's own median), lower is steadier. "
           f"Median CV {_cv(summary['median_cv'])} over {summary['cells']} "
           f"{'cell' if summary['cells'] == 1 else 'cells'}; {share}.\n"]
    lines = [[c["column"], c["mask"], format_size(c["seqlen"]), c["direction"], c["heads"], str(c["head_dim"]),
              c["dtype"], f"{c['runs']} of {c['of_runs']}", _num(c["mean"]), _num(c["std"]) if c["std"] else "0",
              _cv(c["cv"])] for c in cells]
    out += _md_table(["kernel", "mask", "seqlen", "direction", "heads", "head_dim", "dtype", "runs",
                      "mean TFLOP/s", "std", "CV"], lines)
    return "\n".join(out)


def anchors_markdown(rows: list[Row]) -> str:
    """Published single-GPU numbers beside longca's best cell of the same shape (`longca_cli.anchors`);
    empty when no row was measured on a GPU alone."""
    from longca_cli.anchors import beside

    if not any(r.get("status") == "ok" and str(r.get("device") or "").startswith("cuda") and not r.get("strategy")
               and not analysis.is_simulated(r) for r in rows):
        return ""
    lines = []
    for entry in beside(rows):
        a, top = entry["anchor"], entry["row"]
        shape = ", ".join([format_size(a["seqlen"]) if a["seqlen"] else "length not given",
                           f"heads {a['heads']}" if a["heads"] else "heads not given",
                           f"head_dim {a['head_dim']}", a["dtype"]])
        source = a["source"] + (f"; {a['note']}" if a["note"] else "")
        if top is None:
            ours = ["no matching row (single-GPU, measured, same mask, direction, heads, head_dim, dtype)", "", ""]
        else:
            where = {"exact": "", "any": ", best of every length",
                     "nearest": f", nearest length to {format_size(a['seqlen'] or 0)}"}[entry["match"]]
            ours = [f"{top['column'] if 'column' in top else top['kernel']}, {format_size(top['seqlen'])}, "
                    f"heads {analysis.heads_label(top)}, {top.get('gpu') or 'GPU'}{where}",
                    _num(top["tflops"]), f"{entry['ratio']:.2f}"]
        lines.append([f"{a['kernel']} ({a['gpu']})", a["mask"], a["direction"], shape, f"{a['tflops']:g}", *ours,
                      source.replace("|", "/")])
    out = ["## Published anchors\n",
           "The best published single-GPU numbers per shape (`longca_cli/data/published_anchors.json`, each with its "
           "source) beside this report's best measured cell of that shape; ratio = longca / published. A length "
           "the source gives but this report lacks is replaced by the nearest one measured, said so.\n"]
    out += _md_table(["published", "mask", "direction", "shape", "published TFLOP/s", "longca best",
                      "longca TFLOP/s", "ratio", "source"], lines)
    return "\n".join(out)


def _cv(value: float | None) -> str:
    return "" if value is None else f"{value:.2%}" if value < 0.1 else f"{value:.1%}"


def markdown(results: Results, memory: bool = False, variation: list[dict[str, Any]] | None = None) -> str:
    rows = results.rows
    counts = analysis.checked_counts(rows)
    mixed = bool(counts["checked"] and counts["unchecked"])
    out = header(results)
    extra = ([(OF_PEAK, _pct)] if any(r.get("matmul_peak_tflops") for r in rows) else []) \
        + ([(OF_SHEET, _pct_sheet)] if any(r.get("datasheet_peak_tflops") for r in rows) else [])
    out.append("## TFLOP/s\n")
    for t in analysis.tables(rows):
        out += _grid(t, lambda r: r.get("tflops"), _num, "fastest", False, mixed, extra=extra)
    out.append(LEGEND + "\n")
    eff = efficiency_markdown(analysis.scaling_efficiency(rows))
    if eff:
        out.append(eff)
    det = deterministic_markdown(analysis.deterministic_overhead(rows))
    if det:
        out.append(det)
    repeat = repeatability_markdown(analysis.repeatability(rows))
    if repeat:
        out.append(repeat)
    energy = energy_markdown(rows)
    if energy:
        out.append(energy)
    quantized = quantized_markdown(rows)
    if quantized:
        out.append(quantized)
    anchors = anchors_markdown(rows)
    if anchors:
        out.append(anchors)
    if memory:
        out.append(memory_markdown(rows))
    if variation:
        out.append(variation_markdown(variation))
    return "\n".join(out).rstrip() + "\n"


def deterministic_markdown(pairs: list[dict[str, Any]]) -> str:
    """Deterministic backward beside the default one, per kernel and case; empty when no folder has both."""
    if not pairs:
        return ""
    out = ["## Deterministic backward: overhead\n",
           "Median time of the kernel's deterministic backward (`deterministic = true`, the `(det)` columns above) "
           "over its default backward on the same case, lower is better (1.00 = no cost).\n"]
    lines = [[p["kernel"], p["mask"], format_size(p["seqlen"]), p["direction"], p["heads"], str(p["head_dim"]),
              p["dtype"], f"{p['ms_default']:.3g}", f"{p['ms_deterministic']:.3g}", f"{p['ratio']:.2f}",
              _gib(p["default_row"].get("peak_mem_bytes")), _gib(p["row"].get("peak_mem_bytes")),
              _repeatable(p["default_row"]) + " / " + _repeatable(p["row"])]
             for p in pairs]
    out += _md_table(["kernel", "mask", "seqlen", "direction", "heads", "head_dim", "dtype", "ms default",
                      "ms deterministic", "ratio", "peak GiB default", "peak GiB deterministic",
                      "bitwise repeatable (default / det)"], lines)
    return "\n".join(out) + "\n"


def _gib(value: Any) -> str:
    return f"{value / 2 ** 30:.2f}" if isinstance(value, (int, float)) else "-"


def _repeatable(row: Row) -> str:
    flag = row.get("bitwise_repeatable")
    return "-" if flag is None else "yes" if flag else f"no ({float(row.get('repeat_max_abs_diff') or 0):.2g})"


def energy_markdown(rows: list[Row]) -> str:
    """Joules per call and TFLOP per joule of the rows measured with `--energy`; empty when none were."""
    measured = [r for r in rows if r.get("status") == "ok" and r.get("energy_j") and r.get("flops")]
    if not measured:
        return ""
    out = ["## Energy per call\n",
           "NVML's energy counter of the whole GPU over at least one second of back-to-back calls, divided by the "
           "calls (`energy_j`, `energy_calls`); TFLOP/J is the row's FLOPs (the unmasked area's) over it, higher is "
           "better.\n"]
    measured.sort(key=lambda r: (r["direction"], analysis.mask_label(r), r["seqlen"], analysis.base_label(r)))
    lines = [[analysis.base_label(r), analysis.mask_label(r), format_size(r["seqlen"]), r["direction"],
              f"{r['energy_j']:.3g}", f"{r['flops'] / r['energy_j'] / 1e12:.3g}", str(r.get("energy_calls") or "-")]
             for r in measured]
    out += _md_table(["kernel", "mask", "seqlen", "direction", "J per call", "TFLOP/J", "calls"], lines)
    return "\n".join(out) + "\n"


def _quantized_cell(row: Row | None) -> tuple[str, str]:
    """(ms, relative error) of a quantized row; its status where it has no time (never a blank backward)."""
    if row is None:
        return "not run", ""
    if row.get("status") != "ok" or not row.get("ms_median"):
        return str(row.get("status")), ""
    err = row.get("rel_err")
    return f"{row['ms_median']:.3g}", "" if err is None else f"{err:.2g}"


def quantized_markdown(rows: list[Row]) -> str:
    """Quantized kernels' time and error, forward and backward side by side, beside the fastest 16-bit
    kernel of the same case; empty when no row is quantized."""
    cases = analysis.quantized_cases(rows)
    if not cases:
        return ""
    out = ["## Quantized kernels: error beside time\n",
           "FP8 problems and kernels that compute in fewer bits than their bfloat16 inputs (`quantized`): median ms "
           "and relative error against the float32 reference (the worst of out, dq, dk, dv), the forward and the "
           "backward side by side (a backward it does not have says so), beside the fastest 16-bit kernel's ms on "
           "the same case.\n"]
    lines = []
    for c in cases:
        fwd_ms, fwd_err = _quantized_cell(c["fwd"])
        bwd_ms, bwd_err = _quantized_cell(c["bwd"])
        best = [f"{b['ms_median']:.3g} ({analysis.base_label(b)})" if b else "-"
                for b in (c["best_fwd"], c["best_bwd"])]
        lines.append([c["kernel"], c["quantized"], c["mask"], format_size(c["seqlen"]), fwd_ms, fwd_err, bwd_ms,
                      bwd_err, *best])
    out += _md_table(["kernel", "quantized", "mask", "seqlen", "fwd ms", "fwd error", "bwd ms", "bwd error",
                      "16-bit fwd ms", "16-bit bwd ms"], lines)
    return "\n".join(out) + "\n"


def repeatability_markdown(groups: list[dict[str, Any]]) -> str:
    """Backward rows run again on the same inputs: bitwise repeatable or not, per kernel; empty when none did."""
    if not groups:
        return ""
    out = ["## Backward repeatability\n",
           "Each backward row's step run three times more on the same inputs after its timed calls, the second and "
           "third results compared bit for bit with the first (`bitwise_repeatable`, `repeat_max_abs_diff`): "
           "whether a kernel "
           "(deterministic or not) really gives the same dq, dk, dv twice.\n"]
    lines = [[g["kernel"], "yes" if g["deterministic"] else "no", str(g["rows"]), str(g["repeatable"]),
              f"{g['max_abs_diff']:.3g}"] for g in groups]
    out += _md_table(["kernel", "deterministic asked", "rows", "bitwise repeatable", "largest abs difference"], lines)
    return "\n".join(out) + "\n"


def memory_markdown(rows: list[Row]) -> str:
    """Each ok case's peak GPU memory (GiB) and the lightest kernel; empty when no row has it (CPU)."""
    if not any(r.get("status") == "ok" and r.get("peak_mem_bytes") for r in rows):
        return ""
    out = ["## Peak memory, GiB, lower is better\n",
           "`peak_mem_bytes`: `torch.cuda.max_memory_allocated` during one call, inputs included.\n"]
    for t in analysis.tables(rows):
        out += _grid(t, lambda r: r.get("peak_mem_bytes") or None, lambda b: f"{b / 2**30:.2f}", "lightest",
                     True, False)
    return "\n".join(out)


def _column(row: Row) -> str:
    """The row's column label (rows from `analysis.load` carry one)."""
    return row.get("column") or analysis.base_label(row) + (" (sim)" if analysis.is_simulated(row) else "")


def _efficiency(value: float) -> str:
    """Two decimals, or two significant digits below 0.1: a small efficiency never reads 0.00."""
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"


def efficiency_markdown(pairs: list[dict[str, Any]]) -> str:
    """A table per (direction, heads, head_dim, dtype): a line per strategy/kernel and mask, a column per world size."""
    if not pairs:
        return ""
    out = ["## Scaling efficiency\n",
           "TFLOP/s per GPU of the CP case over its inner kernel alone on one GPU at the per-GPU length "
           f"(S / world size), higher is better; in brackets the CP case's TFLOP/s per GPU; `{SIMULATED}` and "
           "`(sim)`: simulated, next to the measured cell.\n"]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for p in pairs:
        r = p["row"]
        groups.setdefault((r["direction"], analysis.heads_label(r), analysis.head_dims_label(r), r["dtype"]),
                          []).append(p)
    for (direction, heads, d, dtype), group in groups.items():
        worlds = sorted({p["row"]["world_size"] for p in group})
        cells: dict[tuple, dict[int, dict]] = {}
        masks = {m: i for i, m in enumerate(dict.fromkeys(analysis.mask_label(p["row"]) for p in group))}
        measured_first = sorted(group, key=lambda p: (_column(p["row"]).replace(" (sim)", ""),
                                                      masks[analysis.mask_label(p["row"])],
                                                      analysis.is_simulated(p["row"])))
        for p in measured_first:
            r = p["row"]
            key = (_column(r), analysis.mask_label(r), p["baseline"]["seqlen"], p["baseline"]["tflops"])
            cells.setdefault(key, {})[r["world_size"]] = p
        lines = []
        for (label, mask, seqlen, alone_tf), by_world in cells.items():
            line = [label, mask, format_size(seqlen), _num(alone_tf)]
            for w in worlds:
                at = by_world.get(w)
                text = f"{_efficiency(at['efficiency'])} ({_num(at['row']['tflops'])})" if at else ""
                line.append(SIMULATED + text if at and analysis.is_simulated(at["row"]) else text)
            lines.append(line)
        out.append(f"### {direction}, heads {heads}, head_dim {d}, {dtype}\n")
        out += _md_table(["strategy/kernel", "mask", "per-GPU length", "alone (TFLOP/s)", *(f"W={w}" for w in worlds)],
                         lines)
    return "\n".join(out)


CSV_EXTRA = ("simulated", "source", "column", "spread", "of_peak", "of_datasheet")  # beside the row's own fields


def write_csv(rows: list[Row], path: Path) -> None:
    """Every row with its reason; `ms_p20`/`ms_p80` and `spread` (p80/p20) give each cell's spread."""
    # fields newer than most folders appear only where a row sets them (old folders' CSVs stay as they were)
    unset = [c for c, default in (("head_dim_v", None), ("deterministic", False), ("sinks", False), ("quantized", None))
             if all(row.get(c, default) == default for row in rows)]
    columns = [c for c in dict.fromkeys([*FIELDS, *CSV_EXTRA])
               if c not in ("iter_times_ms", "rel_err_detail", *unset)]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            full = {**row, "spread": analysis.spread(row), "of_peak": analysis.of_peak(row),
                    "of_datasheet": analysis.of_datasheet(row)}
            writer.writerow({k: csv_cell(json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in full.items()})


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads a cell starting so as a formula


def csv_cell(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (`=HYPERLINK(...)` as a kernel name) gets a
    leading `'`, which the spreadsheet shows as text; numbers are left as they are."""
    return f"'{value}" if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def write_report(results: list[Path], directory: Path, plots: bool = True, memory: bool = False,
                 html: bool = False) -> dict[str, Any]:
    """report.md, report.csv, PNG plots and (with `html`) report.html over one or more result folders."""
    loaded = analysis.load(*results)
    directory.mkdir(parents=True, exist_ok=True)
    text = markdown(loaded, memory, analysis.run_variation(*results) if len(results) > 1 else None)
    files = [directory / "report.md", directory / "report.csv"]
    pictures: list[Path] = []
    if plots and loaded.rows:
        from .plots import plot_all

        pictures = plot_all(loaded, directory, memory=memory)
        text += "\n## Plots\n\n" + "\n".join(f"![{p.stem}]({p.name})" for p in pictures) + "\n"
    (directory / "report.md").write_text(text)
    write_csv(loaded.rows, directory / "report.csv")
    files += pictures
    if html:
        from .html import report_page

        (directory / "report.html").write_text(report_page(loaded, text))
        files.append(directory / "report.html")
    return {"markdown": text, "files": files, "unreadable": loaded.unreadable}
