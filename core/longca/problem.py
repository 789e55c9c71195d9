"""A Problem: everything that defines one measurement; and building its mask and inputs."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from .errors import LongcaError
from .masks.mask import Mask, MaskContext
from .masks.validate import mask_problem
from .plugins import Registry, get_registry

DIRECTIONS = ("fwd", "bwd", "fwdbwd")
TORCH_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
                "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32",
                "float8_e4m3fn": "float8_e4m3fn", "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn",
                "float8_e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2"}
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
# fields added after result folders existed: left out of `key()` at their default, so old case ids stay
NEW_FIELDS_DEFAULTS: dict[str, Any] = {"head_dim_v": None, "deterministic": False, "sinks": False}


@dataclass(frozen=True)
class Problem:
    """One measurement: kernel (or strategy + inner kernel + world size), mask, sizes, direction."""

    kernel: str
    mask: str
    seqlen: int
    heads_q: int = 32
    heads_kv: int = 32
    head_dim: int = 128
    batch: int = 1
    dtype: str = "bfloat16"
    direction: str = "fwd"
    device: str = "cpu"
    sampler: str = "auto"
    seed: int = 0
    mask_params: dict[str, Any] = field(default_factory=dict)
    sampler_params: dict[str, Any] = field(default_factory=dict)
    strategy: str | None = None
    world_size: int = 1
    strategy_options: dict[str, Any] = field(default_factory=dict)
    # V's (and the output's) head dim when it differs from Q/K's `head_dim` (MLA-style 192/128); None: the same
    head_dim_v: int | None = None
    # the backward through the kernel's deterministic algorithm (KernelSpec.deterministic)
    deterministic: bool = False
    # one learnable attention-sink logit per query head (gpt-oss style): each row's softmax also runs
    # over the sink, which takes probability and adds no value (`make_sinks`, KernelSpec.sinks)
    sinks: bool = False

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise LongcaError(f"unknown direction {self.direction!r}; known: {', '.join(DIRECTIONS)}")
        if self.dtype not in TORCH_DTYPES:
            raise LongcaError(f"unknown dtype {self.dtype!r}; known: bfloat16, float16, float32, float8_e4m3fn "
                              f"(fp8, fp8_e4m3), float8_e5m2 (fp8_e5m2)")
        object.__setattr__(self, "dtype", TORCH_DTYPES[self.dtype])
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise LongcaError(f"unknown device {self.device!r}; expected cpu or cuda")
        for name in ("seqlen", "heads_q", "heads_kv", "head_dim", "batch", "world_size"):
            if int(getattr(self, name)) <= 0:
                raise LongcaError(f"{name} must be positive, got {getattr(self, name)}")
        if self.head_dim_v is not None:
            if isinstance(self.head_dim_v, bool) or not isinstance(self.head_dim_v, int) or self.head_dim_v <= 0:
                raise LongcaError(f"head_dim_v must be a positive integer, got {self.head_dim_v!r}")
            if self.head_dim_v == self.head_dim:  # one spelling per case: the same head dim is None
                object.__setattr__(self, "head_dim_v", None)
        for flag in ("deterministic", "sinks"):
            if not isinstance(getattr(self, flag), bool):
                raise LongcaError(f"{flag} must be true or false, got {getattr(self, flag)!r}")
        if self.deterministic and self.direction == "fwd":
            raise LongcaError("deterministic applies to the backward (the forward is deterministic); "
                              "use direction bwd or fwdbwd")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise LongcaError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.heads_q % self.heads_kv:
            raise LongcaError(f"heads {self.heads_q}:{self.heads_kv}: query heads must be a multiple of KV heads")

    @property
    def dv(self) -> int:
        """V's head dim: `head_dim_v`, else `head_dim`."""
        return self.head_dim_v or self.head_dim

    @property
    def head_dims_label(self) -> str:
        """`128`, or `192/128` when V's head dim differs."""
        return str(self.head_dim) if self.head_dim_v is None else f"{self.head_dim}/{self.head_dim_v}"

    @property
    def fp8(self) -> bool:
        return self.dtype in FP8_DTYPES

    @property
    def input_dtype(self) -> str:
        """The dtype of the inputs longca makes: bfloat16 for an FP8 problem (the kernel quantizes them
        in `prepare`, `quantize_fp8`), else the problem's dtype."""
        return "bfloat16" if self.fp8 else self.dtype

    @property
    def torch_dtype(self):
        """The torch dtype of the inputs (`input_dtype`)."""
        import torch

        return getattr(torch, self.input_dtype)

    @property
    def device_type(self) -> str:
        return self.device.split(":")[0]

    def with_(self, **changes: Any) -> Problem:
        return replace(self, **changes)

    def key(self) -> str:
        """Identity of the case, used by --resume to skip what is done."""
        fields = {k: v for k, v in asdict(self).items()
                  if not (k in NEW_FIELDS_DEFAULTS and v == NEW_FIELDS_DEFAULTS[k])}
        return json.dumps(fields, sort_keys=True, default=str)


def _sample_documents(problem: Problem, registry: Registry, rng: np.random.Generator, sample: int = 0):
    sampler = registry.sampler(problem.sampler)
    given = {**problem.sampler_params, **({"draw": sample} if sampler.takes_draw else {})}

    def draw(total: int) -> np.ndarray:
        try:
            lengths = sampler.sample(total, rng, **given)
        except TypeError as exc:
            known = ", ".join(sampler.params) or "none"
            raise LongcaError(f"sampler {problem.sampler!r}: bad parameters {problem.sampler_params} "
                              f"({exc}); it accepts: {known}") from None
        reason = lengths_problem(lengths, total)
        if reason:
            raise LongcaError(f"sampler {problem.sampler!r} of {_plugin(registry, 'samplers', problem.sampler)}: "
                              f"{reason}")
        return np.asarray(lengths, dtype=np.int64)

    return draw


def lengths_problem(lengths: Any, total: int) -> str | None:
    """Why a sampler's answer is not document lengths for `total` tokens, or None."""
    arr = np.asarray(lengths)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        return f"returned {type(lengths).__name__} {arr.dtype} of shape {arr.shape}; expected a 1-D integer array"
    if len(arr) == 0 or (arr <= 0).any():
        return f"returned {len(arr)} lengths, {int((arr <= 0).sum())} of them not positive; every length must be >= 1"
    if int(arr.sum()) != total:
        return f"returned {len(arr)} lengths summing to {int(arr.sum())}; they must sum to the {total} tokens asked for"
    return None


def plugin_label(registry: Registry, kind: str, name: str) -> str:
    """`plugin NAME (distribution)`: who registered a spec, for error messages."""
    info = registry.entry(kind, name).plugin
    return f"plugin {info.name} ({info.distribution})"


_plugin = plugin_label


def check_mask_params(problem: Problem, registry: Registry | None = None) -> None:
    """Unknown mask parameters and lengths the mask cannot take are errors, before anything runs."""
    spec = (registry or get_registry()).mask(problem.mask)
    for name in problem.mask_params:
        if spec.aliases.get(name, name) not in spec.params:
            known = ", ".join(spec.params) or "none"
            raise LongcaError(f"mask {problem.mask!r} has no parameter {name!r}; it takes: {known}")
    if problem.seqlen % spec.seqlen_multiple:
        raise LongcaError(f"mask {problem.mask!r} needs a sequence length that is a multiple of "
                          f"{spec.seqlen_multiple}, got {problem.seqlen}")


def build_mask(problem: Problem, sample: int = 0, registry: Registry | None = None) -> Mask:
    """The mask of a problem; `sample` selects another draw with the same seed (document masks)."""
    registry = registry or get_registry()
    check_mask_params(problem, registry)
    spec = registry.mask(problem.mask)
    rng = np.random.default_rng([problem.seed, sample])
    params = {spec.aliases.get(k, k): v for k, v in problem.mask_params.items()}
    ctx = MaskContext(problem.seqlen, rng, _sample_documents(problem, registry, rng, sample), params,
                      problem.heads_q, problem.heads_kv)
    try:
        mask = spec.build(ctx)
    except LongcaError:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken builder is the plugin's fault: name it
        raise LongcaError(f"mask {spec.name!r} of {_plugin(registry, 'masks', spec.name)}: build raised "
                          f"{type(exc).__name__}: {exc}") from None
    reason = mask_problem(mask, problem.seqlen, problem.heads_q, spec.name)
    if reason:
        raise LongcaError(f"mask {spec.name!r} of {_plugin(registry, 'masks', spec.name)}: {reason}")
    if spec.uses_documents:
        mask.params.setdefault("sampler", problem.sampler)
    return mask


def bounded_build(problem: Problem, registry: Registry, seconds: float | None = None) -> Mask:
    """`build_mask` in this process, bounded in time (`longca.bounded`): a builder that never
    returns is a HookHung naming the mask's plugin."""
    from .bounded import call_bounded

    registry.mask(problem.mask)  # an unknown name is its own error, not a hang
    return call_bounded(lambda: build_mask(problem, registry=registry),
                        f"the builder of mask {problem.mask!r} ({plugin_label(registry, 'masks', problem.mask)})",
                        seconds)


def make_inputs(problem: Problem, sample: int = 0, requires_grad: bool = False):
    """Seeded random q, k (B, S, H, head_dim) and v (B, S, Hkv, dv) in the problem's input dtype
    (bfloat16 for FP8 problems: the same tensors as the bfloat16 problem) on its device."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(problem.seed * 1000003 + sample)
    shapes = [(problem.batch, problem.seqlen, h, d)
              for h, d in ((problem.heads_q, problem.head_dim), (problem.heads_kv, problem.head_dim),
                           (problem.heads_kv, problem.dv))]
    return [seeded_normal(problem, shape, gen).requires_grad_(requires_grad) for shape in shapes]


def make_sinks(problem: Problem, sample: int = 0, requires_grad: bool = False):
    """The case's learnable sink logits: (heads_q,) float32 on its device, seeded like the inputs,
    around 0 (a sink then takes about as much weight as one more key)."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(problem.seed * 1000003 + sample + 11)
    return torch.randn(problem.heads_q, generator=gen).to(problem.device).requires_grad_(requires_grad)


def seeded_normal(problem: Problem, shape: tuple[int, ...], gen):
    """A normal tensor drawn from the CPU generator `gen`, in the problem's dtype on its device.

    On a GPU it is drawn there from a seed `gen` gives (large tensors would be slow on the host);
    the same seed gives the same tensor on every rank of a CP group."""
    import torch

    if problem.device_type == "cuda":
        seed = int(torch.randint(1 << 62, (1,), generator=gen))
        gen_dev = torch.Generator(device=problem.device).manual_seed(seed)
        return torch.randn(shape, generator=gen_dev, device=problem.device, dtype=problem.torch_dtype)
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(problem.torch_dtype)
