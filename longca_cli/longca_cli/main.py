"""The `longca` command line: discover plugins, run one case or a sweep, report, draw masks."""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from longca.errors import LongcaError

from . import comm_bench, compare_cmd, dist_run, recommend, render, simulate
from . import options as opt

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Benchmark long-context attention kernels and context-parallel strategies.")

FormatOpt = typer.Option("table", "--format", "-f", help="table or json")


class Terminated(KeyboardInterrupt):
    """SIGTERM (`timeout`, a job's time limit, a scheduler) taken as an interrupt, so the run's `finally`
    blocks still record what it did: runs.jsonl's end line with `wall_s` and `phases_s`."""


def _terminated(signum: int, frame: Any) -> None:
    raise Terminated()


def cli_errors(fn: Callable) -> Callable:
    """Input errors become one line on stderr and exit code 2, never a traceback; an interrupt (Ctrl-C:
    130, SIGTERM: 143) one line too, the rows written so far kept."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LongcaError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt as exc:
            stopped = isinstance(exc, Terminated)
            typer.echo(f"{'terminated (SIGTERM)' if stopped else 'interrupted'}; rows written so far are kept",
                       err=True)
            raise typer.Exit(143 if stopped else 130) from None

    return wrapper


def _check_format(fmt: str, allowed: tuple[str, ...] = ("table", "json")) -> None:
    if fmt not in allowed:
        raise LongcaError(f"unknown format {fmt!r}; known: {', '.join(allowed)}")


def _registry():
    from longca.plugins import get_registry

    return get_registry()


@app.callback(invoke_without_command=True)
def main(ctx: typer.Context,
         verbose: bool = typer.Option(False, "--verbose", "-v",
                                      help="log diagnostics to stderr; with --version, every distribution's version"),
         version: bool = typer.Option(False, "--version", help="print longca's version and exit")) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, stream=sys.stderr, force=True)
    if version:
        from .versions import version_lines

        typer.echo("\n".join(version_lines(every=verbose)))
        raise typer.Exit()
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit()


@app.command()
@cli_errors
def plugins(fmt: str = FormatOpt) -> None:
    """Installed plugins: distribution, version, hooks, what each registered, load errors."""
    _check_format(fmt)
    rows = [p.as_dict() for p in _registry().plugins]
    render.listing(rows, fmt, ["name", "distribution", "version", "hooks", "registered", "errors"])
    if fmt == "table":  # the table cuts long cells: every load error in full below it
        for row in rows:
            for error in row["errors"]:
                typer.echo(f"error: plugin {row['name']} ({row['distribution']}): {error}")


@app.command("new-plugin")
@cli_errors
def new_plugin(
    name: str = typer.Argument(..., help="plugin name (also the kernel's, mask's, ...): a-z, 0-9, '_'"),
    kind: str = typer.Option("kernel", "--kind", "-k", help="kernel, mask, sampler or strategy (a CP strategy)"),
    output: Path | None = typer.Option(None, help="folder to create (default: ./longca-plugin-NAME)"),
    template: Path | None = typer.Option(None, help="template folder (default: KIND's, shipped with longca-cli)"),
) -> None:
    """Create a plugin of any kind from its template; it installs and passes its tests as it stands."""
    from .newplugin import create_plugin, kind_of, next_steps

    entries = _registry().entries[kind_of(kind).registry_kind]
    taken = {n: e.plugin.distribution for n, e in entries.items()}
    typer.echo(next_steps(name, create_plugin(name, output, template, taken, kind), kind))


@app.command("list-kernels")
@cli_errors
def list_kernels(fmt: str = FormatOpt) -> None:
    """Kernels with family, plugin, version, availability, masks and backward support."""
    _check_format(fmt)
    from longca_cli.inventory import kernel_rows

    render.kernels(kernel_rows(_registry()), fmt)


@app.command("list-masks")
@cli_errors
def list_masks(fmt: str = FormatOpt) -> None:
    """The mask patterns with their kind and parameters."""
    _check_format(fmt)
    from longca_cli.inventory import mask_rows

    render.listing(mask_rows(_registry()), fmt, ["name", "kind", "description", "params"])


@app.command("list-samplers")
@cli_errors
def list_samplers(fmt: str = FormatOpt) -> None:
    """Document-length samplers."""
    _check_format(fmt)
    from longca_cli.inventory import sampler_rows

    render.listing(sampler_rows(_registry()), fmt, ["name", "description", "params"])


@app.command("list-cp")
@cli_errors
def list_cp(fmt: str = FormatOpt) -> None:
    """Context-parallel strategies."""
    _check_format(fmt)
    from longca_cli.inventory import strategy_rows

    render.listing(strategy_rows(_registry()), fmt, ["name", "distribution", "masks", "options", "description"])


@app.command()
@cli_errors
def run(
    kernel: str = typer.Option(..., help="kernel name (see list-kernels)"),
    mask: str = opt.Mask(),
    seqlen: str = opt.Seqlen(),
    heads: str = opt.Heads(),
    head_dim: int = opt.HeadDim,
    head_dim_v: int | None = opt.HeadDimV,
    deterministic: bool = opt.Deterministic,
    sinks: bool = opt.Sinks,
    batch: int = opt.Batch,
    dtype: str = opt.Dtype,
    direction: str = opt.Direction,
    device: str | None = opt.Device,
    sampler: str = opt.Sampler,
    seed: int = opt.Seed,
    mask_param: list[str] | None = opt.MaskParam,
    sampler_param: list[str] | None = opt.SamplerParam,
    warmup: int = opt.Warmup,
    repeat: int | None = opt.Repeat,
    samples: int = opt.Samples,
    check: bool = typer.Option(False, "--check/--no-check", help="compare with the float32 reference"),
    output: Path | None = typer.Option(None, help="also append the row to OUTPUT/results.jsonl"),
    timeout: float | None = typer.Option(None, help="seconds the case may take (default: scaled with its FLOPs)"),
    timing: str = typer.Option("events", help="events (CUDA events, L2 flushed), cuda_graph (replays of one "
                                              "capture, CUDA only) or profiler (device kernel time)"),
    energy: bool = typer.Option(False, "--energy/--no-energy", help="joules per call from NVML's energy counter "
                                                                    "(GPU; about 1 s more)"),
    fmt: str = FormatOpt,
) -> None:
    """Measure one case given by flags, in a worker process bounded by --timeout."""
    _check_format(fmt)
    from longca.given import problem_from
    from longca.results import ResultsWriter
    from longca_runner.integrity import Stamper
    from longca_runner.measure import RunOptions
    from longca_runner.outdir import OutputFolder
    from longca_runner.supervisor import Supervisor

    problem = problem_from(kernel, mask, seqlen, heads, head_dim, batch, dtype, direction, device, sampler, seed,
                           mask_param, sampler_param, head_dim_v=head_dim_v, deterministic=deterministic,
                           sinks=sinks)
    from longca_runner.timing import MIN_REPEAT, check_timing

    check_timing(timing, problem.device)
    options = RunOptions(warmup=warmup, repeat=repeat, samples=samples, check=check, timing=timing, energy=energy)
    big = False
    if problem.device_type == "cpu":  # names checked first: a warning must not precede a refusal
        from longca.bounded import HookHung
        from longca.problem import bounded_build
        from longca.results import new_row

        registry = _registry()
        registry.kernel(problem.kernel)
        try:  # mask, sampler and their parameters; a builder that never returns is the case's timeout
            bounded_build(problem, registry, timeout)
        except HookHung as exc:
            row = new_row(problem, status="timeout", phase="mask", reason=str(exc))
            render.result_row(row, fmt)
            raise typer.Exit(1) from None
        big = render.warn_if_large_on_cpu(problem, warmup + (repeat or MIN_REPEAT))
    with OutputFolder(output) if output else contextlib.nullcontext() as folder, Supervisor() as supervisor, \
            render.running(f"running {problem.kernel} {problem.mask} {problem.seqlen}", show=big):
        row = supervisor.run(problem, options, timeout)  # the output folder is checked and locked first
        Stamper(problem.device)(row)  # peaks, datasheet and the plausibility gate, as a sweep's rows
        writer = ResultsWriter(folder.results) if folder else None
        if writer:
            writer.keep(row)
    render.result_row(row, fmt)
    if writer and writer.unwritten:
        typer.echo(f"error: {writer.unwritten}", err=True)
        raise typer.Exit(2)
    if row.status not in ("ok", "unsupported"):
        raise typer.Exit(1)


@app.command()
@cli_errors
def sweep(
    spec: Path = typer.Argument(..., help="sweep spec TOML (see contrib/specs/)"),
    output: Path | None = typer.Option(None, help="results folder (default: the spec's output, or results/NAME)"),
    resume: bool = typer.Option(False, "--resume/--no-resume", help="skip cases already in OUTPUT/results.jsonl"),
    dry_run: bool = typer.Option(False, "--dry-run/--no-dry-run", help="list the cases and exit"),
    device: str | None = typer.Option(None, help="cpu or cuda: overrides the spec's device"),
    max_minutes: float | None = typer.Option(
        None, "--max-minutes", min=0, help="start no new case after this many minutes (the running one finishes); "
                                           "continue later with --resume"),
    kernels: str | None = typer.Option(None, "--kernels", help="run only these of the spec's kernels, "
                                                                  "comma-separated (e.g. those installed now)"),
) -> None:
    """Run a grid from a TOML spec; rows are appended to OUTPUT/results.jsonl as they finish."""
    from longca_runner.sweep import default_output, plan, run_sweep

    sweep_plan = plan(spec, _registry(), kernels=kernels, device=device)
    cases = sweep_plan.cases
    if dry_run:
        for p in cases:
            typer.echo(render.case_line(p))
        typer.echo(f"{len(cases)} cases", err=True)
        return
    out = output or default_output(sweep_plan.spec)
    max_seconds = None if max_minutes is None else 60 * max_minutes
    rows = render.with_progress(len(cases), lambda tick: run_sweep(sweep_plan.spec, out, resume, tick, _registry(),
                                                                   max_seconds, cases))
    typer.echo(f"{len(rows)} cases run into {out / 'results.jsonl'}: {render.status_counts(rows)}", err=True)
    left = sweep_plan.not_run(out) if max_minutes is not None else 0
    if left:
        typer.echo(f"{left} of {len(cases)} cases not run yet (--max-minutes {max_minutes:g}); "
                   f"continue with: longca sweep {spec} --output {out} --resume"
                   + (f" --kernels {kernels}" if kernels else ""), err=True)


LOG_FILE = "longca.log"  # `longca bench`: the library warnings of the run, beside its results


@contextlib.contextmanager
def warnings_to(path: Path):
    """Library warnings of this process and of the workers it starts go to `path`, not the terminal."""
    import os
    import sys
    import warnings

    from longca_runner import warnlog

    warnlog.start(path, "longca " + " ".join(sys.argv[1:]) + ": library warnings and prewarm lines follow")
    before = os.environ.get(warnlog.ENV)
    os.environ[warnlog.ENV] = str(path.resolve())
    previous = warnlog.to_file(path)
    try:
        yield
    finally:
        warnings.showwarning = previous
        if before is None:
            os.environ.pop(warnlog.ENV, None)
        else:
            os.environ[warnlog.ENV] = before


@app.command()
@cli_errors
def bench(
    output: Path = typer.Option(Path("results/default"), help="results folder"),
    resume: bool = typer.Option(False, "--resume/--no-resume",
                                help="continue the run in OUTPUT (its cases are skipped), then rewrite the report"),
    runs: int = typer.Option(1, "--runs", help="repeat the whole grid N times (OUTPUT/run-1 ... run-N); the report "
                                               "gives each cell's run-to-run variation"),
    prewarm: bool = typer.Option(True, "--prewarm/--no-prewarm", help="on CUDA, first compile the cases of compiling "
                                                                      "kernels in parallel processes (no measurement)"),
) -> None:
    """The default benchmark: the paper's dense setting at 4K-16K on a GPU, else a small CPU run; then the report."""
    from longca.given import default_device
    from longca_runner.measure.phases import PhaseClock
    from longca_runner.prewarm import WarmPool, before_bench
    from longca_runner.repeat import check_layout, run_folders, run_repeats
    from longca_runner.sweep import plan

    from .report import write_report
    from .specs import default_spec_path

    clock = PhaseClock()  # where the minutes go: runs.jsonl's wall_s and phases_s, the report's header
    path = default_spec_path(default_device())
    bench_plan = plan(path, _registry(), installed_kernels_only=True)
    check_layout(output, runs)  # before anything is written
    log = output / LOG_FILE
    typer.echo(f"running {path.name} into {output} (library warnings: {log})", err=True)
    with warnings_to(log), WarmPool() as pool:  # the prewarm's workers measure the groups they compiled
        before_bench(bench_plan.spec, run_folders(output, runs), _registry(), prewarm, resume,
                     lambda line: typer.echo(line, err=True), log, cases=bench_plan.cases, clock=clock, pool=pool)
        files = render.with_progress(len(bench_plan.cases) * runs, lambda tick: run_repeats(
            bench_plan.spec, output, runs, resume, tick, _registry(), cases=bench_plan.cases, clock=clock,
            pool=pool))
    written = write_report(files, output, html=True)
    typer.echo(written["markdown"])
    typer.echo(f"report: {output / 'report.md'} (and report.html, report.csv, plots) in {output}", err=True)


@app.command()
@cli_errors
def report(
    results: list[Path] = typer.Argument(..., help="results.jsonl files, or folders holding one (merged)"),
    output: Path | None = typer.Option(
        None, help="folder for report.md, report.csv and plots (default: beside the first results)"),
    plots: bool = typer.Option(True, help="write PNG plots"),
    memory: bool = typer.Option(False, help="add tables and plots of each case's peak GPU memory (GiB), "
                                            "lightest kernel"),
    html: bool = typer.Option(False, "--html/--no-html", help="also write report.html: one self-contained page with "
                                                    "sortable, filterable rows and plots"),
) -> None:
    """A self-describing report: runs, protocol, TFLOP/s tables, CSV, PNG plots (a panel per mask)."""
    from longca_cli.analysis import results_files
    from longca_runner.outdir import check_writable_folder

    from .report import write_report

    paths = results_files(results)  # a folder of repeats (run-1 ... run-N) stands for each of them
    for path in paths:
        if not path.is_file():
            raise LongcaError(f"no results at {path}" + (" (a folder)" if path.is_dir() else ""))
    folder = check_writable_folder(output or (results[0] if results[0].is_dir() else paths[0].parent))  # before reading
    written = write_report(paths, folder, plots=plots, memory=memory, html=html)
    for line in written["unreadable"]:
        typer.echo(f"warning: {line}; left out of the report", err=True)
    typer.echo(written["markdown"])
    typer.echo("wrote " + ", ".join(str(p) for p in written["files"]), err=True)


@app.command("show-mask")
@cli_errors
def show_mask(
    name: str = typer.Argument(..., help="mask name"),
    seqlen: str = opt.Seqlen("4k", "total tokens: 4k, 4096"),
    heads: str = opt.Heads("1:1", "heads, for block-sparse masks (one mask per head or KV group)"),
    sampler: str = opt.Sampler,
    seed: int = opt.Seed,
    mask_param: list[str] | None = opt.MaskParam,
    output: Path | None = typer.Option(None, help="PNG path (default: NAME.png)"),
    fmt: str = typer.Option("png", "--format", "-f", help="png or json (slices and drawn parameters)"),
) -> None:
    """Draw a mask as a PNG, or print its slices and every drawn parameter as JSON."""
    _check_format(fmt, ("png", "json"))
    from longca.given import problem_from
    from longca.problem import bounded_build
    from longca_runner.outdir import check_image_path

    path = check_image_path(output or Path(f"{name}.png")) if fmt == "png" else None  # before building
    problem = problem_from("reference", name, seqlen, heads, sampler=sampler, seed=seed, mask_param=mask_param,
                           device="cpu")
    built = bounded_build(problem, _registry())
    if fmt == "json":
        typer.echo(json.dumps(built.describe()))
        return
    from .maskviz import draw_mask

    assert path is not None  # checked above for the png format
    draw_mask(built, path)
    typer.echo(str(path))


@app.command()
@cli_errors
def doctor(fmt: str = FormatOpt) -> None:
    """What this machine can run, and why not."""
    _check_format(fmt)
    from longca_cli.inventory import doctor_report

    render.doctor(doctor_report(_registry()), fmt)


app.command("dist-run")(cli_errors(dist_run.dist_run))  # context parallelism
app.command("simulate")(cli_errors(simulate.simulate))  # CP at any world size
app.command("compare")(cli_errors(compare_cmd.compare))  # performance gate
app.command("recommend")(cli_errors(recommend.recommend))  # ranked CP choices
app.command("comm-bench")(cli_errors(comm_bench.comm_bench))  # simulator calibration


def run_cli() -> None:  # console-script entry point
    signal.signal(signal.SIGTERM, _terminated)  # workers are spawned (forkserver, spawn): they keep the default
    app()


if __name__ == "__main__":  # pragma: no cover
    run_cli()
