"""Sweep specs (TOML, validated by pydantic) and running a grid of problems into results.jsonl."""
from __future__ import annotations

import itertools
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from . import integrity, peaks
from .measure import RunOptions, check_device
from .errors import LongcaError
from .plugins import Registry, get_registry
from .problem import Problem, check_mask_params
from .outdir import RESULTS_FILE, OutputFolder
from .results import ResultRow, ResultsWriter, case_id
from .runinfo import record_run
from .sizes import parse_heads, parse_size
from .timing import check_timing
from .supervisor import Supervisor

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
CP_BATCH = 8  # CP cases measured per spawned process group (rows are written after each group)
Size = Union[int, str]


class SweepSpec(BaseModel):
    """The `[sweep]` table of a spec file. Every list is one axis of the grid."""

    model_config = ConfigDict(extra="forbid")

    name: str = "sweep"
    output: Optional[str] = None
    kernels: list[str]
    masks: Union[list[str], Literal["static", "block_sparse", "all"]] = "static"
    seqlens: list[Size]
    heads: list[Union[str, int]] = ["64:8"]
    head_dims: list[int] = [128]
    batches: list[int] = [1]
    dtypes: list[Literal["bfloat16", "float16", "float32"]] = ["bfloat16"]
    directions: list[Literal["fwd", "bwd", "fwdbwd"]] = ["fwd", "bwd"]
    device: str = "cuda"
    sampler: str = "auto"
    sampler_params: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0
    samples: int = Field(5, ge=1)
    warmup: int = Field(5, ge=0)
    repeat: int = Field(20, ge=1)
    # "auto": the whole float32 reference where it is cheap, else the forward on a few query windows;
    # true: always the whole reference; "spot": always windows; false: no check (rows say checked "no")
    check: Union[bool, Literal["auto", "spot"]] = "auto"
    measure_peak: bool = True
    # how each single-GPU case is timed (longca.timing): events, cuda_graph (CUDA only), profiler
    timing: Literal["events", "cuda_graph", "profiler"] = "events"
    isolate: bool = False  # a case that kills its worker process becomes an error row (else the sweep stops)
    mask_params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # context parallelism: with strategies, `kernels` are the inner kernels
    strategies: list[str] = Field(default_factory=list)
    world_sizes: list[int] = [1]
    seqlen_per_rank: bool = False  # S = seqlen x world size (the paper's CP grid: 8K tokens per GPU)
    baseline: bool = False  # with strategies: each inner kernel alone too, on one GPU at the per-rank length
    backend: Optional[Literal["nccl", "gloo"]] = None
    strategy_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    timeout: int = Field(600, ge=1)  # seconds a CP collective may wait
    case_timeout: Optional[float] = Field(None, gt=0)  # seconds per case; default: scaled with its FLOPs
    # per mask, parameters swept as axes: {"block_sparse_uniform": {"block": [64, 128]}}
    mask_grid: dict[str, dict[str, list[Any]]] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SAFE_NAME.match(value) or set(value) == {"."}:
            raise ValueError(f"{value!r}: use letters, digits, '_', '-' and '.' (it names the default output "
                             f"folder results/NAME)")
        return value

    @field_validator("mask_grid")
    @classmethod
    def _grid(cls, value: dict[str, dict[str, list[Any]]]) -> dict[str, dict[str, list[Any]]]:
        empty = [f"{mask}.{name}" for mask, axes in value.items() for name, values in axes.items() if not values]
        if empty:
            raise ValueError(f"mask_grid axes must list at least one value: {', '.join(empty)}")
        return value

    @field_validator("seqlens")
    @classmethod
    def _sizes(cls, value: list[Size]) -> list[int]:
        try:
            return [parse_size(v) for v in value]
        except LongcaError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("heads")
    @classmethod
    def _heads(cls, value: list[Union[str, int]]) -> list[str]:
        try:
            return [":".join(map(str, parse_heads(v))) for v in value]
        except LongcaError as exc:
            raise ValueError(str(exc)) from None

    def mask_names(self, registry: Optional[Registry] = None) -> list[str]:
        """The masks axis; a group name stands for what the installed plugins registered in it."""
        if isinstance(self.masks, str):
            return (registry or get_registry()).mask_group(self.masks)
        return self.masks

    def mask_param_sets(self, mask: str) -> list[dict[str, Any]]:
        """The parameter dicts a mask runs with: `mask_params` under each point of its `mask_grid`."""
        base = dict(self.mask_params.get(mask, {}))
        axes = self.mask_grid.get(mask, {})
        return [{**base, **dict(zip(axes, point))} for point in itertools.product(*axes.values())]


class SpecFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sweep: SweepSpec


def default_output(spec: SweepSpec) -> Path:
    """The spec's `output`, or results/NAME (NAME is checked to be one plain folder name)."""
    return Path(spec.output) if spec.output else Path("results") / spec.name


def load_spec(path: Union[str, Path], registry: Optional[Registry] = None,
              installed_kernels_only: bool = False) -> SweepSpec:
    """Read and validate a spec; every problem is reported as one line naming the field.

    With `installed_kernels_only`, kernels no plugin registers are dropped instead of refused
    (the built-in default benchmark lists every kernel the project knows).
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise LongcaError(f"spec file {path} does not exist") from None
    except IsADirectoryError:
        raise LongcaError(f"spec {path} is a folder; give the TOML file") from None
    except UnicodeDecodeError as exc:
        raise LongcaError(f"{path}: not UTF-8 text (byte {exc.start}); is it a TOML spec?") from None
    except OSError as exc:
        raise LongcaError(f"cannot read spec {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise LongcaError(f"{path}: not valid TOML: {exc}") from None
    try:
        spec = SpecFile.model_validate(data).sweep
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(x) for x in first["loc"])
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        raise LongcaError(f"{path}: field '{field}': {first['msg']}{more}") from None
    registry = registry or get_registry()
    if installed_kernels_only:
        spec.kernels = [k for k in spec.kernels if k in registry.entries["kernels"]]
    for kernel in spec.kernels:
        registry.entry("kernels", kernel)
    for mask in spec.mask_names(registry):
        registry.entry("masks", mask)
    for mask in {**spec.mask_params, **spec.mask_grid}:
        registry.entry("masks", mask)
    registry.entry("samplers", spec.sampler)
    for strategy in [*spec.strategies, *spec.strategy_options]:
        registry.entry("strategies", strategy)
    from longca_cp.measure import resolve

    for problem in problems(spec, registry):
        check_mask_params(problem, registry)
        if problem.strategy:
            resolve(problem, problem.strategy_options, registry)  # unknown options: an error before anything runs
    return spec


def problems(spec: SweepSpec, registry: Optional[Registry] = None) -> Iterator[Problem]:
    """The grid, ordered so each (mask, length) finishes in every direction for every kernel
    before the next: a sweep cut short still compares all kernels on what it reached."""
    grid = itertools.product(spec.dtypes, spec.head_dims, spec.heads, spec.batches, spec.mask_names(registry))
    for dtype, head_dim, heads, batch, mask in grid:
        hq, hkv = parse_heads(heads)
        for params, seqlen, direction, kernel in itertools.product(spec.mask_param_sets(mask), spec.seqlens,
                                                                   spec.directions, spec.kernels):
            problem = Problem(kernel=kernel, mask=mask, seqlen=seqlen, heads_q=hq, heads_kv=hkv, head_dim=head_dim,
                              batch=batch, dtype=dtype, direction=direction, device=spec.device,
                              sampler=spec.sampler, seed=spec.seed, mask_params=dict(params),
                              sampler_params=dict(spec.sampler_params))
            if not spec.strategies:
                yield problem
            elif spec.baseline:
                yield from _baselines(spec, problem)
            for world, strategy in itertools.product(spec.world_sizes, spec.strategies):
                yield _cp_problem(spec, problem, strategy, world, registry)


def _baselines(spec: SweepSpec, problem: Problem) -> Iterator[Problem]:
    """The inner kernel alone at each per-rank length: what scaling efficiency is measured against."""
    lengths = [problem.seqlen] if spec.seqlen_per_rank else [problem.seqlen // w for w in spec.world_sizes]
    for seqlen in dict.fromkeys(lengths):
        yield problem.with_(seqlen=seqlen)


def _cp_problem(spec: SweepSpec, problem: Problem, strategy: str, world: int, registry) -> Problem:
    """A CP case with the options the spec gives: its identity (for --resume) depends on nothing else.

    Defaults are filled in where the case runs (`longca_cp.cases.measure_cases`; they may depend
    on the host, such as the ranks per node) and recorded in the row's strategy_options."""
    cp = problem.with_(strategy=strategy, world_size=world,
                       seqlen=problem.seqlen * world if spec.seqlen_per_rank else problem.seqlen)
    return cp.with_(strategy_options=dict(spec.strategy_options.get(strategy, {})))


def measure_matmul_peak(device: str = "cuda", n: int = 8192, warm_seconds: float = 1.0) -> Optional[float]:
    """bf16 n^3 matmul TFLOP/s on this GPU: the ceiling the report compares kernels with.

    The GPU first multiplies for `warm_seconds` (an idle GPU starts at low clocks: with 10 warm-up
    calls, seven runs on one H200 measured 733-800 TFLOP/s), then 100 timed calls; the median."""
    import torch

    from .timing import summarize, synchronize, time_ms

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    dev = torch.device(device)
    deadline = time.perf_counter() + warm_seconds
    while time.perf_counter() < deadline:
        for _ in range(8):
            a @ b
        synchronize(dev)
    median, _, _ = summarize(time_ms(lambda: a @ b, dev, warmup=1, repeat=100))
    return 2 * n ** 3 / (median * 1e-3) / 1e12


def run_sweep(spec: SweepSpec, output: Path, resume: bool = False,
              on_case: Optional[Callable[[Problem, Optional[ResultRow]], None]] = None,
              registry: Optional[Registry] = None, max_seconds: Optional[float] = None) -> list[ResultRow]:
    """Run every case of the grid, appending each row as it finishes; returns the new rows.

    `max_seconds`: start no case (or CP batch) after that many seconds; a case already running
    finishes. The cases left are run by a later call with `resume=True`."""
    registry = registry or get_registry()
    from longca_cp.launch import under_torchrun

    # under torchrun (one or many nodes) every rank runs the loop: the CP cases of its world size
    # join the launcher's group, single-GPU cases run on rank 0 alone, and only rank 0 writes
    launched = under_torchrun()
    lead = not launched or os.environ.get("RANK") == "0"
    if launched and max_seconds is not None:
        raise LongcaError("--max-minutes does not work under torchrun: every rank must run the same cases")
    check_device(spec.device)
    check_timing(spec.timing, spec.device)
    if spec.strategies and spec.timing != "events":
        raise LongcaError(f"timing {spec.timing!r} is for single-GPU cases; CP sweeps (strategies) time with events")
    if not lead:  # the other ranks read the folder (for --resume) but never write or lock it
        return _run_into(None, Path(output), spec, resume, on_case, registry, max_seconds, launched)
    with OutputFolder(output) as folder:
        return _run_into(folder, folder.path, spec, resume, on_case, registry, max_seconds, launched)


def _run_into(folder: Optional[OutputFolder], path: Path, spec: SweepSpec, resume: bool,
              on_case: Optional[Callable[[Problem, Optional[ResultRow]], None]], registry: Registry,
              max_seconds: Optional[float], launched: bool = False) -> list[ResultRow]:
    lead = folder is not None
    world = int(os.environ.get("WORLD_SIZE", "1"))
    started = time.monotonic()
    out_of_time = lambda: max_seconds is not None and time.monotonic() - started > max_seconds  # noqa: E731
    writer = ResultsWriter(folder.results if folder else path / RESULTS_FILE)
    if lead and not resume and writer.path.exists() and writer.path.stat().st_size:
        raise LongcaError(f"{writer.path} already has results; pass --resume to continue it, "
                          f"or choose another --output")
    done = writer.done_ids() if resume else set()
    extra: dict[str, Any] = {"spec": spec.model_dump()}
    if spec.measure_peak:
        extra.update(peaks.run_peaks(spec.device, spec.dtypes))
    gpu = peaks.gpu_name(spec.device)
    if lead:
        record_run(path, extra, registry)
    options = RunOptions(warmup=spec.warmup, repeat=spec.repeat, samples=spec.samples, check=spec.check,
                         timing=spec.timing)
    rows = []
    runner = Supervisor(isolate=spec.isolate)
    pending: list[Problem] = []  # CP cases of one world size, measured together in one process group

    def record(problem: Problem, row: ResultRow) -> None:
        integrity.stamp(row, extra, gpu)  # this run's peaks (resumed folders mix runs), then the gate
        if lead:
            writer.append(row)
        rows.append(row)
        if on_case:
            on_case(problem, row)

    def flush_cp() -> None:
        from longca_cp.cases import measure_cases
        from longca_cp.launch import default_backend

        while pending and not out_of_time():
            world = pending[0].world_size
            batch = [p for p in pending if p.world_size == world]
            pending[:] = [p for p in pending if p.world_size != world]
            measure_cases(batch, options, spec.backend or default_backend(spec.device), spec.timeout,
                          spec.case_timeout, on_row=record)  # each row written as soon as it is measured

    try:
        todo = list(problems(spec, registry))
        if launched:
            todo = [p for p in todo if (p.world_size == world if p.strategy else lead)]
            if not any(p.strategy for p in todo):
                raise LongcaError(f"under torchrun ({world} ranks) a sweep runs its CP cases of world size {world}; "
                                  f"the spec has none (world_sizes)")
        for problem in todo:
            if out_of_time():
                break
            if case_id(problem) in done:
                if on_case:
                    on_case(problem, None)
                continue
            if problem.strategy:
                pending.append(problem)
                if len(pending) < CP_BATCH and problem.world_size == pending[0].world_size:
                    continue
                flush_cp()
                continue
            flush_cp()
            record(problem, runner.run(problem, options, spec.case_timeout))
        flush_cp()
    finally:
        runner.close()
    return rows
