"""An output folder opened for writing: checked before anything is measured, locked, its tail repaired.

`OutputFolder(path).open()` refuses (one line, `LongcaError`) a path that is a file, lies under a
file, or cannot be written; takes an exclusive lock (`.longca.lock`, `flock`: released when the
process dies, however it dies), so a second sweep into the same folder names the holder and
stops; and moves a torn last line of results.jsonl (an interrupted write: no newline at the end)
to results.jsonl.torn, so the next row cannot glue onto it and its case runs again.
"""
from __future__ import annotations

import json
import logging
import os
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any

from longca.errors import LongcaError

log = logging.getLogger(__name__)

LOCK_FILE = ".longca.lock"
RESULTS_FILE = "results.jsonl"


def safe_name(text: str) -> str:
    """`text` as one file name: every character but letters, digits and `_.=+-` becomes `_`; never `.`/`..`."""
    name = re.sub(r"[^A-Za-z0-9_.=+-]", "_", str(text)).lstrip(".")
    return name[:200] or "_"


def confined(folder: Path, name: str) -> Path:
    """FOLDER/safe_name(name): a path that cannot leave the folder."""
    path = Path(folder) / safe_name(name)
    if path.resolve().parent != Path(folder).resolve():
        raise LongcaError(f"file name {name!r} leaves {folder}")  # unreachable with safe_name; a guard
    return path


IMAGE_FORMATS = ("png", "pdf", "svg", "svgz", "jpg", "jpeg", "tif", "tiff", "webp", "eps", "ps", "gif", "avif")


def check_image_path(path: Path, what: str = "--output") -> Path:
    """A picture file to write: a format matplotlib writes, not a folder, in a folder that can be written."""
    path = Path(path)
    if path.is_dir():
        raise LongcaError(f"{what} {path} is a folder; give a file name such as {path / 'mask.png'}")
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in IMAGE_FORMATS:
        raise LongcaError(f"{what} {path}: cannot write a {fmt or 'extension-less'} picture; "
                          f"use one of: {', '.join('.' + f for f in IMAGE_FORMATS)}")
    return check_file_path(path, what)


def check_file_path(path: Path, what: str = "--output", example: str = "report.md") -> Path:
    """A file to (over)write: not a folder, not a device, in a folder that can be written."""
    path = Path(path)
    if path.is_dir():
        raise LongcaError(f"{what} {path} is a folder; give a file name such as {path / example}")
    if path.exists() and not path.is_file():
        raise LongcaError(f"{what} {path} is not a regular file (a device, pipe or socket)")
    check_writable_folder(path.parent if str(path.parent) else Path("."), what)
    if path.exists() and not os.access(path, os.W_OK):
        raise LongcaError(f"{what} {path}: the file is not writable")
    return path


def write_text_file(path: Path, text: str, what: str = "--output") -> None:
    """Write a whole file or say in one line why not (a full disk, a read-only file system)."""
    try:
        path.write_text(text)
    except OSError as exc:
        raise LongcaError(f"{what} {path}: could not be written ({exc.strerror or exc})") from None


def check_writable_folder(path: Path, what: str = "--output") -> Path:
    """Create `path` as a folder if needed; a file in the way or no permission is one clear line."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise LongcaError(f"{what} {path} is a file, not a folder")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise LongcaError(f"{what} {path}: {parent} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LongcaError(f"{what} {path}: cannot create the folder ({exc.strerror or exc})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise LongcaError(f"{what} {path}: the folder is not writable")
    return path


def repair_tail(results: Path) -> str | None:
    """Move an unterminated last line of `results` to `results`.torn; what was done, or None."""
    try:
        size = results.stat().st_size
    except FileNotFoundError:
        return None
    if size == 0:
        return None
    with results.open("rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return None
        f.seek(max(0, size - (1 << 20)))
        tail = f.read()
        cut = tail.rfind(b"\n")
        start = size - len(tail) + cut + 1 if cut >= 0 else 0
        if cut < 0 and size > len(tail):
            raise LongcaError(f"{results}: the last 1 MiB holds no line break; not a results file")
        f.seek(start)
        torn = f.read()
        with Path(f"{results}.torn").open("ab") as out:
            out.write(torn + b"\n")
            out.flush()
            os.fsync(out.fileno())
        f.truncate(start)
        f.flush()
        os.fsync(f.fileno())
    return (f"{results}: its last line was torn (an interrupted write, {len(torn)} bytes); moved to "
            f"{results.name}.torn, its case runs again")


def _holder(text: str) -> str:
    try:
        info = json.loads(text)
        return (f"pid {info['pid']} on {info['host']}, since {info['started']}: "
                f"{' '.join(info.get('argv') or [])}".rstrip(": "))
    except (ValueError, KeyError, TypeError):
        return "another process"


class OutputFolder:
    """A results folder this process writes into; use as a context manager."""

    def __init__(self, path: Path, what: str = "--output") -> None:
        self.path, self.what = Path(path), what
        self._lock: Any = None
        self.notes: list[str] = []

    @property
    def results(self) -> Path:
        return self.path / RESULTS_FILE

    def open(self) -> OutputFolder:
        check_writable_folder(self.path, self.what)
        if self.results.exists() and not self.results.is_file():
            raise LongcaError(f"{self.what} {self.path}: {self.results.name} is not a file")
        self._take_lock()
        try:
            note = repair_tail(self.results)
        except OSError as exc:
            self.close()
            raise LongcaError(f"{self.results}: cannot read or repair it ({exc.strerror or exc})") from None
        if note:
            log.warning(note)
            self.notes.append(note)
        return self

    def _take_lock(self) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - no flock (Windows): no exclusion
            return
        path = self.path / LOCK_FILE
        try:
            handle = path.open("a+")
        except OSError as exc:
            raise LongcaError(f"{self.what} {self.path}: cannot write into the folder "
                              f"({exc.strerror or exc})") from None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = _holder(handle.read())
            handle.close()
            raise LongcaError(f"{self.path} is in use by another longca run ({holder}); wait for it to end or "
                              f"choose another --output") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "argv": sys.argv,
                                 "started": time.strftime("%Y-%m-%d %H:%M:%S")}))
        handle.flush()
        self._lock = handle

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None

    def __enter__(self) -> OutputFolder:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


RUN_FOLDER = re.compile(r"^run-(\d+)$")  # a repeat of `longca bench --runs N` (longca_runner.repeat)


def existing_runs(output: Path | str) -> list[Path]:
    """The OUTPUT/run-K folders that hold results, in K order."""
    output = Path(output)
    if not output.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in output.iterdir()
             if (m := RUN_FOLDER.match(p.name)) and (p / RESULTS_FILE).is_file()]
    return [p for _, p in sorted(found)]
