"""benchmarks/torch_cp_direct.py on CPU (gloo, flex forward): the torch-cp plugin and torch's context parallel
called directly, at world sizes 1 and 2, give the same output and a timed ratio; bad values are one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed.tensor.experimental._context_parallel")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "torch_cp_direct.py"


def _run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


@pytest.mark.slow
def test_plugin_and_direct_agree_and_a_ratio_is_reported_at_world_sizes_1_and_2(tmp_path):
    done = _run("--device", "cpu", "--nproc", "1,2", "--inner", "flex", "--mask", "causal", "--seqlen", "1024",
                "--heads", "4:2", "--head-dim", "64", "--direction", "fwd", "--warmup", "1", "--rounds", "2",
                "--round-calls", "2", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [r["world_size"] for r in rows] == [1, 2]
    for row in rows:
        assert row["status"] == "ok", row
        assert row["rel_diff"] < 1e-5, row
        assert row["direct_ms"] > 0 and row["plugin_ms"] > 0
        assert row["ratio"] == pytest.approx(row["direct_ms"] / row["plugin_ms"])
        assert row["calls"] == 2 * 2 and row["options"] == {"load_balance": "head-tail", "rotate": "allgather"}
    table = (tmp_path / "table.md").read_text().splitlines()
    assert table[0].startswith("| W | inner |") and len(table) == 2 + 2
    assert f"{rows[1]['ratio']:.3f}" in table[3]


def test_a_refused_case_is_a_row_with_the_reason_and_no_rank_starts(tmp_path):
    done = _run("--device", "cpu", "--nproc", "2", "--inner", "sdpa", "--mask", "causal", "--seqlen", "1024",
                "--out", str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert row["status"] == "unsupported" and "NotImplementedError" in row["reason"]


@pytest.mark.parametrize("flag, value", [("--inner", "fa2"), ("--mask", "nosuch"), ("--seqlen", "nosuch"),
                                         ("--direction", "bwd"), ("--nproc", "0"), ("--option", "rotate=sideways")])
def test_a_bad_value_is_one_line_and_a_non_zero_exit(tmp_path, flag, value):
    done = _run("--device", "cpu", flag, value, "--out", str(tmp_path / "out"), timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.startswith("torch_cp_direct:") and value.split("=")[-1] in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
