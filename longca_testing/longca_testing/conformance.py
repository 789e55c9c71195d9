"""Conformance suite every kernel plugin runs: spec well formed, claims honoured, results correct.

The suite is a list of named cases (`conformance_cases`), each a check that raises
`AssertionError` with a message naming what is wrong, or `ConformanceSkip` when it cannot run
here (no CUDA, kernel library missing). Two ways to run it from a plugin's tests:

    from longca_testing import conformance_tests
    test_conformance = conformance_tests("mykernel")      # one pytest test per case

    from longca_testing import run_conformance
    def test_conformance():
        run_conformance("mykernel")                       # all cases in one test

Cases: `registered` (the kernel is there, under one plugin that loaded without errors), `name`,
`spec` (fields well formed), `available` (the probe answers None or a reason), `refusals-DEV`
(every mask, dtype, head dim, GQA, direction and device the spec does not claim is refused with a
reason), `mask-M-DIR-DEV` (every claimed mask runs fwd and bwd with `--check` against the float32
reference in the device's primary dtype: float32 on CPU, bfloat16 on CUDA, when claimed),
`dtype-D-DIR-DEV` (every other claimed dtype runs), `sinks-M-DIR-DEV` (a kernel with `sinks=True`
runs learnable sinks on the variants' mask and on share_question, against the reference with sinks,
dsinks included; a refusal is a skip), `forward_lse-DEV` / `backward_lse-DEV`
(the context-parallel primitives, if declared, match `longca.reference` on the claimed masks'
slices, whole and cropped as ring and all-gather strategies crop them), `cp_merge-DEV` (both
primitives used as every CP strategy uses them: uneven query and key pieces, forward_lse on each,
lse merge, backward_lse on each with the merged out and lse, summed gradients vs the reference),
`timing-integrity-DEV` (the timed forward on fresh inputs prepared again: no output cached per
buffer or per value, no work past the timer, work that grows with the heads, timers not patched;
`timing_integrity.py`, docs/timing-integrity.md), `work-scaling-DEV` (four times the heads take
clearly longer: the timed call does work that grows with the problem).

A claimed case must run and match the reference; the one exception is a refusal by the
kernel's `supports(problem)` with a reason, for what a spec cannot declare per device (no
backward on CPU, no float32 on this GPU): that case is skipped and the reason shown. The forward
of every claimed mask in the device's primary dtype may not be refused.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from longca.errors import LongcaError, UnsupportedError
from longca.plugins import WILDCARDS, Registry, get_registry, validate
from longca.problem import Problem, build_mask, make_inputs
from longca.results import ResultRow
from longca.specs import DEVICES, DTYPES, KernelSpec
from longca_runner.measure import TOLERANCE, RunOptions, mask_refusal, run_problem

log = logging.getLogger(__name__)
DEVICE_ORDER = {"cpu": ("float32", "bfloat16", "float16"), "cuda": ("bfloat16", "float16", "float32")}
HEAD_DIM_PREFERENCE = (64, 128, 32, 96, 256)
BLOCK_PREFERENCE = (64, 128)  # block-sparse masks: tokens per block
OPTIONS = RunOptions(warmup=0, repeat=2, samples=1, check=True)  # two timed calls: their checksums must agree


class ConformanceSkip(Exception):
    """A case that cannot run here (no CUDA, the kernel's library missing); the message says why."""


@dataclass(frozen=True)
class Variant:
    """A problem shape beyond the per-mask cases: lengths past every tile and chunk size, odd
    lengths, ragged documents (down to one token), other seeds, GQA ratios, batch > 1."""

    label: str
    seqlen: int
    heads: tuple[int, int]
    batch: int = 1
    seed: int = 1
    heavy: bool = False  # marked `longca_heavy`; on CUDA only, where it is cheap


VARIANTS = (
    Variant("s1152", 1152, (4, 2), seed=1),  # past 1024: tiles, splits and chunks of every kernel we know
    Variant("s997-b2-gqa3", 997, (3, 1), batch=2, seed=2),  # a prime length, two sequences, 3 query heads per KV
    Variant("s515-mha", 515, (4, 4), seed=3),
    Variant("s8195-b2-gqa8", 8195, (16, 2), batch=2, seed=4, heavy=True),
)


@dataclass(frozen=True)
class Settings:
    """Problem sizes of the suite; a kernel that needs others passes them to `conformance_tests`."""

    seqlen: int = 256
    head_dim: int | None = None  # None: 64 if allowed, else the first declared head dim
    block: int | None = None  # block-sparse masks; None: 64 if supports() allows, else 128
    heads: tuple[int, int] = (4, 2)  # (4, 4) for kernels without GQA
    seed: int = 0
    variants: tuple[Variant, ...] = VARIANTS  # the shape-* cases


@dataclass(frozen=True)
class Case:
    """One conformance check of one kernel; `run(registry)` returns the result rows it produced."""

    id: str
    kernel: str
    check: Callable[[Registry], list[dict]] = field(repr=False)
    device: str | None = None
    heavy: bool = False  # pytest marker `longca_heavy`

    def run(self, registry: Registry | None = None) -> list[dict]:
        return self.check(registry or get_registry())


# ---------------------------------------------------------------- problems


def primary_dtype(spec: KernelSpec, device: str) -> str:
    """The dtype a device's cases run in: float32 on CPU, bfloat16 on CUDA, when claimed."""
    return next(d for d in DEVICE_ORDER[device] + tuple(spec.dtypes) if d in spec.dtypes)


def _head_dims(spec: KernelSpec, settings: Settings) -> list[int]:
    """`settings.head_dim`, else the declared head dims in preference order."""
    if settings.head_dim:
        return [settings.head_dim]
    pairs = spec.head_dim_pairs()
    if pairs is None:
        return list(HEAD_DIM_PREFERENCE)
    same = [d for d, dv in pairs if d == dv]  # the suite's problems have V's head dim equal to Q/K's
    return [d for d in HEAD_DIM_PREFERENCE if d in same] + [d for d in same if d not in HEAD_DIM_PREFERENCE]


def _accepted(spec: KernelSpec, problem: Problem) -> bool:
    """Whether supports() takes `problem` (True when the kernel has no supports())."""
    if spec.supports is None:
        return True
    try:
        return spec.supports(problem) is None
    except Exception:  # noqa: BLE001 - a raising supports() is reported by the case itself
        return False


def small_problem(spec: KernelSpec, mask: str, direction: str, device: str = "cpu",
                  dtype: str | None = None, registry: Registry | None = None,
                  settings: Settings = Settings(), **changes: Any) -> Problem:
    """A small case of `mask` within the kernel's declared capabilities (sizes from `settings`).

    Head dim and, for block-sparse masks, block size are the first (in preference order) that
    supports() accepts: a cut-down build without head_dim 64 gets 128, a kernel of 128-token
    blocks gets block 128. With none accepted, the first ones (the case then reports the refusal).
    """
    registry = registry or get_registry()
    multiple = registry.mask(mask).seqlen_multiple if mask in registry.entries["masks"] else 1
    seqlen = -(-max(settings.seqlen, multiple) // multiple) * multiple
    hq, hkv = settings.heads
    problem = Problem(
        kernel=spec.name, mask=mask, seqlen=seqlen, heads_q=hq, heads_kv=hkv if spec.gqa else hq,
        head_dim=_head_dims(spec, settings)[0], dtype=dtype or primary_dtype(spec, device),
        direction=direction, device=device, seed=settings.seed, sampler="uniform",
        sampler_params={"min_len": max(1, seqlen // 16), "max_len": max(1, seqlen // 2)})
    problem = problem.with_(**changes) if changes else problem
    head_dims = [problem.head_dim] if "head_dim" in changes else _head_dims(spec, settings)
    blocks: list[int | None] = [None]
    if mask.startswith("block_sparse") and "mask_params" not in changes:
        blocks = [settings.block] if settings.block else list(BLOCK_PREFERENCE)
    candidates = [problem.with_(head_dim=d, mask_params={"block": b} if b else problem.mask_params)
                  for b in blocks for d in head_dims]
    return next((c for c in candidates if _accepted(spec, c)), candidates[0])


def _describe(problem: Problem) -> str:
    return (f"{problem.kernel}: mask {problem.mask} {problem.direction} on {problem.device} "
            f"({problem.dtype}, S={problem.seqlen}, heads {problem.heads_q}:{problem.heads_kv}, "
            f"head_dim {problem.head_dim})")


# ---------------------------------------------------------------- helpers of the checks


def registered_spec(registry: Registry, kind: str, name: str) -> Any:
    """The spec of `name` (kind: kernels, masks, samplers, strategies); an unknown or conflicting
    name fails with every plugin load error."""
    try:
        return registry.entry(kind, name).spec
    except LongcaError as exc:
        errors = [f"  {p.distribution} ({p.name}): {e}" for p in registry.plugins for e in p.errors]
        detail = ("\nplugin load errors:\n" + "\n".join(errors)) if errors else ""
        raise AssertionError(f"{exc}{detail}") from None


def check_registered_kind(kind: str, name: str, registry: Registry) -> list[dict]:
    """`name` is registered by exactly one plugin, and that plugin loaded without errors."""
    registered_spec(registry, kind, name)
    plugin = registry.entries[kind][name].plugin
    if plugin.errors:
        raise AssertionError(f"{KIND_LABEL[kind]} {name}: its plugin {plugin.distribution} ({plugin.name}) has "
                             f"load errors: " + "; ".join(plugin.errors))
    return []


def common_spec_problems(spec: Any, call: str, signature: str) -> list[str]:
    """What every registered spec needs: a description, its callable `call`, params as name -> meaning."""
    problems = []
    if not str(getattr(spec, "description", "")).strip():
        problems.append("description is empty")
    if not callable(getattr(spec, call, None)):
        problems.append(f"{call} must be callable: {signature}")
    params = getattr(spec, "params", {})
    if not isinstance(params, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in params.items()):
        problems.append("params must map each parameter name to what it means (str -> str)")
    return problems


def kind_cases(kind: str, name: str, registry: Registry,
               checks: list[tuple[str, Callable[[str, Registry], list[dict]]]]) -> list[Case]:
    """`registered`, then each `(label, check(name, registry))` once the name is registered."""
    cases = [Case("registered", name, lambda r: check_registered_kind(kind, name, r))]
    if name not in registry.entries[kind]:
        return cases
    return cases + [Case(label, name, partial(check, name)) for label, check in checks]


KIND_LABEL = {"kernels": "kernel", "masks": "mask", "samplers": "sampler", "strategies": "CP strategy"}


def _kernel(registry: Registry, name: str) -> KernelSpec:
    return registered_spec(registry, "kernels", name)


def _need_device(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise ConformanceSkip("no CUDA GPU visible: GPU cases skipped")


def _need_available(spec: KernelSpec) -> None:
    try:
        reason = spec.available()
    except Exception as exc:  # noqa: BLE001 - reported by the `available` case
        reason = f"available() raised {type(exc).__name__}: {exc}"
    if reason:
        raise ConformanceSkip(f"kernel {spec.name} is unavailable here: {reason}")


def _probe_supports(spec: KernelSpec, problem: Problem) -> str | None:
    """supports(problem) must return None or a non-empty reason, and never raise."""
    if spec.supports is None:
        return None
    try:
        answer = spec.supports(problem)
    except Exception as exc:  # noqa: BLE001 - whatever the plugin raises becomes the suite's assertion
        raise AssertionError(f"{_describe(problem)}: supports() raised {type(exc).__name__}: {exc}; "
                             f"it must return None or a reason string") from None
    if answer is not None and not (isinstance(answer, str) and answer.strip()):
        raise AssertionError(f"{_describe(problem)}: supports() returned {answer!r}; "
                             f"expected None (supported) or a non-empty reason string")
    return answer


def _run(problem: Problem, registry: Registry) -> ResultRow:
    try:
        return run_problem(problem, OPTIONS, registry)
    except Exception as exc:  # noqa: BLE001 - run_problem only raises for input errors
        raise AssertionError(f"{_describe(problem)}: the run raised {type(exc).__name__}: {exc}") from None


def _expect_ok(spec: KernelSpec, problem: Problem, registry: Registry, what: str, may_refuse: bool) -> dict:
    """The run must be ok. A refusal (supports(), supports_mask() or prepare raising
    UnsupportedError) is a skip where `may_refuse` or where the mask is claimed only through a
    wildcard (a planner may not map every mask of a group), else a failure."""
    may_refuse = may_refuse or problem.mask not in spec.masks
    refusal = _probe_supports(spec, problem)
    if refusal and may_refuse:
        raise ConformanceSkip(f"{_describe(problem)}: refused by supports(): {refusal}")
    if refusal:
        raise AssertionError(f"{_describe(problem)}: the spec claims {what} but supports() refuses its forward "
                             f"in the primary dtype: {refusal}. Remove the claim from the KernelSpec, or pass "
                             f"sizes the kernel takes to conformance_tests(..., seqlen=, head_dim=, block=)")
    if problem.direction == "fwd":
        _check_output(spec, problem, registry)
    row = _run(problem, registry)
    if row["status"] == "unsupported" and may_refuse:
        raise ConformanceSkip(f"{_describe(problem)}: refused once the mask was built: {row['reason']}")
    if row["status"] != "ok":
        detail = row.get("rel_err_detail")
        errors = f" (relative errors: {', '.join(f'{k} {v:.3g}' for k, v in detail.items())})" if detail else ""
        where = _wrong_rows(spec, problem, registry) if row["status"] == "incorrect" else ""
        raise AssertionError(f"{_describe(problem)}: {row['status']}: {row['reason']}{errors}{where}")
    return row.as_dict()


def _forward(spec: KernelSpec, problem: Problem, registry: Registry):
    """(out, q, k, v, mask) of one forward call, outside the measurement; None if the call raises
    (the run then reports the error as a row)."""
    try:
        mask = build_mask(problem, 0, registry)
        q, k, v = make_inputs(problem)
        with torch.no_grad():
            return spec.run(spec.prepare(problem, mask, q, k, v), q, k, v), q, k, v, mask
    except Exception:  # noqa: BLE001 - reported by the run itself
        return None


def _check_output(spec: KernelSpec, problem: Problem, registry: Registry) -> None:
    """run() returns a tensor of q's shape (batch, seqlen, heads_q, head_dim), dtype and device."""
    called = _forward(spec, problem, registry)
    if called is None:
        return
    out, q, _, v, _ = called
    want = (problem.batch, problem.seqlen, problem.heads_q, v.shape[-1])
    if not isinstance(out, torch.Tensor):
        raise AssertionError(f"{_describe(problem)}: run() returned a {type(out).__name__}; expected the output "
                             f"tensor (batch, seqlen, heads_q, head_dim) = {want}")
    if tuple(out.shape) != want:
        hint = ""
        if tuple(out.shape) == (want[0], want[2], want[1], want[3]):
            hint = ": that is (batch, heads, seqlen, head_dim); longca's layout is (batch, seqlen, heads, head_dim)"
        raise AssertionError(f"{_describe(problem)}: run() returned shape {tuple(out.shape)}, expected "
                             f"(batch, seqlen, heads_q, head_dim) = {want}{hint}")
    if out.dtype != q.dtype or out.device != q.device:
        raise AssertionError(f"{_describe(problem)}: run() returned {out.dtype} on {out.device}; expected the "
                             f"inputs' {q.dtype} on {q.device}")


def _wrong_rows(spec: KernelSpec, problem: Problem, registry: Registry) -> str:
    """Where the forward output differs from the reference: which query rows, and batch entries."""
    from longca import reference

    called = _forward(spec, problem, registry)
    if called is None:
        return ""
    out, q, k, v, mask = called
    ref = reference.forward_lse(q.float(), k.float(), v.float(), mask)[0]
    diff = (out.float() - ref).abs().amax(dim=(2, 3))  # (batch, rows)
    bad = diff > TOLERANCE[problem.dtype] * (1 + ref.abs().amax(dim=(2, 3)))
    rows = torch.nonzero(bad.any(0)).flatten().tolist()
    if not rows:
        return " (the forward output agrees: the gradients differ)"
    batches = torch.nonzero(bad.any(1)).flatten().tolist()
    return (f"; forward output wrong on {len(rows)} of {problem.seqlen} query rows, from row {rows[0]} to "
            f"{rows[-1]}" + (f", batch entries {batches}" if problem.batch > 1 else ""))


def _expect_refused(problem: Problem, registry: Registry, what: str) -> dict:
    row = _run(problem, registry)
    if row["status"] != "unsupported" or not str(row.get("reason") or "").strip():
        raise AssertionError(f"{_describe(problem)}: {what} is not claimed, so it must be refused with a reason; "
                             f"got status {row['status']!r}, reason {row.get('reason')!r}")
    return row.as_dict()


# ---------------------------------------------------------------- the checks


def check_registered(name: str, registry: Registry) -> list[dict]:
    """The kernel is registered by exactly one plugin, and that plugin loaded without errors."""
    return check_registered_kind("kernels", name, registry)


def check_spec(name: str, registry: Registry) -> list[dict]:
    """Every field of the KernelSpec well formed, and every claimed mask registered."""
    spec = _kernel(registry, name)
    problems = []
    invalid = validate("kernels", spec)
    if invalid:
        problems.append(invalid)
    if not str(spec.description).strip():
        problems.append("description is empty")
    masks = tuple(spec.masks)
    if not masks:
        problems.append("masks is empty: a kernel claims at least one mask")
    unknown = [m for m in masks if m not in registry.entries["masks"] and m not in WILDCARDS]
    if unknown:
        problems.append(f"claims masks no plugin registered: {unknown}; known: {', '.join(registry.names('masks'))}")
    if len(set(masks)) != len(masks):
        problems.append(f"masks has duplicates: {list(masks)}")
    if not spec.dtypes or not set(spec.dtypes) <= set(DTYPES):
        problems.append(f"dtypes {spec.dtypes!r} must be a non-empty subset of {DTYPES}")
    if not spec.devices or not set(spec.devices) <= set(DEVICES):
        problems.append(f"devices {spec.devices!r} must be a non-empty subset of {DEVICES}")
    def head_dim_ok(d: object) -> bool:
        if isinstance(d, tuple):
            return len(d) == 2 and all(head_dim_ok(x) for x in d)
        return isinstance(d, int) and not isinstance(d, bool) and d > 0

    if spec.head_dims is not None and (not spec.head_dims or not all(head_dim_ok(d) for d in spec.head_dims)):
        problems.append(f"head_dims {spec.head_dims!r} must be None (any) or positive integers and "
                        f"(Q/K, V) pairs of them")
    if not isinstance(spec.deterministic, (bool, str)):
        problems.append(f"deterministic {spec.deterministic!r} must be true, false or the reason it is not offered")
    cc = spec.min_compute_capability
    if cc is not None and not (len(cc) == 2 and all(isinstance(x, int) for x in cc)):
        problems.append(f"min_compute_capability {cc!r} must be None or (major, minor)")
    for attr in ("available", "backend"):
        if not callable(getattr(spec, attr)):
            problems.append(f"{attr} must be callable")
    for attr in ("supports", "forward_lse", "backward_lse"):
        if getattr(spec, attr) is not None and not callable(getattr(spec, attr)):
            problems.append(f"{attr} must be None or callable")
    if spec.backward_lse is not None and spec.forward_lse is None:
        problems.append("backward_lse is declared without forward_lse")
    if problems:
        raise AssertionError(f"kernel {name}: malformed KernelSpec:\n  " + "\n  ".join(problems))
    return []


def check_available(name: str, registry: Registry) -> list[dict]:
    """available() returns None or a non-empty reason, and does not raise."""
    spec = _kernel(registry, name)
    try:
        answer = spec.available()
    except Exception as exc:  # noqa: BLE001 - whatever the plugin raises becomes the suite's assertion
        raise AssertionError(f"kernel {name}: available() raised {type(exc).__name__}: {exc}; it must "
                             f"return None or the reason (import the library inside a try)") from None
    if answer is not None and not (isinstance(answer, str) and answer.strip()):
        raise AssertionError(f"kernel {name}: available() returned {answer!r}; expected None or a reason string")
    if answer:
        raise ConformanceSkip(f"kernel {name} is unavailable here: {answer}")
    try:
        backend = spec.backend()
    except Exception as exc:  # noqa: BLE001 - whatever the plugin raises becomes the suite's assertion
        raise AssertionError(f"kernel {name}: backend() raised {type(exc).__name__}: {exc}") from None
    if not isinstance(backend, str):
        raise AssertionError(f"kernel {name}: backend() returned {backend!r}; expected a string")
    return []


def check_refusals(name: str, device: str, registry: Registry, settings: Settings) -> list[dict]:
    """Every mask, dtype, head dim, GQA, direction and device not claimed is refused with a reason."""
    _need_device(device)
    spec = _kernel(registry, name)
    claimed = registry.claimed_masks(spec.masks)
    known = claimed[0] if claimed and claimed[0] in registry.entries["masks"] else "full"
    base = small_problem(spec, known, "fwd", device, registry=registry, settings=settings)
    cases: list[tuple[Problem, str]] = []
    if device not in spec.devices:
        cases.append((base, f"device {device}"))
    else:
        cases += [(small_problem(spec, m, "fwd", device, registry=registry, settings=settings), f"mask {m}")
                  for m in registry.names("masks") if m not in claimed]
        cases += [(base.with_(dtype=d), f"dtype {d}") for d in DTYPES if d not in spec.dtypes]
        if spec.head_dims is not None:
            other = next(d for d in (8, 16, 24, 40, 48, 72, 80, 160, 192, 512) if not spec.takes_head_dims(d))
            cases.append((base.with_(head_dim=other), f"head_dim {other}"))
            odd = next(p for p in ((128, 24), (64, 40), (256, 8)) if not spec.takes_head_dims(*p))
            cases.append((base.with_(head_dim=odd[0], head_dim_v=odd[1]), f"head dims {odd[0]}/{odd[1]}"))
        if spec.deterministic is not True and spec.backward:
            cases.append((base.with_(direction="bwd", deterministic=True), "deterministic backward"))
        if spec.sinks is not True:
            cases.append((base.with_(sinks=True), "learnable sinks"))
        if not spec.gqa:
            cases.append((base.with_(heads_q=4, heads_kv=2), "GQA"))
        if not spec.backward:
            cases.append((base.with_(direction="bwd"), "backward"))
    return [_expect_refused(problem, registry, what) for problem, what in cases]


def check_mask(name: str, mask: str, direction: str, device: str, registry: Registry,
               settings: Settings) -> list[dict]:
    """A claimed mask runs in the device's primary dtype and matches the reference.

    The forward must run; supports() may refuse the backward on this device (with a reason),
    which skips the case: a spec declares `backward` once for every device.
    """
    _need_device(device)
    spec = _kernel(registry, name)
    _need_available(spec)
    problem = small_problem(spec, mask, direction, device, registry=registry, settings=settings)
    return [_expect_ok(spec, problem, registry, f"mask {mask}", may_refuse=direction != "fwd")]


def variant_mask(spec: KernelSpec, registry: Registry) -> str:
    """The mask variants run on: causal_document (ragged documents) if claimed, else causal, else the first."""
    claimed = registry.claimed_masks(spec.masks)
    return next((m for m in ("causal_document", "causal") if m in claimed), claimed[0])


def variant_problem(spec: KernelSpec, variant: Variant, direction: str, device: str, registry: Registry,
                    settings: Settings) -> Problem:
    mask = variant_mask(spec, registry)
    hq, hkv = variant.heads
    problem = small_problem(spec, mask, direction, device, registry=registry, settings=settings)
    seqlen = -(-variant.seqlen // registry.mask(mask).seqlen_multiple) * registry.mask(mask).seqlen_multiple
    return problem.with_(seqlen=seqlen, heads_q=hq, heads_kv=hkv if spec.gqa else hq, batch=variant.batch,
                         seed=variant.seed, sampler_params={"min_len": 1, "max_len": max(1, seqlen // 3)})


def check_variant(name: str, variant: Variant, direction: str, device: str, registry: Registry,
                  settings: Settings) -> list[dict]:
    """A claimed mask at another shape runs and matches the reference, unless supports() refuses
    that shape with a reason (a skip: lengths or head counts a kernel cannot take)."""
    _need_device(device)
    spec = _kernel(registry, name)
    _need_available(spec)
    problem = variant_problem(spec, variant, direction, device, registry, settings)
    return [_expect_ok(spec, problem, registry, f"shape {variant.label}", may_refuse=True)]


def dtype_mask(spec: KernelSpec, registry: Registry) -> str:
    """The mask the extra-dtype cases run on: causal if claimed, else the first claimed mask."""
    claimed = registry.claimed_masks(spec.masks)
    return "causal" if "causal" in claimed else claimed[0]


def check_dtype(name: str, dtype: str, direction: str, device: str, registry: Registry,
                settings: Settings) -> list[dict]:
    """A claimed dtype beyond the device's primary one runs and matches the reference, unless
    supports() refuses it on this device with a reason (a skip)."""
    _need_device(device)
    spec = _kernel(registry, name)
    _need_available(spec)
    problem = small_problem(spec, dtype_mask(spec, registry), direction, device, dtype, registry, settings)
    return [_expect_ok(spec, problem, registry, f"dtype {dtype}", may_refuse=True)]


def sinks_masks(spec: KernelSpec, registry: Registry) -> list[str]:
    """The masks learnable sinks are checked on: the variants' mask, and share_question where claimed (a
    mask that planning kernels run as several calls, whose sinks go through the merged lse)."""
    claimed = registry.claimed_masks(spec.masks)
    return list(dict.fromkeys([variant_mask(spec, registry), *(m for m in ("share_question",) if m in claimed)]))


def check_sinks(name: str, mask: str, direction: str, device: str, registry: Registry,
                settings: Settings) -> list[dict]:
    """A kernel that takes learnable sinks (`sinks=True`) runs a sinks problem and matches the reference
    with sinks (the backward's dsinks too); a refusal of this case (supports, prepare) is a skip."""
    _need_device(device)
    spec = _kernel(registry, name)
    _need_available(spec)
    problem = small_problem(spec, mask, direction, device, registry=registry, settings=settings).with_(sinks=True)
    return [_expect_ok(spec, problem, registry, f"sinks on {mask}", may_refuse=True)]


def check_deterministic(name: str, device: str, registry: Registry, settings: Settings) -> list[dict]:
    """A kernel that offers a deterministic backward (`deterministic=True`) gives the same gradients, bit
    for bit, in two backward calls on the same inputs, and they match the reference; a refusal of this
    problem (a library without the flag here) is a skip with its reason."""
    from longca_runner.measure import seeded_dout, unsupported_reason
    from longca_runner.measure.checks import rel_err

    _need_device(device)
    spec = _kernel(registry, name)
    _need_available(spec)
    problem = small_problem(spec, dtype_mask(spec, registry), "bwd", device, registry=registry,
                            settings=settings).with_(deterministic=True)
    reason = unsupported_reason(spec, problem, registry)
    if reason:
        raise ConformanceSkip(f"kernel {name}: deterministic backward refused here: {reason}")
    mask = build_mask(problem, 0, registry)
    q, k, v = make_inputs(problem, 0, requires_grad=True)
    dout = seeded_dout(problem)
    try:
        prepared = spec.prepare(problem, mask, q, k, v)
    except UnsupportedError as exc:
        raise ConformanceSkip(f"kernel {name}: deterministic backward refused in prepare: {exc}") from None
    out = spec.run(prepared, q, k, v)
    first, second = (torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) for _ in range(2))
    differ = [n for n, a, b in zip(("dq", "dk", "dv"), first, second, strict=True) if not torch.equal(a, b)]
    if differ:
        raise AssertionError(f"kernel {name}: deterministic backward gave different {', '.join(differ)} in two "
                             f"calls on the same inputs ({problem.mask}, {device})")
    from longca.reference import attention as reference_attention

    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    want = torch.autograd.grad(reference_attention(qf, kf, vf, mask), (qf, kf, vf), dout.float())
    errors = {n: rel_err(g, w) for n, g, w in zip(("dq", "dk", "dv"), first, want, strict=True)}
    tolerance = TOLERANCE[problem.dtype]
    if not all(e <= tolerance for e in errors.values()):  # NaN fails too
        raise AssertionError(f"kernel {name}: deterministic backward differs from the reference: {errors} > "
                             f"{tolerance:g}")
    return []


PRIMITIVE_CHECKS = {"forward_lse": "forward_lse", "backward_lse": "backward_lse",
                    "cp_merge": "forward_lse + lse merge + backward_lse with the merged out and lse"}


def check_primitives(name: str, device: str, registry: Registry, settings: Settings, which: str) -> list[dict]:
    """The CP primitives against longca.reference on the claimed masks' slices.

    `which`: `forward_lse` or `backward_lse` on whole and cropped pieces of each mask, or
    `cp_merge`: both used together the way strategies use them (`compare_cp_pieces`).
    """
    from longca_testing.primitives import BackwardRefused, compare_cp_pieces, compare_primitives

    _need_device(device)
    spec = _kernel(registry, name)
    _need_available(spec)
    static = [m for m in registry.claimed_masks(spec.masks) if m in registry.entries["masks"]
              and registry.mask(m).kind != "block_sparse"]
    if not static:
        raise ConformanceSkip(f"kernel {name} claims no mask with slices to test its primitives on")
    # masks that need a longer sequence (block_causal_document) only when nothing else is claimed
    static = [m for m in static if registry.mask(m).seqlen_multiple <= settings.seqlen] or static
    failures, refusals = [], []
    for mask_name in static:  # a strategy asks supports() first too (longca_cp.inner): honour refusals
        problem = small_problem(spec, mask_name, "fwd" if which == "forward_lse" else "bwd", device,
                                registry=registry, settings=settings)
        refusal = _probe_supports(spec, problem)
        if refusal:
            refusals.append(f"{_describe(problem)}: refused by supports(): {refusal}")
            continue
        mask = build_mask(problem, 0, registry)
        refusal = mask_refusal(spec, problem, mask)
        if refusal:
            refusals.append(f"{_describe(problem)}: refused by supports_mask(): {refusal}")
            continue
        q, k, v = make_inputs(problem.with_(direction="fwd"))
        tolerance = TOLERANCE[problem.dtype]
        try:
            if which == "cp_merge":
                failures += compare_cp_pieces(spec, q, k, v, mask, tolerance)
            else:
                failures += compare_primitives(spec, q, k, v, mask, tolerance, which == "backward_lse")
        except BackwardRefused as refused:  # its forward parts agreed; a CP backward row says unsupported
            refusals.append(f"backward_lse raised UnsupportedError (forward parts checked): {refused}")
    if refusals and len(refusals) == len(static):
        raise ConformanceSkip(refusals[0] + (f" (and {len(refusals) - 1} more masks)" if len(refusals) > 1 else ""))
    if failures:
        raise AssertionError(f"kernel {name}: {PRIMITIVE_CHECKS[which]} on {device} "
                             f"disagrees with longca.reference:\n  " + "\n  ".join(failures))
    return []


def check_timing_integrity(name: str, device: str, registry: Registry, settings: Settings) -> list[dict]:
    """The timed forward does its work inside the timer, on the values given, with untouched timers
    (`longca_testing.timing_integrity`)."""
    from longca.errors import UnsupportedError
    from longca_testing import timing_integrity

    _need_device(device)
    spec = _kernel(registry, name)
    _need_available(spec)
    problem = small_problem(spec, variant_mask(spec, registry), "fwd", device, registry=registry, settings=settings)
    refused = timing_integrity.refusal(spec, problem) or mask_refusal(spec, problem, build_mask(problem, 0, registry))
    if refused:
        raise ConformanceSkip(f"{_describe(problem)}: refused: {refused}")
    try:
        timing_integrity.check(spec, problem, registry, _describe)
    except UnsupportedError as exc:
        raise ConformanceSkip(f"{_describe(problem)}: refused once the mask was built: {exc}") from None
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - a kernel that raises here fails the case with its reason
        raise AssertionError(f"{_describe(problem)}: the timed forward raised {type(exc).__name__}: {exc}") from None
    return []


def check_work_scaling(name: str, device: str, registry: Registry, settings: Settings) -> list[dict]:
    """Four times the heads take clearly longer to run: the timed forward does the work it is
    credited with (`longca_testing.timing_integrity.check_work`)."""
    from longca.errors import UnsupportedError
    from longca_testing import timing_integrity

    _need_device(device)
    spec = _kernel(registry, name)
    _need_available(spec)
    problem = small_problem(spec, variant_mask(spec, registry), "fwd", device, registry=registry, settings=settings)
    pair = timing_integrity.work_problems(spec, problem, registry)
    if isinstance(pair, str):
        raise ConformanceSkip(f"{_describe(problem)}: {pair}")
    try:
        refused = timing_integrity.check_work(spec, *pair, registry, _describe)
    except UnsupportedError as exc:
        refused = str(exc)
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - a kernel that raises here fails the case with its reason
        raise AssertionError(f"{_describe(pair[1])}: the timed forward raised {type(exc).__name__}: {exc}") from None
    if refused:
        raise ConformanceSkip(f"{_describe(pair[1])}: refused once the mask was built: {refused}")
    return []


# ---------------------------------------------------------------- the suite


def conformance_cases(kernel: str, registry: Registry | None = None, devices: tuple[str, ...] = DEVICES,
                      settings: Settings | None = None) -> list[Case]:
    """The cases of one kernel. If it is not registered, only `registered`, which fails saying why."""
    registry = registry or get_registry()
    settings = settings or Settings()
    cases = [Case("registered", kernel, lambda r: check_registered(kernel, r))]
    try:
        spec = registry.entry("kernels", kernel).spec
    except LongcaError:
        return cases
    cases += [Case("spec", kernel, lambda r: check_spec(kernel, r)),
              Case("available", kernel, lambda r: check_available(kernel, r))]
    for dev in devices:
        cases.append(Case(f"refusals-{dev}", kernel, partial(check_refusals, kernel, dev, settings=settings), dev))
        if dev not in spec.devices:
            continue
        directions = ("fwd", "bwd") if spec.backward else ("fwd",)
        cases += [Case(f"mask-{m}-{x}-{dev}", kernel, partial(check_mask, kernel, m, x, dev, settings=settings), dev)
                  for m in registry.claimed_masks(spec.masks) for x in directions]
        cases += [Case(f"shape-{w.label}-{x}-{dev}", kernel,
                       partial(check_variant, kernel, w, x, dev, settings=settings), dev, w.heavy)
                  for w in settings.variants if dev == "cuda" or not w.heavy for x in directions]
        first = primary_dtype(spec, dev) if spec.dtypes else None
        cases += [Case(f"dtype-{t}-{x}-{dev}", kernel, partial(check_dtype, kernel, t, x, dev, settings=settings), dev)
                  for t in spec.dtypes if t != first for x in directions]
        if spec.sinks is True:
            cases += [Case(f"sinks-{m}-{x}-{dev}", kernel,
                           partial(check_sinks, kernel, m, x, dev, settings=settings), dev)
                      for m in sinks_masks(spec, registry) for x in directions]
        if spec.deterministic is True and spec.backward:
            cases.append(Case(f"deterministic-{dev}", kernel,
                              partial(check_deterministic, kernel, dev, settings=settings), dev))
        declared = [w for w in ("forward_lse", "backward_lse") if getattr(spec, w) is not None]
        if len(declared) == 2:
            declared.append("cp_merge")
        cases += [Case(f"{w}-{dev}", kernel, partial(check_primitives, kernel, dev, settings=settings, which=w), dev)
                  for w in declared]
        cases.append(Case(f"timing-integrity-{dev}", kernel,
                          partial(check_timing_integrity, kernel, dev, settings=settings), dev))
        cases.append(Case(f"work-scaling-{dev}", kernel, partial(check_work_scaling, kernel, dev, settings=settings),
                          dev))
    return cases


@dataclass
class Report:
    """What a conformance run found: rows produced, failures and skips by case id."""

    kernel: str  # the name checked (a kernel, mask, sampler or strategy: see `kind`)
    rows: list[dict] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    skips: dict[str, str] = field(default_factory=dict)
    passed: list[str] = field(default_factory=list)
    kind: str = "kernel"

    def summary(self) -> str:
        lines = [f"conformance of {self.kind} {self.kernel}: {len(self.passed)} passed, "
                 f"{len(self.failures)} failed, {len(self.skips)} skipped"]
        lines += [f"FAILED {case}: {message}" for case, message in self.failures.items()]
        return "\n".join(lines)


def run_cases(cases: list[Case], registry: Registry, report: Report) -> Report:
    """Run every case, collecting passes, failures and skips in `report`; never raises for failures."""
    for case in cases:
        try:
            report.rows += case.run(registry)
            report.passed.append(case.id)
        except ConformanceSkip as exc:
            report.skips[case.id] = str(exc)
        except AssertionError as exc:
            report.failures[case.id] = str(exc)
    return report


def check_kernel(kernel: str, device: str | None = None, registry: Registry | None = None,
                 settings: Settings | None = None, seqlen: int | None = None) -> Report:
    """Run every case (on `device` only, if given) and collect the outcome; never raises for failures.

    `seqlen` is a shortcut for `settings=Settings(seqlen=...)` (as `conformance_tests(seqlen=)`).
    """
    registry = registry or get_registry()
    if seqlen is not None:
        from dataclasses import replace

        settings = replace(settings or Settings(), seqlen=seqlen)
    devices = (device,) if device else ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)
    return run_cases(conformance_cases(kernel, registry, devices, settings), registry, Report(kernel))


def run_conformance(kernel: str, device: str | None = None, registry: Registry | None = None,
                    settings: Settings | None = None, seqlen: int | None = None) -> list[dict]:
    """Run the whole suite; raise AssertionError listing every failed case; return the result rows.

    `device` restricts the run to "cpu" or "cuda"; by default the CPU, and CUDA when a GPU is
    visible. Skipped cases (kernel library missing) are logged, not failures.
    """
    report = check_kernel(kernel, device, registry, settings, seqlen)
    for case, reason in report.skips.items():
        log.info("conformance %s %s skipped: %s", kernel, case, reason)
    if report.failures:
        raise AssertionError(report.summary())
    return report.rows
