"""`longca dist-run`: one context-parallel measurement, on processes it spawns or under torchrun.

With `--nproc N` (or alone, N = 1) it starts N processes on this host itself; started by
`torchrun` (RANK and WORLD_SIZE set) it joins that group instead, so the same command runs from
one host to many. Rank 0 prints the row.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, List, Optional

import typer

from longca.errors import LongcaError

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


def _strategies(text: str) -> list[str]:
    from longca.plugins import get_registry

    names = get_registry().names("strategies") if text == "all" else [t.strip() for t in text.split(",") if t.strip()]
    for name in names:
        get_registry().strategy(name)  # unknown names are input errors
    return names


def _options_for(strategy: str, given: dict[str, Any], strategies: list[str]) -> dict[str, Any]:
    """With one strategy every option is its own; with several, each takes the options it declares."""
    if len(strategies) == 1:
        return given
    from longca.plugins import get_registry

    registry = get_registry()
    unknown = [n for n in given if not any(n in registry.strategy(s).options for s in strategies)]
    if unknown:
        raise LongcaError(f"no strategy among {', '.join(strategies)} takes option {', '.join(unknown)}")
    return {n: v for n, v in given.items() if n in registry.strategy(strategy).options}


def dist_run(
    strategy: str = typer.Option(..., help="CP strategy (see list-cp); several comma-separated, or all"),
    inner: str = typer.Option("reference", help="inner kernel: any kernel with forward_lse/backward_lse"),
    nproc: Optional[int] = typer.Option(None, help="processes to start on this host (default: torchrun's, else 1)"),
    backend: Optional[str] = typer.Option(None, help="nccl or gloo (default: nccl on cuda, gloo on cpu)"),
    mask: str = typer.Option("causal", help="mask name (see list-masks)"),
    seqlen: str = typer.Option("8k", help="total tokens of the global sequence (all ranks together)"),
    heads: str = typer.Option("32:32", help="query:kv heads, e.g. 64:8"),
    head_dim: int = typer.Option(128),
    batch: int = typer.Option(1),
    dtype: str = typer.Option("bfloat16", help="bfloat16, float16 or float32"),
    direction: str = typer.Option("fwd", help="fwd, bwd or fwdbwd"),
    device: Optional[str] = typer.Option(None, help="cpu or cuda (default: cuda when present)"),
    sampler: str = typer.Option("auto", help="document-length sampler (see list-samplers)"),
    seed: int = typer.Option(0),
    mask_param: Optional[List[str]] = typer.Option(None, "--mask-param", help="override a mask parameter"),
    sampler_param: Optional[List[str]] = typer.Option(None, "--sampler-param", help="sampler parameter"),
    option: Optional[List[str]] = typer.Option(None, "--option", help="strategy option, e.g. ulysses_degree=2"),
    warmup: int = typer.Option(5), repeat: int = typer.Option(20),
    samples: int = typer.Option(5, help="mask draws for document masks (median reported)"),
    check: bool = typer.Option(False, "--check", help="compare output (and gradients) with the float32 reference"),
    timeout: Optional[float] = typer.Option(None, help="seconds each case may take; its group is then torn down "
                                                       "(default: scaled with the case's FLOPs)"),
    output: Optional[Path] = typer.Option(None, help="also append the row to OUTPUT/results.jsonl"),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json"),
) -> None:
    """Measure context-parallel strategies on one case: one row each, TFLOP/s per GPU from the mean rank time."""
    if fmt not in ("table", "json"):
        raise LongcaError(f"unknown format {fmt!r}; known: table, json")
    from longca.measure import RunOptions, check_device
    from longca_cp.cases import measure_cases
    from longca_cp.launch import DEFAULT_TIMEOUT_S, default_backend, under_torchrun
    from longca_cp.measure import resolve
    from longca.problem import Problem
    from longca.outdir import OutputFolder
    from longca.results import ResultsWriter
    from longca.sizes import parse_heads, parse_size

    from .main import default_device, parse_params

    torchrun = under_torchrun()
    world = int(os.environ["WORLD_SIZE"]) if torchrun else (1 if nproc is None else nproc)
    if torchrun and nproc not in (None, world):
        raise LongcaError(f"--nproc {nproc} under torchrun, whose WORLD_SIZE is {world}; leave --nproc out")
    if world < 1:
        raise LongcaError(f"--nproc must be positive, got {world}")
    device = device or default_device()
    backend = backend or default_backend(device)
    if backend not in ("nccl", "gloo"):
        raise LongcaError(f"unknown backend {backend!r}; known: nccl, gloo")
    if backend == "nccl" and not device.startswith("cuda"):
        raise LongcaError("--backend nccl needs --device cuda; use --backend gloo on the CPU")
    if backend == "gloo" and device.startswith("cuda"):
        raise LongcaError("--backend gloo runs CPU tensors here; use --backend nccl with --device cuda")
    check_device(device)
    if device.startswith("cuda") and not torchrun:
        import torch

        if world > torch.cuda.device_count():
            raise LongcaError(f"--nproc {world} needs {world} GPUs, this host has {torch.cuda.device_count()}")
    hq, hkv = parse_heads(heads)
    names = _strategies(strategy)
    given = parse_params(option, "--option")
    problems = []
    for name in names:
        problem = Problem(kernel=inner, mask=mask, seqlen=parse_size(seqlen), heads_q=hq, heads_kv=hkv,
                          head_dim=head_dim, batch=batch, dtype=dtype, direction=direction, device=device,
                          sampler=sampler, seed=seed, mask_params=parse_params(mask_param, "--mask-param"),
                          sampler_params=parse_params(sampler_param, "--sampler-param"), strategy=name,
                          world_size=world)
        options = _options_for(name, given, names)
        resolve(problem, options)  # unknown options are input errors; defaults are filled where the case runs
        problems.append(problem.with_(strategy_options=options))
    run = RunOptions(warmup=warmup, repeat=repeat, samples=samples, check=check)
    rank0 = int(os.environ.get("RANK", "0")) == 0
    with OutputFolder(output) if output and rank0 else contextlib.nullcontext() as folder:  # checked first
        writer = ResultsWriter(folder.results) if folder else None
        ordered = measure_cases(problems, run, backend, timeout or DEFAULT_TIMEOUT_S, timeout,
                                on_row=lambda _, row: writer.append(row) if writer else None)
    if not rank0:
        return
    _show(ordered, fmt)
    if any(row["status"] not in ("ok", "unsupported") for row in ordered):
        raise typer.Exit(1)
