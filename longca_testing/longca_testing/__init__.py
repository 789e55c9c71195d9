"""Testing kit for longca plugins: the kernel conformance suite and its pytest integration.

    from longca_testing import conformance_tests
    test_conformance = conformance_tests("mykernel")   # in a plugin's tests/test_conformance.py

See docs/writing-a-plugin.md. Importing this package is cheap; torch loads with the suite.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from longca_testing.conformance import Case, Report, Settings

__all__ = ["conformance_tests", "run_conformance", "check_kernel", "conformance_cases", "Settings",
           "mask_conformance_tests", "sampler_conformance_tests", "strategy_conformance_tests",
           "check_mask", "check_sampler", "check_strategy"]


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


_LAZY = {"Settings": ".conformance", "check_mask": ".mask_suite", "check_sampler": ".sampler_suite",
         "check_strategy": "longca_testing.strategy_suite"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name], __name__), name)  # a strategy's suite lives in longca-cp
    raise AttributeError(name)
