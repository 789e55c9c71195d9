"""`longca recommend`: every inner kernel x strategy x options for one training setting, ranked by the simulator.

Candidates: every inner kernel the fit file prices (measured one-GPU rows) and every strategy with
its option variants (layouts; USP's Ulysses degree and LoongTrain's head degree and windows, kept
inside a node). Each is simulated over the same mask draws, ranked by predicted fwd+bwd step time
of the slowest rank. Each line's band is an interval from the out-of-sample errors of its regime (mask class x
world size x one node or several, docs/cp-simulator/validation-*.md): the quantile of their abs errors the
bands file names (80 %), not their median; a line within that band of the best is a near-tie. A request no
validated regime covers says how far out of the validated range it is, and claims no near-ties. When the first
choice's strategy is the one whose predictions the validation data contradict most in that regime (the largest
median abs error of its strategies), a warning names it and its error. Flags: KV heads replicated by the head split,
an all-to-all across nodes, modelled memory above the GPU's. Refusals (heads that
do not divide, lengths a layout cannot split, modelled memory above the GPU's) are listed with the
reason. A line rests on measured rows when a results folder holds the same case measured; else
on the model alone (its inner kernel's fit and the topology).
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from longca.errors import LongcaError, UnsupportedError
from longca.flops import attention_flops
from longca.plugins import Registry, get_registry
from longca.problem import Problem, build_mask
from longca_cp.accounting import schedule_of

from .simulate import Pricing, aggregate_of, resolve_for, simulate_schedules_all
from .topology import Topology

BANDS_PATH = Path(__file__).resolve().parent / "data" / "validation_bands.json"


def mask_class(mask: str, registry: Registry | None = None) -> str:
    """The regime's mask class: `dense` (full, causal), `document` (masks of documents), else `other`."""
    if mask in ("full", "causal"):
        return "dense"
    return "document" if (registry or get_registry()).mask(mask).uses_documents else "other"


def load_bands(path: Path | None = None) -> list[dict[str, Any]]:
    """The out-of-sample error of each validated regime (written by docs/scripts/cp_validate.py)."""
    try:
        return list(json.loads(Path(path or BANDS_PATH).read_text())["regimes"])
    except (OSError, ValueError, KeyError) as exc:
        raise LongcaError(f"cannot read validation bands {path or BANDS_PATH}: {exc}") from None


def regime_band(bands: list[dict[str, Any]], cls: str, world: int, gpus_per_node: int) -> dict[str, Any] | None:
    """The validated regime holding this case (mask class, one node or several, world size in its range)."""
    multi = world > gpus_per_node
    for band in bands:
        lo, hi = band["worlds"]
        if band["mask_class"] == cls and band["multi_node"] == multi and lo <= world <= hi:
            return band
    return None


# GPUs whose published figures are excluded from the validation claims (docs/cp-simulator.md section 3): the
# source ran kernels there that longca has no rows of, so no band is claimed on them
UNVALIDATED_GPUS = {"b200": "B200 is excluded from the validation claims: its published runs used TransformerEngine's "
                            "cuDNN kernels, which longca has no B200 rows to price (a declared FA4 speed instead)"}


def out_of_range(bands: list[dict[str, Any]], cls: str, world: int, gpus_per_node: int) -> str:
    """How far a case no validated regime holds lies from the validated ones of its mask class."""
    mine = [b for b in bands if b["mask_class"] == cls]
    if not mine:
        return f"mask class {cls} was never validated"
    multi = world > gpus_per_node
    same = [b for b in mine if b["multi_node"] == multi]
    if not same:
        where = "several nodes" if multi else "one node"
        top = max(b["worlds"][1] for b in mine)
        return f"{cls} masks on {where} were never validated (validated: world sizes up to {top} on the other)"
    lo = min(b["worlds"][0] for b in same)
    hi = max(b["worlds"][1] for b in same)
    if world > hi:
        return f"world size {world} is {world / hi:.3g}x beyond the largest validated, {hi}"
    if world < lo:
        return f"world size {world} is {lo / world:.3g}x below the smallest validated, {lo}"
    below = max(b["worlds"][1] for b in same if b["worlds"][1] < world)
    above = min(b["worlds"][0] for b in same if b["worlds"][0] > world)
    return f"world size {world} lies between the validated {below} and {above}"


def nearest_band(bands: list[dict[str, Any]], cls: str, world: int, gpus_per_node: int) -> dict[str, Any] | None:
    """The validated regime of this mask class nearest to a case none holds (the same node count first, then the
    world size range nearest by ratio): what a warning about its first choice rests on."""
    mine = [b for b in bands if b["mask_class"] == cls]
    same = [b for b in mine if b["multi_node"] == (world > gpus_per_node)] or mine
    if not same:
        return None
    return min(same, key=lambda b: max(b["worlds"][0] / world, world / b["worlds"][1], 1.0))


def worst_strategy(band: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The strategy whose predictions the regime's validation data contradict most (largest median abs error),
    where the regime validated more than one."""
    per = band.get("strategies") or {}
    if len(per) < 2:
        return None
    return max(per.items(), key=lambda kv: (kv[1]["median_abs_err_pct"], kv[0]))


def regime_of(bands: list[dict[str, Any]], cls: str, world: int, gpus_per_node: int,
              gpu: str) -> tuple[dict[str, Any] | None, str]:
    """The case's validated regime (None if none) and the sentence that describes it."""
    nodes = -(-world // gpus_per_node)
    head = f"{cls}, {world} GPUs, {nodes} node{'s' if nodes > 1 else ''}: "
    if gpu in UNVALIDATED_GPUS:
        return None, head + "not validated: " + UNVALIDATED_GPUS[gpu]
    band = regime_band(bands, cls, world, gpus_per_node)
    if band is None:
        return None, head + "not validated: " + out_of_range(bands, cls, world, gpus_per_node)
    return band, head + (f"validated on {band['source']} ({band['quantile'] * 100:.0f} % of |error| within "
                         f"{band['quantile_abs_err_pct']:.0f} %, median {band['median_abs_err_pct']:.0f} %, "
                         f"{band['cells']} cells)")


@dataclass
class Setting:
    mask: str
    seqlen: int
    gpus: int
    heads_q: int
    heads_kv: int
    head_dim: int = 128
    dtype: str = "bfloat16"
    batch: int = 1
    sampler: str = "auto"
    sampler_params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    samples: int = 3
    aggregate: str = "median"  # over the draws (`simulate.AGGREGATES`)


def variants(strategy: str, world: int, heads_q: int, gpus_per_node: int,
             registry: Registry | None = None) -> list[dict[str, Any]]:
    """The option sets tried for a strategy: what its spec's `variants` lists ([{}]: its defaults only)."""
    spec = (registry or get_registry()).strategy(strategy)
    return spec.option_variants(world, heads_q, gpus_per_node)


@dataclass
class Line:
    kernel: str
    strategy: str
    options: dict[str, Any]
    status: str = "ok"
    reason: str | None = None
    fwd_ms: float = math.nan
    bwd_ms: float = math.nan
    tflops: float = math.nan
    peak_mem_gb: float = math.nan
    # the band of its validated regime: that quantile of the regime's out-of-sample abs errors; None: not validated
    error_pct: float | None = None
    regime: str = ""
    flags: list[str] = field(default_factory=list)
    wait: dict[str, float] = field(default_factory=dict)  # critical rank: waiting for data / for slower ranks, ms
    basis: str = "model"
    measured: dict[str, Any] | None = None
    rank: int | None = None
    tie: bool = False
    warnings: list[str] = field(default_factory=list)  # on the first choice: what the validation says against it

    @property
    def step_ms(self) -> float:
        return self.fwd_ms + self.bwd_ms

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "kernel": self.kernel, "strategy": self.strategy, "options": self.options,
                "status": self.status, "reason": self.reason, "step_ms": self.step_ms, "fwd_ms": self.fwd_ms,
                "bwd_ms": self.bwd_ms, "tflops_per_gpu": self.tflops, "peak_mem_gb": self.peak_mem_gb,
                "model_error_pct": self.error_pct, "regime": self.regime, "flags": self.flags, "wait_ms": self.wait,
                "near_tie_with_best": self.tie, "warnings": self.warnings, "basis": self.basis,
                "measured": self.measured}


def _measured(rows: Iterable[dict[str, Any]], problem: Problem, options: dict[str, Any]) -> dict[str, Any] | None:
    """The measured fwd and bwd rows of exactly this case, if a results folder holds them."""
    found: dict[str, Any] = {}
    for row in rows:
        if (row.get("status") == "ok" and row.get("strategy") == problem.strategy
                and row.get("kernel") == problem.kernel
                and row.get("world_size") == problem.world_size and row.get("mask") == problem.mask
                and row.get("seqlen") == problem.seqlen and row.get("heads_q") == problem.heads_q
                and row.get("heads_kv") == problem.heads_kv and row.get("head_dim") == problem.head_dim
                and (row.get("strategy_options") or {}) == options and not row.get("simulated")):
            found[row["direction"]] = row
    if not {"fwd", "bwd"} <= set(found):
        return None
    return {"fwd_ms": found["fwd"]["ms_median"], "bwd_ms": found["bwd"]["ms_median"]}


def kernel_refusal(name: str, setting: Setting, priced: bool, registry: Registry) -> str | None:
    """Why an inner kernel cannot serve this setting, from what it declares (its library is not loaded here)."""
    spec = registry.kernel(name)
    missing = [n for n in ("forward_lse", "backward_lse") if getattr(spec, n) is None]
    if missing:
        return f"kernel {name} has no {' or '.join(missing)}, so it cannot be an inner kernel"
    if setting.dtype not in spec.dtypes:
        return f"kernel {name} does not run {setting.dtype} (it takes {', '.join(spec.dtypes)})"
    if spec.head_dims is not None and setting.head_dim not in spec.head_dims:
        return f"kernel {name} does not take head_dim {setting.head_dim}"
    if setting.mask not in registry.claimed_masks(spec.masks):
        return f"kernel {name} does not support mask {setting.mask}"
    if not priced:
        return (f"no measured one-GPU rows of {name} to price it (measure it with longca sweep on the target GPU "
                f"and pass --results)")
    return None


def recommend(setting: Setting, pricings: dict[str, Pricing | None], topology: Topology,
              rows: Iterable[dict[str, Any]] = (), strategies: list[str] | None = None,
              registry: Registry | None = None) -> list[Line]:
    """Every candidate line, ranked (ok lines first by step time, then the refused ones).

    `pricings`: per inner kernel its pricing, or None when no measured rows price it (refused)."""
    registry = registry or get_registry()
    rows = list(rows)
    names = strategies or registry.names("strategies")
    lines: list[Line] = []
    usable: dict[str, Pricing] = {}
    for kernel, pricing in pricings.items():
        reason = kernel_refusal(kernel, setting, pricing is not None, registry)
        if reason:
            lines.append(Line(kernel, "any", {}, "unsupported", reason))
        elif pricing is not None:  # kernel_refusal refuses a kernel without one
            usable[kernel] = pricing
    if not usable:
        return lines
    if setting.seqlen % setting.gpus:
        raise LongcaError(f"sequence length {setting.seqlen} is not a multiple of {setting.gpus} GPUs")
    base = Problem(kernel=next(iter(usable)), mask=setting.mask, seqlen=setting.seqlen, heads_q=setting.heads_q,
                   heads_kv=setting.heads_kv, head_dim=setting.head_dim, batch=setting.batch, dtype=setting.dtype,
                   direction="fwdbwd", device="cuda", sampler=setting.sampler,
                   sampler_params=dict(setting.sampler_params), seed=setting.seed, world_size=setting.gpus)
    draws = setting.samples if registry.mask(setting.mask).uses_documents else 1
    masks = [build_mask(base, i, registry) for i in range(max(1, draws))]
    memory = topology.memory_gb * 1e9
    bands = load_bands()
    cls = mask_class(setting.mask, registry)
    band, regime = regime_of(bands, cls, setting.gpus, topology.gpus_per_node, topology.name)
    kernels = list(usable)
    reduce = aggregate_of(setting.aggregate)
    draw_flops = [attention_flops(m.area, setting.heads_q, setting.head_dim, setting.batch, "fwdbwd") for m in masks]
    flops = float(np.median(draw_flops))
    prepared: list[tuple[str, dict[str, Any], Problem, dict[str, Any]]] = []
    for strategy in names:
        for given in variants(strategy, setting.gpus, setting.heads_q, topology.gpus_per_node, registry):
            problem = base.with_(strategy=strategy)
            try:
                prepared.append((strategy, given, problem,
                                 resolve_for(problem, given, topology.gpus_per_node, registry)))
            except UnsupportedError as exc:
                lines += [Line(k, strategy, given, "unsupported", str(exc)) for k in usable]
    # one draw at a time, every variant's schedule of it priced together: ring schedules of one ring size and
    # layout (LoongTrain's windows, USP's and LoongTrain's head degrees) share each position's calls and their
    # features, every kernel priced in the same pass (one position's calls in memory)
    priced = [usable[k] for k in kernels]
    per_variant: list[list[list[dict[str, Any]]]] = [[] for _ in prepared]
    refused: dict[int, str] = {}
    for m in masks:
        items, index = [], []
        for v, (_, _, problem, options) in enumerate(prepared):
            if v in refused:
                continue
            try:
                items.append((schedule_of(problem.with_(strategy_options=options), m, options, registry), m.area))
                index.append(v)
            except UnsupportedError as exc:
                refused[v] = str(exc)
        for v, sims in zip(index, simulate_schedules_all(items, priced), strict=True):
            per_variant[v].append(sims)
        del items
    for v, (strategy, given, problem, options) in enumerate(prepared):
        if v in refused:
            lines += [Line(k, strategy, given, "unsupported", refused[v]) for k in usable]
            continue
        per_draw = per_variant[v]
        for j, kernel in enumerate(kernels):
            sims = [d[j] for d in per_draw]
            line = Line(kernel, strategy, options, error_pct=band["quantile_abs_err_pct"] if band else None,
                        regime=regime, flags=list(sims[0]["flags"]))
            line.fwd_ms = float(reduce([s["fwd"]["ms_max"] for s in sims]))
            line.bwd_ms = float(reduce([s["bwd"]["ms_max"] for s in sims]))
            line.wait = {f"{ph}_{k}": float(reduce([s[ph][f"wait_{k}_ms"] for s in sims]))
                         for ph in ("fwd", "bwd") for k in ("data", "ranks")}
            if setting.aggregate == "median":
                line.tflops = flops / setting.gpus / (line.step_ms * 1e-3) / 1e12
            else:  # each draw's TFLOP/s (its own FLOPs over its own time), then reduced
                line.tflops = float(reduce([f / setting.gpus / ((s["fwd"]["ms_max"] + s["bwd"]["ms_max"]) * 1e-3)
                                            / 1e12 for f, s in zip(draw_flops, sims, strict=True)]))
            peak = max(s["bwd"]["peak_mem_bytes"] for s in sims)
            line.peak_mem_gb = peak / 1e9
            measured = _measured(rows, problem.with_(kernel=kernel), options)
            if measured:
                line.basis, line.measured = "measured", measured
            if peak > memory:
                line.status = "oom"
                line.reason = (f"modelled {peak / 1e9:.1f} GB per GPU (inputs and the strategy's buffers) exceeds "
                               f"{topology.memory_gb:.0f} GB")
            lines.append(line)
    ok = sorted((ln for ln in lines if ln.status == "ok"), key=lambda ln: ln.step_ms)
    for i, line in enumerate(ok, 1):
        line.rank = i
        best = ok[0]
        # a near-tie: within the validation error of the regime (never claimed where it was never validated)
        line.tie = (i > 1 and line.error_pct is not None and best.error_pct is not None
                    and line.step_ms <= best.step_ms * (1 + max(best.error_pct, line.error_pct) / 100))
    # the regime, or where none holds the case the nearest validated one (not on a GPU excluded from the claims)
    basis = band or (None if topology.name in UNVALIDATED_GPUS
                     else nearest_band(bands, cls, setting.gpus, topology.gpus_per_node))
    worst = worst_strategy(basis) if basis else None
    if basis and ok and worst and ok[0].strategy == worst[0]:
        where = ("this regime" if band else
                 f"the nearest validated regime ({basis['worlds'][0]}-{basis['worlds'][1]} GPUs)")
        ok[0].warnings.append(
            f"#1 is {worst[0]}, the strategy whose predictions the validation data of {where} contradict most: "
            f"median |error| {worst[1]['median_abs_err_pct']:.0f} % over {worst[1]['cells']} cells "
            f"({basis['source']}; its other strategies are predicted better)")
    for ln in lines:  # the refused ones too: the request's regime is theirs
        ln.regime = ln.regime or regime
    return ok + [ln for ln in lines if ln.status != "ok"]
