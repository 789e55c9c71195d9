"""`longca simulate`: CP strategies at any world size, priced from measured rows and a topology model."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from longca.errors import LongcaError
from longca.results import ResultRow

from . import render

COLUMNS = ["strategy", "W", "options", "fwd TF/s", "bwd TF/s", "fwd ms", "bwd ms", "critical", "imbalance %",
           "calls/rank", "MB/rank fwd", "MB/rank bwd", "wait data % fwd", "wait ranks % fwd", "wait data % bwd",
           "wait ranks % bwd", "peak GB", "measured %", "flags", "reason"]


def display(row: ResultRow) -> dict[str, Any]:
    """A simulated row as the table's cells."""
    cells: dict[str, Any] = {"strategy": row["strategy"], "W": row["world_size"],
                             "options": render.options_text(row.get("strategy_options")), "reason": row.get("reason")}
    if row["status"] != "ok":
        cells["fwd TF/s"] = row["status"]
        return cells
    sim, bal = row["sim"], row["balance"]
    for phase in ("fwd", "bwd"):
        f = sim[phase]
        cells[f"{phase} TF/s"] = f"{f['tflops']:.0f}"
        cells[f"{phase} ms"] = f"{f['ms_max']:.3g}"
        for kind in ("data", "ranks"):  # the critical rank waiting for transfers / for slower ranks
            share = 100 * f.get(f"wait_{kind}_ms", 0.0) / f["ms_max"] if f["ms_max"] else 0.0
            cells[f"wait {kind} % {phase}"] = f"{share:.0f}"
        cells[f"MB/rank {phase}"] = f"{bal[f'comm_bytes_{phase}_max'] / 1e6:.0f}"
    cells.update({"critical": sim["fwd"]["critical_rank"], "imbalance %": f"{bal['imbalance_pct']:.1f}",
                  "calls/rank": bal["calls_max"], "peak GB": f"{row['peak_mem_bytes'] / 1e9:.1f}",
                  "measured %": f"{100 * sim['measured_share']:.0f}", "flags": "; ".join(sim.get("flags", []))})
    return cells


def simulate(
    strategy: str = typer.Option("all", help="CP strategies, comma-separated, or all"),
    world_sizes: str = typer.Option("8,16,32,64", help="world sizes (GPUs), 1 to 1,024, comma-separated"),
    mask: str = typer.Option("causal", help="mask name (see list-masks)"),
    seqlen_per_rank: str | None = typer.Option(None, help="tokens per GPU (the paper's weak scaling), e.g. 8k"),
    seqlen: str | None = typer.Option(None, help="total tokens instead (the same for every world size)"),
    heads: str = typer.Option("64:8", help="query:kv heads"),
    head_dim: int = typer.Option(128),
    batch: int = typer.Option(1),
    dtype: str = typer.Option("bfloat16"),
    inner: str = typer.Option("fa3", help="inner kernel, priced from its measured rows"),
    sampler: str = typer.Option("auto", help="document-length sampler"),
    seed: int = typer.Option(0),
    samples: int = typer.Option(3, help="mask draws for document masks"),
    aggregate: str = typer.Option("median", help="over the draws: median of each figure, or mean of each draw's "
                                               "figure (how MagiAttention's CP benchmark reports a cell)"),
    option: list[str] | None = typer.Option(None, "--option", help="strategy option, e.g. ulysses_degree=8"),
    topology: str = typer.Option("h200-sxm", help="h100-sxm or h200-sxm"),
    gpus_per_node: int | None = typer.Option(None, help="GPUs per node (default: the preset's 8)"),
    calibration: Path | None = typer.Option(None, help="calibration file written by longca comm-bench"),
    figure: list[str] | None = typer.Option(None, "--set", help="topology figure, e.g. inter.p2p.bandwidth_gbs=40"),
    results: list[Path] | None = typer.Option(None, "--results", help="refit the kernel from these result rows"),
    fit: Path | None = typer.Option(None, help="kernel fit file (default: the one shipped, from the H200 rows)"),
    output: Path | None = typer.Option(None, help="also append the simulated rows to OUTPUT/results.jsonl"),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json"),
) -> None:
    """Simulate CP strategies: per-GPU TFLOP/s, step times, balance, communication and memory per GPU."""
    if fmt not in ("table", "json"):
        raise LongcaError(f"unknown format {fmt!r}; known: table, json")
    if (seqlen is None) == (seqlen_per_rank is None):
        raise LongcaError("give exactly one of --seqlen-per-rank and --seqlen")
    from longca.given import parse_params
    from longca.plugins import get_registry
    from longca.results import ResultsWriter
    from longca.sizes import parse_heads, parse_size
    from longca_runner.cp.request import strategy_names
    from longca_runner.outdir import check_writable_folder
    from longca_sim.request import int_list, pricing_from
    from longca_sim.simulate import Grid, aggregate_of, simulate_grid

    if output:
        check_writable_folder(output)  # before anything is priced
    hq, hkv = parse_heads(heads)
    pricing = pricing_from(inner, topology, gpus_per_node, calibration, figure, results, fit)
    get_registry().kernel(inner)
    get_registry().mask(mask)
    names = strategy_names(strategy)
    grid = Grid(names, int_list(world_sizes, "--world-sizes"), mask, inner, hq, hkv, head_dim,
                parse_size(seqlen) if seqlen else None, parse_size(seqlen_per_rank) if seqlen_per_rank else None,
                dtype, "fwdbwd", sampler, seed, batch, samples, parse_params(option, "--option"),
                aggregate=aggregate)
    aggregate_of(aggregate)
    rows = simulate_grid(grid, pricing)
    if output:
        writer = ResultsWriter(output / "results.jsonl")
        for row in rows:
            writer.append(row)
    if fmt == "json":
        render.listing([r.model_dump() for r in rows], "json", [])
        return
    topo = pricing.topology
    declared = " at a declared speed (docs/cp-simulator.md)" if "@" in pricing.fwd.kernel else ""
    typer.echo(f"simulated: inner {inner} priced from measured rows{declared} (fit median error fwd "
               f"{pricing.fwd.median_err_pct:.1f} %, bwd {pricing.bwd.median_err_pct:.1f} %); comm {topo.name}, "
               f"{topo.gpus_per_node} GPUs per node{' + calibration' if pricing.calibrated else ''}")
    typer.echo(render.table([display(r) for r in rows], COLUMNS))
