"""Starting process groups: under an existing `torchrun`, or by spawning processes on this host."""
from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 600
# imported once by the fork server, not by every child (autograd's first call alone imports sympy)
PRELOAD = ("torch", "torch.distributed", "torch.fx.experimental.symbolic_shapes", "longca_runner.cp.check",
           "longca_runner.cp.measure", "longca_cp.hybrid")


def default_backend(device: str) -> str:
    return "nccl" if device.startswith("cuda") else "gloo"


def init_group(backend: str, device: str, rank: int | None = None, world_size: int | None = None,
               init_method: str = "env://", timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """Initialise the default process group; returns this rank's device (cuda:LOCAL_RANK on GPUs)."""
    local_rank = int(os.environ.get("LOCAL_RANK", rank or 0))
    if device.startswith("cuda"):
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off unless the user asks for it
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    if not dist.is_initialized():
        extra: dict[str, Any] = {"device_id": torch.device(device)} if device.startswith("cuda") else {}
        if rank is not None:  # else from the environment (torchrun)
            extra.update(rank=rank, world_size=world_size)
        dist.init_process_group(backend, init_method=init_method, timeout=timedelta(seconds=timeout_s), **extra)
        from longca_cp.comm import set_timeout

        set_timeout(timedelta(seconds=timeout_s))  # subgroups time out as the world group does
    return device


def _child(rank: int, nproc: int, store: str, backend: str, device: str, fn: Callable, args: tuple,
           out_dir: str, threads: int, timeout_s: float) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(nproc))
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if not device.startswith("cuda"):
        torch.set_num_threads(threads)
    local_device = init_group(backend, device, rank, nproc, f"file://{store}", timeout_s)
    try:
        result = fn(local_device, *args)
    finally:
        dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result, default=str))


def spawn(fn: Callable[..., Any], nproc: int, backend: str, device: str, args: tuple = (),
          timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Any]:
    """Run `fn(device, *args)` in `nproc` new processes forming one group; their JSON-able results in rank order.

    Children start from a fork server where available (fast: torch is imported once), else by
    spawning. `fn` must be importable (a module-level function). A failing rank raises
    `torch.multiprocessing.ProcessRaisedException` here, with the rank's traceback.
    """
    import multiprocessing

    import torch.multiprocessing as mp

    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    if method == "forkserver":  # children fork from a server that imported these once
        multiprocessing.get_context(method).set_forkserver_preload(list(PRELOAD))
    threads = max(1, (os.cpu_count() or 1) // nproc)
    with tempfile.TemporaryDirectory(prefix="longca-cp-") as tmp:
        mp.start_processes(_child, args=(nproc, os.path.join(tmp, "store"), backend, device, fn, args, tmp,
                                         threads, timeout_s),
                           nprocs=nproc, join=True, start_method=method)
        return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(nproc)]
