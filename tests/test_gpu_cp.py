"""GPU suite of the context-parallel strategies on NCCL (`pytest -m longca_gpu`, needs 2 or more GPUs).

Every strategy, world sizes 2, 4 and 8 (as many as the host has GPUs), forward and backward
against the float32 reference (`dist-run --check`), bf16, GQA 16:8, 8K tokens, with fa2 inside on
three masks and fa4 and flashmask on causal_document (each skipped where not installed). With
`LONGCA_GPU_TEST_OUT=file.jsonl` every row is appended there.
"""
from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from longca.plugins import get_registry
from longca_cli.main import app

pytestmark = [pytest.mark.longca_gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

BUILT_IN = ("ulysses", "ring-p2p", "ring-allgather", "usp", "loongtrain")
# every installed strategy that takes any inner kernel with the lse primitives (not torch-cp, te-cp): a sixth too
STRATEGIES = tuple(n for n in get_registry().names("strategies") if get_registry().strategy(n).inner_kernels is None)
CASE = ["--seqlen", "8k", "--heads", "16:8", "--head-dim", "128", "--dtype", "bfloat16", "--direction", "fwdbwd",
        "--device", "cuda", "--backend", "nccl", "--warmup", "1", "--repeat", "2", "--samples", "1", "--check",
        "--format", "json"]


@pytest.mark.parametrize("nproc", [2, 4, 8])
@pytest.mark.parametrize("inner,mask", [("fa2", "causal"), ("fa2", "causal_document"), ("fa2", "full_document"),
                                        ("fa4", "causal_document"), ("flashmask", "causal_document")])
def test_every_strategy_on_nccl(nproc, inner, mask, available_kernel, record_rows):
    if torch.cuda.device_count() < nproc:
        pytest.skip(f"needs {nproc} GPUs, this host has {torch.cuda.device_count()}")
    if not set(BUILT_IN) <= set(STRATEGIES):
        pytest.skip("strategy plugins not installed (make install)")
    available_kernel(inner)
    done = CliRunner().invoke(app, ["dist-run", "--strategy", ",".join(STRATEGIES), "--inner", inner,
                                    "--nproc", str(nproc), "--mask", mask, *CASE])
    assert done.exit_code == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    record_rows(rows)
    assert [r["strategy"] for r in rows] == list(STRATEGIES)
    bad = [(r["strategy"], r["status"], r["reason"]) for r in rows if r["status"] != "ok"]
    assert not bad, bad
    for row in rows:
        assert row["world_size"] == nproc and row["kernel"] == inner
        assert set(row["rel_err_detail"]) == {"out", "dq", "dk", "dv"}
