"""Output: tables that wrap to the terminal width, or JSON, on stdout; progress on stderr."""
from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import typer

# a CPU run above this many FLOPs (all timed and warm-up calls) is announced before it starts
CPU_WARN_FLOPS = 2e11


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_cell(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return "" if value is None else str(value)


def terminal_width() -> int:
    """The terminal's columns ($COLUMNS first), 100 when there is no terminal (pipes, files)."""
    return shutil.get_terminal_size((100, 24)).columns


def table(rows: list[dict[str, Any]], columns: list[str], width: int | None = None,
          wide: tuple[str, ...] = ("reason", "description", "note", "errors")) -> str:
    """A plain-text table `width` columns wide (default: the terminal's); long cells wrap, never cut.

    The `wide` columns share the width the others leave; the others keep their cells on one line
    where the width allows."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    # the narrow columns never wrap: where they alone are wider than `width`, the table is as wide as they need
    narrow = sum(max([len(column)] + [len(r[i]) for r in cells]) + 3 for i, column in enumerate(columns)
                 if column not in wide)
    width = max(width or terminal_width(), narrow + 23 * sum(c in wide for c in columns))
    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False)
    for column in columns:
        if column in wide:
            grid.add_column(column, overflow="fold", ratio=1, min_width=20)
        else:
            grid.add_column(column, overflow="fold", no_wrap=True)
    for line in cells:
        grid.add_row(*(Text(cell) for cell in line))  # Text: no markup ("[cu13]" stays)
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, highlight=False,
            emoji=False).print(grid)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()).strip("\n")


KERNEL_COLUMNS = ["name", "plugin", "available", "needs", "backward", "masks", "reason"]


def kernels(rows: list[dict[str, Any]], fmt: str) -> None:
    """list-kernels: JSON rows whole, or a table with the mask claims counted and every reason in full."""
    if fmt == "json":
        listing(rows, fmt, [])
        return
    shown = [{**r, "plugin": r["distribution"].removeprefix("longca-plugin-"),
              "available": "yes" if r["available"] else "no", "backward": "yes" if r["backward"] else "no",
              "masks": f"{len(r['masks'])}"} for r in rows]
    typer.echo(table(shown, KERNEL_COLUMNS))


def listing(rows: list[dict[str, Any]], fmt: str, columns: list[str]) -> None:
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=2, default=str))
    else:
        typer.echo(table(rows, columns))


ROW_SUMMARY = ["kernel", "mask", "seqlen", "direction", "status", "ms_median", "tflops", "rel_err", "reason"]


def result_row(row: Any, fmt: str) -> None:
    """One result row (a `longca.results.ResultRow`): its JSON line, or a one-row table."""
    if fmt == "json":
        typer.echo(row.to_json())
        return
    shown = row.as_dict()
    for key in ("ms_median", "tflops"):
        if shown.get(key) is not None:
            shown[key] = f"{shown[key]:.4g}"
    if shown.get("rel_err") is not None:
        shown["rel_err"] = f"{shown['rel_err']:.2e}"
    typer.echo(table([shown], ROW_SUMMARY))


def doctor(report: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        typer.echo(json.dumps(report, indent=2, default=str))
        return
    typer.echo("machine: " + _cell(report["machine"]))
    if report.get("libraries"):
        typer.echo("libraries: " + _cell(report["libraries"]))
    typer.echo(table(report["kernels"], ["name", "runs_here", "devices", "needs", "reason"]))
    for err in report["plugin_errors"]:
        typer.echo(f"plugin {err['plugin']} ({err['distribution']}): " + "; ".join(err["errors"]))


def progress_columns() -> list[Any]:
    """What the progress line shows: the case and its status, a bar, done/total, elapsed, and the
    time left at the pace so far (`eta`)."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn()]


PROGRESS_LINES = 20  # without a terminal: about this many plain progress lines over a sweep


def with_progress(total: int, work: Callable[[Callable], Any]) -> Any:
    """Run work(tick) with a progress bar on stderr; tick(problem, row) advances it. Without a
    terminal (a log, CI, `nohup`) a bar shows nothing until the end, so then a plain line every
    total/PROGRESS_LINES cases says how far it is and the time left (`progress_line`)."""
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    if not console.is_terminal:
        return work(_plain_ticker(total, lambda line: typer.echo(line, err=True)))
    with Progress(*progress_columns(), console=console, transient=False) as progress:
        task = progress.add_task("sweep", total=total)

        def tick(problem, row) -> None:
            status = row["status"] if row else "skipped"
            what = f"{problem.kernel} {problem.mask} {problem.seqlen} {problem.direction}"
            progress.update(task, advance=1, description=f"{what}: {status}")

        return work(tick)


def _plain_ticker(total: int, say: Callable[[str], None]) -> Callable:
    import time

    started, state = time.monotonic(), {"done": 0, "measured": 0}
    every = max(1, total // PROGRESS_LINES)

    def tick(problem, row) -> None:
        state["done"] += 1
        state["measured"] += row is not None
        if state["done"] % every and state["done"] != total:
            return
        status = row["status"] if row else "skipped"
        what = f"{problem.kernel} {problem.mask} {problem.seqlen} {problem.direction}: {status}"
        say(progress_line(state["done"], total, time.monotonic() - started, state["measured"], what))

    return tick


def progress_line(done: int, total: int, elapsed_s: float, measured: int, last: str) -> str:
    """`[ 120/576] 21 %, 2 min 10 s, about 8 min 1 s left: <last case>`; the time left is the pace of
    the cases measured so far (resumed ones take no time) over the cases left."""
    left = ""
    if measured and done < total:
        left = f", about {duration(elapsed_s / measured * (total - done))} left"
    width = len(str(total))
    return f"[{done:>{width}}/{total}] {100 * done // max(1, total)} %, {duration(elapsed_s)}{left}: {last}"


def duration(seconds: float) -> str:
    """`7 min 12 s`, `45 s`, `1 h 2 min`."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def warn_if_large_on_cpu(problem: Any, calls: int) -> bool:
    """On a CPU, warn on stderr before a case of more than CPU_WARN_FLOPS starts; True if warned."""
    from longca.flops import problem_flops

    if problem.device_type != "cpu":
        return False
    per_call = problem_flops(problem, float(problem.seqlen) ** 2)  # the full mask: an upper bound
    total = per_call * max(1, calls)
    if total <= CPU_WARN_FLOPS:
        return False
    typer.echo(f"warning: this case is up to {per_call / 1e9:,.0f} GFLOP per call, {calls} calls, on a CPU "
               f"(the default sizes are a GPU's); at ~50 GFLOP/s that is up to {total / 5e10 / 60:,.0f} min. "
               f"Smaller: --seqlen 2k --heads 4:2 --head-dim 64 --repeat 3", err=True)
    return True


@contextlib.contextmanager
def running(what: str, show: bool) -> Iterator[None]:
    """A spinner with the elapsed time on stderr while a long case runs (when `show`)."""
    if not show:
        yield
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn(what), TimeElapsedColumn(), console=Console(stderr=True),
                  transient=True) as progress:
        progress.add_task(what, total=None)
        yield


def case_line(p: Any) -> str:
    """One case of a sweep as `--dry-run` lists it."""
    cp = f"{p.strategy} x{p.world_size} " if p.strategy else ""
    return f"{cp}{p.kernel} {p.mask} {p.seqlen} {p.heads_q}:{p.heads_kv} d{p.head_dim} {p.dtype} {p.direction}"


def status_counts(rows: list[Any]) -> str:
    """`3 ok, 1 unsupported`: how many rows of each status."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def options_text(options: Any) -> str:
    """A CP row's strategy options as `name=value,...`, the default zigzag layout left out."""
    return ",".join(f"{k}={v}" for k, v in (options or {}).items() if k != "layout" or v != "zigzag")
