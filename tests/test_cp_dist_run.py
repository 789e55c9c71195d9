"""`longca dist-run` end to end on CPU with gloo: spawned ranks, one JSON row, refusals."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from longca.plugins import get_registry
from longca_cli.main import app

pytestmark = pytest.mark.slow  # spawns ranks and worker processes

SMALL = ["--inner", "reference", "--backend", "gloo", "--seqlen", "512", "--heads", "8:8", "--head-dim", "16",
         "--dtype", "float32", "--device", "cpu", "--warmup", "0", "--repeat", "2", "--samples", "2",
         "--format", "json"]


class _Done:
    def __init__(self, result):
        self.returncode, self.stdout, self.stderr = result.exit_code, result.stdout, result.stderr


def _dist_run(*args: str) -> _Done:
    return _Done(CliRunner().invoke(app, ["dist-run", *args]))


@pytest.fixture(autouse=True)
def _installed():
    if not {"ring-p2p", "usp", "ulysses"} <= set(get_registry().names("strategies")):
        pytest.skip("strategy plugins not installed (make install)")


@pytest.mark.parametrize("strategy,nproc,extra", [
    ("ring-p2p", "4", ["--mask", "causal_document"]),
    ("usp", "2", ["--mask", "full_document", "--direction", "fwdbwd", "--option", "ulysses_degree=2"]),
    ("loongtrain", "1", ["--mask", "causal", "--direction", "bwd"]),  # one rank: runs in this process
])
def test_dist_run_prints_one_ok_row(strategy, nproc, extra):
    done = _dist_run("--strategy", strategy, "--nproc", nproc, "--check", *SMALL, *extra)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    row = json.loads(lines[0])
    got = (row["status"], row["strategy"], row["kernel"], row["world_size"])
    assert got == ("ok", strategy, "reference", int(nproc))
    assert row["rel_err"] < 1e-5 and row["ms_median"] > 0 and row["ms_max_rank"] >= row["ms_median"] * 0.999
    assert row["tflops"] > 0 and row["backend"] == "longca.reference"
    balance = row["balance"]  # from the strategy's schedule: every rank's share of the mask
    assert balance["area_mean"] * int(nproc) == pytest.approx(row["area"]) and balance["calls_max"] >= 1
    assert balance["imbalance_pct"] >= 0 and (balance["comm_bytes_fwd_max"] > 0) == (int(nproc) > 1)
    if "--direction" in extra:
        assert set(row["rel_err_detail"]) == {"out", "dq", "dk", "dv"}
    if strategy == "usp":
        assert row["strategy_options"] == {"ulysses_degree": 2, "layout": "zigzag"}


def test_dist_run_refusals():
    done = _dist_run("--strategy", "ulysses", "--nproc", "4", *SMALL, "--heads", "6:6")
    assert done.returncode == 0
    row = json.loads(done.stdout)
    assert row["status"] == "unsupported" and "6 query heads do not divide over 4" in row["reason"]
    done = _dist_run("--strategy", "ring-p2p", "--nproc", "2", *SMALL, "--inner", "sdpa")
    assert json.loads(done.stdout)["status"] == "unsupported"
    done = _dist_run("--strategy", "usp", "--nproc", "2", *SMALL, "--option", "rings=2")
    assert done.returncode == 2 and "has no option rings" in done.stderr
    done = _dist_run("--strategy", "usp", "--nproc", "2", *SMALL, "--backend", "nccl")
    assert done.returncode == 2 and "needs --device cuda" in done.stderr


def test_dist_run_under_torchrun(free_port):
    """Started by torchrun, dist-run joins the launcher's group and rank 0 prints the rows."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                           "127.0.0.1", "--master-port", str(free_port), "-m", "longca_cli.main", "dist-run",
                           "--strategy", "ring-p2p,ring-allgather", "--check", "--direction", "fwdbwd", "--mask",
                           "causal_document", *SMALL], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [(r["strategy"], r["status"], r["world_size"]) for r in rows] == [("ring-p2p", "ok", 2),
                                                                            ("ring-allgather", "ok", 2)]
    assert max(r["rel_err"] for r in rows) < 1e-5
    assert all(r["matmul_peak_tflops"] > 0 and r["matmul_peak_shape"] for r in rows)  # gated as sweep rows are


def test_dist_run_on_two_node_agents(free_port):
    """Two torchrun agents (one per 'node', 2 ranks each) meet through c10d rendezvous: 4 ranks, 2 per node."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port}", "--rdzv-id", "longca-test",
           "-m", "longca_cli.main", "dist-run", "--strategy", "usp,loongtrain", "--check", "--direction", "fwdbwd",
           "--mask", "causal_document", *SMALL]
    agents = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [a.communicate(timeout=300) for a in agents]
    assert all(a.returncode == 0 for a in agents), outs[0][1][-3000:] + outs[1][1][-3000:]
    rows = [json.loads(line) for out, _ in outs for line in out.splitlines() if line.startswith("{")]
    assert [(r["strategy"], r["status"], r["world_size"]) for r in rows] == [("usp", "ok", 4), ("loongtrain", "ok", 4)]
    assert max(r["rel_err"] for r in rows) < 1e-5
    # the head-parallel groups stay inside a node (LOCAL_WORLD_SIZE = 2): all-to-all on the fast links
    assert rows[0]["strategy_options"]["ulysses_degree"] == 2 and rows[1]["strategy_options"]["head_degree"] == 2
