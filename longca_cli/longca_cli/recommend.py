"""`longca recommend`: which inner kernel, strategy and options for a mask, length and cluster."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from longca.errors import LongcaError

from . import render

COLUMNS = ["#", "kernel", "strategy", "options", "fwd+bwd ms", "fwd ms", "bwd ms", "TF/s/GPU", "GB/GPU", "±%",
           "wait data/ranks ms", "basis", "note"]


def _cells(line) -> dict:
    from .simulate import _options_text

    d = line.as_dict()
    cells = {"#": d["rank"] or "-", "kernel": d["kernel"], "strategy": d["strategy"],
             "options": _options_text(d["options"]), "basis": d["basis"],
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
    mask: str = typer.Option(..., help="mask name (see list-masks)"),
    seqlen: str = typer.Option(..., help="total tokens of one sequence, e.g. 512k"),
    gpus: int = typer.Option(..., help="GPUs the sequence is spread over (the CP world size)"),
    gpus_per_node: int = typer.Option(8, help="GPUs per node"),
    heads: str = typer.Option("64:8", help="query:kv heads"),
    head_dim: int = typer.Option(128),
    dtype: str = typer.Option("bfloat16"),
    batch: int = typer.Option(1),
    kernels: Optional[str] = typer.Option(None, help="inner kernels to consider (default: every one with a fit)"),
    strategy: str = typer.Option("all", help="strategies to consider, comma-separated, or all"),
    sampler: str = typer.Option("auto", help="document-length sampler (or corpus) for document masks"),
    sampler_param: Optional[List[str]] = typer.Option(None, "--sampler-param", help="sampler parameter"),
    samples: int = typer.Option(3, help="mask draws for document masks"),
    topology: str = typer.Option("h100-sxm", help="h100-sxm or h200-sxm"),
    calibration: Optional[Path] = typer.Option(None, help="calibration file written by longca comm-bench"),
    figure: Optional[List[str]] = typer.Option(None, "--set", help="topology figure, e.g. inter.p2p.bandwidth_gbs=40"),
    results: Optional[List[Path]] = typer.Option(None, "--results",
                                                 help="result folders: refit kernels, and mark cases measured there"),
    top: int = typer.Option(20, help="lines to print (json prints all)"),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json"),
) -> None:
    """Rank kernel x strategy x options by predicted fwd+bwd step time and memory per GPU."""
    if fmt not in ("table", "json"):
        raise LongcaError(f"unknown format {fmt!r}; known: table, json")
    if gpus < 1 or gpus > 1024:
        raise LongcaError(f"--gpus must be 1 to 1,024, got {gpus}")
    from longca_sim.costmodel import fit_rows, load_fits, read_rows
    from longca_sim.recommend import Setting
    from longca_sim.recommend import recommend as rank
    from longca.plugins import get_registry
    from longca.sizes import parse_heads, parse_size

    from .dist_run import _strategies
    from .main import parse_params
    from .simulate import pricing_from

    registry = get_registry()
    registry.mask(mask)
    hq, hkv = parse_heads(heads)
    fits, _ = load_fits()
    fits.update(fit_rows(read_rows(results)) if results else {})
    inner = [n for n in registry.names("kernels") if registry.kernel(n).forward_lse is not None]
    names = [k.strip() for k in kernels.split(",")] if kernels else inner
    for name in names:
        registry.kernel(name)  # unknown names are input errors
    pricings = {k: pricing_from(k, topology, gpus_per_node, calibration, figure, results, None) if k in fits else None
                for k in names}
    topo = next((p.topology for p in pricings.values() if p is not None), None)
    if topo is None:
        raise LongcaError(f"none of the kernels {', '.join(names)} has measured rows to price it; pass --results")
    setting = Setting(mask, parse_size(seqlen), gpus, hq, hkv, head_dim, dtype, batch, sampler,
                      parse_params(sampler_param, "--sampler-param"), 0, samples)
    rows = read_rows(results) if results else []
    lines = rank(setting, pricings, topo, rows, _strategies(strategy), registry)
    if fmt == "json":
        typer.echo(json.dumps([ln.as_dict() for ln in lines], indent=2, default=str))
        return
    regime = next((ln.regime for ln in lines if ln.regime), "")
    typer.echo(f"{mask}, {seqlen} tokens on {gpus} GPUs ({gpus_per_node} per node, {topo.name}), heads {heads}, "
               f"d{head_dim}, {dtype}: predicted by longca simulate (docs/cp-simulator.md); ±% is the out-of-sample "
               f"error of the regime ({regime}; n/v: never validated); basis 'model' = no "
               f"measured row of that case")
    ok = [ln for ln in lines if ln.status == "ok"][:top]
    typer.echo(render.table([_cells(ln) for ln in ok], COLUMNS))
    refused = [ln for ln in lines if ln.status != "ok"]
    if refused:
        typer.echo(f"\nnot possible ({len(refused)}):")
        typer.echo(render.table([_cells(ln) for ln in refused], ["kernel", "strategy", "options", "GB/GPU", "note"]))
