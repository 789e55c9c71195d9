"""Plugin discovery: built-in modules plus the `longca` entry-point group, one failure at a time.

Each entry point is loaded and each of its hooks called in its own try: a plugin that fails to
import, or registers a malformed spec, is recorded with its error and breaks nothing else. Two
plugins claiming one name make that name unusable, with an error naming both distributions.

Environment: `LONGCA_DISABLE_PLUGINS=a,b` skips those entry points (by entry-point or
distribution name); `LONGCA_PLUGINS=a,b` loads only those. Built-ins always load.
"""
from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass, field
from importlib import import_module, metadata
from typing import Any, Generic, TypeVar

import pluggy

from . import __version__, hookspecs
from .bounded import HookHung, call_bounded
from .errors import LongcaError, UnknownNameError
from .specs import (
    ANY_BLOCK_SPARSE,
    ANY_MASK,
    ANY_STATIC,
    DEVICES,
    DTYPES,
    FAMILIES,
    MASK_GROUPS,
    MASK_KINDS,
    CPStrategySpec,
    KernelSpec,
    MaskSpec,
    SamplerSpec,
)

WILDCARDS = {ANY_STATIC: "static", ANY_BLOCK_SPARSE: "block_sparse", ANY_MASK: "all"}

log = logging.getLogger(__name__)

BUILTIN_MODULES = ("longca.masks.catalog", "longca.samplers", "longca.builtins.reference")
ENTRY_POINT_GROUP = "longca"
IMPORT_TIMEOUT_S = 60.0  # a plugin's import that takes longer is reported as hanging
UNAVAILABLE = "unavailable: "
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.\-]*$")
KINDS = {"masks": ("longca_masks", MaskSpec), "samplers": ("longca_samplers", SamplerSpec),
         "kernels": ("longca_kernels", KernelSpec), "strategies": ("longca_cp_strategies", CPStrategySpec)}
KIND_NAMES = {"masks": "mask", "samplers": "sampler", "kernels": "kernel", "strategies": "CP strategy"}
S = TypeVar("S")


@dataclass
class PluginInfo:
    """One plugin: a built-in module or an entry point of an installed distribution."""

    name: str
    distribution: str
    version: str
    module: str
    builtin: bool = False
    hooks: list[str] = field(default_factory=list)
    registered: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "module": self.module, "builtin": self.builtin, "hooks": self.hooks,
                "registered": self.registered, "errors": self.errors}


@dataclass
class Entry(Generic[S]):
    """A registered spec and the plugin it came from; `conflict` when two plugins claim the name."""

    spec: S
    plugin: PluginInfo
    conflict: str | None = None


class Registry:
    """Everything the installed plugins registered, by kind and name."""

    def __init__(self) -> None:
        self.plugins: list[PluginInfo] = []
        self.entries: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}
        self.pm: pluggy.PluginManager | None = None

    def names(self, kind: str) -> list[str]:
        return sorted(self.entries[kind])

    def entry(self, kind: str, name: str) -> Entry:
        entries = self.entries[kind]
        if name not in entries:
            raise UnknownNameError(KIND_NAMES[kind], name, list(entries))
        found = entries[name]
        if found.conflict:
            raise LongcaError(found.conflict)
        return found

    def mask_group(self, group: str) -> list[str]:
        """The registered masks of a group: `static`, `block_sparse` or `all`, third-party ones included."""
        if group not in MASK_GROUPS:
            raise LongcaError(f"unknown mask group {group!r}; known: {', '.join(MASK_GROUPS)}")
        names = list(self.entries["masks"])  # registration order: built-ins first, in the catalog's order
        if group == "all":
            return names
        sparse = group == "block_sparse"
        return [n for n in names if (self.entries["masks"][n].spec.kind == "block_sparse") == sparse]

    def claimed_masks(self, claims: tuple[str, ...]) -> list[str]:
        """The mask names a `masks` declaration stands for, wildcards expanded to registered masks."""
        out: list[str] = []
        for claim in claims:
            out += self.mask_group(WILDCARDS[claim]) if claim in WILDCARDS else [claim]
        return list(dict.fromkeys(out))

    def mask(self, name: str) -> MaskSpec:
        return self.entry("masks", name).spec

    def sampler(self, name: str) -> SamplerSpec:
        return self.entry("samplers", name).spec

    def kernel(self, name: str) -> KernelSpec:
        return self.entry("kernels", name).spec

    def strategy(self, name: str | None) -> CPStrategySpec:
        """The CP strategy `name` (a Problem's `strategy`, so None is refused here)."""
        if name is None:
            raise LongcaError("no CP strategy given (a problem for one GPU has none)")
        return self.entry("strategies", name).spec

    def _add(self, kind: str, spec: Any, plugin: PluginInfo) -> None:
        entries = self.entries[kind]
        old = entries.get(spec.name)
        if old is None:
            entries[spec.name] = Entry(spec, plugin)
            plugin.registered.setdefault(kind, []).append(spec.name)
            return
        message = (f"{KIND_NAMES[kind]} name {spec.name!r} is claimed by two plugins: "
                   f"{old.plugin.distribution} ({old.plugin.name}) and {plugin.distribution} ({plugin.name}); "
                   f"uninstall one or block it with LONGCA_DISABLE_PLUGINS")
        old.conflict = message
        plugin.errors.append(message)
        old.plugin.errors.append(message)


def _env_list(name: str) -> set[str] | None:
    value = os.environ.get(name, "").strip()
    return {x.strip() for x in value.split(",") if x.strip()} if value else None


def validate(kind: str, spec: Any) -> str | None:
    """Why a registered spec is malformed, or None."""
    expected = KINDS[kind][1]
    if not isinstance(spec, expected):
        return f"{KINDS[kind][0]} returned a {type(spec).__name__}, expected {expected.__name__}"
    name = getattr(spec, "name", None)
    if not isinstance(name, str) or not NAME_RE.match(name):
        return (f"invalid {KIND_NAMES[kind]} name {name!r}: use lower-case letters, digits, '_', '-', '.', "
                f"starting with a letter or digit")
    if isinstance(spec, MaskSpec) and spec.kind not in MASK_KINDS:
        return f"mask {spec.name!r}: kind {spec.kind!r} is not one of {', '.join(MASK_KINDS)}"
    if isinstance(spec, KernelSpec):
        if spec.family not in FAMILIES:
            return f"kernel {spec.name!r}: family {spec.family!r} is not one of {', '.join(FAMILIES)}"
        bad = [d for d in spec.dtypes if d not in DTYPES] + [d for d in spec.devices if d not in DEVICES]
        if bad:
            return f"kernel {spec.name!r}: unknown dtype or device {bad}"
        if not callable(spec.prepare) or not callable(spec.run):
            return f"kernel {spec.name!r}: prepare and run must be callable"
    return None


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, except that a hookimpl a module imports under another name
    (`from other.hooks import longca_kernels as theirs`) is not taken as a hook of that module:
    only functions defined under their own name count, so pluggy's unknown-hook check
    (`check_pending`) flags real misspellings and nothing else."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.add_hookspecs(hookspecs)
        if os.environ.get("LONGCA_TRACE_PLUGINS", "") not in ("", "0"):
            trace_hook_calls(self)

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is not None and getattr(getattr(plugin, name, None), "__name__", name) != name:
            return None
        return opts


def trace_hook_calls(pm: pluggy.PluginManager, write: Any = None) -> None:
    """Every hook call, its arguments and result on stderr (`LONGCA_TRACE_PLUGINS=1`): pluggy's own
    tracing, as pytest's --debug and datasette's DATASETTE_TRACE_PLUGINS turn it on, to see which
    plugin answered what while debugging a plugin."""
    pm.trace.root.setwriter(write or sys.stderr.write)
    pm.enable_tracing()


def hook_of(pm: pluggy.PluginManager, obj: Any, hook_name: str) -> Any | None:
    """pluggy's caller of `hook_name` restricted to the plugin `obj` (each plugin is called in its
    own try, so one failing plugin does not hide the others' results), or None if it has none."""
    others = [p for p in pm.get_plugins() if p is not obj]
    caller = pm.subset_hook_caller(hook_name, remove_plugins=others)
    return caller if caller.get_hookimpls() else None


def _register(registry: Registry, pm: pluggy.PluginManager, plugin: PluginInfo, obj: Any) -> None:
    try:
        pm.register(obj, name=plugin.name)
    except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the others
        plugin.errors.append(f"cannot register: {exc}")
        return
    try:  # a misspelled hook would otherwise be ignored silently; every plugin before this one passed
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        known = sorted(n for n in vars(hookspecs) if n.startswith("longca_"))
        plugin.errors.append(f"{exc}; known hooks: {', '.join(known)}")
        pm.unregister(obj)
        return
    for kind, (hook_name, _) in KINDS.items():
        caller = hook_of(pm, obj, hook_name)
        if caller is None:
            continue
        plugin.hooks.append(hook_name)
        try:
            specs = [spec for result in call_bounded(caller, f"{hook_name}()") for spec in (result or [])]
        except HookHung as exc:
            plugin.errors.append(f"{UNAVAILABLE}{exc}; disable it with LONGCA_DISABLE_PLUGINS={plugin.name}")
            continue
        except Exception as exc:  # noqa: BLE001 - a failing hook is an error on its plugin, the registry still loads
            plugin.errors.append(f"{hook_name}() failed: {type(exc).__name__}: {exc}")
            continue
        for spec in specs:
            problem = validate(kind, spec)
            if problem:
                plugin.errors.append(problem)
            else:
                registry._add(kind, spec, plugin)
    if hook_of(pm, obj, "longca_env_info") is not None:
        plugin.hooks.append("longca_env_info")


class ImportGuarded(Exception):
    """A plugin's import hung or tried to end the process."""


def import_timeout_s() -> float:
    try:
        return max(0.1, float(os.environ.get("LONGCA_PLUGIN_IMPORT_TIMEOUT", IMPORT_TIMEOUT_S)))
    except ValueError:
        return IMPORT_TIMEOUT_S


def load_guarded(ep: Any) -> Any:
    """`ep.load()` bounded in time (`call_bounded`): a plugin that hangs at import (or calls sys.exit
    there) is an error of that plugin, and the others load. The hung thread is left behind (a
    daemon: it cannot keep the process alive); a re-run starts without it."""
    limit = import_timeout_s()
    try:
        return call_bounded(ep.load, "the import", limit)
    except HookHung:
        raise ImportGuarded(f"the import did not finish in {limit:g} s (LONGCA_PLUGIN_IMPORT_TIMEOUT); "
                            f"disable it with LONGCA_DISABLE_PLUGINS={ep.name}") from None
    except ValueError as error:
        if "main thread" in str(error):
            return ep.load()  # it installs signal handlers at import: only the main thread may
        raise
    except SystemExit as error:
        raise ImportGuarded(f"it called sys.exit({error.code!r}) while being imported") from None


def load_registry() -> Registry:
    """Discover built-ins and installed plugins (not cached: see `get_registry`)."""
    registry = Registry()
    pm = PluginManager()
    for module in BUILTIN_MODULES:
        info = PluginInfo(module.rsplit(".", 1)[-1], "longca-core", __version__, module, builtin=True)
        registry.plugins.append(info)
        _register(registry, pm, info, import_module(module))
    only, disabled = _env_list("LONGCA_PLUGINS"), _env_list("LONGCA_DISABLE_PLUGINS") or set()
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = ep.dist.name if ep.dist else "?"
        version = ep.dist.version if ep.dist else "?"
        if {ep.name, dist} & disabled or (only is not None and not {ep.name, dist} & only):
            continue
        if any(p.name == ep.name and p.distribution == dist for p in registry.plugins):
            continue  # the same distribution seen twice on sys.path
        info = PluginInfo(ep.name, dist, version, ep.value)
        registry.plugins.append(info)
        try:
            obj = load_guarded(ep)
        except ImportGuarded as exc:
            info.errors.append(f"{UNAVAILABLE}{ep.value}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - a plugin that fails to import is an error on it, the others load
            info.errors.append(f"cannot import {ep.value}: {type(exc).__name__}: {exc}")
            log.debug("plugin %s failed to load", ep.name, exc_info=True)
            continue
        _register(registry, pm, info, obj)
    registry.pm = pm
    return registry


_REGISTRY: Registry | None = None


def get_registry(reload: bool = False) -> Registry:
    """The process-wide registry, loaded on first use."""
    global _REGISTRY
    if _REGISTRY is None or reload:
        _REGISTRY = load_registry()
    return _REGISTRY


def env_info(registry: Registry | None = None) -> dict[str, Any]:
    """What every plugin's `longca_env_info` hook reports, each in its own try."""
    registry = registry or get_registry()
    info: dict[str, Any] = {}
    pm = registry.pm
    if pm is None:  # a registry built without discovery has no plugins to ask
        return info
    for name, plugin in pm.list_name_plugin():
        hook = hook_of(pm, plugin, "longca_env_info")
        if hook is not None:
            try:
                hook(info=info)
            except Exception as exc:  # noqa: BLE001 - a failing env-info hook is one field of the info, not a failed run
                info[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
    return info


def installed_version(*distributions: str) -> str | None:
    """The version of the first of `distributions` that is installed, or None (a library's names vary)."""
    from importlib import metadata

    for dist in distributions:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None
