"""`longca comm-bench`: measure the collectives CP uses here and write the simulator's calibration file."""
from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from longca.errors import LongcaError

from . import render


def comm_bench(
    nproc: int | None = typer.Option(None, help="processes to start on this host (default: torchrun's, else 2)"),
    backend: str | None = typer.Option(None, help="nccl or gloo (default: nccl on cuda, gloo on cpu)"),
    device: str | None = typer.Option(None, help="cpu or cuda (default: cuda when present)"),
    sizes: str = typer.Option("1M,4M,16M,64M", help="message sizes (bytes), comma-separated"),
    repeat: int = typer.Option(10, help="timed runs per size"),
    output: Path = typer.Option(Path("comm-calibration.json"), help="calibration file to write"),
    timeout: int = typer.Option(600, help="seconds a collective may wait"),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json"),
) -> None:
    """Time all-to-all, all-gather, reduce-scatter and ring send/recv; fit bandwidth and latency per kind."""
    if fmt not in ("table", "json"):
        raise LongcaError(f"unknown format {fmt!r}; known: table, json")
    from longca.given import default_device
    from longca.sizes import parse_size
    from longca_runner.cp.launch import default_backend, init_group, spawn
    from longca_runner.launcher import under_torchrun
    from longca_sim.commbench import bench_in_group, calibration

    device = device or default_device()
    backend = backend or default_backend(device)
    if backend not in ("nccl", "gloo"):
        raise LongcaError(f"unknown backend {backend!r}; known: nccl, gloo")
    byte_sizes = [parse_size(s.strip()) for s in sizes.split(",") if s.strip()]
    if len(byte_sizes) < 2:
        raise LongcaError("--sizes needs at least two sizes to fit latency and bandwidth")
    if repeat < 1:
        raise LongcaError("--repeat must be positive")
    if under_torchrun():
        import torch.distributed as dist

        world, local = int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
        here = init_group(backend, device, timeout_s=timeout)
        try:
            measured = bench_in_group(here, byte_sizes, repeat)
        finally:
            dist.destroy_process_group()
        if int(os.environ["RANK"]) != 0:
            return
    else:
        world = local = nproc or 2
        if world < 2:
            raise LongcaError("--nproc must be at least 2 (a collective needs two ranks)")
        measured = spawn(bench_in_group, world, backend, device, (byte_sizes, repeat), timeout)[0]
    doc = calibration(measured, world, local, backend, device)
    output.write_text(json.dumps(doc, indent=1) + "\n")
    if fmt == "json":
        typer.echo(json.dumps(doc, indent=1))
        return
    where = "intra" if "intra" in doc else "inter"
    rows = [{"where": where, "collective": k, "GB/s": f"{v['bandwidth_gbs']:.3g}",
             "latency us": f"{v['latency_us']:.3g}"} for k, v in doc[where].items()]
    typer.echo(render.table(rows, ["where", "collective", "GB/s", "latency us"]))
    typer.echo(f"wrote {output} (longca simulate --calibration {output})")
