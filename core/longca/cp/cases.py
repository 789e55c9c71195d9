"""Measuring a list of CP problems of one world size: refusals as rows, the rest in one group.

Used by `longca dist-run` (one case, several strategies) and by sweeps with `strategies`.
The problems carry their resolved options (`Problem.strategy_options`, see `resolve`).
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import asdict
from typing import Any

from ..measure import RunOptions, failure_status
from ..errors import LongcaError
from ..problem import Problem
from ..results import ResultRow, as_row, new_row
from .launch import init_group, spawn, under_torchrun
from .measure import measure_in_group, unsupported


def failed_row(problem: Problem, exc: BaseException) -> ResultRow:
    """The row of a case whose group died: the last unindented line of the error (a rank's traceback)."""
    text = str(exc).strip().splitlines()
    lines = [line for line in text if line.strip() and not line.startswith(" ")]
    return new_row(problem, status=failure_status(exc), reason=(lines[-1] if lines else type(exc).__name__)[:500])


def _measure_here(cases: list, run: RunOptions, backend: str, device: str, timeout_s: float) -> list[dict]:
    """In this process: joined to torchrun's group, or a group of one."""
    import torch.distributed as dist

    with tempfile.TemporaryDirectory(prefix="longca-cp-") as tmp:
        if under_torchrun():
            local = init_group(backend, device, timeout_s=timeout_s)
        else:
            local = init_group(backend, device, 0, 1, f"file://{os.path.join(tmp, 'store')}", timeout_s)
        try:
            return measure_in_group(local, cases, asdict(run))
        finally:
            dist.destroy_process_group()


def measure_cases(problems: list[Problem], run: RunOptions, backend: str, timeout_s: float) -> list[ResultRow]:
    """One row per problem, in order (rank 0; other torchrun ranks get rows of their own copies).

    All problems share one world size and device. Supported ones run in one process group: this
    process under torchrun or for a world of one, else `world_size` processes spawned here.
    """
    if not problems:
        return []
    world, device = problems[0].world_size, problems[0].device
    if any(p.world_size != world or p.device != device for p in problems):
        raise LongcaError("measure_cases: every problem must have the same world size and device")
    rows: dict[int, ResultRow] = {}
    todo: list[int] = []
    for i, problem in enumerate(problems):
        reason = unsupported(problem, problem.strategy_options)
        if reason:
            rows[i] = new_row(problem, status="unsupported", reason=reason)
        else:
            todo.append(i)
    cases = [(asdict(problems[i]), problems[i].strategy_options) for i in todo]
    if cases:
        try:
            if under_torchrun() or world == 1:
                measured = _measure_here(cases, run, backend, device, timeout_s)
            else:
                measured = spawn(measure_in_group, world, backend, device, (cases, asdict(run)), timeout_s)[0]
            rows.update(zip(todo, map(as_row, measured)))
        except LongcaError:
            raise
        except Exception as exc:  # noqa: BLE001 - a rank died: the rows say why
            rows.update((i, failed_row(problems[i], exc)) for i in todo)
    return [rows[i] for i in range(len(problems)) if i in rows]
