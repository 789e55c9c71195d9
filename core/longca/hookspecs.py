"""The hooks a longca plugin implements. Every hook is documented in docs/hooks.md.

A plugin is a module with functions decorated with `longca.hookimpl`, named after the hooks
below, and listed as an entry point in the `longca` group of its distribution's pyproject:

    [project.entry-points.longca]
    mykernel = "longca_plugin_mykernel.hooks"
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    from .specs import CPStrategySpec, KernelSpec, MaskSpec, SamplerSpec

PROJECT = "longca"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def longca_masks() -> list[MaskSpec]:  # type: ignore[empty-body]  # a hookspec is a signature only
    """Mask patterns this plugin defines. Each MaskSpec's `build(ctx)` returns a Mask."""


@hookspec
def longca_samplers() -> list[SamplerSpec]:  # type: ignore[empty-body]
    """Document-length samplers this plugin defines."""


@hookspec
def longca_kernels() -> list[KernelSpec]:  # type: ignore[empty-body]
    """Attention kernels this plugin provides, with their declared capabilities.

    Must not import the kernel's library: do that inside `available`, `prepare` and `run`.
    """


@hookspec
def longca_cp_strategies() -> list[CPStrategySpec]:  # type: ignore[empty-body]
    """Context-parallel strategies this plugin provides."""


@hookspec
def longca_env_info(info: dict[str, Any]) -> None:
    """Add what this plugin knows of its environment (library versions, build flags) to `info`.

    Called when `run.json` is written and by `longca doctor`; keys should be namespaced by the
    plugin, e.g. `info["flash_attn"] = "2.8.3"`. Must not fail when the library is missing.
    """
