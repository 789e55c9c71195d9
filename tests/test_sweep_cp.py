"""Sweeps with `strategies`: CP cases in spawned gloo groups, one row each, resumable, reported."""
import json
import textwrap

import pytest
from typer.testing import CliRunner

from longca_cli.main import app

pytestmark = pytest.mark.slow  # spawns gloo ranks

SPEC = """
    [sweep]
    kernels = ["reference"]
    strategies = ["ring-p2p", "ulysses"]
    world_sizes = [1, 2]
    seqlen_per_rank = true
    masks = ["causal", "causal_document"]
    seqlens = ["128"]
    heads = ["4:4"]
    head_dims = [16]
    dtypes = ["float32"]
    directions = ["fwd", "bwd"]
    device = "cpu"
    samples = 1
    warmup = 0
    repeat = 1
    check = true
    timeout = 120
"""


def test_cp_sweep_rows_resume_and_report(tmp_path):
    spec = tmp_path / "cp.toml"
    spec.write_text(textwrap.dedent(SPEC))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["sweep", str(spec), "--output", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 * 2 * 2  # masks x directions x world sizes x strategies
    assert all(r["status"] == "ok" and r["rel_err"] < 1e-4 for r in rows), [r["reason"] for r in rows]
    assert {(r["strategy"], r["world_size"], r["seqlen"]) for r in rows} == {
        (s, w, 128 * w) for s in ("ring-p2p", "ulysses") for w in (1, 2)}
    assert all(r["strategy_options"] is not None and r["ms_max_rank"] for r in rows)
    again = CliRunner().invoke(app, ["sweep", str(spec), "--output", str(out), "--resume"])
    assert again.exit_code == 0 and len((out / "results.jsonl").read_text().splitlines()) == len(rows)
    report = CliRunner().invoke(app, ["report", str(out)])
    assert report.exit_code == 0 and "ring-p2p/reference" in report.stdout and "world size 2" in report.stdout
    # one table per world size and direction, every strategy a column of it
    assert report.stdout.count("world size 2\n") == 2 and "| ring-p2p/reference | ulysses/reference |" in report.stdout


def test_cp_sweep_unknown_strategy_is_an_input_error(tmp_path):
    spec = tmp_path / "cp.toml"
    spec.write_text(textwrap.dedent(SPEC).replace('"ulysses"', '"ulyses"'))
    result = CliRunner().invoke(app, ["sweep", str(spec), "--output", str(tmp_path / "o")])
    assert result.exit_code == 2 and "unknown CP strategy 'ulyses'" in result.output


def test_baseline_cases_and_scaling_efficiency_in_the_report(tmp_path):
    spec = tmp_path / "cp.toml"
    text = textwrap.dedent(SPEC).replace('strategies = ["ring-p2p", "ulysses"]', 'strategies = ["ring-p2p"]')
    text = text.replace("world_sizes = [1, 2]", "world_sizes = [2]\nbaseline = true")
    spec.write_text(text.replace('masks = ["causal", "causal_document"]', 'masks = ["causal"]')
                    .replace('directions = ["fwd", "bwd"]', 'directions = ["fwd"]'))
    out = tmp_path / "out"
    assert CliRunner().invoke(app, ["sweep", str(spec), "--output", str(out)]).exit_code == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["strategy"], r["seqlen"]) for r in rows] == [(None, 128), ("ring-p2p", 256)]
    report = CliRunner().invoke(app, ["report", str(out)])
    assert report.exit_code == 0 and "## Scaling efficiency" in report.stdout
    assert "| ring-p2p/reference | causal | 128 |" in report.stdout


def test_scaling_efficiency_divides_by_the_kernel_alone_at_the_per_gpu_length():
    from longca_cli.analysis import scaling_efficiency
    from longca_cli.report import efficiency_markdown

    def row(seqlen, tflops, strategy=None, world=1, mask="full"):
        return {"kernel": "fa2", "strategy": strategy, "world_size": world, "mask": mask, "mask_params": {},
                "sampler": "auto", "seqlen": seqlen, "batch": 1, "heads_q": 64, "heads_kv": 8, "head_dim": 128,
                "dtype": "bfloat16", "direction": "fwd", "status": "ok", "tflops": tflops}

    rows = [row(8192, 400.0), row(8192 * 8, 360.0, "usp", 8), row(8192 * 8, 380.0, "usp", 4),
            row(8192 * 2, 390.0, "usp", 2, mask="causal")]  # no causal baseline: left out
    pairs = scaling_efficiency(rows)
    assert [(p["row"]["world_size"], p["efficiency"]) for p in pairs] == [(8, 0.9)]
    assert "| usp/fa2 | full | 8k | 400.0 | 0.90 (360.0) |" in efficiency_markdown(pairs)


def test_cp_sweep_on_two_node_agents(tmp_path, free_port):
    """A CP sweep under torchrun --nnodes 2 (c10d rendezvous, 2 ranks per agent): the world-size-4 cases
    run in the launcher's group, rank 0 writes each row once, the other world sizes are left out."""
    import subprocess
    import sys

    spec = tmp_path / "cp.toml"
    spec.write_text(textwrap.dedent(SPEC).replace("world_sizes = [1, 2]", "world_sizes = [2, 4]")
                    .replace('masks = ["causal", "causal_document"]', 'masks = ["causal_document"]'))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port}", "--rdzv-id", "longca-sweep",
           "-m", "longca_cli.main", "sweep", str(spec), "--output", str(out)]
    agents = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [a.communicate(timeout=300) for a in agents]
    assert all(a.returncode == 0 for a in agents), outs[0][1][-3000:] + outs[1][1][-3000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((r["strategy"], r["direction"]) for r in rows) == sorted(
        (s, d) for s in ("ring-p2p", "ulysses") for d in ("fwd", "bwd"))
    assert all(r["status"] == "ok" and r["world_size"] == 4 and r["rel_err"] < 1e-4 for r in rows)
    assert all(r["balance"]["calls_max"] >= 1 for r in rows)
