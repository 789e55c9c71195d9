"""`longca dist-run`: one context-parallel measurement, on processes it spawns or under torchrun.

With `--nproc N` (or alone, N = 1) it starts N processes on this host itself; started by
`torchrun` (RANK and WORLD_SIZE set) it joins that group instead, so the same command runs from
one host to many. Rank 0 prints the row.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import typer

from longca.errors import LongcaError

from . import options as opt
from . import render

COLUMNS = ["strategy", "kernel", "world_size", "mask", "seqlen", "direction", "status", "ms_median", "ms_max_rank",
           "tflops", "rel_err", "reason"]


def _show(rows: list[Any], fmt: str) -> None:
    if fmt == "json":
        for row in rows:
            render.result_row(row, fmt)
        return
    shown = []
    for row in rows:
        cells = row.as_dict()
        for key in ("ms_median", "ms_max_rank", "tflops"):
            if cells.get(key) is not None:
                cells[key] = f"{cells[key]:.4g}"
        if cells.get("rel_err") is not None:
            cells["rel_err"] = f"{cells['rel_err']:.2e}"
        shown.append(cells)
    typer.echo(render.table(shown, COLUMNS))


def dist_run(
    strategy: str = typer.Option(..., help="CP strategy (see list-cp); several comma-separated, or all"),
    inner: str = typer.Option("reference", help="inner kernel: any kernel with forward_lse/backward_lse"),
    nproc: int | None = typer.Option(None, help="processes to start on this host (default: torchrun's, else 1)"),
    backend: str | None = typer.Option(None, help="nccl or gloo (default: nccl on cuda, gloo on cpu)"),
    mask: str = opt.Mask(),
    seqlen: str = opt.Seqlen("8k", "total tokens of the global sequence (all ranks together)"),
    heads: str = opt.Heads(),
    head_dim: int = opt.HeadDim,
    head_dim_v: int | None = opt.HeadDimV,
    deterministic: bool = opt.Deterministic,
    batch: int = opt.Batch,
    dtype: str = opt.Dtype,
    direction: str = opt.Direction,
    device: str | None = opt.Device,
    sampler: str = opt.Sampler,
    seed: int = opt.Seed,
    mask_param: list[str] | None = opt.MaskParam,
    sampler_param: list[str] | None = opt.SamplerParam,
    option: list[str] | None = typer.Option(None, "--option", help="strategy option, e.g. ulysses_degree=2"),
    warmup: int = opt.Warmup,
    repeat: int | None = opt.Repeat,
    samples: int = opt.Samples,
    check: bool = typer.Option(False, "--check", help="compare output (and gradients) with the float32 reference"),
    timeout: float | None = typer.Option(None, help="seconds each case may take; its group is then torn down "
                                                       "(default: scaled with the case's FLOPs)"),
    output: Path | None = typer.Option(None, help="also append the row to OUTPUT/results.jsonl"),
    fmt: str = opt.Format,
) -> None:
    """Measure context-parallel strategies on one case: one row each, TFLOP/s per GPU from the mean rank time."""
    if fmt not in ("table", "json"):
        raise LongcaError(f"unknown format {fmt!r}; known: table, json")
    from longca.given import parse_params, problem_from
    from longca.results import ResultsWriter
    from longca_runner.cp.cases import measure_cases
    from longca_runner.cp.launch import DEFAULT_TIMEOUT_S
    from longca_runner.cp.request import dist_run as resolve_run
    from longca_runner.integrity import Stamper
    from longca_runner.measure import RunOptions
    from longca_runner.outdir import OutputFolder
    from longca_runner.supervisor import check_timeout

    problem = problem_from(inner, mask, seqlen, heads, head_dim, batch, dtype, direction, device, sampler, seed,
                           mask_param, sampler_param, head_dim_v=head_dim_v, deterministic=deterministic)
    check_timeout(timeout)
    asked = resolve_run(problem, strategy, parse_params(option, "--option"), nproc, backend, timeout_s=timeout)
    run = RunOptions(warmup=warmup, repeat=repeat, samples=samples, check=check)
    rank0 = int(os.environ.get("RANK", "0")) == 0
    with OutputFolder(output) if output and rank0 else contextlib.nullcontext() as folder:  # checked first
        writer = ResultsWriter(folder.results) if folder else None
        stamp = Stamper(problem.device) if rank0 else None  # as a sweep's rows: peaks, datasheet, the gate

        def on_row(_, row) -> None:
            if stamp:
                stamp(row)
            if writer:
                writer.keep(row)

        ordered = measure_cases(asked.problems, run, asked.backend, timeout or DEFAULT_TIMEOUT_S, timeout,
                                on_row=on_row)
    if not rank0:
        return
    _show(ordered, fmt)
    if writer and writer.unwritten:
        typer.echo(f"error: {writer.unwritten}", err=True)
        raise typer.Exit(2)
    if any(row["status"] not in ("ok", "unsupported") for row in ordered):
        raise typer.Exit(1)
