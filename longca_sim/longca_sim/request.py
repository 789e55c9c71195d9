"""What `longca simulate` and `longca recommend` ask for, from the text given: a kernel's pricing on a
topology (preset, calibration, overridden figures), world-size lists, and recommend's whole setting
(kernels priced, the lines ranked). Kept out of the CLI, which holds no logic."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from longca.errors import LongcaError
from longca.given import parse_params
from longca.plugins import Registry, get_registry
from longca.sizes import parse_heads, parse_size


def int_list(text: str, what: str) -> list[int]:
    """`8,16,32` -> [8, 16, 32]; anything else is an input error naming `what`."""
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise LongcaError(f"malformed {what} {text!r}; expected numbers separated by commas, e.g. 8,16,32") from None


def pricing_from(inner: str, topology: str, gpus_per_node: int | None, calibration: Path | None,
                 figures: Sequence[str] | None, results: Sequence[Path] | None, fit: Path | None):
    """The inner kernel's pricing on a topology preset, calibrated (comm-bench file) and with figures overridden."""
    from .simulate import default_pricing
    from .topology import preset

    if gpus_per_node is not None and gpus_per_node < 1:
        raise LongcaError("--gpus-per-node must be positive")
    topo = preset(topology)
    if calibration:
        topo = topo.with_calibration(calibration)
    topo = topo.override(gpus_per_node, parse_params(figures, "--set"))
    return default_pricing(inner, topo, fit, list(results) if results else None, calibrated=calibration is not None)


@dataclass
class Asked:
    """Recommend's question: the case, the cluster and what to consider."""

    mask: str
    seqlen: str
    gpus: int
    gpus_per_node: int = 8
    heads: str = "64:8"
    head_dim: int = 128
    dtype: str = "bfloat16"
    batch: int = 1
    kernels: str | None = None  # comma-separated; default: every inner kernel with a fit
    strategy: str = "all"
    sampler: str = "auto"
    sampler_param: Sequence[str] | None = None
    samples: int = 3
    topology: str = "h100-sxm"
    calibration: Path | None = None
    figures: Sequence[str] | None = None
    results: Sequence[Path] | None = None
    aggregate: str = "median"


def recommendations(asked: Asked, registry: Registry | None = None) -> tuple[list[Any], Any]:
    """The ranked lines (`recommend.recommend`) and the topology they were priced on."""
    from longca_runner.cp.request import strategy_names

    from .costmodel import fit_rows, load_fits, read_rows
    from .recommend import Setting, recommend
    from .simulate import aggregate_of

    aggregate_of(asked.aggregate)  # an unknown name: one line, before anything is priced
    if asked.gpus < 1 or asked.gpus > 1024:
        raise LongcaError(f"--gpus must be 1 to 1,024, got {asked.gpus}")
    registry = registry or get_registry()
    registry.mask(asked.mask)
    hq, hkv = parse_heads(asked.heads)
    results = list(asked.results) if asked.results else None
    fits, _ = load_fits()
    fits.update(fit_rows(read_rows(results)) if results else {})
    inner = [n for n in registry.names("kernels") if registry.kernel(n).forward_lse is not None]
    names = [k.strip() for k in asked.kernels.split(",")] if asked.kernels else inner
    for name in names:
        registry.kernel(name)  # unknown names are input errors
    pricings = {k: pricing_from(k, asked.topology, asked.gpus_per_node, asked.calibration, asked.figures, results,
                                None) if k in fits else None for k in names}
    topo = next((p.topology for p in pricings.values() if p is not None), None)
    if topo is None:
        raise LongcaError(f"none of the kernels {', '.join(names)} has measured rows to price it; pass --results")
    setting = Setting(asked.mask, parse_size(asked.seqlen), asked.gpus, hq, hkv, asked.head_dim, asked.dtype,
                      asked.batch, asked.sampler, parse_params(asked.sampler_param, "--sampler-param"), 0,
                      asked.samples, asked.aggregate)
    rows = read_rows(results) if results else []
    return recommend(setting, pricings, topo, rows, strategy_names(asked.strategy, registry), registry), topo
