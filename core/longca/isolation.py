"""Running cases in a child process, so a crash that kills the process (a segfault, an illegal
memory access that poisons the CUDA context) becomes an `error` row and the sweep goes on.

One child serves case after case (torch and the kernels' JIT caches stay warm); when a case
kills it, the row says so and the next case starts a fresh child.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
from dataclasses import asdict
from typing import Any, Optional

from .measure import RunOptions, run_problem
from .errors import LongcaError
from .problem import Problem
from .results import ResultRow, new_row

log = logging.getLogger(__name__)


def _serve(conn) -> None:
    """Child: run each (problem, options) received and send back ("row", row) or ("input", message)."""
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        fields, options = message
        try:
            conn.send(("row", run_problem(Problem(**fields), RunOptions(**options)).model_dump()))
        except LongcaError as exc:
            conn.send(("input", str(exc)))


class IsolatedRunner:
    """`run(problem, options) -> row`, each case in a (reused) child process."""

    def __init__(self) -> None:
        self._process: Optional[mp.process.BaseProcess] = None
        self._conn = None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child,), daemon=True)
        self._process.start()
        child.close()

    def run(self, problem: Problem, options: RunOptions) -> ResultRow:
        if self._process is None or not self._process.is_alive():
            self._start()
        self._conn.send((asdict(problem), asdict(options)))
        try:
            kind, payload = self._conn.recv()
        except (EOFError, ConnectionResetError):
            self._process.join(timeout=10)
            code = self._process.exitcode
            self._process = None
            row = new_row(problem, status="error", reason=f"the case killed its process (exit code {code}); "
                                                          f"a fresh process runs the next case")
            log.warning("case %s killed its worker (exit code %s)", row.case_id, code)
            return row
        if kind == "input":
            raise LongcaError(payload)
        return ResultRow.model_validate(payload)

    def close(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._conn.send(None)
            self._process.join(timeout=30)
        self._process = None

    def __enter__(self) -> "IsolatedRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
