"""pytest plugin of longca (entry point `pytest11: longca`), active wherever longca-core is installed.

- registers the `longca_gpu` marker and skips `longca_gpu` tests when no CUDA GPU is visible
  (only that marker: other projects' own `gpu` markers are left alone), and `longca_heavy`;
- `conformance_tests(kernel, ...)` builds a test function parametrized with one test per
  conformance case; CUDA cases carry `longca_gpu`, so `pytest -m longca_gpu` runs them alone,
  and the larger shape cases carry `longca_heavy` (`-m "not longca_heavy"` leaves them out);
- the fixture `longca_conformance` is `run_conformance`, for a test that wants the whole suite.

Module import stays light (no torch): pytest loads this plugin in every session.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

GPU_MARKER = "longca_gpu"
HEAVY_MARKER = "longca_heavy"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{GPU_MARKER}: needs a CUDA GPU; skipped without one (longca)")
    config.addinivalue_line("markers", f"{HEAVY_MARKER}: a larger longca conformance case (seconds on a GPU)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker(GPU_MARKER)]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none is visible")
    for item in gpu_items:
        item.add_marker(skip)


def case_marks(case: Any) -> list:
    """`longca_gpu` on CUDA cases, `longca_heavy` on the larger ones."""
    marks = [getattr(pytest.mark, GPU_MARKER)] if case.device == "cuda" else []
    return marks + ([getattr(pytest.mark, HEAVY_MARKER)] if getattr(case, "heavy", False) else [])


def run_case(case: Any) -> None:
    """Run one conformance case (`longca_testing.conformance.Case`); its skip becomes a pytest skip."""
    from longca_testing.conformance import ConformanceSkip

    try:
        case.run()
    except ConformanceSkip as exc:
        pytest.skip(str(exc))


def parametrized(cases: list, doc: str) -> Callable[..., None]:
    """A test function with one test per conformance case, ids = case ids, marks from `case_marks`."""
    params = [pytest.param(case, id=case.id, marks=case_marks(case)) for case in cases]

    @pytest.mark.parametrize("longca_case", params)
    def test_conformance(longca_case: Any) -> None:
        run_case(longca_case)

    test_conformance.__doc__ = doc
    return test_conformance


def conformance_tests(kernel: str, *, seqlen: int | None = None, head_dim: int | None = None,
                      heads: tuple[int, int] | None = None, block: int | None = None,
                      devices: tuple[str, ...] | None = None) -> Callable[..., None]:
    """`test_conformance = conformance_tests("mykernel")`: one test per case, ids like `mask-causal-fwd-cpu`.

    `seqlen`, `head_dim`, `heads`, `block` change the problem sizes (defaults 256; the first declared
    head dim, 64 preferred, that supports() accepts; 4:2; block-sparse masks: 64 if supports() accepts
    it, else 128); `devices` restricts the devices (default cpu and cuda).
    """
    from longca.specs import DEVICES
    from longca_testing.conformance import Settings, conformance_cases

    overrides: dict[str, Any] = {k: v for k, v in (("seqlen", seqlen), ("head_dim", head_dim), ("heads", heads),
                                                 ("block", block)) if v}
    cases = conformance_cases(kernel, devices=tuple(devices or DEVICES), settings=Settings(**overrides))
    return parametrized(cases, f"longca conformance of kernel {kernel!r}")


def mask_conformance_tests(mask: str) -> Callable[..., None]:
    """`test_mask = mask_conformance_tests("chunked_causal")`: the mask suite, one test per case."""
    from longca_testing.mask_suite import mask_conformance_cases

    return parametrized(mask_conformance_cases(mask), f"longca conformance of mask {mask!r}")


def sampler_conformance_tests(sampler: str) -> Callable[..., None]:
    """`test_sampler = sampler_conformance_tests("lognormal")`: the sampler suite, one test per case."""
    from longca_testing.sampler_suite import sampler_conformance_cases

    return parametrized(sampler_conformance_cases(sampler), f"longca conformance of sampler {sampler!r}")


def strategy_conformance_tests(strategy: str, *, world_sizes: tuple[int, ...] = (2, 4),
                               plugin_modules: tuple[str, ...] = (), inner: str = "reference") -> Callable[..., None]:
    """`test_strategy = strategy_conformance_tests("mystrategy")`: gloo ranks on CPU, one test per world size
    (`inner`: the inner kernel, for a strategy that names its own in `inner_kernels`)."""
    from longca_testing.strategy_suite import strategy_conformance_cases  # the CP strategy suite

    cases = strategy_conformance_cases(strategy, world_sizes=world_sizes, plugin_modules=plugin_modules, inner=inner)
    return parametrized(cases, f"longca conformance of CP strategy {strategy!r}")


@pytest.fixture
def longca_conformance() -> Callable[..., list[dict]]:
    """`run_conformance(kernel, device=None)`: the whole suite in one test; returns the result rows."""
    from longca_testing.conformance import run_conformance

    return run_conformance
