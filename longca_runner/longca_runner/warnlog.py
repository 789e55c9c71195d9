"""Library warnings (`warnings.warn`: cutlass, triton, torch UserWarnings) into the run's log file
instead of the terminal, where dozens of them buried `longca bench`'s progress line. The worker
processes pick the file up from LONGCA_WARNINGS_LOG, which the parent sets before starting them."""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

ENV = "LONGCA_WARNINGS_LOG"


def to_file(path: str | Path) -> Any:
    """Send every shown warning of this process to `path` (appended); returns the previous handler."""
    target = Path(path)
    previous = warnings.showwarning

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        with target.open("a") as f:
            f.write(f"[pid {os.getpid()}] " + warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show
    return previous


def start(path: str | Path, what: str) -> None:
    """Begin a run's part of the log with a dated line, so the file exists (and says which run wrote
    what follows) even when no library warns."""
    from datetime import datetime, timezone

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a") as f:
        f.write(f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} {what}\n")


def from_env() -> None:
    """In a worker: follow the parent's LONGCA_WARNINGS_LOG, if set."""
    path = os.environ.get(ENV)
    if path:
        to_file(path)
