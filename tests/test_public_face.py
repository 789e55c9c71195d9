"""Plugins import longca only through its public face, `longca.plugin` (issue 26).

Every module of a built-in plugin, its tests and the new-plugin template is parsed; an import of
`longca.<anything else>`, of a name from `longca` other than `plugin`, or of longca's own other
distributions (`longca_cp`, `longca_flashplan`, `longca_sim`, `longca_cli`) fails, naming the file
and line. Plugins may import each other (flex-fa4 builds on flex): they declare it as a dependency.
The face itself must resolve every name it promises and stay documented in docs/writing-a-plugin.md.
"""
from __future__ import annotations

import ast
import re
from importlib import import_module
from pathlib import Path

import pytest

from longca import plugin

ROOT = Path(__file__).resolve().parents[1]
INTERNAL = ("longca_cp", "longca_flashplan", "longca_sim", "longca_cli")
FACE = "longca.plugin"


def _past_face(module: str) -> bool:
    top = module.split(".")[0]
    if top in INTERNAL:
        return True
    return top == "longca" and module != FACE and not module.startswith(FACE + ".")


def imports_past_face(source: str, filename: str = "<source>") -> list[str]:
    """`file:line: statement` for every import that reaches past `longca.plugin`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if _past_face(a.name) or a.name == "longca"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "longca":
                bad = [f"longca.{a.name}" for a in node.names if a.name != "plugin"]
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
    ("from longca import plugin", False),
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


@pytest.mark.parametrize("name", sorted(plugin._LAZY))
def test_every_lazy_name_resolves(name):
    module, attr = plugin._LAZY[name]
    assert getattr(plugin, name) is getattr(import_module(module), attr)


def test_all_lists_every_name_and_unknown_names_fail():
    assert len(set(plugin.__all__)) == len(plugin.__all__)
    assert all(hasattr(plugin, name) for name in plugin.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        getattr(plugin, "nothing_here")  # noqa: B009 - the lookup of an unknown name is what is tested


def test_the_guide_lists_every_name_of_the_face():
    """docs/writing-a-plugin.md's table of the face: every exported name, and nothing else."""
    guide = (ROOT / "docs" / "writing-a-plugin.md").read_text()
    section = guide.split("## What `longca.plugin` exports", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(\w+)`", "\n".join(line.split("|")[2] for line in section.splitlines()
                                                  if line.startswith("| ") and line.count("|") >= 4)))
    assert listed == set(plugin.__all__), (f"missing from the table: {sorted(set(plugin.__all__) - listed)}; "
                                           f"not exported: {sorted(listed - set(plugin.__all__))}")
