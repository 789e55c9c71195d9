"""Results as a table to query from Python: load result folders, keep the last row per case, and
derive what reports show (fastest kernel per cell, fraction of peak, spread, scaling efficiency,
memory). The CLI's `report`, plots and HTML page only render what this module computes.

Rows are plain dicts (each `longca.results.ResultRow` as a dict: rows of older schema versions
carry the defaults of the fields they lack, fields the schema does not know are kept).
`pandas.DataFrame(results.rows)` gives a frame where pandas is installed; it is not a core
dependency (tens of MB and an import cost for tables of a few thousand rows that lists handle).
"""
from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from longca.errors import LongcaError
from longca.results import is_unavailable, read_results
from longca_runner import gpustate, integrity, peaks
from longca_runner.outdir import RESULTS_FILE, existing_runs
from longca_runner.runinfo import read_runs

# how a cell without a number reads; `n/a` = the kernel's library was not installed in that run
STATUS_SHORT = {"unsupported": "unsup", "oom": "oom", "error": "err", "incorrect": "wrong", "timeout": "timeout",
                "suspect": "suspect"}
SPREAD_SHOWN = 1.1  # markdown shows a ± where p80/p20 of the times is above this

Row = dict[str, Any]


@dataclass
class Run:
    """One run record (run.json, or one entry of runs.jsonl / run-N.json) of a results folder."""

    label: str
    folder: Path
    record: dict[str, Any]

    @property
    def peak(self) -> float | None:
        return self.record.get("matmul_peak_tflops") or None

    @property
    def spec(self) -> dict[str, Any]:
        return self.record.get("spec") or {}


@dataclass
class Results:
    """Rows of one or more folders, one per case (the last written wins), with their run records."""

    rows: list[Row]
    runs: list[Run] = field(default_factory=list)
    replaced: int = 0  # rows dropped because a later row measured the same case
    unreadable: list[str] = field(default_factory=list)  # "path line N: why" for lines that are not rows

    def ok(self) -> list[Row]:
        return [r for r in self.rows if r.get("status") == "ok"]

    def where(self, **equal: Any) -> list[Row]:
        """Rows whose fields equal the given values, e.g. `where(mask="causal", direction="fwd")`."""
        return [r for r in self.rows if all(r.get(k) == v for k, v in equal.items())]


# what a run's `repeat` of None means (longca_runner.timing.until_precise)
ADAPTIVE_REPEAT = "until the median's 95 % interval is within +-1 % (5-100 calls, at most 2 s)"


def results_files(paths: Iterable[Path | str]) -> list[Path]:
    """The results.jsonl of each path given to a report: a file as it is, a folder's own file, or,
    for a folder of repeats (no results.jsonl, run-K folders inside), each repeat's file."""
    out = []
    for path in map(Path, paths):
        if path.is_dir() and not (path / RESULTS_FILE).is_file() and existing_runs(path):
            out += [p / RESULTS_FILE for p in existing_runs(path)]
        else:
            out.append(path / RESULTS_FILE if path.is_dir() else path)
    return out


def _results_file(path: Path) -> Path:
    path = Path(path)
    file = path / "results.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise LongcaError(f"no results at {file}")
    return file


PROBLEM_FIELDS = ("kernel", "strategy", "world_size", "mask", "mask_params", "sampler", "sampler_params", "seed",
                  "batch", "seqlen", "heads_q", "heads_kv", "head_dim", "dtype", "direction", "device",
                  "strategy_options")


# problem fields added later: part of a row's key only where set, so older folders keep their keys
NEW_FIELDS = (("head_dim_v", None), ("deterministic", False), ("sinks", False))


def problem_key(row: Row) -> str:
    """The case as its problem fields say (stable across longca versions, unlike `case_id`), and
    whether it was simulated."""
    fields = [row.get(k) for k in PROBLEM_FIELDS]
    fields += [[k, row.get(k)] for k, default in NEW_FIELDS if row.get(k, default) != default]  # old keys unchanged
    return ("sim:" if is_simulated(row) else "") + json.dumps(fields, sort_keys=True, default=str)


def case_key(row: Row) -> Any:
    """What makes two rows the same case in one report: the sweep's case id (else the problem's
    fields), and whether it was simulated (a simulated row never replaces the measured one)."""
    return ("sim:" + str(row.get("case_id")) if is_simulated(row) else row.get("case_id")) or problem_key(row)


def load(*paths: Path | str) -> Results:
    """Rows of results folders (or results.jsonl files), merged in the order given; a case measured
    more than once keeps its last row. Each row gets `source` (its folder) and `column` (the label
    of its table column), and `matmul_peak_tflops` from its folder's run record where it lacks one."""
    if not paths:
        raise LongcaError("no results given")
    paths = tuple(results_files(paths))
    by_case: dict[Any, Row] = {}
    runs: list[Run] = []
    unreadable: list[str] = []
    total = derived = 0
    for path in paths:
        file = _results_file(Path(path))
        label = file.parent.name or str(file.parent)
        records = read_runs(file.parent)
        runs += [Run(label, file.parent, rec) for rec in records]
        folder_peak = next((rec.get("matmul_peak_tflops") for rec in reversed(records)
                            if isinstance(rec.get("matmul_peak_tflops"), (int, float))), None)
        folder_gpu = next((rec.get("gpu") for rec in reversed(records) if rec.get("gpu")), None)
        read = read_results(file)
        unreadable += [f"{file} line {n}: {why}" for n, why in read.bad_lines]
        for typed in read.rows:
            total += 1
            phases = _simulated_phases(typed.as_dict())
            derived += len(phases)
            for row in [typed.as_dict(), *phases]:
                key = case_key(row)
                by_case.pop(key, None)  # the newest row goes last, as if the case had been measured then
                by_case[key] = _checked_row({**row, "source": label,
                                             "matmul_peak_tflops": row.get("matmul_peak_tflops") or folder_peak},
                                            folder_gpu)
    rows = list(by_case.values())
    _label_columns(rows)
    return Results(rows, runs, total + derived - len(rows), unreadable)


def _checked_row(row: Row, folder_gpu: str | None) -> Row:
    """A loaded row with its GPU (from its run where the row predates the field), the datasheet
    peak of that GPU and dtype, and the plausibility gate applied (rows written before the gate)."""
    if str(row.get("device") or "").startswith("cuda"):
        row["gpu"] = row.get("gpu") or folder_gpu
        if row.get("datasheet_peak_tflops") is None:
            row.update(integrity.datasheet_fields(row.get("gpu"), row["dtype"]))
    integrity.gate(row)
    return row


def _simulated_phases(row: Row) -> list[Row]:
    """A simulated fwdbwd row as its forward and backward rows too (from the simulator's own
    per-phase figures in `sim`), so they sit next to the measured fwd and bwd cells."""
    sim = row.get("sim")
    if not (is_simulated(row) and row.get("direction") == "fwdbwd" and isinstance(sim, dict)):
        return []
    out = []
    for phase in ("fwd", "bwd"):
        figures = sim.get(phase)
        if isinstance(figures, dict) and figures.get("tflops"):
            out.append({**row, "direction": phase, "tflops": figures["tflops"], "ms_median": figures.get("ms_mean"),
                        "ms_max_rank": figures.get("ms_max"), "peak_mem_bytes": figures.get("peak_mem_bytes"),
                        "flops": None, "case_id": f"{row.get('case_id')}-{phase}", "derived_from": "fwdbwd"})
    return out


def is_simulated(row: Row) -> bool:
    """A row predicted by the CP simulator rather than measured."""
    return bool(row.get("simulated")) or row.get("measured") is False


def is_unchecked(row: Row) -> bool:
    """A row never compared with the reference: `checked` neither full nor spot, and no relative
    error (rows of schema 1 recorded a check only as `rel_err`)."""
    return row.get("checked") not in ("full", "spot") and row.get("rel_err") is None


def base_label(row: Row) -> str:
    """kernel (or strategy/kernel); `(det)` for a deterministic backward, `(sinks)` with learnable sinks:
    each a column beside the default one."""
    label = row["kernel"] if not row.get("strategy") else f"{row['strategy']}/{row['kernel']}"
    return label + (" (det)" if row.get("deterministic") else "") + (" (sinks)" if row.get("sinks") else "")


def head_dims_label(row: Row) -> Any:
    """The row's head_dim, or `192/128` where V's head dim differs."""
    dv = row.get("head_dim_v")
    return row["head_dim"] if dv is None or dv == row["head_dim"] else f"{row['head_dim']}/{dv}"


def _distinguishing_words(backends: list[str]) -> dict[str, str]:
    """The first word that tells each backend string apart ('cudnn-frontend' / 'torch')."""
    words = {b: b.split() for b in backends}
    for i in range(max(len(w) for w in words.values())):
        at = {b: (w[i] if i < len(w) else "").strip("(),;") for b, w in words.items()}
        if len(set(at.values())) == len(backends) and all(at.values()):
            return at
    return {b: b for b in backends}


def _label_columns(rows: list[Row]) -> None:
    """`column` of each row: kernel (or strategy/kernel), split by backend when rows of one kernel
    ran through different backends (two implementations never share a column), marked `(sim)`
    when simulated. Rows with no backend (refused before running) join every column of their kernel."""
    backends: dict[str, list[str]] = {}
    for r in rows:
        if r.get("backend"):
            seen = backends.setdefault(base_label(r), [])
            if r["backend"] not in seen:
                seen.append(r["backend"])
    tags = {label: _distinguishing_words(b) for label, b in backends.items() if len(b) > 1}
    for r in rows:
        label = base_label(r)
        if label in tags and r.get("backend"):
            label += f" [{tags[label][r['backend']]}]"
        r["column"] = label + (" (sim)" if is_simulated(r) else "")


def columns_of(row: Row, every_column: Iterable[str]) -> list[str]:
    """The columns a row fills: its own, or, for a row with no backend of a kernel whose columns are
    split by backend (`every_column`: the columns of rows with one), each of them."""
    own = row["column"]
    if row.get("backend") or own in every_column:
        return [own]
    prefix = base_label(row) + " ["
    split = [c for c in every_column if c.startswith(prefix) and c.endswith("(sim)") == own.endswith("(sim)")]
    return split or [own]


def mask_label(row: Row) -> str:
    """The mask with the parameters a sweep varied (block, density, ...)."""
    params = row.get("mask_params") or {}
    return " ".join([row["mask"], *(f"{k}={v}" for k, v in sorted(params.items()))])


def heads_label(row: Row) -> str:
    return f"{row['heads_q']}:{row['heads_kv']}"


def spread(row: Row) -> float | None:
    """p80 / p20 of the row's times (1.0 = no spread); None without both."""
    p20, p80 = row.get("ms_p20"), row.get("ms_p80")
    return p80 / p20 if p20 and p80 and p20 > 0 else None


def of_peak(row: Row) -> float | None:
    """TFLOP/s over the bf16 matmul peak measured by the row's own run."""
    peak, tflops = row.get("matmul_peak_tflops"), row.get("tflops")
    return tflops / peak if peak and tflops else None


def of_datasheet(row: Row) -> float | None:
    """TFLOP/s over the GPU model's dense datasheet peak for the row's dtype (`longca_runner.peaks`)."""
    sheet, tflops = row.get("datasheet_peak_tflops"), row.get("tflops")
    return tflops / sheet if sheet and tflops else None


def suspects(rows: list[Row]) -> list[Row]:
    """Rows the plausibility gate refused (`longca_runner.integrity`): faster than possible."""
    return [r for r in rows if r.get("status") == "suspect"]


def cell_state(row: Row | None) -> str:
    """'' (no row), 'ok', 'n/a' (library not installed in that run), or the status in short."""
    if row is None:
        return ""
    if row.get("status") == "ok":
        return "ok"
    return "n/a" if is_unavailable(row) else STATUS_SHORT.get(row["status"], str(row["status"]))


@dataclass
class Table:
    """Rows of one (direction, heads, head_dim, dtype, CP or not, world size): a line per (mask,
    length), a column per kernel (or strategy/kernel, per backend)."""

    direction: str
    heads: str
    head_dim: Any
    dtype: str
    cp: bool
    world_size: int
    columns: list[str]
    cells: dict[tuple[str, int], dict[str, Row]]

    @property
    def title(self) -> str:
        return (f"{self.direction}, heads {self.heads}, head_dim {self.head_dim}, {self.dtype}"
                + (f", world size {self.world_size}" if self.cp else ""))

    @property
    def masks(self) -> list[str]:
        return list(dict.fromkeys(mask for mask, _ in self.cells))

    def rows(self) -> list[Row]:
        return [r for by_col in self.cells.values() for r in by_col.values()]


def table_key(row: Row) -> tuple:
    return (row["direction"], heads_label(row), head_dims_label(row), row["dtype"], bool(row.get("strategy")),
            row.get("world_size") or 1)


def tables(rows: list[Row]) -> list[Table]:
    """The report's tables, masks in the order first seen, lengths ascending."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        groups.setdefault(table_key(r), []).append(r)
    out = []
    for key, group in groups.items():
        backed = {r["column"] for r in group if r.get("backend")}
        columns = sorted({c for r in group for c in columns_of(r, backed)})
        order = {m: i for i, m in enumerate(dict.fromkeys(mask_label(r) for r in group))}
        cells: dict[tuple[str, int], dict[str, Row]] = {}
        for r in sorted(group, key=lambda r: (order[mask_label(r)], r["seqlen"])):
            by_col = cells.setdefault((mask_label(r), r["seqlen"]), {})
            for c in columns_of(r, backed):
                if r.get("backend") or c not in by_col:  # a row that ran beats one refused before running
                    by_col[c] = r
        direction, heads, head_dim, dtype, cp, world_size = key
        out.append(Table(direction, heads, head_dim, dtype, cp, world_size, columns, cells))
    return out


def deterministic_overhead(rows: list[Row]) -> list[dict[str, Any]]:
    """Each ok deterministic-backward row beside the same case's default row: the ratio of their median
    times (deterministic / default; 1.10 = 10% slower), per kernel, mask, length, direction and shape."""
    def key(r: Row) -> tuple:
        return (r["kernel"], r.get("strategy"), mask_label(r), r["seqlen"], r["direction"], heads_label(r),
                head_dims_label(r), r["dtype"], r.get("batch", 1), r.get("backend"), is_simulated(r))

    ok = [r for r in rows if r.get("status") == "ok" and r.get("ms_median")]
    default = {key(r): r for r in ok if not r.get("deterministic")}
    out = []
    for r in ok:
        base = default.get(key(r)) if r.get("deterministic") else None
        if base is not None:
            out.append({"kernel": base_label(base), "mask": mask_label(r), "seqlen": r["seqlen"],
                        "direction": r["direction"], "heads": heads_label(r), "head_dim": head_dims_label(r),
                        "dtype": r["dtype"], "ms_default": base["ms_median"], "ms_deterministic": r["ms_median"],
                        "ratio": r["ms_median"] / base["ms_median"], "row": r, "default_row": base})
    out.sort(key=lambda c: (c["direction"], c["heads"], str(c["head_dim"]), c["dtype"], c["kernel"], c["mask"],
                            c["seqlen"]))
    return out


def is_quantized(row: Row) -> bool:
    """An FP8 problem, or a kernel that computes in fewer bits than its inputs (`quantized`)."""
    return bool(row.get("quantized")) or str(row.get("dtype", "")).startswith("float8")


def quantized_cases(rows: list[Row]) -> list[dict[str, Any]]:
    """Each quantized kernel's case (`is_quantized`) with its forward and backward rows side by side,
    and the fastest ok 16-bit row of the same case and direction: what the bits saved and what they
    cost in error. The backward is always there, as a row or None (never left out)."""
    def case(r: Row) -> tuple:
        return (mask_label(r), r["seqlen"], heads_label(r), head_dims_label(r), r.get("batch", 1), is_simulated(r))

    sixteen: dict[tuple, Row] = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("ms_median") and not is_quantized(r) and not r.get("strategy") \
                and r.get("dtype") in ("bfloat16", "float16"):
            key = (*case(r), r["direction"])
            if key not in sixteen or r["ms_median"] < sixteen[key]["ms_median"]:
                sixteen[key] = r
    cases: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        if not is_quantized(r) or r.get("strategy") or r["direction"] not in ("fwd", "bwd"):
            continue
        key = (base_label(r), r.get("quantized") or r["dtype"], *case(r))
        entry = cases.setdefault(key, {"kernel": base_label(r), "quantized": r.get("quantized") or r["dtype"],
                                       "mask": mask_label(r), "seqlen": r["seqlen"], "fwd": None, "bwd": None,
                                       "best_fwd": sixteen.get((*case(r), "fwd")),
                                       "best_bwd": sixteen.get((*case(r), "bwd"))})
        entry[r["direction"]] = r
    return sorted(cases.values(), key=lambda c: (c["kernel"], c["mask"], c["seqlen"]))


def repeatability(rows: list[Row]) -> list[dict[str, Any]]:
    """Per kernel and deterministic flag, over backward rows that ran their step again on the same inputs
    (`bitwise_repeatable`): how many there are, how many were bitwise repeatable, the largest difference."""
    groups: dict[tuple[str, bool], list[Row]] = {}
    for r in rows:
        if r.get("bitwise_repeatable") is not None:
            groups.setdefault((base_label(r), bool(r.get("deterministic"))), []).append(r)
    return [{"kernel": kernel, "deterministic": det, "rows": len(group),
             "repeatable": sum(1 for r in group if r["bitwise_repeatable"]),
             "max_abs_diff": max(float(r.get("repeat_max_abs_diff") or 0.0) for r in group)}
            for (kernel, det), group in sorted(groups.items())]


def best(by_column: dict[str, Row], value: Callable[[Row], float | None] = lambda r: r.get("tflops"),
         lowest: bool = False, measured_only: bool = True) -> Row | None:
    """The ok row with the highest (or `lowest`) value among a cell's columns; simulated rows are
    left out unless `measured_only` is False."""
    candidates = [r for r in by_column.values() if r.get("status") == "ok" and value(r) is not None
                  and not (measured_only and is_simulated(r))]
    if not candidates:
        return None
    pick = min if lowest else max
    return pick(candidates, key=lambda r: value(r))  # type: ignore[arg-type, return-value]


def fastest(rows: list[Row]) -> list[dict[str, Any]]:
    """Per (table, mask, length): the fastest measured kernel, its TFLOP/s and fraction of peak."""
    out = []
    for t in tables(rows):
        for (mask, seqlen), by_col in t.cells.items():
            top = best(by_col)
            if top is not None:
                out.append({"table": t.title, "mask": mask, "seqlen": seqlen, "column": top["column"],
                            "tflops": top["tflops"], "of_peak": of_peak(top), "of_datasheet": of_datasheet(top),
                            "row": top})
    return out


def lightest(rows: list[Row]) -> list[dict[str, Any]]:
    """Per (table, mask, length): the measured kernel with the least peak memory."""
    out = []
    for t in tables(rows):
        for (mask, seqlen), by_col in t.cells.items():
            top = best(by_col, lambda r: r.get("peak_mem_bytes") or None, lowest=True)
            if top is not None:
                out.append({"table": t.title, "mask": mask, "seqlen": seqlen, "column": top["column"],
                            "peak_mem_bytes": top["peak_mem_bytes"], "row": top})
    return out


def _alone_key(row: Row, seqlen: int) -> tuple:
    return (row["kernel"], mask_label(row), row.get("sampler"), seqlen, row.get("batch", 1), row["heads_q"],
            row["heads_kv"], row["head_dim"], row["dtype"], row["direction"])


def scaling_efficiency(rows: list[Row]) -> list[dict[str, Any]]:
    """CP rows next to their inner kernel alone on one GPU at the per-GPU length (S / world size):
    efficiency = the CP row's TFLOP/s per GPU over the single-GPU row's TFLOP/s. Simulated CP rows
    are paired too (marked by their row)."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("tflops")]
    alone = {_alone_key(r, r["seqlen"]): r for r in ok if not r.get("strategy") and not is_simulated(r)}
    out = []
    for r in ok:
        if not r.get("strategy"):
            continue
        base = alone.get(_alone_key(r, r["seqlen"] // (r.get("world_size") or 1)))
        if base:
            out.append({"row": r, "baseline": base, "efficiency": r["tflops"] / base["tflops"]})
    return out


def environments(results: Results) -> list[dict[str, Any]]:
    """One line per run record: where, on what, with which software, and its matmul peak."""
    out = []
    for run in results.runs:
        rec = run.record
        gpu = rec.get("gpu")
        count = rec.get("gpu_count")
        cudnn = rec.get("cudnn")
        out.append({
            "results": run.label, "date": rec.get("time"), "host": rec.get("host"),
            "device": ((f"{count} x {gpu}" if gpu and count and count > 1 else gpu)
                       or ("CPU" if rec.get("torch") else None)),
            "driver": rec.get("driver"), "torch": rec.get("torch"), "cuda": rec.get("cuda"),
            "cudnn": _cudnn_version(cudnn), "python": rec.get("python"), "longca": rec.get("longca"),
            "commit": (rec.get("git_commit") or "")[:10] or None, "platform": rec.get("platform"),
            "matmul_peak_tflops": run.peak, "matmul_peaks": _peaks_text(rec.get("matmul_peaks")),
            "gpu_model": peaks.gpu_model(gpu),
        })
    return out


def _peaks_text(measured: Any) -> str | None:
    """"bfloat16 741 at 4096³" per dtype a run measured, or None (a run before best-of-shapes peaks)."""
    if not isinstance(measured, dict) or not measured:
        return None
    def num(v: float) -> str:
        return f"{v:.0f}" if v >= 10 else f"{v:.3g}"

    return ", ".join(f"{dtype} {num(entry['tflops'])} at {peaks.shape_label(entry)}"
                     for dtype, entry in measured.items() if isinstance(entry, dict) and entry.get("tflops"))


def gpu_states(rows: list[Row]) -> list[dict[str, Any]]:
    """Per results folder: the GPU readings of its rows in brief (`longca_runner.gpustate.summary`), with
    the warnings (clocks moved > 2 %, throttling); folders whose rows carry none are left out."""
    by_source: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        for key in ("gpu_state_before", "gpu_state_after"):
            if isinstance(r.get(key), dict):
                by_source.setdefault(str(r.get("source")), []).append(r[key])
    return [{"results": source, **gpustate.summary(readings)} for source, readings in by_source.items()]


def _cudnn_version(value: Any) -> str | None:
    """cuDNN's integer version (91900) as 9.19.0."""
    if isinstance(value, int) and value >= 10000:
        return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
    return None if value is None else str(value)


def run_times(results: Results) -> list[dict[str, Any]]:
    """Where each run's minutes went (runs.jsonl `wall_s`, `phases_s`: compile, reference, check,
    timed, other; `kernels_s`: the same per kernel), for runs that recorded them."""
    return [{"results": run.label, "wall_s": run.record["wall_s"], "phases_s": run.record.get("phases_s") or {},
             "cases_run": run.record.get("cases_run"), "kernels_s": run.record.get("kernels_s") or {}}
            for run in results.runs if isinstance(run.record.get("wall_s"), (int, float))]


def protocol(results: Results) -> list[dict[str, Any]]:
    """How each run measured: warm-up and timed iterations, mask samples, check, L2 flush, sampler."""
    out = []
    for run in results.runs:
        spec = run.spec
        if not spec:
            continue
        device = spec.get("device")
        out.append({
            "results": run.label, "warmup": spec.get("warmup"),
            "repeat": spec.get("repeat") or ADAPTIVE_REPEAT if "repeat" in spec else None,
            "samples": spec.get("samples"), "check": spec.get("check"), "device": device,
            "l2_flush": ("256 MiB zeroed before each timed call" if device == "cuda"
                         else "none (host clock)" if device == "cpu" else None),
            "sampler": spec.get("sampler"), "sampler_params": spec.get("sampler_params") or {},
            "seed": spec.get("seed"),
        })
    return out


def samplers(rows: list[Row]) -> dict[str, int]:
    """'sampler params' -> rows, over rows whose mask has documents (they carry a sampler)."""
    counts: dict[str, int] = {}
    for r in rows:
        if r.get("sampler") is None:
            continue
        params = r.get("sampler_params")
        text = r["sampler"] + (" " + json.dumps(params, sort_keys=True) if params else "")
        counts[text] = counts.get(text, 0) + 1
    return counts


def checked_counts(rows: list[Row]) -> dict[str, int]:
    """ok rows by check state: 'checked' / 'unchecked'."""
    ok = [r for r in rows if r.get("status") == "ok" and not is_simulated(r)]
    unchecked = sum(is_unchecked(r) for r in ok)
    return {"checked": len(ok) - unchecked, "unchecked": unchecked}


def median(values: Iterable[float]) -> float | None:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else None


LONG_SEQLEN = 16384  # the variation summary's share is over cells of this length and more
CV_STEADY = 0.01  # ... whose run-to-run CV is at most this


def _cell_key(row: Row) -> str:
    """A measured cell across runs: its problem and the implementation that ran it."""
    return problem_key(row) + "|" + str(row.get("backend") or "")


def run_variation(*paths: Path | str) -> list[dict[str, Any]]:
    """Each case measured ok in two or more of the given runs (folders or results.jsonl files, each
    one run; a folder of repeats, run-1 ... run-N, gives each): its TFLOP/s per run, mean, sample
    standard deviation and coefficient of variation (std / mean). Cases are matched by their
    problem fields (`problem_key`) and backend; within one run the last row per case counts.
    Simulated and suspect rows are left out."""
    paths = tuple(results_files(paths))  # a folder of repeats: each repeat is a run
    cells: dict[str, dict[str, Any]] = {}
    for path in paths:
        for row in load(path).ok():
            if is_simulated(row) or not row.get("tflops"):
                continue
            cell = cells.setdefault(_cell_key(row), {"row": row, "tflops": [], "runs": []})
            cell["tflops"].append(float(row["tflops"]))
            cell["runs"].append(_results_file(Path(path)).parent.name)
    out = []
    for cell in cells.values():
        values = cell["tflops"]
        if len(values) < 2:
            continue
        row = cell["row"]
        mean = statistics.fmean(values)
        std = statistics.stdev(values)
        out.append({"column": base_label(row),
                    "mask": mask_label(row), "seqlen": row["seqlen"], "direction": row["direction"],
                    "heads": heads_label(row), "head_dim": row["head_dim"], "dtype": row["dtype"],
                    "runs": len(values), "of_runs": len(paths), "sources": cell["runs"], "tflops": values,
                    "mean": mean, "std": std, "cv": std / mean if mean else None, "row": row})
    shared: dict[str, set[str]] = {}  # a kernel that ran through two backends: one column per backend
    for c in out:
        shared.setdefault(problem_key(c["row"]), set()).add(str(c["row"].get("backend")))
    for c in out:
        if len(shared[problem_key(c["row"])]) > 1:
            c["column"] += f" [{c['row'].get('backend')}]"
    out.sort(key=lambda c: (c["direction"], c["heads"], c["head_dim"], c["dtype"], c["mask"], c["seqlen"],
                            c["column"]))
    return out


def variation_summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Median CV over the cells, and how many cells of LONG_SEQLEN and more have a CV of at most
    CV_STEADY (`steady_long` of `long`; `steady_share` None when there is no long cell)."""
    long = [c for c in cells if c["seqlen"] >= LONG_SEQLEN and c["cv"] is not None]
    steady = [c for c in long if c["cv"] <= CV_STEADY]
    return {"cells": len(cells), "median_cv": median(c["cv"] for c in cells if c["cv"] is not None),
            "long": len(long), "steady_long": len(steady),
            "steady_share": len(steady) / len(long) if long else None}
