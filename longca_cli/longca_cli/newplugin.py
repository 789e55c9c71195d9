"""`longca new-plugin NAME --kind KIND`: a new plugin of any kind, copied from a template shipped in
this package (longca_cli/plugin_templates/<kind>).

Each template is a complete plugin of its kind named after its one package `longca_plugin_<name>`
(the kernel `mykernel`, the mask `mymask`, the sampler `mysampler`, the CP strategy `mystrategy`).
Copying it replaces that name in file names and contents (the distribution's `longca-plugin-<name>`
first), so the copy installs and passes its tests as it stands, under its own name.
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from longca.errors import LongcaError
from longca.plugins import KIND_NAMES
from longca_runner.outdir import check_writable_folder

TEMPLATE_ENV = "LONGCA_PLUGIN_TEMPLATE"
TEMPLATES = Path(__file__).resolve().parent / "plugin_templates"
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
SKIP = {"__pycache__", "build", "dist", ".pytest_cache"}


@dataclass(frozen=True)
class Kind:
    """A plugin kind (the name of its template folder): the registry's word for it, the module the author edits."""

    registry_kind: str
    edit: str  # relative to the package

    @property
    def noun(self) -> str:
        return KIND_NAMES[self.registry_kind]


KINDS = {"kernel": Kind("kernels", "kernel.py"), "mask": Kind("masks", "mask.py"),
         "sampler": Kind("samplers", "sampler.py"), "strategy": Kind("strategies", "algorithm.py")}


def kind_of(kind: str) -> Kind:
    if kind not in KINDS:
        raise LongcaError(f"unknown plugin kind {kind!r}: one of {', '.join(KINDS)}")
    return KINDS[kind]


def find_template(kind: str = "kernel", explicit: Path | None = None) -> Path:
    """The template folder: --template, $LONGCA_PLUGIN_TEMPLATE, or the one of `kind` shipped as package data."""
    if explicit:
        candidates = [Path(explicit)]
    elif os.environ.get(TEMPLATE_ENV):
        candidates = [Path(os.environ[TEMPLATE_ENV])]
    else:
        kind_of(kind)
        candidates = [TEMPLATES / kind]
    for path in candidates:
        if (path / "pyproject.toml").is_file():
            return path
    tried = ", ".join(str(p) for p in candidates)
    raise LongcaError(f"plugin template not found (tried {tried}); pass --template PATH to a "
                      f"plugin template folder, or set {TEMPLATE_ENV}")


def template_name(template: Path) -> str:
    """The name a template is written under: that of its one `longca_plugin_<name>` package."""
    found = sorted(p.name[len("longca_plugin_"):] for p in template.glob("longca_plugin_*") if p.is_dir())
    if len(found) != 1 or not NAME_RE.match(found[0]):
        raise LongcaError(f"plugin template {template} must hold exactly one package folder longca_plugin_<name> "
                          f"(found {', '.join('longca_plugin_' + f for f in found) or 'none'})")
    return found[0]


def names(name: str, old: str = "mykernel") -> dict[str, str]:
    """Template strings and their replacements: distribution, then package and plugin name."""
    return {f"longca-plugin-{old.replace('_', '-')}": f"longca-plugin-{name.replace('_', '-')}", old: name}


def _substitute(text: str, mapping: dict[str, str]) -> str:
    for old, new in mapping.items():  # the distribution first: it contains the plugin name
        text = text.replace(old, new)
    return text


def check_name(name: str, registered: dict[str, str] | None = None, kind: str = "kernel") -> None:
    """A plugin name must be a valid Python identifier part and not shadow a registered one of its kind."""
    noun = kind_of(kind).noun
    if not NAME_RE.match(name):
        raise LongcaError(f"invalid plugin name {name!r}: use lower-case letters, digits and '_', starting "
                          f"with a letter (it becomes the {noun} name and the package longca_plugin_{name})")
    if registered and name in registered:
        raise LongcaError(f"a {noun} named {name!r} is already registered by {registered[name]}; choose another name")


def create_plugin(name: str, output: Path | None = None, template: Path | None = None,
                  registered: dict[str, str] | None = None, kind: str = "kernel") -> Path:
    """Copy the template of `kind` into `output` (default ./longca-plugin-NAME) under the new name; return it."""
    check_name(name, registered, kind)
    source = find_template(kind, template)
    mapping = names(name, template_name(source))
    target = Path(output) if output else Path.cwd() / f"longca-plugin-{name.replace('_', '-')}"
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


def _try_it(name: str, kind: str) -> list[str]:
    """The commands that show a freshly installed plugin of `kind` at work on a CPU."""
    small = "--seqlen 1k --heads 4:2 --head-dim 64 --dtype float32 --device cpu --check"
    return {
        "kernel": ["  longca list-kernels", f"  longca run --kernel {name} --mask causal {small}"],
        "mask": ["  longca list-masks", f"  longca show-mask {name} --seqlen 4k",
                 f"  longca run --kernel reference --mask {name} {small}"],
        "sampler": ["  longca list-samplers",
                    f"  longca run --kernel reference --mask causal_document --sampler {name} {small}"],
        "strategy": ["  longca list-cp", f"  longca dist-run --strategy {name} --inner reference --nproc 2 "
                     f"--mask causal_document --direction fwdbwd {small}"],
    }[kind]


def next_steps(name: str, target: Path, kind: str = "kernel") -> str:
    """What to do after creating the plugin, printed by the command."""
    edit = target / f"longca_plugin_{name}" / kind_of(kind).edit
    return "\n".join([
        f"created {target}",
        "next:",
        f"  pip install -e {target} --no-deps",
        f"  python -m pytest {target / 'tests'}",
        *_try_it(name, kind),
        f"then put your {kind_of(kind).noun} in {edit} (the README says what each file holds)",
    ])
