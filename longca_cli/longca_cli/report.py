"""Reports from results.jsonl: markdown tables, CSV, and plots in the paper's style."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Callable, Optional

from longca.results import FIELDS, is_unavailable, read_results
from longca.runinfo import read_runs
from longca.sizes import format_size

STATUS_SHORT = {"unsupported": "unsup", "oom": "oom", "error": "err", "incorrect": "wrong"}


def _run_peak(path: Path) -> Optional[float]:
    """The bf16 matmul peak measured by the last run recorded beside `path` (runs.jsonl, run.json), if any."""
    peaks = [run.get("matmul_peak_tflops") for run in read_runs(path.parent)]
    return next((p for p in reversed(peaks) if isinstance(p, (int, float)) and p > 0), None)


def _mask_label(row: dict[str, Any]) -> str:
    """The mask, with the parameters a sweep varied (block, density, ...) when the row has any."""
    params = row.get("mask_params") or {}
    return " ".join([row["mask"], *(f"{k}={v}" for k, v in sorted(params.items()))])


def _groups(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """Rows by (direction, heads, head_dim, dtype, CP or not, world size): one table each, so every
    strategy of one world size shares a table (a column per strategy/kernel)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        key = (row["direction"], f"{row['heads_q']}:{row['heads_kv']}", row["head_dim"], row["dtype"],
               "cp" if row.get("strategy") else "-", row.get("world_size") or 1)
        groups.setdefault(key, []).append(row)
    return groups


def _label(row: dict[str, Any]) -> str:
    return row["kernel"] if not row.get("strategy") else f"{row['strategy']}/{row['kernel']}"


def _grid(group: list[dict[str, Any]]) -> tuple[list[str], dict[tuple, dict[str, dict]]]:
    """The kernel columns of a table and its rows: (mask label, seqlen) -> kernel label -> row."""
    kernels = sorted({_label(r) for r in group})
    order = {m: i for i, m in enumerate(dict.fromkeys(_mask_label(r) for r in group))}
    cells: dict[tuple, dict[str, dict]] = {}
    for r in sorted(group, key=lambda r: (order[_mask_label(r)], r["seqlen"])):
        cells.setdefault((_mask_label(r), r["seqlen"]), {})[_label(r)] = r
    return kernels, cells


def _title(direction: str, heads: str, d: Any, dtype: str, strategy: str, world: int) -> str:
    return (f"### {direction}, heads {heads}, head_dim {d}, {dtype}"
            + (f", world size {world}" if strategy != "-" else "") + "\n")


def _not_ok(row: Optional[dict[str, Any]]) -> str:
    """The cell of a row without a value: empty (no row), n/a, or the status in short."""
    if row is None:
        return ""
    return "n/a" if is_unavailable(row) else STATUS_SHORT.get(row["status"], row["status"])


def _tables(rows: list[dict[str, Any]], value: Callable[[dict], Optional[float]], fmt: Callable[[float], str],
            best_name: str, lower_is_better: bool = False,
            extra: Optional[tuple[str, Callable[[dict], str]]] = None) -> list[str]:
    """One table per group: a row per (mask, length), a column per kernel holding `fmt(value(row))`
    for ok rows with a value (else the status), the best kernel, and an optional `extra` column
    (header, text from the best row)."""
    out = []
    for key, group in _groups(rows).items():
        kernels, cells = _grid(group)
        header = ["mask", "seqlen", *kernels, best_name] + ([extra[0]] if extra else [])
        out += [_title(*key), "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for (mask, seqlen), by_kernel in cells.items():
            line, best = [mask, format_size(seqlen)], None
            for k in kernels:
                r = by_kernel.get(k)
                v = value(r) if r is not None and r["status"] == "ok" else None
                if v is None:
                    line.append(_not_ok(r))
                    continue
                line.append(fmt(v))
                if best is None or (v < value(best) if lower_is_better else v > value(best)):
                    best = r
            line.append(_label(best) if best else "")
            if extra:
                line.append(extra[1](best) if best else "")
            out.append("| " + " | ".join(line) + " |")
        out.append("")
    return out


def _of_peak(best: dict[str, Any]) -> str:
    """The best row's TFLOP/s over the matmul peak of the run that produced it."""
    peak = best.get("matmul_peak_tflops")
    return f"{best['tflops'] / peak:.0%}" if peak else ""


def markdown(rows: list[dict[str, Any]], peaks: Optional[dict[str, float]] = None) -> str:
    """One table per group: a row per (mask, length), a column per kernel, TFLOP/s or status.

    `peaks` (results folder name -> its run's bf16 matmul peak) is listed on top; "of peak" is the
    fastest cell over the peak of the run that produced it (rows carry it as `matmul_peak_tflops`)."""
    out = []
    if peaks:
        measured = ", ".join(f"{v:.0f} ({k})" for k, v in peaks.items())
        out.append(f"bf16 matmul peak measured in each run, TFLOP/s: {measured}. \"of peak\" divides the "
                   f"fastest cell by the peak of the run that measured it.\n")
    with_peak = any(r.get("matmul_peak_tflops") for r in rows)
    out += _tables(rows, lambda r: r.get("tflops"), lambda t: f"{t:.1f}" if t >= 10 else f"{t:.3g}", "fastest",
                   extra=("of peak", _of_peak) if with_peak else None)
    out.append("Cells are TFLOP/s (median; document masks: median over mask samples). "
               "unsup = unsupported, n/a = the kernel's library was not installed in that run, "
               "oom = out of memory, err = error, wrong = failed the correctness check; "
               "reasons are in the CSV and results.jsonl.")
    return "\n".join(out)


def memory_markdown(rows: list[dict[str, Any]]) -> str:
    """The same tables with each ok case's peak GPU memory (`peak_mem_bytes`, GiB) and the lightest
    kernel; empty when no row has it (CPU runs)."""
    if not any(r["status"] == "ok" and r.get("peak_mem_bytes") for r in rows):
        return ""
    out = ["## Peak memory, GiB (`peak_mem_bytes`: `torch.cuda.max_memory_allocated` during one call, "
           "inputs included)\n"]
    out += _tables(rows, lambda r: r.get("peak_mem_bytes") or None, lambda b: f"{b / 2**30:.2f}", "lightest",
                   lower_is_better=True)
    return "\n".join(out)


def _case_key(row: dict[str, Any], seqlen: int) -> tuple:
    return (row["kernel"], _mask_label(row), row.get("sampler"), seqlen, row.get("batch", 1), row["heads_q"],
            row["heads_kv"], row["head_dim"], row["dtype"], row["direction"])


def scaling_efficiency(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """CP rows next to their inner kernel alone on one GPU at the per-GPU length (S / world size):
    efficiency = the CP row's TFLOP/s per GPU / the single-GPU row's TFLOP/s."""
    ok = [r for r in rows if r["status"] == "ok" and r.get("tflops")]
    alone = {_case_key(r, r["seqlen"]): r for r in ok if not r.get("strategy")}
    out = []
    for r in ok:
        world = r.get("world_size") or 1
        base = alone.get(_case_key(r, r["seqlen"] // world)) if r.get("strategy") else None
        if base:
            out.append({"row": r, "baseline": base, "efficiency": r["tflops"] / base["tflops"]})
    return out


def efficiency_markdown(pairs: list[dict[str, Any]]) -> str:
    """A table per (direction, heads, head_dim, dtype): a row per strategy/kernel and mask, a column per world size."""
    if not pairs:
        return ""
    out = ["## Scaling efficiency\n",
           "TFLOP/s per GPU of the CP case over its inner kernel alone on one GPU at the per-GPU length "
           "(S / world size); in brackets the CP case's TFLOP/s per GPU.\n"]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for p in pairs:
        r = p["row"]
        groups.setdefault((r["direction"], f"{r['heads_q']}:{r['heads_kv']}", r["head_dim"], r["dtype"]), []).append(p)
    for (direction, heads, d, dtype), group in groups.items():
        worlds = sorted({p["row"]["world_size"] for p in group})
        out.append(f"### {direction}, heads {heads}, head_dim {d}, {dtype}\n")
        header = ["strategy/kernel", "mask", "per-GPU length", "alone (TFLOP/s)", *(f"W={w}" for w in worlds)]
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "---|" * len(header))
        cells: dict[tuple, dict[int, dict]] = {}
        for p in group:
            r = p["row"]
            key = (_label(r), _mask_label(r), p["baseline"]["seqlen"], p["baseline"]["tflops"])
            cells.setdefault(key, {})[r["world_size"]] = p
        for (label, mask, seqlen, alone_tf), by_world in cells.items():
            line = [label, mask, format_size(seqlen), f"{alone_tf:.1f}"]
            line += [f"{by_world[w]['efficiency']:.2f} ({by_world[w]['row']['tflops']:.1f})" if w in by_world else ""
                     for w in worlds]
            out.append("| " + " | ".join(line) + " |")
        out.append("")
    return "\n".join(out)


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    columns = [f for f in FIELDS if f != "iter_times_ms"]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in row.items()})


def plot(rows: list[dict[str, Any]], directory: Path) -> list[Path]:
    """A figure per group: a panel per mask, TFLOP/s against length, a line per kernel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for (direction, heads, d, dtype, strategy, world), group in _groups(rows).items():
        masks = list(dict.fromkeys(_mask_label(r) for r in group))
        ncols = min(4, len(masks))
        nrows = -(-len(masks) // ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
        kernels = sorted({_label(r) for r in group})
        for ax, mask in zip(axes.flat, masks):
            for k in kernels:
                pts = sorted((r["seqlen"], r["tflops"]) for r in group
                             if _mask_label(r) == mask and _label(r) == k and r["status"] == "ok" and r.get("tflops"))
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=k)
            seqlens = sorted({r["seqlen"] for r in group})
            ax.set_xscale("log", base=2)
            ax.set_xticks(seqlens, [format_size(s) for s in seqlens], fontsize=7)
            ax.set_title(mask, fontsize=9)
            ax.set_ylabel("TFLOP/s", fontsize=8)
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(masks):]:
            ax.axis("off")
        handles, labels = axes.flat[0].get_legend_handles_labels()
        for ax in axes.flat:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        fig.legend(handles, labels, loc="upper center", ncol=min(8, len(labels) or 1), fontsize=8)
        fig.suptitle(f"{direction}, heads {heads}, head_dim {d}, {dtype}", y=0.995, fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 0.93))
        name = (f"tflops_{direction}_{heads.replace(':', 'x')}_d{d}_{dtype}"
                + (f"_{strategy}_w{world}" if strategy != "-" else ""))
        path = directory / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def write_report(results: list[Path], directory: Path, plots: bool = True, memory: bool = False) -> dict[str, Any]:
    """Report over one or more results.jsonl; a case measured twice keeps its last row.
    `memory` adds the peak-memory tables; `unreadable` in the answer names every line that is not a row."""
    by_case: dict[Any, dict[str, Any]] = {}
    peaks: dict[str, float] = {}
    unreadable: list[str] = []
    for path in results:
        peak = _run_peak(path)
        if peak:
            peaks[path.parent.name or str(path)] = peak
        read = read_results(path)
        unreadable += [f"{path} line {n}: {why}" for n, why in read.bad_lines]
        for row in read.rows:
            # the row's own run's peak (sweeps write it); older rows take their folder's run.json
            by_case[row.case_id or id(row)] = {**row.as_dict(), "matmul_peak_tflops": row.matmul_peak_tflops or peak}
    rows = list(by_case.values())
    directory.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, peaks)
    efficiency = efficiency_markdown(scaling_efficiency(rows))
    if efficiency:
        text += "\n\n" + efficiency
    memory_text = memory_markdown(rows) if memory else ""
    if memory_text:
        text += "\n\n" + memory_text
    (directory / "report.md").write_text(text + "\n")
    write_csv(rows, directory / "report.csv")
    files = [directory / "report.md", directory / "report.csv"]
    if plots and rows:
        files += plot(rows, directory)
    return {"markdown": text, "files": files, "unreadable": unreadable}
