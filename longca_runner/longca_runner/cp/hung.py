"""Which rank of a stuck CP case hung: each rank's watcher thread keeps a small file saying where its
main thread is, and the supervisor reads them before tearing the group down.

A rank blocked on its peers sits in a collective: its innermost Python frame is in torch.distributed
or in longca_cp's exchange (`comm.py`), and the call released the GIL, so its watcher keeps writing.
The rank that hung is elsewhere (in a kernel, a strategy's own code), or its watcher stopped writing
(a C call holding the GIL). Reading where each rank *is* rather than when each rank *reported* is
what makes the answer the same on every run: under a collective timeout the waiting rank reports
first, the hung one never does.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

INTERVAL_S = 0.25  # how often a rank's watcher writes where it is
STALE_S = 3.0  # a where-file older than this: the rank's interpreter is not running Python (GIL held)
_WAITING = (f"{os.sep}torch{os.sep}distributed{os.sep}", f"{os.sep}longca_cp{os.sep}comm.py")


def where_file(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank{rank}.where")


def where(frame: Any) -> dict[str, Any]:
    """Where a thread is: its innermost Python frame, and whether that frame waits on peers."""
    if frame is None:
        return {"at": time.time(), "waiting": False, "frame": "no Python frame"}
    code = frame.f_code
    return {"at": time.time(), "waiting": any(part in code.co_filename for part in _WAITING),
            "frame": f"{Path(code.co_filename).name}:{frame.f_lineno} in {code.co_name}"}


def watch(path: str) -> None:
    """Start this rank's watcher: `path` says where the main thread is, rewritten every INTERVAL_S."""
    main = threading.main_thread().ident or 0

    def loop() -> None:
        scratch = path + ".tmp"
        while True:
            try:
                with open(scratch, "w") as f:
                    json.dump(where(sys._current_frames().get(main)), f)  # noqa: SLF001 - the one way to see another thread's frame
                os.replace(scratch, path)
            except OSError:
                return  # the group's folder is gone: the group is being torn down
            time.sleep(INTERVAL_S)

    threading.Thread(target=loop, daemon=True, name="longca-rank-where").start()


def read(path: str, now: float | None = None) -> dict[str, Any]:
    """A rank's last where-file; a missing or stale one says the rank's interpreter stopped."""
    now = time.time() if now is None else now
    try:
        with open(path) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return {"waiting": False, "frame": "no answer from its watcher (a call that holds the GIL?)"}
    if now - state.get("at", 0) > STALE_S:
        return {"waiting": False, "frame": f"no answer from its watcher for {now - state['at']:.0f} s "
                                           f"(a call that holds the GIL?); last seen {state.get('frame')}"}
    return state


def hung(states: dict[int, dict[str, Any]]) -> list[int]:
    """The ranks (of those still running) that are not waiting on their peers: the ones that hung.
    Empty when every one waits (a deadlock of mismatched collectives: no single rank to name)."""
    return sorted(rank for rank, state in states.items() if not state.get("waiting"))


def describe(states: dict[int, dict[str, Any]], stuck: list[int]) -> str:
    """'rank 1 hung in strategies.py:21 in attention while rank 0 waited in distributed_c10d.py:...'."""
    hung_part = ", ".join(f"rank {r} hung in {states[r].get('frame')}" for r in stuck)
    waiting = [r for r in sorted(states) if r not in stuck]
    if not waiting:
        return hung_part
    return hung_part + " while " + ", ".join(f"rank {r} waited in {states[r].get('frame')}" for r in waiting)
