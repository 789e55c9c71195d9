"""What `longca dist-run` asks for, resolved: strategy names, each strategy's options, the world
size (given, or torchrun's) and the backend, checked against the device, before any process starts."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from longca.capability import check_options
from longca.errors import LongcaError
from longca.plugins import Registry, get_registry
from longca.problem import Problem
from longca_runner.cp.launch import default_backend
from longca_runner.launcher import under_torchrun


def strategy_names(text: str, registry: Registry | None = None) -> list[str]:
    """`ring-p2p,usp` or `all`; unknown names are input errors."""
    registry = registry or get_registry()
    names = registry.names("strategies") if text == "all" else [t.strip() for t in text.split(",") if t.strip()]
    for name in names:
        registry.strategy(name)
    return names


def options_for(strategy: str, given: dict[str, Any], strategies: list[str],
                registry: Registry | None = None) -> dict[str, Any]:
    """With one strategy every option is its own; with several, each takes the options it declares."""
    if len(strategies) == 1:
        return given
    registry = registry or get_registry()
    unknown = [n for n in given if not any(n in registry.strategy(s).options for s in strategies)]
    if unknown:
        raise LongcaError(f"no strategy among {', '.join(strategies)} takes option {', '.join(unknown)}")
    return {n: v for n, v in given.items() if n in registry.strategy(strategy).options}


def world_size(nproc: int | None) -> int:
    """`--nproc`, or under torchrun its WORLD_SIZE (a different --nproc is an error); 1 by default."""
    if under_torchrun():
        world = int(os.environ["WORLD_SIZE"])
        if nproc not in (None, world):
            raise LongcaError(f"--nproc {nproc} under torchrun, whose WORLD_SIZE is {world}; leave --nproc out")
        return world
    world = 1 if nproc is None else nproc
    if world < 1:
        raise LongcaError(f"--nproc must be positive, got {world}")
    return world


def backend_for(backend: str | None, device: str, world: int) -> str:
    """nccl for CUDA, gloo for the CPU (or the one given, checked against the device and the GPUs here)."""
    from longca_runner.measure import check_device

    backend = backend or default_backend(device)
    if backend not in ("nccl", "gloo"):
        raise LongcaError(f"unknown backend {backend!r}; known: nccl, gloo")
    if backend == "nccl" and not device.startswith("cuda"):
        raise LongcaError("--backend nccl needs --device cuda; use --backend gloo on the CPU")
    if backend == "gloo" and device.startswith("cuda"):
        raise LongcaError("--backend gloo runs CPU tensors here; use --backend nccl with --device cuda")
    check_device(device)
    if device.startswith("cuda") and not under_torchrun():
        import torch

        if world > torch.cuda.device_count():
            raise LongcaError(f"--nproc {world} needs {world} GPUs, this host has {torch.cuda.device_count()}")
    return backend


@dataclass
class DistRun:
    """One CP case under several strategies: a problem each (with the options given), the backend."""

    problems: list[Problem]
    backend: str


def dist_run(problem: Problem, strategies: str, given: dict[str, Any], nproc: int | None = None,
             backend: str | None = None, registry: Registry | None = None, timeout_s: float | None = None) -> DistRun:
    """`problem` (its kernel the inner one) under each of `strategies`, at the world size asked for.

    Unknown options are input errors here (a resolve_options() call bounded by `timeout_s`, else the
    hook limit); defaults are filled where the case runs."""
    registry = registry or get_registry()
    world = world_size(nproc)
    chosen = backend_for(backend, problem.device, world)
    names = strategy_names(strategies, registry)
    problems = []
    for name in names:
        cp = problem.with_(strategy=name, world_size=world)
        options = options_for(name, given, names, registry)
        check_options(cp, options, registry, timeout_s)
        problems.append(cp.with_(strategy_options=options))
    return DistRun(problems, chosen)
