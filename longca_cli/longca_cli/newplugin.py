"""`longca new-plugin NAME`: a new kernel plugin, copied from the template shipped in this package
(longca_cli/plugin_template).

The template is a complete plugin named `mykernel` (distribution `longca-plugin-mykernel`,
package `longca_plugin_mykernel`). Copying it replaces those names in file names and contents,
so the copy installs and passes its tests as it stands, under its own name.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from longca.errors import LongcaError
from longca.outdir import check_writable_folder

TEMPLATE_NAME = "mykernel"
TEMPLATE_ENV = "LONGCA_PLUGIN_TEMPLATE"
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
SKIP = {"__pycache__", "build", "dist", ".pytest_cache"}


def find_template(explicit: Path | None = None) -> Path:
    """The template folder: --template, $LONGCA_PLUGIN_TEMPLATE, or the one shipped as package data."""
    if explicit:
        candidates = [Path(explicit)]
    elif os.environ.get(TEMPLATE_ENV):
        candidates = [Path(os.environ[TEMPLATE_ENV])]
    else:
        candidates = [Path(__file__).resolve().parent / "plugin_template"]
    for path in candidates:
        if (path / "pyproject.toml").is_file():
            return path
    tried = ", ".join(str(p) for p in candidates)
    raise LongcaError(f"plugin template not found (tried {tried}); pass --template PATH to a "
                      f"plugin template folder, or set {TEMPLATE_ENV}")


def names(name: str) -> dict[str, str]:
    """Template strings and their replacements: distribution, package, kernel name."""
    return {f"longca-plugin-{TEMPLATE_NAME}": f"longca-plugin-{name.replace('_', '-')}",
            TEMPLATE_NAME: name}


def _substitute(text: str, mapping: dict[str, str]) -> str:
    for old, new in mapping.items():  # the distribution first: it contains the kernel name
        text = text.replace(old, new)
    return text


def check_name(name: str, registered: dict[str, str] | None = None) -> None:
    """A plugin name must be a valid Python identifier part and not shadow a registered kernel."""
    if not NAME_RE.match(name):
        raise LongcaError(f"invalid plugin name {name!r}: use lower-case letters, digits and '_', starting "
                          f"with a letter (it becomes the kernel name and the package longca_plugin_{name})")
    if registered and name in registered:
        raise LongcaError(f"a kernel named {name!r} is already registered by {registered[name]}; choose another name")


def create_plugin(name: str, output: Path | None = None, template: Path | None = None,
                  registered: dict[str, str] | None = None) -> Path:
    """Copy the template into `output` (default ./longca-plugin-NAME) under the new name; return it."""
    check_name(name, registered)
    source = find_template(template)
    mapping = names(name)
    target = Path(output) if output else Path.cwd() / mapping[f"longca-plugin-{TEMPLATE_NAME}"]
    check_writable_folder(target)
    if any(target.iterdir()):
        raise LongcaError(f"{target} exists and is not empty; pass --output to a new folder")
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if any(part in SKIP or part.endswith(".egg-info") for part in rel.parts) or path.suffix == ".pyc":
            continue
        dest = target / _substitute(str(rel), mapping)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            dest.write_text(_substitute(path.read_text(encoding="utf-8"), mapping), encoding="utf-8")
        except UnicodeDecodeError:
            shutil.copyfile(path, dest)
    return target


def next_steps(name: str, target: Path) -> str:
    """What to do after creating the plugin, printed by the command."""
    return "\n".join([
        f"created {target}",
        "next:",
        f"  pip install -e {target} --no-deps",
        "  longca list-kernels",
        f"  python -m pytest {target / 'tests'}",
        f"  longca run --kernel {name} --mask causal --seqlen 1k --heads 4:2 --head-dim 64 "
        f"--dtype float32 --device cpu --check",
        f"then put your kernel in {target / ('longca_plugin_' + name) / 'kernel.py'} and its claims in hooks.py",
    ])
