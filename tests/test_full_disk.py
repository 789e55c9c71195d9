"""Rows on a full disk or in a folder made read-only: the measured row is printed, the failure is one
line naming the file, results.jsonl is left as it was (no torn line), and `--resume` finishes the rest.
ENOSPC is simulated by an `os.write` that writes part of the line then fails (a tiny tmpfs needs root);
a read-only folder by an `os.open` that raises EACCES (root may write anyway)."""
from __future__ import annotations

import errno
import json
import os
import textwrap

import pytest
from typer.testing import CliRunner

from longca.problem import Problem
from longca.results import ResultsWriter, RowNotWritten, new_row, read_results
from longca_cli.main import app

RUN = ["run", "--kernel", "reference", "--seqlen", "128", "--heads", "1:1", "--head-dim", "16", "--dtype",
       "float32", "--device", "cpu", "--warmup", "0", "--repeat", "1", "-f", "json"]
SPEC = """
    [sweep]
    kernels = ["reference"]
    masks = ["causal"]
    seqlens = [64, 96, 128]
    heads = ["1:1"]
    head_dims = [16]
    dtypes = ["float32"]
    directions = ["fwd"]
    device = "cpu"
    warmup = 0
    repeat = 1
    measure_peak = false
"""


def _is_results(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").endswith("results.jsonl")
    except OSError:
        return False


@pytest.fixture
def full_disk(monkeypatch):
    """After `allow` whole writes to a results.jsonl, each write there writes 10 bytes and then fails."""
    real = os.write
    state = {"allow": 0}

    def write(fd, data):
        if not _is_results(fd):
            return real(fd, data)
        if state["allow"] > 0:
            state["allow"] -= 1
            return real(fd, data)
        if len(data) > 10:
            return real(fd, bytes(data[:10]))  # a short write: part of the line is on the disk
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", write)
    return state


@pytest.fixture
def read_only(monkeypatch):
    real = os.open

    def open_(path, flags, *args, **kwargs):
        if str(path).endswith("results.jsonl") and flags & (os.O_WRONLY | os.O_RDWR):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)


def _lines(path):
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


def test_the_writer_leaves_no_torn_line(tmp_path, full_disk):
    path = tmp_path / "results.jsonl"
    writer = ResultsWriter(path)
    row = new_row(Problem(kernel="reference", mask="causal", seqlen=64, heads_q=1, heads_kv=1, head_dim=16),
                  status="ok")
    full_disk["allow"] = 1
    writer.append(row)
    before = path.read_bytes()
    with pytest.raises(RowNotWritten) as caught:
        writer.append(row)
    assert path.read_bytes() == before and before.endswith(b"\n")
    assert "No space left on device" in str(caught.value) and str(path) in str(caught.value)
    writer.keep(row)
    writer.keep(row)
    assert writer.unwritten is not None and writer.unwritten.later == 1 and path.read_bytes() == before


def test_run_output_on_a_full_disk_prints_the_row_and_says_where(tmp_path, full_disk):
    out = tmp_path / "out"
    full_disk["allow"] = 1
    first = CliRunner().invoke(app, [*RUN, "--output", str(out)])
    assert first.exit_code == 0, first.output
    kept = (out / "results.jsonl").read_bytes()
    result = CliRunner().invoke(app, [*RUN, "--seqlen", "96", "--output", str(out)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    row = json.loads(result.stdout.strip().splitlines()[-1])
    assert row["status"] == "ok" and row["seqlen"] == 96 and row["ms_median"] > 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"could not write to {out / 'results.jsonl'}: No space left on device" in errors[0]
    assert (out / "results.jsonl").read_bytes() == kept  # no torn line


def _sweep(tmp_path, *args):
    spec = tmp_path / "spec.toml"
    spec.write_text(textwrap.dedent(SPEC))
    return CliRunner().invoke(app, ["sweep", str(spec), "--output", str(tmp_path / "out"), *args])


def test_a_sweep_on_a_full_disk_stops_with_one_line_and_resume_finishes(tmp_path, full_disk):
    full_disk["allow"] = 1  # the first row fits, the second does not
    result = _sweep(tmp_path)
    assert result.exit_code == 2 and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "--resume" in errors[0]
    results = tmp_path / "out" / "results.jsonl"
    assert len(_lines(results)) == 1 and _lines(results)[0].endswith(b"\n")
    full_disk["allow"] = 10**6  # space freed
    resumed = _sweep(tmp_path, "--resume")
    assert resumed.exit_code == 0, resumed.output
    read = read_results(results)
    assert not read.bad_lines and sorted(r.seqlen for r in read.rows) == [64, 96, 128]


def test_a_sweep_into_a_folder_made_read_only_is_one_line(tmp_path, read_only):
    result = _sweep(tmp_path)
    assert result.exit_code == 2 and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Permission denied" in errors[0] and "results.jsonl" in errors[0]
    assert not _lines(tmp_path / "out" / "results.jsonl")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_run_output_into_a_read_only_results_file(tmp_path):
    out = tmp_path / "out"
    assert CliRunner().invoke(app, [*RUN, "--output", str(out)]).exit_code == 0
    kept = (out / "results.jsonl").read_bytes()
    (out / "results.jsonl").chmod(0o444)
    try:
        result = CliRunner().invoke(app, [*RUN, "--output", str(out)])
    finally:
        (out / "results.jsonl").chmod(0o644)
    assert result.exit_code == 2 and json.loads(result.stdout.strip().splitlines()[-1])["status"] == "ok"
    assert "Permission denied" in result.stderr and (out / "results.jsonl").read_bytes() == kept
