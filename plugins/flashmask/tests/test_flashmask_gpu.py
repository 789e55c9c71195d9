"""GPU tests of the flashmask kernels against the float32 reference: every static mask, forward
and gradients, bf16 with the paper's GQA 64:8 and head_dim 128, and fp16 with head_dim 64,
batch 2 and a length that is not a multiple of the tiles.

`LONGCA_FLASHMASK_BWD=fused` runs all of it through the fused backward; `test_gpu_fused_variants`
checks the fused backward's other settings (TMA reductions, 32-row tiles with rotated walks).

`FLASHMASK_GPU_REPORT=path` also writes the relative errors as a Markdown table (the committed
results under docs/results/h200/flashmask/ come from it).
"""
from __future__ import annotations

import os

import pytest
import torch

from longca.plugin import STATIC_MASKS, Problem
from longca_testing import TOLERANCE, RunOptions, conformance_tests, run_problem

pytestmark = pytest.mark.longca_gpu
CASES = {
    "bf16-d128-64:8": dict(seqlen=4096, heads_q=64, heads_kv=8, head_dim=128, dtype="bfloat16", batch=1),
    "fp16-d64-8:2-b2": dict(seqlen=3000, heads_q=8, heads_kv=2, head_dim=64, dtype="float16", batch=2),
}
_rows: list[dict] = []


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    path = os.environ.get("FLASHMASK_GPU_REPORT")
    if path and _rows:
        lines = ["| case | mask | S | out | dq | dk | dv | status |", "|---|---|---|---|---|---|---|---|"]
        for r in _rows:
            e = r.get("rel_err_detail") or {}
            errs = " | ".join(f"{e[n]:.2e}" if n in e else "-" for n in ("out", "dq", "dk", "dv"))
            lines.append(f"| {r['case']} | {r['mask']} | {r['seqlen']} | {errs} | {r['status']} |")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")


# the conformance suite on CUDA, one test per case (its CPU cases are too slow in Triton's interpreter)
test_gpu_conformance = conformance_tests("flashmask", devices=("cuda",))


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("mask", STATIC_MASKS)
def test_gpu_against_reference(case, mask):
    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("TRITON_INTERPRET is set: the GPU kernels would run in the interpreter")
    sizes = dict(CASES[case])
    if mask == "block_causal_document":
        sizes["seqlen"] = 4096  # whole 1024-token blocks
    problem = Problem(kernel="flashmask", mask=mask, direction="bwd", device="cuda", seed=1, **sizes)
    row = run_problem(problem, RunOptions(warmup=0, repeat=1, samples=1, check=True))
    _rows.append({**row, "case": case})
    assert row["status"] == "ok", (row["status"], row.get("reason"), row.get("rel_err_detail"))
    assert row["rel_err"] < TOLERANCE[problem.dtype]


FUSED_VARIANTS = {
    "fused": dict(bwd_fused=1),
    "fused-tma": dict(bwd_fused=1, fused_tma=1),
    "fused-32x128-rotate": dict(bwd_fused=1, fused_m=32, fused_rotate=1),
}


@pytest.mark.parametrize("variant", list(FUSED_VARIANTS))
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("mask", ["prefix_lm_causal", "causal_document"])
def test_gpu_fused_variants(variant, case, mask):
    """The fused backward's settings against the float32 reference (the ragged fp16 case clips
    the last row block: masked atomics, or TMA's bounds)."""
    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("TRITON_INTERPRET is set: the GPU kernels would run in the interpreter")
    from longca_plugin_flashmask import configs

    problem = Problem(kernel="flashmask", mask=mask, direction="bwd", device="cuda", seed=2, **CASES[case])
    with configs.override(**FUSED_VARIANTS[variant]):
        row = run_problem(problem, RunOptions(warmup=0, repeat=1, samples=1, check=True))
    _rows.append({**row, "case": f"{case} {variant}"})
    assert row["status"] == "ok", (row["status"], row.get("reason"), row.get("rel_err_detail"))
    assert row["rel_err"] < TOLERANCE[problem.dtype]
    assert row["backend"].endswith("backward fused)")
