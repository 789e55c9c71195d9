"""Every plugin of this repository loads, and every kernel plugin passes the conformance suite.

A kernel plugin's own tests run the suite with `conformance_tests` (one test per case, CUDA cases
marked `longca_gpu`), so nothing is repeated here; kernels whose plugin tests do not mention it get
every case here.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from longca.plugins import get_registry
from longca_testing.pytest_plugin import case_marks, run_case

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_DIRS = sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))


def distribution(folder: Path) -> str:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]["name"]


def own_suite(folder: Path) -> bool:
    """Whether the plugin's own tests run the conformance suite, one test per case."""
    return any("conformance_tests(" in path.read_text() for path in (folder / "tests").rglob("*.py"))


@pytest.mark.parametrize("folder", PLUGIN_DIRS, ids=lambda p: p.name)
def test_plugin_is_installed_and_loads(folder):
    dist = distribution(folder)
    loaded = [p for p in get_registry().plugins if p.distribution == dist]
    assert loaded, f"{dist} ({folder.relative_to(ROOT)}) is not installed: run `make install`"
    for plugin in loaded:
        assert not plugin.errors, f"{dist}: " + "; ".join(plugin.errors)
    assert any(plugin.registered for plugin in loaded), f"{dist} registered nothing"


def _kernels() -> list[tuple[str, Path]]:
    by_dist = {distribution(folder): folder for folder in PLUGIN_DIRS}
    return sorted((name, by_dist[entry.plugin.distribution])
                  for name, entry in get_registry().entries["kernels"].items()
                  if entry.plugin.distribution in by_dist)


def _params() -> list:
    from longca_testing.conformance import conformance_cases

    params = []
    for kernel, folder in _kernels():
        if own_suite(folder):
            continue
        for case in conformance_cases(kernel):
            marks = case_marks(case)
            params.append(pytest.param(case, id=f"{kernel}-{case.id}", marks=marks))
    return params


@pytest.mark.parametrize("case", _params())
def test_kernel_plugin_conformance(case):
    run_case(case)
