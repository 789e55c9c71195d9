"""Measuring the collectives CP strategies use, and fitting the latency and bandwidth `topology` reads.

Every rank of a group (spawned here or started by torchrun) times all-to-all, all-gather,
reduce-scatter and a ring send/recv (each rank to the next, batched as the rings do) at several
sizes. Sizes follow NCCL's tests (`schedule.CommOp`): time = latency + size * (n-1)/n / bus
bandwidth (p2p: size / bandwidth); the two are fitted by least squares over the sizes. Ranks on
one host give the `intra` figures; a group spanning hosts (LOCAL_WORLD_SIZE < WORLD_SIZE) the `inter`
ones. `longca comm-bench` writes them as the calibration file `longca simulate --calibration` reads.
"""
from __future__ import annotations

import os
import platform
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from longca_cp.comm import _all_gather, _reduce_scatter
from longca_cp.schedule import COLLECTIVES


def _time(fn, device: str, repeat: int) -> float:
    """Median ms of `fn` over `repeat` runs after one warm-up, all ranks starting together."""
    fn()
    times = []
    for _ in range(repeat):
        dist.barrier()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    slowest = torch.tensor([float(np.median(times))])
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a collective ends when its last rank does
    return float(slowest.item())


def _ops(nbytes: int, device: str) -> dict[str, Any]:
    world, rank = dist.get_world_size(), dist.get_rank()
    n = max(world, nbytes // 4 // world * world)  # float32 elements, a multiple of the world size
    x = torch.ones(n, dtype=torch.float32, device=device)
    part = torch.ones(n // world, dtype=torch.float32, device=device)
    out = torch.empty_like(x)

    def p2p():
        ops = [dist.P2POp(dist.isend, part, (rank + 1) % world), dist.P2POp(dist.irecv, out[: n // world],
                                                                             (rank - 1) % world)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    return {"all_to_all": (lambda: dist.all_to_all_single(out, x), 4 * n),
            "all_gather": (lambda: _all_gather(out, part), 4 * n),
            "reduce_scatter": (lambda: _reduce_scatter(part, x), 4 * n),
            "p2p": (p2p, 4 * (n // world))}


def bench_in_group(device: str, sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    """Measurements (kind, bytes, ms) on every rank; the same list everywhere (times are the slowest rank's)."""
    if device.startswith("cuda"):
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    out = []
    for nbytes in sizes:
        for kind, (fn, size) in _ops(nbytes, device).items():
            out.append({"kind": kind, "bytes": size, "ms": _time(fn, device, repeat)})
    return out


def fit_links(measurements: list[dict[str, Any]], world: int) -> dict[str, dict[str, float]]:
    """Per collective: bus bandwidth (GB/s) and latency (us) fitted over the sizes."""
    links = {}
    for kind in COLLECTIVES:
        rows = [m for m in measurements if m["kind"] == kind]
        if len(rows) < 2:
            continue
        factor = 1.0 if kind == "p2p" else (world - 1) / world
        x = np.array([m["bytes"] * factor for m in rows])
        t = np.array([m["ms"] for m in rows])
        slope, intercept = np.polyfit(x, t, 1)
        if slope <= 0:  # no growth with size over these sizes: use the largest size's rate
            slope, intercept = t[-1] / x[-1], 0.0
        links[kind] = {"bandwidth_gbs": float(1.0 / slope / 1e6), "latency_us": float(max(0.0, intercept) * 1e3)}
    return links


def calibration(measurements: list[dict[str, Any]], world: int, local: int, backend: str, device: str) -> dict:
    """The calibration file: `intra` (one host) or `inter` (spanning hosts) figures and what they came from."""
    where = "intra" if local >= world else "inter"
    return {"machine": f"{platform.node()} ({backend}, {device}, {world} ranks, {local} per host)",
            "ranks_per_host": local, where: fit_links(measurements, world), "measurements": measurements}
