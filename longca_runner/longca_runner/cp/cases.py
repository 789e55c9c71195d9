"""Measuring a list of CP problems of one world size: refusals as rows, the rest in a supervised group.

Used by `longca dist-run` (one case, several strategies) and by sweeps with `strategies`. The
problems carry the options given (their identity); defaults are resolved here (`resolve`) and
recorded in the rows. Each case runs
in a `RankGroup` under its own deadline; a case that fails or hangs costs only itself. Under
torchrun the ranks are the launcher's, so cases run in this process without a supervisor.
"""
from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import asdict

from longca.bounded import HookHung, call_bounded
from longca.capability import strategy_unsupported
from longca.errors import LongcaError
from longca.plugins import get_registry
from longca.problem import Problem, plugin_label
from longca.results import ResultRow, as_row, new_row
from longca_runner.cp.group import RankGroup
from longca_runner.cp.launch import init_group
from longca_runner.cp.measure import measure_in_group, resolve
from longca_runner.launcher import under_torchrun
from longca_runner.measure import RunOptions, failure_reason
from longca_runner.supervisor import check_timeout, default_timeout


def _measure_under_torchrun(cases: list, run: RunOptions, backend: str, device: str, timeout_s: float) -> list[dict]:
    import torch.distributed as dist

    with tempfile.TemporaryDirectory(prefix="longca-cp-"):
        local = init_group(backend, device, timeout_s=timeout_s)
        try:
            return measure_in_group(local, cases, asdict(run))
        finally:
            dist.destroy_process_group()


def _refusal(problem: Problem, options: dict[int, dict], i: int, timeout_s: float | None) -> ResultRow | None:
    """The row of a case decided before ranks start: unsupported, or the strategy's or inner
    kernel's resolve_options()/supports() raising (`error`) or never returning (`timeout`);
    None when it runs. Fills `options[i]` with the resolved options (defaults filled here, on the
    host that runs it). Unknown names stay input errors (LongcaError)."""
    def decide() -> str | None:
        options[i] = resolve(problem, problem.strategy_options)
        return strategy_unsupported(problem, options[i])

    what = (f"resolve_options()/supports() of strategy {problem.strategy} or inner kernel {problem.kernel} "
            f"({plugin_label(get_registry(), 'strategies', problem.strategy or '')})")
    try:
        reason = call_bounded(decide, what, timeout_s)
    except HookHung as exc:
        return new_row(problem, status="timeout", phase="supports", reason=str(exc), strategy_options=options[i])
    except LongcaError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a raising check is this case's row, the others run
        return new_row(problem, status="error", phase="supports", strategy_options=options[i],
                       reason=f"resolve_options()/supports() raised {failure_reason(exc)}")
    if reason:
        return new_row(problem, status="unsupported", reason=reason, strategy_options=options[i])
    return None


def measure_cases(problems: list[Problem], run: RunOptions, backend: str, collective_timeout_s: float,
                  case_timeout_s: float | None = None,
                  on_row: Callable[[Problem, ResultRow], None] | None = None) -> list[ResultRow]:
    """One row per problem, in order (rank 0; other torchrun ranks get rows of their own copies).

    All problems share one world size and device. `case_timeout_s` bounds each case (default:
    scaled with its FLOPs); `on_row` hears each row as soon as it is measured."""
    check_timeout(case_timeout_s)
    if not problems:
        return []
    world, device = problems[0].world_size, problems[0].device
    if any(p.world_size != world or p.device != device for p in problems):
        raise LongcaError("measure_cases: every problem must have the same world size and device")
    rows: dict[int, ResultRow] = {}

    def done(i: int, row: ResultRow) -> None:
        rows[i] = row
        if on_row:
            on_row(problems[i], row)

    todo = []
    options: dict[int, dict] = {}
    for i, problem in enumerate(problems):
        options[i] = dict(problem.strategy_options)
        refused = _refusal(problem, options, i, case_timeout_s)
        if refused is not None:
            done(i, refused)
        else:
            todo.append(i)
    if todo and under_torchrun():
        cases = [(asdict(problems[i]), options[i]) for i in todo]
        measured = _measure_under_torchrun(cases, run, backend, device, collective_timeout_s)
        for i, row in zip(todo, measured, strict=False):
            done(i, as_row(row))
    elif todo:
        with RankGroup(world, backend, device, collective_timeout_s) as group:
            for i in todo:
                done(i, group.run(problems[i], run, case_timeout_s or default_timeout(problems[i], run), options[i]))
    return [rows[i] for i in range(len(problems)) if i in rows]
