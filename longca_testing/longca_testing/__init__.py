"""The testing face for plugin authors: the kernel, mask, sampler and CP strategy conformance suites,
their pytest integration, and what plugins' own tests compare with.

    from longca_testing import conformance_tests
    test_conformance = conformance_tests("mykernel")   # in a plugin's tests/test_conformance.py

See docs/writing-a-plugin.md. Importing this package is cheap; torch loads with the suite.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from longca.faces import lazy_getattr

if TYPE_CHECKING:  # pragma: no cover
    from longca_testing.conformance import Case, Report


def run_conformance(kernel: str, device: Any = None, **kwargs: Any) -> list[dict]:
    """Run the whole conformance suite of `kernel`; AssertionError lists every failed case."""
    from longca_testing.conformance import run_conformance as run

    return run(kernel, device, **kwargs)


def check_kernel(kernel: str, device: Any = None, **kwargs: Any) -> Report:
    """Run the suite and return a Report (rows, failures, skips) instead of raising."""
    from longca_testing.conformance import check_kernel as check

    return check(kernel, device, **kwargs)


def conformance_cases(kernel: str, **kwargs: Any) -> list[Case]:
    from longca_testing.conformance import conformance_cases as cases

    return cases(kernel, **kwargs)


def conformance_tests(kernel: str, **kwargs: Any):
    """A pytest test function, parametrized with one test per conformance case of `kernel`."""
    from longca_testing.pytest_plugin import conformance_tests as tests

    return tests(kernel, **kwargs)


def mask_conformance_tests(mask: str):
    """pytest tests of a mask plugin's mask: valid disjoint slices, area, seeded, derived forms."""
    from longca_testing.pytest_plugin import mask_conformance_tests as tests

    return tests(mask)


def sampler_conformance_tests(sampler: str):
    """pytest tests of a sampler: positive lengths summing exactly, seeded, parameters declared."""
    from longca_testing.pytest_plugin import sampler_conformance_tests as tests

    return tests(sampler)


def strategy_conformance_tests(strategy: str, **kwargs: Any):
    """pytest tests of a CP strategy on gloo ranks: every claimed mask, out and gradients, round trip."""
    from longca_testing.pytest_plugin import strategy_conformance_tests as tests

    return tests(strategy, **kwargs)


# name -> (module, attribute): the suites' entry points and what plugins' own tests compare with
# (the runner's one measurement path, the tolerances); tests/test_public_face.py resolves every entry
_LAZY = {
    "Settings": ("longca_testing.conformance", "Settings"),
    "check_mask": ("longca_testing.mask_suite", "check_mask"),
    "check_sampler": ("longca_testing.sampler_suite", "check_sampler"),
    "check_strategy": ("longca_testing.strategy_suite", "check_strategy"),
    "build_mask": ("longca_testing.builders", "build_mask"),
    "assert_close": ("longca_testing.compare", "assert_close"),
    "compare_primitives": ("longca_testing.primitives", "compare_primitives"),
    "rel_err": ("longca_runner.measure", "rel_err"),
    "TOLERANCE": ("longca_runner.measure", "TOLERANCE"),
    "tolerance_for": ("longca_runner.measure", "tolerance_for"),
    "RunOptions": ("longca_runner.measure", "RunOptions"),
    "run_problem": ("longca_runner.measure", "run_problem"),
    "seeded_dout": ("longca_runner.measure", "seeded_dout"),
}

__all__ = ["conformance_tests", "run_conformance", "check_kernel", "conformance_cases",
           "mask_conformance_tests", "sampler_conformance_tests", "strategy_conformance_tests", *_LAZY]

__getattr__ = lazy_getattr(__name__, _LAZY, globals())
