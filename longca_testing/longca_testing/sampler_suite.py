"""Conformance of a document-length sampler: positive lengths that sum exactly, seeded, parameters declared.

    test_sampler = plugin.sampler_conformance_tests("lognormal")

Cases: `registered`, `spec`, `sums` (totals from 1 token to 512K, several seeds: a 1-D integer
array of positive lengths summing to the total), `seeded` (one seed, one answer; drawn from the
rng given only), `params` (every declared parameter is accepted, an undeclared one refused).
"""
from __future__ import annotations

import inspect

import numpy as np

from longca.errors import LongcaError
from longca.plugins import Registry, get_registry
from longca.problem import lengths_problem
from longca.specs import SamplerSpec
from longca_testing.conformance import Case, Report, common_spec_problems, kind_cases, registered_spec, run_cases

TOTALS = (1, 2, 7, 1000, 4096, 65537, 512 * 1024)
SEEDS = (0, 1, 2)


def _draw(spec: SamplerSpec, total: int, seed: int) -> np.ndarray:
    try:
        return spec.sample(total, np.random.default_rng(seed))
    except Exception as exc:  # noqa: BLE001 - whatever the plugin raises becomes the suite's assertion
        raise AssertionError(f"sampler {spec.name}: sample({total}, rng) with seed {seed} raised "
                             f"{type(exc).__name__}: {exc}") from None


def check_spec(name: str, registry: Registry) -> list[dict]:
    spec = registered_spec(registry, "samplers", name)
    problems = common_spec_problems(spec, "sample", "sample(total, rng, **params) -> lengths")
    if problems:
        raise AssertionError(f"sampler {name}: malformed SamplerSpec:\n  " + "\n  ".join(problems))
    return []


def check_sums(name: str, registry: Registry) -> list[dict]:
    """Positive integer lengths summing exactly to the total, for every total and seed."""
    spec = registered_spec(registry, "samplers", name)
    for total in TOTALS:
        for seed in SEEDS:
            reason = lengths_problem(_draw(spec, total, seed), total)
            if reason:
                raise AssertionError(f"sampler {name}: sample({total}, rng) with seed {seed} {reason}")
    return []


def check_seeded(name: str, registry: Registry) -> list[dict]:
    """The same seed gives the same lengths: the rng passed in is the only source of randomness."""
    spec = registered_spec(registry, "samplers", name)
    for total in (1000, 65537):
        a, b = _draw(spec, total, 3), _draw(spec, total, 3)
        if not np.array_equal(np.asarray(a), np.asarray(b)):
            raise AssertionError(f"sampler {name}: two draws of {total} tokens with seed 3 differ; draw only "
                                 f"from the rng argument (never numpy's or Python's global generator)")
    return []


def check_params(name: str, registry: Registry) -> list[dict]:
    """Each declared parameter is a parameter of sample(); an undeclared one is refused."""
    from longca.problem import Problem, build_mask

    spec = registered_spec(registry, "samplers", name)
    signature = inspect.signature(spec.sample)
    takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    missing = [p for p in spec.params if p not in signature.parameters and not takes_any]
    if missing:
        raise AssertionError(f"sampler {name}: declares parameters {missing} that sample() does not take")
    problem = Problem(kernel="reference", mask="causal_document", seqlen=512, sampler=name,
                      sampler_params={"longca_no_such_parameter": 1})
    try:
        build_mask(problem, 0, registry)
    except LongcaError:
        return []
    raise AssertionError(f"sampler {name}: an undeclared parameter (longca_no_such_parameter=1) was accepted; "
                         f"take only the declared parameters, so a misspelt one is an error")


def sampler_conformance_cases(name: str, registry: Registry | None = None) -> list[Case]:
    return kind_cases("samplers", name, registry or get_registry(), [
        ("spec", check_spec), ("sums", check_sums), ("seeded", check_seeded), ("params", check_params)])


def check_sampler(name: str, registry: Registry | None = None) -> Report:
    """The sampler suite as a Report (never raises for failures)."""
    registry = registry or get_registry()
    return run_cases(sampler_conformance_cases(name, registry), registry, Report(name, kind="sampler"))
