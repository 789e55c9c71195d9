"""Every bad input gets one clear line and a non-zero exit, never a traceback, and nothing is measured
first; the same rules in run, sweep, dist-run, report, show-mask and new-plugin (docs/reliability.md)."""
from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from longca_cli.main import app

SPEC = ('[sweep]\nkernels=["reference"]\nmasks=["causal"]\nseqlens=[128]\nheads=["2:2"]\nhead_dims=[16]\n'
        'dtypes=["float32"]\ndirections=["fwd"]\ndevice="cpu"\nwarmup=0\nrepeat=1\nmeasure_peak=false\n')
RUN = ["run", "--kernel", "reference", "--seqlen", "128", "--heads", "2:2", "--head-dim", "16", "--dtype", "float32",
       "--device", "cpu", "--warmup", "0", "--repeat", "1"]
DIST = ["dist-run", "--strategy", "ring-p2p", "--nproc", "2", "--seqlen", "128", "--heads", "2:2", "--head-dim", "16",
        "--dtype", "float32", "--device", "cpu", "--warmup", "0", "--repeat", "1"]
SIM = ["simulate", "--seqlen", "8k", "--world-sizes", "8", "--strategy", "ring-p2p"]
ROW = {"kernel": "a", "mask": "causal", "seqlen": 8, "heads_q": 1, "heads_kv": 1, "head_dim": 8, "dtype": "float32",
       "direction": "fwd", "status": "ok", "tflops": 1.0}

CASES = {  # name -> (arguments, words of the one error line)
    "spec is a folder": (["sweep", "{d}/spec.d"], "is a folder; give the TOML file"),
    "spec not UTF-8": (["sweep", "{d}/bin.toml"], "not UTF-8 text"),
    "spec name escapes": (["sweep", "{d}/escape.toml"], "field 'sweep.name'"),
    "sweep output is a file": (["sweep", "{d}/ok.toml", "--output", "{d}/afile"], "is a file, not a folder"),
    "sweep output under a file": (["sweep", "{d}/ok.toml", "--output", "{d}/afile/x"], "afile is a file"),
    "run output is a file": ([*RUN, "--output", "{d}/afile"], "is a file, not a folder"),
    "run output under a file": ([*RUN, "--output", "{d}/afile/x"], "afile is a file"),
    "dist-run output is a file": ([*DIST, "--output", "{d}/afile"], "is a file, not a folder"),
    "dist-run output under a file": ([*DIST, "--output", "{d}/afile/x"], "afile is a file"),
    "report output is a file": (["report", "{d}/res", "--output", "{d}/afile"], "is a file, not a folder"),
    "report output under a file": (["report", "{d}/res", "--output", "{d}/afile/x"], "afile is a file"),
    "report of a folder without results": (["report", "{d}/spec.d"], "no results at"),
    "show-mask output under a file": (["show-mask", "causal", "--output", "{d}/afile/m.png"], "afile is a file"),
    "show-mask unknown picture format": (["show-mask", "causal", "--output", "{d}/m.xyz"],
                                         "cannot write a xyz picture"),
    "show-mask output is a folder": (["show-mask", "causal", "--output", "{d}/spec.d"], "is a folder"),
    "show-mask huge block-sparse layout": (["show-mask", "block_sparse_uniform", "--seqlen", "100M", "--output",
                                            "{d}/bs.png"], "its block layout"),
    "new-plugin output is a file": (["new-plugin", "zz", "--output", "{d}/afile"], "is a file, not a folder"),
    "new-plugin output under a file": (["new-plugin", "zz", "--output", "{d}/afile/x"], "afile is a file"),
    "mask parameter not a number": ([*RUN, "--mask", "block_sparse_uniform", "--mask-param", "density=abc"],
                                    "could not convert string to float: 'abc'"),
    "repeat 0": ([*RUN, "--repeat", "0"], "repeat must be an integer >= 1"),
    "warmup -1": ([*RUN, "--warmup", "-1"], "warmup must be an integer >= 0"),
    "samples 0": ([*RUN, "--samples", "0"], "samples must be an integer >= 1"),
    "seed -1": ([*RUN, "--seed", "-1"], "seed must be a non-negative integer"),
    "sampler parameter of another sampler": ([*RUN, "--mask", "causal_document", "--sampler", "fixed",
                                              "--sampler-param", "doc_lens=a,b"], "it accepts: doc_len"),
    "timeout 0": ([*RUN, "--timeout", "0"], "timeout must be a positive number"),
    "dist-run nproc 0": ([*DIST[:3], "--nproc", "0", *DIST[5:]], "--nproc must be positive"),
    "dist-run repeat 0": ([*DIST, "--repeat", "0"], "repeat must be an integer >= 1"),
    "dist-run timeout -1": ([*DIST, "--timeout", "-1"], "timeout must be a positive number"),
    "sweep of /dev/zero": (["sweep", "/dev/zero"], "is not a regular file"),
    "sweep of a huge file": (["sweep", "{d}/huge.toml"], "larger than 16 MiB"),
    "compare output is a folder": (["compare", "{d}/res", "{d}/res", "--output", "{d}/spec.d"], "is a folder"),
    "compare output under a file": (["compare", "{d}/res", "{d}/res", "--output", "{d}/afile/c.md"],
                                    "afile is a file"),
    "compare output is a device": (["compare", "{d}/res", "{d}/res", "--output", "/dev/null"],
                                   "is not a regular file"),
    "simulate --set not a number": ([*SIM, "--set", "intra.p2p.bandwidth_gbs=abc"], "not a number"),
    "simulate --set negative": ([*SIM, "--set", "intra.p2p.bandwidth_gbs=-5"], "must be a finite number > 0"),
    "simulate --set nan": ([*SIM, "--set", "hbm_gbs=nan"], "must be a finite number > 0"),
    "simulate --set negative latency": ([*SIM, "--set", "inter.p2p.latency_us=-1"], "must be a finite number >= 0"),
    "simulate output is a file": ([*SIM, "--output", "{d}/afile"], "is a file, not a folder"),
    "simulate output under a file": ([*SIM, "--output", "{d}/afile/x"], "afile is a file"),
}


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "ok.toml").write_text(SPEC)
    (tmp_path / "escape.toml").write_text(SPEC.replace("[sweep]\n", '[sweep]\nname = "../.."\n'))
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe[sweep]\n")
    (tmp_path / "spec.d").mkdir()
    with (tmp_path / "huge.toml").open("wb") as f:  # sparse: no disk used
        f.truncate(17 * 2**20)
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "results.jsonl").write_text(json.dumps(ROW) + "\n")
    return tmp_path


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_clear_line(folder, name):
    args, words = CASES[name]
    result = CliRunner().invoke(app, [a.format(d=folder) for a in args])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and words in errors[0], result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, (KeyError, ValueError, OSError))
    assert not (folder / "afile").is_dir() and not list(folder.glob("afile/*"))


@pytest.mark.parametrize("name,content", [
    ("another schema", b'{"name": "x", "value": 1}\n'),
    ("binary data", bytes(range(256)) * 2),
    ("JSON lines that are not objects", b"[1, 2]\n3\n"),
    ("a row whose fields make file names", json.dumps({**ROW, "direction": "../../../../x", "dtype": "a/b"}).encode()),
])
def test_report_of_lines_that_are_not_rows_names_them(tmp_path, name, content):
    (tmp_path / "results.jsonl").write_bytes(content)
    result = CliRunner().invoke(app, ["report", str(tmp_path / "results.jsonl"), "--output", str(tmp_path / "rep")])
    assert result.exit_code == 0 and "Traceback" not in result.output
    assert "line 1:" in result.output and "left out of the report" in result.output
    assert {p.parent for p in tmp_path.rglob("*.png")} <= {tmp_path / "rep"}


def test_sizes_are_checked_before_allocating():
    """sdpa at 100M tokens is oom with the bytes it needs, the reference refuses what it cannot finish."""
    result = CliRunner().invoke(app, ["run", "--kernel", "sdpa", "--seqlen", "100M", "--device", "cpu", "-f", "json"])
    row = json.loads(result.stdout)
    assert result.exit_code == 1 and (row["status"], row["phase"]) == ("oom", "memory check")
    assert "GiB, the host has" in row["reason"] and "(not allocated)" in row["reason"]
    result = CliRunner().invoke(app, ["run", "--kernel", "torch", "--seqlen", "1M", "--heads", "1:1", "--head-dim",
                                      "16", "--device", "cpu", "-f", "json"])
    assert json.loads(result.stdout)["status"] == "oom"  # naive: S x S scores (O(S^2) memory model)
    result = CliRunner().invoke(app, ["run", "--kernel", "reference", "--seqlen", "10M", "--heads", "1:1",
                                      "--head-dim", "16", "--device", "cpu", "-f", "json"])
    row = json.loads(result.stdout)
    assert row["status"] == "unsupported" and "the float32 reference would need about" in row["reason"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_output_is_one_clear_line(folder):
    ro = folder / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    result = CliRunner().invoke(app, [*RUN, "--output", str(ro / "out")])
    assert result.exit_code == 2 and "cannot create the folder" in result.output
