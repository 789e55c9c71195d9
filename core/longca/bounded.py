"""Plugin code called in this process with a time limit: a hook that never returns (an `available()`
probe, a mask builder, a `supports()`) becomes an error naming its plugin instead of a hang.

The call runs in a daemon thread; at the limit the caller goes on and the thread is left behind
(it cannot keep the process alive). A hang that holds the GIL in C code cannot be bounded so.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import LongcaError

HOOK_TIMEOUT_S = 60.0  # what a listing waits for one plugin's probe
T = TypeVar("T")


class HookHung(LongcaError):
    """A plugin's hook did not return in time."""


def hook_timeout_s() -> float:
    """`LONGCA_HOOK_TIMEOUT` seconds, else 60."""
    try:
        return max(0.1, float(os.environ.get("LONGCA_HOOK_TIMEOUT", HOOK_TIMEOUT_S)))
    except ValueError:
        return HOOK_TIMEOUT_S


def call_bounded(fn: Callable[[], T], what: str, seconds: float | None = None) -> T:
    """`fn()`, or HookHung("WHAT did not return in N s") when it takes longer; what it raised, re-raised."""
    limit = hook_timeout_s() if seconds is None else seconds
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name="longca-bounded-hook")
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        raise HookHung(f"{what} did not return in {limit:g} s (LONGCA_HOOK_TIMEOUT, or the case's --timeout)")
    if "error" in result:
        raise result["error"]
    return result["value"]

