"""`longca bench` keeps library warnings out of the terminal (they go to the run's longca.log,
worker processes included) and its progress line says how long is left."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

from rich.progress import TimeRemainingColumn

from longca_cli import render
from longca_cli.main import LOG_FILE, warnings_to
from longca_runner import warnlog


def test_warnings_go_to_the_log_not_the_terminal(tmp_path, capsys):
    log = tmp_path / "out" / LOG_FILE
    before = warnings.showwarning
    with warnings_to(log):
        assert os.environ[warnlog.ENV] == str(log.resolve())
        warnings.warn("cutlass: this GPU is not tuned", UserWarning, stacklevel=1)
    assert warnings.showwarning is before and warnlog.ENV not in os.environ
    assert "cutlass: this GPU is not tuned" in log.read_text()
    assert "cutlass" not in capsys.readouterr().err


def test_a_worker_follows_the_environment(tmp_path):
    log = tmp_path / LOG_FILE
    code = ("import warnings; from longca_runner import warnlog; warnlog.from_env(); "
            "warnings.warn('triton: autotuning', UserWarning)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, warnlog.ENV: str(log)}, check=True)
    assert "triton: autotuning" in log.read_text() and "triton" not in out.stderr


def test_progress_line_has_an_eta():
    columns = render.progress_columns()
    assert any(isinstance(c, TimeRemainingColumn) for c in columns)
    assert render.with_progress(2, lambda tick: "done") == "done"
