"""`longca recommend`: which inner kernel, strategy and options for a mask, length and cluster."""
from __future__ import annotations

import json
from pathlib import Path

import typer

from longca.errors import LongcaError

from . import options as opt
from . import render

COLUMNS = ["#", "kernel", "strategy", "options", "fwd+bwd ms", "fwd ms", "bwd ms", "TF/s/GPU", "GB/GPU", "±%",
           "wait data/ranks ms", "basis", "note"]


def _cells(line) -> dict:
    d = line.as_dict()
    cells = {"#": d["rank"] or "-", "kernel": d["kernel"], "strategy": d["strategy"],
             "options": render.options_text(d["options"]), "basis": d["basis"],
             "±%": "n/v" if d["model_error_pct"] is None else f"{d['model_error_pct']:.0f}"}
    if line.wait:
        cells["wait data/ranks ms"] = (f"{line.wait['fwd_data'] + line.wait['bwd_data']:.3g}/"
                                       f"{line.wait['fwd_ranks'] + line.wait['bwd_ranks']:.3g}")
    if line.status in ("ok", "oom"):
        cells.update({"fwd+bwd ms": f"{line.step_ms:.4g}", "fwd ms": f"{line.fwd_ms:.4g}",
                      "bwd ms": f"{line.bwd_ms:.4g}", "TF/s/GPU": f"{line.tflops:.0f}",
                      "GB/GPU": f"{line.peak_mem_gb:.1f}"})
    if line.measured:
        cells["basis"] = f"measured {line.measured['fwd_ms'] + line.measured['bwd_ms']:.4g} ms"
    notes = (["near-tie with #1"] if line.tie else []) + list(line.flags)
    cells["note"] = "; ".join(notes) if line.status == "ok" else f"{line.status}: {line.reason}"
    return cells


def recommend(
    mask: str = opt.Mask(...),
    seqlen: str = opt.Seqlen(..., "total tokens of one sequence, e.g. 512k"),
    gpus: int = typer.Option(..., help="GPUs the sequence is spread over (the CP world size)"),
    gpus_per_node: int = typer.Option(8, help="GPUs per node"),
    heads: str = opt.Heads("64:8"),
    head_dim: int = opt.HeadDim,
    dtype: str = opt.Dtype,
    batch: int = opt.Batch,
    kernels: str | None = typer.Option(None, help="inner kernels to consider (default: every one with a fit)"),
    strategy: str = typer.Option("all", help="strategies to consider, comma-separated, or all"),
    sampler: str = opt.Sampler,
    sampler_param: list[str] | None = opt.SamplerParam,
    samples: int = typer.Option(3, help="mask draws for document masks"),
    aggregate: str = typer.Option("median", help="over the draws: median of each figure, or mean of each draw's "
                                               "figure (how MagiAttention's CP benchmark reports a cell)"),
    topology: str = typer.Option("h100-sxm", help="h100-sxm or h200-sxm"),
    calibration: Path | None = typer.Option(None, help="calibration file written by longca comm-bench"),
    figure: list[str] | None = typer.Option(None, "--set", help="topology figure, e.g. inter.p2p.bandwidth_gbs=40"),
    results: list[Path] | None = typer.Option(None, "--results",
                                                 help="result folders: refit kernels, and mark cases measured there"),
    top: int = typer.Option(20, help="lines to print (json prints all)"),
    fmt: str = opt.Format,
) -> None:
    """Rank kernel x strategy x options by predicted fwd+bwd step time and memory per GPU."""
    if fmt not in ("table", "json"):
        raise LongcaError(f"unknown format {fmt!r}; known: table, json")
    from longca_sim.request import Asked, recommendations

    lines, topo = recommendations(Asked(mask, seqlen, gpus, gpus_per_node, heads, head_dim, dtype, batch, kernels,
                                        strategy, sampler, sampler_param, samples, topology, calibration, figure,
                                        results, aggregate))
    if fmt == "json":
        typer.echo(json.dumps([ln.as_dict() for ln in lines], indent=2, default=str))
        return
    regime = next((ln.regime for ln in lines if ln.regime), "")
    typer.echo(f"{mask}, {seqlen} tokens on {gpus} GPUs ({gpus_per_node} per node, {topo.name}), heads {heads}, "
               f"d{head_dim}, {dtype}: predicted by longca simulate (docs/cp-simulator.md); ±% bounds the "
               f"out-of-sample errors of the regime ({regime}; n/v: not validated); basis 'model' = no "
               f"measured row of that case")
    ok = [ln for ln in lines if ln.status == "ok"][:top]
    for warning in (ok[0].warnings if ok else []):
        typer.echo(f"warning: {warning}")
    typer.echo(render.table([_cells(ln) for ln in ok], COLUMNS))
    refused = [ln for ln in lines if ln.status != "ok"]
    if refused:
        typer.echo(f"\nnot possible ({len(refused)}):")
        typer.echo(render.table([_cells(ln) for ln in refused], ["kernel", "strategy", "options", "GB/GPU", "note"]))
