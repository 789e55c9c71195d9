"""Plugins import longca only through the faces, one per distribution (issues 26, 36): `longca.plugin`
(core), `longca_cp.plugin` (CP strategies), `longca_flashplan.plugin` (FlashAttention-style
planning) and `longca_testing` (the conformance kit, in tests).

Every module of a built-in plugin, its tests and the new-plugin templates is parsed; an import of
`longca.<anything else>`, of a name from `longca` other than `plugin`, or of any other module of
longca's distributions fails, naming the file and line (`lint-imports` checks the plugin packages
too; this also covers their tests). Plugins may import each other (flex-fa4 builds on flex): they
declare it as a dependency. Each face resolves every name it promises, holds no name that no plugin,
template or test uses, `longca.plugin` at most 50, and docs/writing-a-plugin.md lists them all.
"""
from __future__ import annotations

import ast
import re
from importlib import import_module
from pathlib import Path

import pytest

import longca_testing
from longca import plugin
from longca_cp import plugin as cp_face
from longca_flashplan import plugin as flash_face

ROOT = Path(__file__).resolve().parents[1]
INTERNAL = ("longca", "longca_runner", "longca_testing", "longca_cp", "longca_flashplan", "longca_sim", "longca_cli")
FACES = {"longca.plugin": plugin, "longca_cp.plugin": cp_face, "longca_flashplan.plugin": flash_face,
         "longca_testing": longca_testing}


def _past_face(module: str) -> bool:
    return module.split(".")[0] in INTERNAL and module not in FACES


def imports_past_face(source: str, filename: str = "<source>") -> list[str]:
    """`file:line: statement` for every import that reaches past `longca.plugin`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if _past_face(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module in ("longca", "longca_cp", "longca_flashplan"):
                bad = [f"{node.module}.{a.name}" for a in node.names if a.name != "plugin"]
            else:
                bad = [node.module] if _past_face(node.module) else []
        else:
            continue
        found += [f"{filename}:{node.lineno}: imports {name}" for name in bad]
    return found


def plugin_files() -> list[Path]:
    files = [*ROOT.glob("plugins/*/longca_plugin_*/**/*.py"), *ROOT.glob("plugins/*/tests/**/*.py"),
             *ROOT.glob("longca_cli/longca_cli/plugin_templates/**/*.py")]
    return sorted(f for f in files if ".egg-info" not in str(f))


@pytest.mark.parametrize("snippet,bad", [
    ("from longca.specs import KernelSpec", True),
    ("from longca.masks import slices as sl", True),
    ("import longca.problem", True),
    ("import longca", True),
    ("from longca import hookimpl", True),
    ("def f():\n    from longca_cp.hybrid import prepare_hybrid", True),  # lazy imports count too
    ("from longca_flashplan.kernel import FA_MASKS", True),
    ("import longca_sim.recommend as r", True),
    ("from longca_runner.measure import run_problem", True),
    ("from longca_testing.builders import build_mask", True),
    ("from longca_cp import layout", True),
    ("from longca import plugin", False),
    ("from longca_cp import plugin as cp", False),
    ("from longca_flashplan.plugin import CallArgs", False),
    ("import longca_testing", False),
    ("from longca_testing import conformance_tests", False),
    ("from longca.plugin import KernelSpec, hookimpl", False),
    ("import longca.plugin", False),
    ("from longca_plugin_flex.kernel import FlexKernel", False),  # another plugin, declared as a dependency
    ("from .kernel import plan", False),
])
def test_checker_finds_imports_past_the_face(snippet, bad):
    assert bool(imports_past_face(snippet)) is bad


def test_every_plugin_module_imports_only_the_face():
    files = plugin_files()
    assert len(files) > 60 and any("plugin_templates" in str(f) for f in files)
    found = [hit for f in files for hit in imports_past_face(f.read_text(), str(f.relative_to(ROOT)))]
    assert not found, "import these through `from longca import plugin` (add the name to longca.plugin):\n" + \
        "\n".join(found)


LAZY = sorted((face, name) for face, module in FACES.items() for name in module._LAZY)


@pytest.mark.parametrize("face,name", LAZY)
def test_every_lazy_name_resolves(face, name):
    module, attr = FACES[face]._LAZY[name]
    assert getattr(FACES[face], name) is getattr(import_module(module), attr)


@pytest.mark.parametrize("face", sorted(FACES))
def test_all_lists_every_name_and_unknown_names_fail(face):
    names = FACES[face].__all__
    assert len(set(names)) == len(names)
    assert all(hasattr(FACES[face], name) for name in names)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        getattr(FACES[face], "nothing_here")  # noqa: B009 - the lookup of an unknown name is what is tested


def test_the_core_face_is_small_and_points_down():
    assert len(plugin.__all__) <= 50
    assert all(module.split(".")[0] == "longca" for module, _ in plugin._LAZY.values())


def _used_names() -> set[str]:
    """Every attribute read and name imported by the plugins, their tests, the templates and longca's tests."""
    files = [*plugin_files(), *(ROOT / "tests").glob("**/*.py")]
    used: set[str] = set()
    for f in files:
        if f.name == Path(__file__).name or ".egg-info" in str(f):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.ImportFrom):
                used.update(a.name for a in node.names)
    return used


def test_no_face_holds_a_name_nothing_uses():
    used = _used_names()
    unused = {face: sorted(set(module.__all__) - used) for face, module in FACES.items()}
    assert not any(unused.values()), f"names no plugin, template or test uses: {unused}"


def test_the_guide_lists_every_name_of_every_face():
    """docs/writing-a-plugin.md's table of the faces: every exported name of each, and nothing else."""
    guide = (ROOT / "docs" / "writing-a-plugin.md").read_text()
    section = guide.split("## What the faces export", 1)[1].split("\n## ", 1)[0]
    listed: dict[str, set[str]] = {}
    for line in section.splitlines():
        if line.startswith("| `") and line.count("|") >= 5:
            cells = line.split("|")
            listed.setdefault(cells[1].strip().strip("`"), set()).update(re.findall(r"`(\w+)`", cells[3]))
    assert sorted(listed) == sorted(FACES)
    for face, module in FACES.items():
        assert listed[face] == set(module.__all__), (
            f"{face}: missing from the table: {sorted(set(module.__all__) - listed[face])}; "
            f"not exported: {sorted(listed[face] - set(module.__all__))}")
