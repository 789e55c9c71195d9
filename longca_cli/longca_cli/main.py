"""The `longca` command line: discover plugins, run one case or a sweep, report, draw masks."""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from longca.errors import LongcaError

from . import render

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Benchmark long-context attention kernels and context-parallel strategies.")

FormatOpt = typer.Option("table", "--format", "-f", help="table or json")


def cli_errors(fn: Callable) -> Callable:
    """Input errors become one line on stderr and exit code 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LongcaError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            typer.echo("interrupted; rows written so far are kept", err=True)
            raise typer.Exit(130) from None

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
    name: str = typer.Argument(..., help="plugin and kernel name: lower-case letters, digits, '_'"),
    output: Optional[Path] = typer.Option(None, help="folder to create (default: ./longca-plugin-NAME)"),
    template: Optional[Path] = typer.Option(None, help="template folder (default: the one shipped with longca-cli)"),
) -> None:
    """Create a kernel plugin from the template; it installs and passes its tests as it stands."""
    from .newplugin import create_plugin, next_steps

    taken = {n: e.plugin.distribution for n, e in _registry().entries["kernels"].items()}
    typer.echo(next_steps(name, create_plugin(name, output, template, taken)))


@app.command("list-kernels")
@cli_errors
def list_kernels(fmt: str = FormatOpt) -> None:
    """Kernels with family, plugin, version, availability, masks and backward support."""
    _check_format(fmt)
    from longca.inventory import kernel_rows

    render.kernels(kernel_rows(_registry()), fmt)


@app.command("list-masks")
@cli_errors
def list_masks(fmt: str = FormatOpt) -> None:
    """The mask patterns with their kind and parameters."""
    _check_format(fmt)
    from longca.inventory import mask_rows

    render.listing(mask_rows(_registry()), fmt, ["name", "kind", "description", "params"])


@app.command("list-samplers")
@cli_errors
def list_samplers(fmt: str = FormatOpt) -> None:
    """Document-length samplers."""
    _check_format(fmt)
    from longca.inventory import sampler_rows

    render.listing(sampler_rows(_registry()), fmt, ["name", "description", "params"])


@app.command("list-cp")
@cli_errors
def list_cp(fmt: str = FormatOpt) -> None:
    """Context-parallel strategies."""
    _check_format(fmt)
    from longca.inventory import strategy_rows

    render.listing(strategy_rows(_registry()), fmt, ["name", "distribution", "masks", "options", "description"])


def parse_params(items: Optional[List[str]], what: str) -> dict[str, Any]:
    """`key=value` pairs; values that look like numbers become numbers."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise LongcaError(f"malformed {what} {item!r}; expected NAME=VALUE, e.g. window=512")
        for cast in (int, float):
            try:
                out[key.strip()] = cast(value)
                break
            except ValueError:
                continue
        else:
            out[key.strip()] = value
    return out


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@app.command()
@cli_errors
def run(
    kernel: str = typer.Option(..., help="kernel name (see list-kernels)"),
    mask: str = typer.Option("causal", help="mask name (see list-masks)"),
    seqlen: str = typer.Option("8k", help="total tokens: 8k, 8192, 1M"),
    heads: str = typer.Option("32:32", help="query:kv heads, e.g. 64:8"),
    head_dim: int = typer.Option(128, help="dimension of each head"),
    batch: int = typer.Option(1, help="sequences per call"),
    dtype: str = typer.Option("bfloat16", help="bfloat16, float16 or float32"),
    direction: str = typer.Option("fwd", help="fwd, bwd or fwdbwd"),
    device: Optional[str] = typer.Option(None, help="cpu or cuda (default: cuda when present)"),
    sampler: str = typer.Option("auto", help="document-length sampler (see list-samplers)"),
    seed: int = typer.Option(0, help="seed of the mask draws and the inputs"),
    mask_param: Optional[List[str]] = typer.Option(None, "--mask-param",
                                                   help="override a mask parameter, e.g. window=512"),
    sampler_param: Optional[List[str]] = typer.Option(None, "--sampler-param",
                                                      help="sampler parameter, e.g. doc_len=2048"),
    warmup: int = typer.Option(5, help="untimed calls before timing"),
    repeat: int = typer.Option(20, help="timed calls (median reported)"),
    samples: int = typer.Option(5, help="mask draws for document masks (median reported)"),
    check: bool = typer.Option(False, "--check/--no-check", help="compare with the float32 reference"),
    output: Optional[Path] = typer.Option(None, help="also append the row to OUTPUT/results.jsonl"),
    timeout: Optional[float] = typer.Option(None, help="seconds the case may take (default: scaled with its FLOPs)"),
    timing: str = typer.Option("events", help="events (CUDA events, L2 flushed), cuda_graph (replays of one "
                                              "capture, CUDA only) or profiler (device kernel time)"),
    fmt: str = FormatOpt,
) -> None:
    """Measure one case given by flags, in a worker process bounded by --timeout."""
    _check_format(fmt)
    from longca.measure import RunOptions
    from longca.supervisor import Supervisor
    from longca.problem import Problem
    from longca.outdir import OutputFolder
    from longca.results import ResultsWriter
    from longca.sizes import parse_heads, parse_size

    hq, hkv = parse_heads(heads)
    problem = Problem(kernel=kernel, mask=mask, seqlen=parse_size(seqlen), heads_q=hq, heads_kv=hkv,
                      head_dim=head_dim, batch=batch, dtype=dtype, direction=direction,
                      device=device or default_device(), sampler=sampler, seed=seed,
                      mask_params=parse_params(mask_param, "--mask-param"),
                      sampler_params=parse_params(sampler_param, "--sampler-param"))
    from longca.timing import check_timing

    check_timing(timing, problem.device)
    options = RunOptions(warmup=warmup, repeat=repeat, samples=samples, check=check, timing=timing)
    big = False
    if problem.device_type == "cpu":  # names checked first: a warning must not precede a refusal
        from longca.problem import build_mask

        registry = _registry()
        registry.kernel(problem.kernel)
        build_mask(problem, registry=registry)  # mask, sampler and their parameters
        big = render.warn_if_large_on_cpu(problem, warmup + repeat)
    with OutputFolder(output) if output else contextlib.nullcontext() as folder, Supervisor() as supervisor, \
            render.running(f"running {problem.kernel} {problem.mask} {problem.seqlen}", show=big):
        row = supervisor.run(problem, options, timeout)  # the output folder is checked and locked first
        if folder:
            ResultsWriter(folder.results).append(row)
    render.result_row(row, fmt)
    if row.status not in ("ok", "unsupported"):
        raise typer.Exit(1)


@app.command()
@cli_errors
def sweep(
    spec: Path = typer.Argument(..., help="sweep spec TOML (see contrib/specs/)"),
    output: Optional[Path] = typer.Option(None, help="results folder (default: the spec's output, or results/NAME)"),
    resume: bool = typer.Option(False, "--resume/--no-resume", help="skip cases already in OUTPUT/results.jsonl"),
    dry_run: bool = typer.Option(False, "--dry-run/--no-dry-run", help="list the cases and exit"),
    device: Optional[str] = typer.Option(None, help="cpu or cuda: overrides the spec's device"),
    max_minutes: Optional[float] = typer.Option(
        None, "--max-minutes", min=0, help="start no new case after this many minutes (the running one finishes); "
                                           "continue later with --resume"),
    kernels: Optional[str] = typer.Option(None, "--kernels", help="run only these of the spec's kernels, "
                                                                  "comma-separated (e.g. those installed now)"),
) -> None:
    """Run a grid from a TOML spec; rows are appended to OUTPUT/results.jsonl as they finish."""
    from longca.sweep import default_output, load_spec, problems, run_sweep

    sweep_spec = load_spec(spec, _registry())
    if kernels is not None:
        chosen = [k.strip() for k in kernels.split(",") if k.strip()]
        unknown = [k for k in chosen if k not in sweep_spec.kernels]
        if unknown or not chosen:
            raise LongcaError(f"--kernels {kernels!r}: not in the spec's kernels ({', '.join(sweep_spec.kernels)})")
        sweep_spec = sweep_spec.model_copy(update={"kernels": chosen})
    if device is not None:
        if device not in ("cpu", "cuda"):
            raise LongcaError(f"--device {device!r}: use cpu or cuda")
        sweep_spec = sweep_spec.model_copy(update={"device": device})
    cases = list(problems(sweep_spec))
    if dry_run:
        for p in cases:
            cp = f"{p.strategy} x{p.world_size} " if p.strategy else ""
            typer.echo(f"{cp}{p.kernel} {p.mask} {p.seqlen} {p.heads_q}:{p.heads_kv} d{p.head_dim} {p.dtype} "
                       f"{p.direction}")
        typer.echo(f"{len(cases)} cases", err=True)
        return
    out = output or default_output(sweep_spec)
    max_seconds = None if max_minutes is None else 60 * max_minutes
    rows = render.with_progress(len(cases), lambda tick: run_sweep(sweep_spec, out, resume, tick, _registry(),
                                                                   max_seconds))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    typer.echo(f"{len(rows)} cases run into {out / 'results.jsonl'}: "
               + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())), err=True)
    if max_minutes is None:
        return
    from longca.results import ResultsWriter, case_id

    left = len(cases) - len(ResultsWriter(out / "results.jsonl").done_ids() & {case_id(p) for p in cases})
    if left:
        typer.echo(f"{left} of {len(cases)} cases not run yet (--max-minutes {max_minutes:g}); "
                   f"continue with: longca sweep {spec} --output {out} --resume"
                   + (f" --kernels {kernels}" if kernels else ""), err=True)


LOG_FILE = "longca.log"  # `longca bench`: the library warnings of the run, beside its results


@contextlib.contextmanager
def warnings_to(path: Path):
    """Library warnings of this process and of the workers it starts go to `path`, not the terminal."""
    import os
    import warnings

    from longca import warnlog

    path.parent.mkdir(parents=True, exist_ok=True)
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
    from longca.prewarm import before_bench
    from longca.repeat import check_layout, run_folders, run_repeats
    from longca.sweep import load_spec, problems

    from .report import write_report
    from .specs import default_spec_path

    path = default_spec_path(default_device())
    sweep_spec = load_spec(path, _registry(), installed_kernels_only=True)
    n = len(list(problems(sweep_spec)))
    check_layout(output, runs)  # before anything is written
    log = output / LOG_FILE
    typer.echo(f"running {path.name} into {output} (library warnings: {log})", err=True)
    with warnings_to(log):
        before_bench(sweep_spec, run_folders(output, runs), _registry(), prewarm, resume,
                     lambda line: typer.echo(line, err=True), log)
        files = render.with_progress(n * runs, lambda tick: run_repeats(sweep_spec, output, runs, resume, tick,
                                                                        _registry()))
    written = write_report(files, output, html=True)
    typer.echo(written["markdown"])
    typer.echo(f"report: {output / 'report.md'} (and report.html, report.csv, plots) in {output}", err=True)


@app.command()
@cli_errors
def report(
    results: List[Path] = typer.Argument(..., help="results.jsonl files, or folders holding one (merged)"),
    output: Optional[Path] = typer.Option(
        None, help="folder for report.md, report.csv and plots (default: beside the first results)"),
    plots: bool = typer.Option(True, help="write PNG plots"),
    memory: bool = typer.Option(False, help="add tables and plots of each case's peak GPU memory (GiB), "
                                            "lightest kernel"),
    html: bool = typer.Option(False, "--html/--no-html", help="also write report.html: one self-contained page with "
                                                    "sortable, filterable rows and plots"),
) -> None:
    """A self-describing report: runs, protocol, TFLOP/s tables, CSV, PNG plots (a panel per mask)."""
    from longca.analysis import results_files
    from longca.outdir import check_writable_folder

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
    seqlen: str = typer.Option("4k", help="total tokens: 4k, 4096"),
    heads: str = typer.Option("1:1", help="heads, for block-sparse masks (one mask per head or KV group)"),
    sampler: str = typer.Option("auto", help="document-length sampler (see list-samplers)"),
    seed: int = typer.Option(0, help="seed of the mask draw"),
    mask_param: Optional[List[str]] = typer.Option(None, "--mask-param",
                                                   help="override a mask parameter, e.g. window=512"),
    output: Optional[Path] = typer.Option(None, help="PNG path (default: NAME.png)"),
    fmt: str = typer.Option("png", "--format", "-f", help="png or json (slices and drawn parameters)"),
) -> None:
    """Draw a mask as a PNG, or print its slices and every drawn parameter as JSON."""
    _check_format(fmt, ("png", "json"))
    from longca.outdir import check_image_path
    from longca.problem import Problem, build_mask
    from longca.sizes import parse_heads, parse_size

    path = check_image_path(output or Path(f"{name}.png")) if fmt == "png" else None  # before building

    hq, hkv = parse_heads(heads)
    problem = Problem(kernel="reference", mask=name, seqlen=parse_size(seqlen), heads_q=hq, heads_kv=hkv,
                      sampler=sampler, seed=seed, mask_params=parse_params(mask_param, "--mask-param"))
    built = build_mask(problem, registry=_registry())
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
    from longca.inventory import doctor_report

    render.doctor(doctor_report(_registry()), fmt)


from .dist_run import dist_run as _dist_run  # noqa: E402 - the `dist-run` command (context parallelism)

app.command("dist-run")(cli_errors(_dist_run))

from .simulate import simulate as _simulate  # noqa: E402 - `longca simulate` (CP at any world size)

app.command("simulate")(cli_errors(_simulate))

from .compare_cmd import compare as _compare  # noqa: E402 - the `compare` command (performance gate)

app.command("compare")(cli_errors(_compare))

from .recommend import recommend as _recommend  # noqa: E402 - `longca recommend` (ranked CP choices)

app.command("recommend")(cli_errors(_recommend))

from .comm_bench import comm_bench as _comm_bench  # noqa: E402 - `longca comm-bench` (simulator calibration)

app.command("comm-bench")(cli_errors(_comm_bench))


def run_cli() -> None:  # console-script entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    run_cli()
