"""One version for every distribution, plugins pinned to the compatible core range, SPDX license metadata."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))
DISTRIBUTIONS = [ROOT / "core", ROOT / "longca_cli"] + PLUGINS


def _project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def _core_minor() -> str:
    major, minor, _ = _project(ROOT / "core")["version"].split(".")
    return f"{major}.{minor}"


@pytest.mark.parametrize("folder", DISTRIBUTIONS, ids=lambda p: p.name)
def test_one_version_core_range_and_spdx_license(folder):
    project = _project(folder)
    assert project["version"] == _project(ROOT / "core")["version"], "every distribution carries core's version"
    major, minor = _core_minor().split(".")
    pin = f">={major}.{minor},<{major}.{int(minor) + 1}"
    for dep in project.get("dependencies", []):
        if dep.startswith("longca-"):
            assert dep.endswith(pin), f"{folder.name}: {dep!r} must pin the compatible range {pin}"
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert (folder / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
