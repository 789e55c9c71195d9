"""benchmarks/varlen_segments.py on CPU (the reference kernel, tiny grid): rows of both directions for
segment and doc_zigzag crop cases, the crops' slices written so the rows can be priced again, --resume
skips what is done, bad input is one line and exit 2."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from longca.masks import slices as sl
from longca_sim.segments import segment_rows, segment_slices

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "varlen_segments.py"


def _module():
    spec = importlib.util.spec_from_file_location("varlen_segments", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_tiny_grid_writes_rows_crops_and_table(tmp_path):
    out = tmp_path / "vs"
    module = _module()
    module.main(["--device", "cpu", "--grid", "tiny", "--kernels", "reference", "--crop-worlds", "2",
                 "--output", str(out)])
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert {r["direction"] for r in rows} == {"fwd", "bwd"}
    assert {r["case"] for r in rows} == {"segments", "crop"}
    assert all(r["status"] == "ok" and r["ms_median"] > 0 for r in rows)
    assert (out / "table.md").read_text().startswith("# Varlen calls")
    priced = segment_rows(out)
    assert len(priced) == len(rows)
    for r in priced:  # the slices read back are the call's: its exact area
        assert sl.area(r["slices"]) == r["area"]
    n = len(rows)
    module.main(["--device", "cpu", "--grid", "tiny", "--kernels", "reference", "--crop-worlds", "2",
                 "--output", str(out), "--resume"])
    assert len((out / "rows.jsonl").read_text().splitlines()) == n


def test_segment_slices_are_diagonal_blocks():
    s = segment_slices(8, 3, "causal")
    assert s.tolist() == [[0, 8, 0, 8, sl.CAUSAL], [8, 16, 8, 16, sl.CAUSAL], [16, 24, 16, 24, sl.CAUSAL]]
    assert sl.area(segment_slices(8, 3, "full")) == 3 * 64
    assert isinstance(s, np.ndarray)


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for extra in (["--kernels", "no-such-kernel"], ["--grid", "huge"], ["--directions", "sideways"],
                  ["--crop-worlds", "two"]):
        proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--grid", "tiny", "--output",
                               str(tmp_path / "x"), *extra], capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("varlen_segments:")
