"""`longca --version`: the versions of longca's distributions, read from installed metadata (no torch import)."""
from __future__ import annotations

from importlib import metadata


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def plugin_distributions() -> dict[str, str]:
    """Distribution -> version of everything registering in the `longca` entry-point group."""
    found: dict[str, str] = {}
    for ep in metadata.entry_points(group="longca"):
        dist = getattr(ep, "dist", None)
        if dist is not None:
            found[dist.metadata["Name"]] = dist.version
    return found


def version_lines(every: bool = False) -> list[str]:
    """`longca-cli X (longca-core Y)`; with `every`, one line per plugin distribution and torch too."""
    lines = [f"longca-cli {_version('longca-cli')} (longca-core {_version('longca-core')})"]
    if every:
        lines += [f"{name} {version}" for name, version in sorted(plugin_distributions().items())
                  if name not in ("longca-core", "longca-cli")]
        lines.append(f"torch {_version('torch')}")
    return lines
