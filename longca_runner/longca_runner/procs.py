"""Child processes that never outlive their parent, and killing a child with everything it started.

Workers start from a fork server (torch imported once, so a fresh worker costs a fork, not an
import); each worker asks the kernel to kill it when its parent dies (Linux `PR_SET_PDEATHSIG`)
and leads its own process group, so stopping it stops whatever it started too.
"""
from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

PRELOAD = ("torch", "torch.distributed", "longca_runner.measure", "longca.plugins")
_PR_SET_PDEATHSIG = 1


def context(preload: tuple[str, ...] = PRELOAD) -> Any:
    """The multiprocessing context for workers: a fork server where there is one, else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(preload))
        return ctx
    return multiprocessing.get_context("spawn")


def start(process: Any) -> None:
    """`process.start()` without the caller's main script: the worker's target lives in an
    importable module, and a script without an `if __name__ == "__main__"` guard would otherwise
    run again in every worker."""
    from multiprocessing import spawn

    original = spawn.get_preparation_data

    def without_main(name: str) -> dict:
        data = original(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    spawn.get_preparation_data = without_main
    try:
        process.start()
    finally:
        spawn.get_preparation_data = original


def become_worker(parent_pid: int, environ: dict[str, str] | None = None) -> None:
    """First thing a worker does: die with its parent, lead a process group, take the parent's environment.

    `parent_pid` is the supervisor's pid: when it is gone already (killed while this process
    started), exit at once."""
    if environ is not None:  # a fork server's children inherit the server's environment, not the caller's
        os.environ.clear()
        os.environ.update(environ)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    _release_fork_server()
    if not _alive(parent_pid):
        os._exit(1)
    threading.Thread(target=_watch, args=(parent_pid,), daemon=True, name="longca-parent-watch").start()


def _release_fork_server() -> None:
    """Close the fork server's keep-alive pipe that its children inherit: the server exits when the
    supervisor dies only once no child holds it, and then the kernel kills this worker (PDEATHSIG)."""
    try:
        from multiprocessing import forkserver

        fd = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)  # noqa: SLF001 - no public way
        if fd is not None:
            os.close(fd)
            setattr(forkserver._forkserver, "_forkserver_alive_fd", None)  # noqa: B010, SLF001 - private, absent from the stubs
    except (ImportError, AttributeError, OSError):
        pass


def _watch(parent_pid: int) -> None:
    """Second line of defence: exit when the supervisor is gone (where PDEATHSIG is not available)."""
    while _alive(parent_pid):
        time.sleep(1.0)
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def requests(conn: Any) -> Iterator[Any]:
    """A worker's view of its pipe: each message until the supervisor sends None or goes away."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        yield message


def tell(conn: Any, message: Any) -> None:
    """A worker's send to its supervisor; when the supervisor is gone (SIGTERM, kill) the worker ends
    quietly here instead of printing a BrokenPipeError traceback."""
    try:
        conn.send(message)
    except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
        os._exit(0)


def send_case(conn: Any, message: Any) -> bool:
    """A supervisor's send to a worker; False when the worker is gone (ended by SIGTERM or a kill
    between cases), so the caller starts a fresh one instead of failing with BrokenPipeError."""
    try:
        conn.send(message)
    except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
        return False
    return True


def kill_tree(process: Any) -> None:
    """SIGKILL a worker's process group (it and what it started), then reap it."""
    pid = getattr(process, "pid", None)
    if pid:
        for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                kill()
            except (ProcessLookupError, PermissionError, OSError):
                continue
    with contextlib.suppress(AssertionError, OSError):
        process.join(timeout=10)


def exit_description(exitcode: int | None) -> str:
    """'signal SIGSEGV' or 'exit code 3'."""
    if exitcode is None:
        return "no exit code"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"
