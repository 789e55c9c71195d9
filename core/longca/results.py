"""The result row (one JSON object per line in results.jsonl): its typed schema, writer and reader.

`ResultRow` is the one schema: the measurement fills it, `ResultsWriter` appends it, `read_results`
loads it back (rows of older schema versions get defaults for the fields they lack) and the report
reads it. Rows can be read by field name (`row["status"]`, `row.get("tflops")`) as well as by
attribute, so code that treats rows as mappings keeps working.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import LongcaError
from .problem import Problem

# 2: checked, sampler_params, iter_times_ms, phase, failed_rank, balance; status timeout
# 3: status suspect, gpu, matmul_peak_shape, datasheet_peak_tflops, gpu_state_before/after, caveat, timing;
#    later, optional: bitwise_repeatable, repeat_max_abs_diff, energy_j, energy_calls
SCHEMA_VERSION = 3
STATUSES = ("ok", "unsupported", "oom", "error", "incorrect", "timeout", "suspect")
Status = Literal["ok", "unsupported", "oom", "error", "incorrect", "timeout", "suspect"]
Checked = Literal["full", "spot", "no"]
log = logging.getLogger(__name__)
UNAVAILABLE = "unavailable: "  # reason prefix of rows whose kernel could not run at all in that process


class ResultRow(BaseModel):
    """One measured (or refused) case. Field meanings: docs/results-schema.md."""

    # unknown fields are kept (a row written by a newer longca survives a round trip)
    model_config = ConfigDict(extra="allow")

    schema_version: int = SCHEMA_VERSION
    # the problem
    kernel: str
    strategy: str | None = None
    world_size: int = 1
    mask: str
    mask_params: dict[str, Any] = {}
    sampler: str = "auto"
    sampler_params: dict[str, Any] = {}
    seed: int = 0
    batch: int = 1
    seqlen: int
    heads_q: int
    heads_kv: int
    head_dim: int
    head_dim_v: int | None = None  # V's head dim where it differs from head_dim (192/128)
    dtype: Literal["bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2"]
    deterministic: bool = False  # the backward through the kernel's deterministic algorithm
    sinks: bool = False  # one learnable sink logit per query head (Problem.sinks)
    quantized: str | None = None  # what the kernel computes in fewer bits (KernelSpec.quantized)
    direction: Literal["fwd", "bwd", "fwdbwd"]
    device: str = "cpu"
    strategy_options: dict[str, Any] | None = None
    case_id: str | None = None
    # the outcome
    status: Status
    reason: str | None = None
    phase: str | None = None  # the phase a failed or timed-out case was in (prepare, timing, check, ...)
    failed_rank: int | None = None  # CP rows: the first rank that failed
    checked: Checked = "no"  # full: compared with the reference; spot: part of it; no: not compared
    # the measurement
    area: float | None = None
    flops: float | None = None
    ms_median: float | None = None
    ms_p20: float | None = None
    ms_p80: float | None = None
    iter_times_ms: list[float] | None = None
    tflops: float | None = None
    peak_mem_bytes: int | None = None
    prepare_ms: float | None = None
    rel_err: float | None = None
    rel_err_detail: dict[str, float | None] | None = None
    backend: str | None = None
    samples: int | None = None
    ms_max_rank: float | None = None
    balance: dict[str, Any] | None = None
    matmul_peak_tflops: float | None = None  # the run's best matmul of the row's dtype
    matmul_peak_shape: str | None = None  # the shape that gave it ("16384³"); None: a single-shape peak
    gpu: str | None = None  # torch.cuda.get_device_name; None on a CPU
    datasheet_peak_tflops: float | None = None  # the GPU model's dense datasheet figure (longca_runner.peaks)
    # NVML readings when the timed calls started and ended (longca_runner.gpustate); {"unknown": why} without NVML
    gpu_state_before: dict[str, Any] | None = None
    gpu_state_after: dict[str, Any] | None = None
    timing: str | None = None  # events, cuda_graph or profiler (longca_runner.timing); None: events (older rows)
    caveat: str | None = None  # what the number must be read with (KernelSpec.caveat: a slow fallback path)
    # backward rows: the step run again on the same inputs, bit for bit (longca_runner.measure.repeatable)
    bitwise_repeatable: bool | None = None
    repeat_max_abs_diff: float | None = None
    # joules per call from NVML's energy counter over `energy_calls` back-to-back calls (--energy; GPU only)
    energy_j: float | None = None
    energy_calls: int | None = None

    # read access by field name, for code that treats rows as mappings
    def __getitem__(self, name: str) -> Any:
        try:
            return getattr(self, name)
        except AttributeError:
            raise KeyError(name) from None

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name, default)

    def keys(self) -> list[str]:
        return list(self.model_dump())

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()

    def to_json(self) -> str:
        """One line of results.jsonl (NaN and infinity written as null)."""
        return json.dumps(_finite(self.model_dump()), default=_default, allow_nan=False)


FIELDS = tuple(name for name in ResultRow.model_fields)  # every column, in schema order


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def is_unavailable(row: ResultRow | dict[str, Any]) -> bool:
    return row.get("status") == "unsupported" and str(row.get("reason") or "").startswith(UNAVAILABLE)


def case_id(problem: Problem) -> str:
    return hashlib.sha1(problem.key().encode()).hexdigest()[:16]


def new_row(problem: Problem, **outcome: Any) -> ResultRow:
    """A row with the problem's fields filled; `outcome` sets status (default error) and the rest."""
    outcome.setdefault("status", "error")
    outcome.setdefault("strategy_options", dict(problem.strategy_options) if problem.strategy else None)
    return ResultRow.model_validate(dict(  # validated: the problem's dtype and direction are plain strings
        kernel=problem.kernel, strategy=problem.strategy, world_size=problem.world_size, mask=problem.mask,
        mask_params=dict(problem.mask_params), sampler=problem.sampler, sampler_params=dict(problem.sampler_params),
        seed=problem.seed, batch=problem.batch, seqlen=problem.seqlen, heads_q=problem.heads_q,
        heads_kv=problem.heads_kv, head_dim=problem.head_dim, head_dim_v=problem.head_dim_v, dtype=problem.dtype,
        deterministic=problem.deterministic, sinks=problem.sinks, direction=problem.direction,
        device=problem.device, case_id=case_id(problem), **outcome))


def as_row(data: ResultRow | dict[str, Any]) -> ResultRow:
    return data if isinstance(data, ResultRow) else ResultRow.model_validate(data)


@dataclass
class ReadResult:
    """The rows of a results.jsonl and every line that could not be read: (line number, why)."""

    rows: list[ResultRow] = field(default_factory=list)
    bad_lines: list[tuple[int, str]] = field(default_factory=list)


def _why(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(x) for x in first["loc"])
    return f"not a result row: field '{where}': {first['msg']}" if where else f"not a result row: {first['msg']}"


def parse_lines(data: bytes) -> ReadResult:
    """Rows of results.jsonl content; lines that are not UTF-8, not JSON, not objects or not rows are listed."""
    out = ReadResult()
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            out.bad_lines.append((number, "not UTF-8 text"))
            continue
        except json.JSONDecodeError as exc:
            out.bad_lines.append((number, f"not JSON ({exc.msg} at column {exc.colno})"))
            continue
        if not isinstance(value, dict):
            out.bad_lines.append((number, f"a JSON {type(value).__name__}, not an object"))
            continue
        try:
            out.rows.append(ResultRow.model_validate(value))
        except ValidationError as exc:
            out.bad_lines.append((number, _why(exc)))
    return out


def read_results(path: Path | str) -> ReadResult:
    return parse_lines(Path(path).read_bytes())


def read_rows(path: Path | str) -> list[ResultRow]:
    """The readable rows of a results.jsonl (see `read_results` for the lines that are not)."""
    return read_results(path).rows


class ResultsWriter:
    """Appends rows to results.jsonl as each case finishes, so an interruption loses at most one."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.unwritten: RowNotWritten | None = None  # the first row `keep` could not write

    def done_ids(self) -> set[str]:
        """Cases --resume skips: every row but those whose kernel was unavailable in that process
        (its library may be installed since; the new row is appended and wins in reports)."""
        if not self.path.exists():
            return set()
        read = read_results(self.path)
        for number, why in read.bad_lines:
            log.warning("%s line %d: %s; its case runs again", self.path, number, why)
        return {row.case_id for row in read.rows if row.case_id and not is_unavailable(row)}

    def append(self, row: ResultRow | dict[str, Any]) -> None:
        """One whole line, written and fsynced, or none of it: a write that fails (disk full, folder
        made read-only) cuts the file back to its size before, then raises RowNotWritten."""
        data = as_row(row)
        try:
            _append_whole(self.path, (data.to_json() + "\n").encode())
        except OSError as exc:
            raise RowNotWritten(self.path, data, exc) from None

    def keep(self, row: ResultRow | dict[str, Any]) -> None:
        """`append`, but a row that cannot be written is noted (`unwritten`), not raised, and no later
        row is tried: a command prints every measured row, then says what was not written."""
        if self.unwritten is not None:
            self.unwritten.later += 1
            return
        try:
            self.append(row)
        except RowNotWritten as exc:
            self.unwritten = exc


class RowNotWritten(LongcaError):
    """A measured row could not be appended to results.jsonl; the file is left as it was before it."""

    def __init__(self, path: Path, row: ResultRow, exc: OSError) -> None:
        self.path, self.row, self.later = path, row, 0
        self.cause = exc.strerror or str(exc)
        super().__init__(self.cause)

    def __str__(self) -> str:
        later = f" nor the {self.later} after it" if self.later else ""
        measured = f", {self.row.ms_median:.4g} ms" if self.row.ms_median is not None else ""
        what = f"{self.row.kernel} {self.row.mask} S={self.row.seqlen}, status {self.row.status}{measured}"
        return (f"could not write to {self.path}: {self.cause}; the row of case {self.row.case_id} "
                f"({what}){later} was not written, the file is as it was before it. Free space or make the "
                f"folder writable, then --resume runs the cases not written")


def _append_whole(path: Path, data: bytes) -> None:
    """Append `data` with os.write until it is all written, fsync; on an error cut the file back."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):  # shrinking needs no space; a torn tail is moved aside on --resume
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def ok_rows(rows: Iterable[ResultRow]) -> list[ResultRow]:
    return [r for r in rows if r.status == "ok"]
