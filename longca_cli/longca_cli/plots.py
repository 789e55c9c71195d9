"""Figures in the paper's style: a panel per mask with forward and backward side by side, TFLOP/s
(or peak memory) against length on a log-2 axis from 0, the measured matmul peak dashed, the datasheet
peak dotted, one colour per kernel in every figure, the legend below the panels; CP: TFLOP/s per GPU
against world size."""
from __future__ import annotations

import re
import textwrap
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from longca.sizes import format_size
from longca_cli import analysis
from longca_cli.analysis import Results, Row

# fixed colours, so a kernel looks the same in every figure of every report: dense kernels take
# tab10, block-sparse kernels Set1, CP strategies Dark2 (kinds that rarely share a figure); other
# names get a colour from a hash of their name
PALETTES = {
    "tab10": ["fa3", "fa4", "fa2", "cudnn", "flex", "flashmask", "sdpa", "torch", "reference", "flex-fa4"],
    "Set1": ["vsa", "flashinfer", "flex-sparse", "vsa-triton", "fa2-sparse"],
    "Dark2": ["ulysses", "ring-p2p", "ring-allgather", "usp", "loongtrain"],
}
DIRECTIONS = ("fwd", "bwd", "fwdbwd")


def colour(name: str) -> Any:
    from matplotlib import colormaps

    for palette, names in PALETTES.items():
        if name in names:
            return colormaps[palette](names.index(name))
    return colormaps["tab20b"](zlib.crc32(name.encode()) % 20)


def _style(column: str) -> dict[str, Any]:
    """Colour from the kernel (or the strategy, for CP columns); a backend variant or a simulated
    column keeps the colour with another line style."""
    base = column.split(" ")[0]
    name = base.split("/")[0]
    style: dict[str, Any] = {"color": colour(name), "marker": "o", "ms": 3, "lw": 1.4}
    if "[" in column:
        variant = column[column.index("[") + 1:column.index("]")]
        style.update(ls=["--", ":", "-."][zlib.crc32(variant.encode()) % 3], marker="s")
    if column.endswith("(sim)"):
        style.update(ls=":", marker="x", ms=4)
    return style


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _length_axis(ax: Any, seqlens: list[int]) -> None:
    ax.set_xscale("log", base=2)
    lo, hi = min(seqlens), max(seqlens)
    ticks = [2 ** e for e in range(lo.bit_length() - 1, hi.bit_length() + 1) if lo <= 2 ** e <= hi] or seqlens
    ax.set_xticks(ticks, [format_size(s) for s in ticks], fontsize=7)
    ax.minorticks_off()
    if lo == hi:
        ax.set_xlim(lo / 1.5, hi * 1.5)


def _figure(panels: list[tuple[str, str]], ncols_masks: int) -> tuple[Any, dict[tuple[str, str], Any]]:
    """A grid of (mask, direction) panels: each mask's directions next to each other."""
    plt = _pyplot()
    masks = list(dict.fromkeys(m for m, _ in panels))
    dirs = [d for d in DIRECTIONS if any(p[1] == d for p in panels)]
    per_row = max(1, min(ncols_masks, len(masks)))
    nrows = -(-len(masks) // per_row)
    ncols = per_row * len(dirs)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(2.9 * ncols + 0.4, 7.5), 2.5 * nrows + 1.3), squeeze=False,
                             layout="constrained")
    placed = {}
    wanted = set(panels)
    for i, mask in enumerate(masks):
        for j, d in enumerate(dirs):
            ax = axes[i // per_row][(i % per_row) * len(dirs) + j]
            if (mask, d) in wanted:
                placed[(mask, d)] = ax
                ax.set_title(textwrap.fill(f"{mask} · {d}", 38), fontsize=8)
    for ax in axes.flat:
        if ax not in placed.values():
            ax.axis("off")
    return fig, placed


def _finish(fig: Any, title: str, path: Path, extra_handles: list | None = None) -> Path:
    handles: dict[str, Any] = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    # kernels first, then the peak line and the kernel-alone marks
    order = sorted(handles, key=lambda lab: (lab.startswith(("matmul peak", "datasheet peak"))
                                             or lab.endswith(" alone"), lab))
    handles = {lab: handles[lab] for lab in order}
    width_in = fig.get_size_inches()[0]
    ncol = max(1, min(len(handles), int(width_in // 2.2)))
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.suptitle(textwrap.fill(title, int(width_in * 11)), fontsize=10)
    fig.savefig(path, dpi=100)
    _pyplot().close(fig)
    return path


def _length_figure(results: Results, rows: list[Row], value: Callable[[Row], float | None], ylabel: str,
                   title: str, path: Path, peak: bool) -> Path | None:
    panels = list(dict.fromkeys((analysis.mask_label(r), r["direction"]) for r in rows))
    if not panels:
        return None
    fig, axes = _figure(panels, ncols_masks=3)
    seqlens = sorted({r["seqlen"] for r in rows})
    peaks = [r["matmul_peak_tflops"] for r in rows if r.get("matmul_peak_tflops")]
    peak_value = analysis.median(peaks) if peak else None
    of_runs = ", median of runs" if len(set(peaks)) > 1 else ""
    sheets = [r["datasheet_peak_tflops"] for r in rows if r.get("datasheet_peak_tflops")]
    sheet_value = max(sheets) if peak and sheets else None
    dtype = rows[0].get("dtype", "")
    for (mask, d), ax in axes.items():
        by_col: dict[str, list[tuple[int, float]]] = {}
        for r in rows:
            v = value(r) if r.get("status") == "ok" else None
            if v is not None and analysis.mask_label(r) == mask and r["direction"] == d:
                by_col.setdefault(r["column"], []).append((r["seqlen"], v))
        for col in sorted(by_col):
            pts = sorted(by_col[col])
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=col, **_style(col))
        if peak_value:
            ax.axhline(peak_value, color="0.35", ls="--", lw=1,
                       label=f"matmul peak, measured ({dtype}, {peak_value:.0f}{of_runs})")
        if sheet_value:
            ax.axhline(sheet_value, color="0.15", ls=":", lw=1.2,
                       label=f"datasheet peak ({dtype} dense, {sheet_value:g})")
        _length_axis(ax, seqlens)
        top = max(peak_value or 0, sheet_value or 0)
        ax.set_ylim(0, max(ax.get_ylim()[1], top * 1.06))  # from 0, the peak lines inside
        ax.set_xlabel("sequence length (tokens, log₂)", fontsize=7)
        ax.set_ylabel(ylabel, fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(alpha=0.3)
    return _finish(fig, title, path)


def _group_title(r: Row) -> str:
    return f"heads {analysis.heads_label(r)}, head_dim {r['head_dim']}, {r['dtype']}"


def _groups(rows: list[Row], cp: bool) -> dict[tuple, list[Row]]:
    out: dict[tuple, list[Row]] = {}
    for r in rows:
        if bool(r.get("strategy")) == cp:
            key = (analysis.heads_label(r), r["head_dim"], r["dtype"]) + ((r.get("world_size") or 1,) if cp else ())
            out.setdefault(key, []).append(r)
    return out


def plot_all(results: Results, directory: Path, memory: bool = False) -> list[Path]:
    """Every figure of a report: TFLOP/s (and peak memory with `memory`) per group, and CP figures."""
    paths = []
    for key, group in _groups(results.rows, cp=False).items():
        name = _safe(f"{key[0].replace(':', 'x')}_d{key[1]}_{key[2]}")
        kernels = len({r["column"] for r in group})
        title = (f"{_group_title(group[0])}: TFLOP/s, higher is better "
                 f"(median; {kernels} kernel{'s' if kernels > 1 else ''})")
        p = _length_figure(results, group, lambda r: r.get("tflops"), "TFLOP/s", title,
                           directory / f"tflops_{name}.png", peak=True)
        paths += [p] if p else []
        if memory and any(r.get("peak_mem_bytes") for r in group if r.get("status") == "ok"):
            p = _length_figure(results, group, lambda r: (r.get("peak_mem_bytes") or 0) / 2**30 or None,
                               "peak memory (GiB)",
                               f"{_group_title(group[0])}: peak GPU memory per call, lower is better",
                               directory / f"memory_{name}.png", peak=False)
            paths += [p] if p else []
    split = {r["case_id"].rsplit("-", 1)[0] for r in results.rows if r.get("derived_from") == "fwdbwd"}
    cp_rows = [r for r in results.rows if r.get("strategy") and r.get("case_id") not in split]  # phases, not twice
    if cp_rows:
        paths += cp_figures(results, cp_rows, directory)
    return paths


def cp_figures(results: Results, cp_rows: list[Row], directory: Path) -> list[Path]:
    """TFLOP/s per GPU against world size: a panel per (mask, per-GPU length) and direction, a line
    per strategy/kernel; world size 1 is the inner kernel alone at the per-GPU length where measured."""
    alone = {}
    for pair in analysis.scaling_efficiency(results.rows):
        b = pair["baseline"]
        alone[(b["kernel"], analysis.mask_label(b), b["seqlen"], b["direction"], analysis.heads_label(b),
               b["head_dim"], b["dtype"])] = b
    groups: dict[tuple, list[Row]] = {}
    for r in cp_rows:
        groups.setdefault((analysis.heads_label(r), r["head_dim"], r["dtype"]), []).append(r)
    paths = []
    for (heads, d, dtype), group in groups.items():
        def panel(r: Row) -> str:
            return f"{analysis.mask_label(r)}, {format_size(r['seqlen'] // (r.get('world_size') or 1))}/GPU"

        panels = list(dict.fromkeys((panel(r), r["direction"]) for r in group))
        fig, axes = _figure(panels, ncols_masks=3)
        worlds = sorted({r.get("world_size") or 1 for r in group} | {1})
        for (name, direction), ax in axes.items():
            lines: dict[str, list[tuple[int, float]]] = {}
            inner: dict[str, tuple[int, float]] = {}
            for r in group:
                if r.get("status") != "ok" or not r.get("tflops") or panel(r) != name or r["direction"] != direction:
                    continue
                world = r.get("world_size") or 1
                lines.setdefault(r["column"], []).append((world, r["tflops"]))
                b = alone.get((r["kernel"], analysis.mask_label(r), r["seqlen"] // world, direction, heads, d, dtype))
                if b:
                    inner[f"{r['kernel']} alone"] = (1, b["tflops"])
            for col in sorted(lines):
                pts = sorted(lines[col])
                style = _style(col)
                style["ms"] = style["ms"] + (3 if len(pts) == 1 else 0)  # a lone point must be seen
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=col, **style)
            for label, (w, tf) in inner.items():
                ax.plot([w], [tf], ls="none", marker="*", ms=8, color=colour(label.split()[0]), label=label)
            ax.set_xscale("log", base=2)
            ax.set_xticks(worlds, [str(w) for w in worlds], fontsize=7)
            ax.minorticks_off()
            ax.set_xlim(worlds[0] / 1.4, worlds[-1] * 1.4)
            ax.set_ylim(0, ax.get_ylim()[1] * 1.06)
            ax.set_xlabel("GPUs (world size, log₂)", fontsize=7)
            ax.set_ylabel("TFLOP/s per GPU", fontsize=7)
            ax.tick_params(axis="y", labelsize=7)
            ax.grid(alpha=0.3)
        path = directory / _safe(f"cp_tflops_{heads.replace(':', 'x')}_d{d}_{dtype}.png")
        paths.append(_finish(fig, f"Context parallelism, heads {heads}, head_dim {d}, {dtype}: "
                                  "TFLOP/s per GPU, higher is better", path))
    return paths
