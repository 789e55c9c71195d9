"""Output: plain tables or JSON on stdout, progress on stderr."""
from __future__ import annotations

import json
from typing import Any, Callable

import typer


def _cell(value: Any, width: int = 60) -> str:
    if isinstance(value, dict):
        text = "; ".join(f"{k}: {_cell(v)}" for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        text = ",".join(str(v) for v in value)
    elif value is None:
        text = ""
    else:
        text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def table(rows: list[dict[str, Any]], columns: list[str], width: int = 60) -> str:
    cells = [[_cell(r.get(c), width) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(x.ljust(w) for x, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


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
    typer.echo("machine: " + _cell(report["machine"], 200))
    if report.get("libraries"):
        typer.echo("libraries: " + _cell(report["libraries"], 400))
    typer.echo(table(report["kernels"], ["name", "runs_here", "devices", "reason"], width=200))
    for err in report["plugin_errors"]:
        typer.echo(f"plugin {err['plugin']} ({err['distribution']}): " + "; ".join(err["errors"]))


def with_progress(total: int, work: Callable[[Callable], Any]) -> Any:
    """Run work(tick) with a progress bar on stderr; tick(problem, row) advances it."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task("sweep", total=total)

        def tick(problem, row) -> None:
            status = row["status"] if row else "skipped"
            what = f"{problem.kernel} {problem.mask} {problem.seqlen} {problem.direction}"
            progress.update(task, advance=1, description=f"{what}: {status}")

        return work(tick)
