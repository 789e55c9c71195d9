"""Built-in sweep specs used by `longca bench`."""
from __future__ import annotations

from importlib import resources
from pathlib import Path


def default_spec_path(device: str) -> Path:
    """The paper's dense grid (trimmed to available kernels) on a GPU, a small CPU run otherwise."""
    name = "gpu-default.toml" if device.startswith("cuda") else "cpu-small.toml"
    return Path(str(resources.files(__package__).joinpath(name)))
