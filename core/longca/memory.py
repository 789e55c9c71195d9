"""Sizes checked before allocating: what a case needs, what the device (or the host) has.

A kernel states its memory model in `KernelSpec.memory(problem) -> bytes`; without one, the
O(S) model of the flash family (`linear`) is assumed. The naive kernels use `quadratic`, which
adds the S x S score matrices. A case that cannot fit becomes an `oom` row saying
"needs N GiB, <device> has M GiB" without allocating anything.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .problem import Problem

GiB = 2 ** 30
ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def tensor_bytes(problem: Problem) -> int:
    """q, k, v and the output; with a backward also dq, dk, dv and the output gradient."""
    e = ELEMENT_BYTES[problem.input_dtype]  # FP8 problems hold their bfloat16 inputs (and the FP8 copies: less)
    tokens = problem.batch * problem.seqlen
    q, out = (tokens * problem.heads_q * d * e for d in (problem.head_dim, problem.dv))
    kv = tokens * problem.heads_kv * (problem.head_dim + problem.dv) * e
    lse = problem.batch * problem.heads_q * problem.seqlen * 4
    total = q + out + kv + lse
    return total * 2 if problem.direction != "fwd" else total


def linear(problem: Problem) -> int:
    """The flash family: inputs, outputs, gradients and lse; O(S)."""
    return tensor_bytes(problem)


def quadratic(problem: Problem, copies: int = 2) -> int:
    """Naive kernels: `linear` plus `copies` float32 S x S matrices per (batch, head) (scores, probabilities)."""
    scores = problem.batch * problem.heads_q * problem.seqlen ** 2 * 4
    return linear(problem) + copies * scores * (2 if problem.direction != "fwd" else 1)


def check_bytes(problem: Problem) -> int:
    """The float32 reference of --check: float32 copies of inputs and outputs (it works in row chunks)."""
    f32 = problem.with_(dtype="float32")
    return tensor_bytes(f32) + 256 * 2 ** 20


def host_available() -> int | None:
    """Bytes the host can still give (MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def capacity(device: str) -> tuple[int | None, str]:
    """(free bytes, a name for it): the GPU's free memory, or the host's available memory."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return free, f"{torch.cuda.get_device_name(torch.device(device))} has"
    return host_available(), "the host has"


def too_big(problem: Problem, needs: int) -> str | None:
    """The `oom` reason when `needs` bytes cannot fit where the problem runs, else None."""
    free, where = capacity(problem.device)
    if free is not None and needs > free and problem.device.startswith("cuda"):
        # what an earlier case freed may still sit in torch's caching allocator (on an H200, a 32K cuDNN
        # deterministic backward left 127 GiB reserved and every later case read 1.1 GiB free): give it back
        import torch

        torch.cuda.empty_cache()
        free, where = capacity(problem.device)
    if free is None or needs <= free:
        return None
    return f"needs {needs / GiB:.1f} GiB, {where} {free / GiB:.1f} GiB free (not allocated)"
