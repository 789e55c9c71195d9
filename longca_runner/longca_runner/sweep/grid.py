"""A spec's grid of problems, expanded once (`plan`): the list `longca sweep` shows, counts and runs."""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from longca.capability import check_options
from longca.plugins import Registry, get_registry
from longca.problem import Problem, check_mask_params
from longca.results import ResultsWriter, case_id
from longca.sizes import parse_head_dims, parse_heads
from longca_runner.sweep.spec import SweepSpec, read_spec, select


def problems(spec: SweepSpec, registry: Registry | None = None) -> Iterator[Problem]:
    """The grid, ordered so each (mask, length) finishes in every direction for every kernel
    before the next: a sweep cut short still compares all kernels on what it reached."""
    grid = itertools.product(spec.dtypes, spec.head_dims, spec.heads, spec.batches, spec.mask_names(registry))
    for dtype, head_dims, heads, batch, mask in grid:
        hq, hkv = parse_heads(heads)
        head_dim, head_dim_v = parse_head_dims(head_dims)
        for params, seqlen, direction, deterministic, sinks, kernel in itertools.product(
                spec.mask_param_sets(mask), spec.seqlens, spec.directions, spec.deterministic, spec.sinks,
                spec.kernels):
            if deterministic and direction == "fwd":  # the forward is deterministic: no case to add
                continue
            problem = Problem(kernel=kernel, mask=mask, seqlen=seqlen, heads_q=hq, heads_kv=hkv, head_dim=head_dim,
                              head_dim_v=head_dim_v, batch=batch, dtype=dtype, direction=direction,
                              device=spec.device, sampler=spec.sampler, seed=spec.seed, mask_params=dict(params),
                              sampler_params=dict(spec.sampler_params), deterministic=deterministic, sinks=sinks)
            if not spec.strategies:
                yield problem
            elif spec.baseline:
                yield from _baselines(spec, problem)
            for world, strategy in itertools.product(spec.world_sizes, spec.strategies):
                yield _cp_problem(spec, problem, strategy, world)


def _baselines(spec: SweepSpec, problem: Problem) -> Iterator[Problem]:
    """The inner kernel alone at each per-rank length: what scaling efficiency is measured against."""
    lengths = [problem.seqlen] if spec.seqlen_per_rank else [problem.seqlen // w for w in spec.world_sizes]
    for seqlen in dict.fromkeys(lengths):
        yield problem.with_(seqlen=seqlen)


def _cp_problem(spec: SweepSpec, problem: Problem, strategy: str, world: int) -> Problem:
    """A CP case with the options the spec gives: its identity (for --resume) depends on nothing else.

    Defaults are filled in where the case runs (`longca_runner.cp.cases.measure_cases`; they may depend
    on the host, such as the ranks per node) and recorded in the row's strategy_options."""
    cp = problem.with_(strategy=strategy, world_size=world,
                       seqlen=problem.seqlen * world if spec.seqlen_per_rank else problem.seqlen)
    return cp.with_(strategy_options=dict(spec.strategy_options.get(strategy, {})))


def expand(spec: SweepSpec, registry: Registry | None = None) -> list[Problem]:
    """The grid as a list, every case checked before anything runs: mask parameters, and CP
    options (unknown names are LongcaErrors)."""
    registry = registry or get_registry()
    cases = list(problems(spec, registry))
    for problem in cases:
        check_mask_params(problem, registry)
        if problem.strategy:
            check_options(problem, problem.strategy_options, registry, spec.case_timeout)
    return cases


@dataclass
class Sweep:
    """A spec and its grid, expanded once."""

    spec: SweepSpec
    cases: list[Problem]

    def not_run(self, output: Path) -> int:
        """How many of the cases OUTPUT/results.jsonl has no row of yet."""
        done = ResultsWriter(Path(output) / "results.jsonl").done_ids()
        return len(self.cases) - len(done & {case_id(p) for p in self.cases})


def plan(path: str | Path, registry: Registry | None = None, kernels: str | None = None,
         device: str | None = None, installed_kernels_only: bool = False) -> Sweep:
    """A spec file, narrowed to `kernels` and moved to `device` (see `spec.select`), and its grid."""
    registry = registry or get_registry()
    spec = select(read_spec(path, registry, installed_kernels_only), kernels, device)
    return Sweep(spec, expand(spec, registry))


def load_spec(path: str | Path, registry: Registry | None = None,
              installed_kernels_only: bool = False) -> SweepSpec:
    """`read_spec`, and its grid checked case by case (`expand`): every problem is one LongcaError line."""
    registry = registry or get_registry()
    spec = read_spec(path, registry, installed_kernels_only)
    expand(spec, registry)
    return spec
