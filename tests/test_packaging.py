"""One version for every distribution, plugins pinned to the compatible core range, SPDX license metadata;
the layer distributions depend only downward, and the Makefile, the wheel check and the layering
contract (.importlinter) name every one of them and every plugin."""
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
# the layers, bottom up (docs/architecture.md): each may depend only on those before it
LAYERS = {"core": "longca-core", "longca_flashplan": "longca-flashplan", "longca_cp": "longca-cp",
          "longca_runner": "longca-runner", "longca_testing": "longca-testing", "longca_sim": "longca-sim",
          "longca_cli": "longca-cli"}
DISTRIBUTIONS = [ROOT / folder for folder in LAYERS] + PLUGINS


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


def test_layers_depend_only_downward():
    folders = list(LAYERS)
    for i, folder in enumerate(folders):
        project = _project(ROOT / folder)
        assert project["name"] == LAYERS[folder]
        below = {LAYERS[f] for f in folders[:i]}
        longca = {dep.split(">")[0].split("=")[0].strip() for dep in project.get("dependencies", [])
                  if dep.startswith("longca-")}
        assert longca <= below, f"{folder} depends on {sorted(longca - below)}, not below it"
    faces = {"longca-core", "longca-cp", "longca-flashplan"}  # the distributions with a plugin face
    for plugin in PLUGINS:
        longca = {dep.split(">")[0] for dep in _project(plugin).get("dependencies", []) if dep.startswith("longca-")}
        assert all(d in faces or d.startswith("longca-plugin-") for d in longca), f"{plugin.name}: {sorted(longca)}"


def test_every_distribution_is_installed_built_and_linted():
    makefile = (ROOT / "Makefile").read_text()
    install = makefile.split("\ninstall:", 1)[1].split("\n\n", 1)[0]
    wheels = makefile.split("\nwheels:", 1)[1].split("\n\n", 1)[0]
    for folder in LAYERS:
        assert f"-e {folder}" in install, f"make install leaves out {folder}"
        assert f"./{folder}" in wheels, f"make wheels leaves out {folder}"
    assert "lint-imports" in makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    contract = (ROOT / ".importlinter").read_text()
    packages = {p.name for p in ROOT.glob("plugins/*/longca_plugin_*") if p.is_dir() and "egg-info" not in p.name}
    roots = set(contract.split("root_packages =", 1)[1].split("\n\n", 1)[0].split())
    assert packages | {"longca", *(f for f in LAYERS if f != "core")} == roots
    faces = contract.split("[importlinter:contract:faces]", 1)[1]
    assert packages == set(faces.split("source_modules =", 1)[1].split("forbidden_modules", 1)[0].split())
