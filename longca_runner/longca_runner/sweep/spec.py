"""The sweep spec: the `[sweep]` table of a TOML file, validated by pydantic (docs/sweep-specs.md)."""
from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from longca.errors import LongcaError
from longca.plugins import Registry, get_registry
from longca.sizes import format_head_dims, parse_head_dims, parse_heads, parse_size

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
Size = int | str


class SweepSpec(BaseModel):
    """The `[sweep]` table of a spec file. Every list is one axis of the grid."""

    model_config = ConfigDict(extra="forbid")

    name: str = "sweep"
    output: str | None = None
    kernels: list[str]
    masks: list[str] | Literal["static", "block_sparse", "all"] = "static"
    seqlens: list[Size]
    heads: list[str | int] = ["64:8"]
    # Q/K head dim, or "192/128" for Q/K 192 with V 128
    head_dims: list[int | str] = [128]
    batches: list[int] = [1]
    # bfloat16, float16, float32, float8_e4m3fn, float8_e5m2 (and their aliases: bf16, fp8, fp8_e5m2, ...)
    dtypes: list[str] = ["bfloat16"]
    directions: list[Literal["fwd", "bwd", "fwdbwd"]] = ["fwd", "bwd"]
    # true: the backward through each kernel's deterministic algorithm (its bwd and fwdbwd cases only)
    deterministic: list[bool] = [False]
    # true: one learnable attention-sink logit per query head (kernels without sinks give unsupported rows)
    sinks: list[bool] = [False]
    device: str = "cuda"
    sampler: str = "auto"
    sampler_params: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0
    samples: int = Field(5, ge=1)
    warmup: int = Field(5, ge=0)
    repeat: int | None = Field(None, ge=1)  # None: until the median is precise (longca.timing.until_precise)
    # "auto": the whole float32 reference where it is cheap, else the forward on a few query windows;
    # true: always the whole reference; "spot": always windows; false: no check (rows say checked "no")
    check: bool | Literal["auto", "spot"] = "auto"
    measure_peak: bool = True
    # how each single-GPU case is timed (longca_runner.timing): events, cuda_graph (CUDA only), profiler
    timing: Literal["events", "cuda_graph", "profiler"] = "events"
    # single-GPU cases: joules per call from NVML's energy counter (longca_runner.measure.energy; ~1 s a case)
    energy: bool = False
    isolate: bool = False  # a case that kills its worker process becomes an error row (else the sweep stops)
    mask_params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # context parallelism: with strategies, `kernels` are the inner kernels
    strategies: list[str] = Field(default_factory=list)
    world_sizes: list[int] = [1]
    seqlen_per_rank: bool = False  # S = seqlen x world size (the paper's CP grid: 8K tokens per GPU)
    baseline: bool = False  # with strategies: each inner kernel alone too, on one GPU at the per-rank length
    backend: Literal["nccl", "gloo"] | None = None
    strategy_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    timeout: int = Field(600, ge=1)  # seconds a CP collective may wait
    case_timeout: float | None = Field(None, gt=0)  # seconds per case; default: scaled with its FLOPs
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

    @field_validator("head_dims")
    @classmethod
    def _head_dims(cls, value: list[int | str]) -> list[int | str]:
        try:
            return [format_head_dims(*parse_head_dims(v)) for v in value]
        except LongcaError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("dtypes")
    @classmethod
    def _dtypes(cls, value: list[str]) -> list[str]:
        from longca.problem import TORCH_DTYPES

        unknown = [v for v in value if v not in TORCH_DTYPES]
        if unknown:
            raise ValueError(f"unknown dtype {unknown[0]!r}; known: {', '.join(dict.fromkeys(TORCH_DTYPES.values()))}")
        return list(dict.fromkeys(TORCH_DTYPES[v] for v in value))

    @field_validator("heads")
    @classmethod
    def _heads(cls, value: list[str | int]) -> list[str]:
        try:
            return [":".join(map(str, parse_heads(v))) for v in value]
        except LongcaError as exc:
            raise ValueError(str(exc)) from None

    def mask_names(self, registry: Registry | None = None) -> list[str]:
        """The masks axis; a group name stands for what the installed plugins registered in it."""
        if isinstance(self.masks, str):
            return (registry or get_registry()).mask_group(self.masks)
        return self.masks

    def mask_param_sets(self, mask: str) -> list[dict[str, Any]]:
        """The parameter dicts a mask runs with: `mask_params` under each point of its `mask_grid`."""
        base = dict(self.mask_params.get(mask, {}))
        axes = self.mask_grid.get(mask, {})
        return [{**base, **dict(zip(axes, point, strict=True))} for point in itertools.product(*axes.values())]


class SpecFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sweep: SweepSpec


def default_output(spec: SweepSpec) -> Path:
    """The spec's `output`, or results/NAME (NAME is checked to be one plain folder name)."""
    return Path(spec.output) if spec.output else Path("results") / spec.name


SPEC_MAX_BYTES = 16 * 2**20  # a spec is a few kB: more is not a spec (and /dev/zero never ends)


def _read_toml(path: Path) -> Any:
    try:
        if path.exists() and not path.is_dir() and not path.is_file():
            raise LongcaError(f"spec {path} is not a regular file (a device, pipe or socket); give the TOML file")
        with path.open("rb") as f:
            data = f.read(SPEC_MAX_BYTES + 1)
        if len(data) > SPEC_MAX_BYTES:
            raise LongcaError(f"spec {path} is larger than {SPEC_MAX_BYTES // 2**20} MiB; is it a TOML spec?")
        return tomllib.loads(data.decode("utf-8"))
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


def read_spec(path: str | Path, registry: Registry | None = None,
              installed_kernels_only: bool = False) -> SweepSpec:
    """Read and validate a spec and the names it uses (not its grid: `grid.expand` checks each case);
    every problem is reported as one line naming the field.

    With `installed_kernels_only`, kernels no plugin registers are dropped instead of refused
    (the built-in default benchmark lists every kernel the project knows).
    """
    path = Path(path)
    data = _read_toml(path)
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
    return spec


def select(spec: SweepSpec, kernels: str | None = None, device: str | None = None) -> SweepSpec:
    """The spec narrowed to some of its kernels (comma-separated) and moved to another device."""
    if kernels is not None:
        chosen = [k.strip() for k in kernels.split(",") if k.strip()]
        unknown = [k for k in chosen if k not in spec.kernels]
        if unknown or not chosen:
            raise LongcaError(f"--kernels {kernels!r}: not in the spec's kernels ({', '.join(spec.kernels)})")
        spec = spec.model_copy(update={"kernels": chosen})
    if device is not None:
        if device not in ("cpu", "cuda"):
            raise LongcaError(f"--device {device!r}: use cpu or cuda")
        spec = spec.model_copy(update={"device": device})
    return spec
