"""pytest plugin of longca (entry point `pytest11: longca`), active wherever longca-core is installed.

- registers the `gpu` marker and skips `gpu` tests when no CUDA GPU is visible;
- `conformance_tests(kernel, ...)` builds a test function parametrized with one test per
  conformance case; CUDA cases carry the `gpu` marker, so `pytest -m gpu` runs them alone;
- the fixture `longca_conformance` is `run_conformance`, for a test that wants the whole suite.

Module import stays light (no torch): pytest loads this plugin in every session.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped without one")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none is visible")
    for item in gpu_items:
        item.add_marker(skip)


def run_case(case: Any) -> None:
    """Run one conformance case (`longca.testing.conformance.Case`); its skip becomes a pytest skip."""
    from .conformance import ConformanceSkip

    try:
        case.run()
    except ConformanceSkip as exc:
        pytest.skip(str(exc))


def conformance_tests(kernel: str, *, seqlen: Optional[int] = None, head_dim: Optional[int] = None,
                      heads: Optional[tuple[int, int]] = None, block: Optional[int] = None,
                      devices: Optional[tuple[str, ...]] = None) -> Callable[..., None]:
    """`test_conformance = conformance_tests("mykernel")`: one test per case, ids like `mask-causal-fwd-cpu`.

    `seqlen`, `head_dim`, `heads`, `block` change the problem sizes (defaults 256; the first declared
    head dim, 64 preferred, that supports() accepts; 4:2; block-sparse masks: 64 if supports() accepts
    it, else 128); `devices` restricts the devices (default cpu and cuda).
    """
    from .conformance import Settings, conformance_cases
    from ..specs import DEVICES

    overrides = {k: v for k, v in (("seqlen", seqlen), ("head_dim", head_dim), ("heads", heads),
                                                 ("block", block)) if v}
    settings = Settings(**overrides)
    cases = conformance_cases(kernel, devices=tuple(devices or DEVICES), settings=settings)
    params = [pytest.param(case, id=case.id, marks=[pytest.mark.gpu] if case.device == "cuda" else [])
              for case in cases]

    @pytest.mark.parametrize("longca_case", params)
    def test_conformance(longca_case: Any) -> None:
        run_case(longca_case)

    test_conformance.__doc__ = f"longca conformance of kernel {kernel!r}"
    return test_conformance


@pytest.fixture
def longca_conformance() -> Callable[..., list[dict]]:
    """`run_conformance(kernel, device=None)`: the whole suite in one test; returns the result rows."""
    from .conformance import run_conformance

    return run_conformance
