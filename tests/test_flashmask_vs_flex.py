"""benchmarks/flashmask_vs_flex.py on the CPU (Triton's interpreter, in a subprocess, since triton
fixes its mode at import): a flashmask-only run times the split and the fused backward and writes
their rows and the table; bad input is one line and a non-zero exit. And
benchmarks/flashmask_compile_report.py compiles a kernel for sm_90 without a GPU."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# found, not imported: triton fixes its mode (interpreter or not) at its first import in this process,
# and the flashmask CPU tests collected later need it to be the interpreter
if importlib.util.find_spec("triton") is None or importlib.util.find_spec("longca_plugin_flashmask") is None:
    pytest.skip("triton or longca-plugin-flashmask is not installed", allow_module_level=True)

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "flashmask_vs_flex.py"


def _run(*args: str, script: Path = SCRIPT, interpret: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    env.pop("LONGCA_FLASHMASK_BWD", None)
    if not interpret:
        env.pop("TRITON_INTERPRET")
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_flashmask_only_run_times_split_and_fused(tmp_path):
    res = _run("--out", str(tmp_path), "--no-flex", "--device", "cpu", "--masks", "prefix_lm_causal",
               "--seqlens", "128", "--heads", "2:1", "--head-dim", "64", "--warmup", "0", "--repeat", "1")
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    if "interpreter cannot run" in (rows[0].get("reason") or ""):  # hooks.interpreter_problem()
        pytest.skip(rows[0]["reason"])
    assert [(r["label"], r["direction"], r["status"]) for r in rows] == [
        ("flashmask", "fwd", "ok"), ("flashmask-split", "bwd", "ok"), ("flashmask-fused", "bwd", "ok")]
    assert [r["backend"].endswith(f"backward {m})")
            for r, m in zip(rows[1:], ("split", "fused"), strict=True)] == [True, True]
    table = (tmp_path / "table.md").read_text()
    assert "| bwd split | bwd fused |" in table and "fused / split" in table
    assert json.loads((tmp_path / "run.json").read_text())["flashmask_backward_settings"]["fused"] == {"bwd_fused": 1}

    # the table again, Flex from a plugin_vs_direct.py run: flashmask / direct-Flex ratios
    pvd = tmp_path / "pvd.jsonl"
    pvd.write_text("".join(json.dumps({"kernel": "flex", "mask": "prefix_lm_causal", "seqlen": 128, "direction": d,
                                       "status": "ok", "direct_ms": 1.0, "direct_tflops": 1e-9}) + "\n"
                           for d in ("fwd", "bwd")))
    res = _run("--out", str(tmp_path / "again"), "--table-only", str(tmp_path / "results.jsonl"),
               "--flex-rows", str(pvd), interpret=False)
    assert res.returncode == 0, res.stderr[-2000:]
    line = [x for x in (tmp_path / "again" / "table.md").read_text().splitlines() if x.startswith("| prefix")][0]
    fwd = rows[0]["tflops"] / 1e-9
    assert f"| {fwd:.3f} |" in line and line.count(" - ") == 0, line


def test_bad_input_is_one_line(tmp_path):
    res = _run("--out", str(tmp_path), "--no-flex", "--device", "cpu", "--bwd", "atomic")
    assert res.returncode != 0
    assert res.stderr.strip().splitlines() == ["unknown backward mode atomic; known: split, fused (or all)"]
    (tmp_path / "other.jsonl").write_text(json.dumps({"kernel": "sdpa", "status": "ok"}) + "\n")
    res = _run("--out", str(tmp_path), "--table-only", str(tmp_path / "other.jsonl"), interpret=False)
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_compile_report_for_sm90_without_gpu(tmp_path):
    res = _run("--out", str(tmp_path), "--only", "1", script=SCRIPT.with_name("flashmask_compile_report.py"),
               interpret=False)
    assert res.returncode == 0, res.stderr[-2000:]
    (row,) = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert row["setting"] == "split (GPU table)" and "error" not in row, row
    assert 0 < row["registers"] <= 255 and row["shared_bytes"] > 0 and row["dq_add"] == []
