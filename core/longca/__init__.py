"""longca: a plugin-based benchmark for long-context attention kernels and context parallelism."""
from __future__ import annotations

__version__ = "0.1.0"

from .hookspecs import hookimpl  # noqa: E402

__all__ = ["__version__", "hookimpl"]
