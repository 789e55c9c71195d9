"""GPU suite of the block-sparse kernels: each against the float32 reference on the same block map.

`pytest -m longca_gpu tests/test_gpu_sparse.py` on a CUDA machine; skipped without CUDA. A kernel whose
library is not installed there is skipped with its `available()` reason; anything else that is
not `ok` (unsupported, error, incorrect) fails, except a refusal that names the library version
that lifts it (`VERSION_REFUSALS`): the case needs a newer library than the one installed. Sizes are
small but cover full tiles, a ragged last block, variable blocks, MHA and GQA, forward and backward.
"""
from __future__ import annotations

import pytest

from longca.problem import Problem
from longca.results import is_unavailable
from longca_runner.measure import RunOptions, run_problem

pytestmark = pytest.mark.longca_gpu
OPTIONS = RunOptions(warmup=1, repeat=3, samples=1, check=True)
# kernel -> the text of its supports() refusal when the installed library is too old for a case
VERSION_REFUSALS = {"vsa-triton": "use fastvideo-kernel >= 0.3.0"}

# kernel, mask, seqlen, block, heads, head_dim, directions
CASES = [
    ("vsa", "block_sparse_uniform", 1024, 64, (2, 2), 128, ("fwd", "bwd")),
    ("vsa", "block_sparse_uniform", 1000, 64, (2, 2), 64, ("fwd", "bwd")),
    ("vsa", "block_sparse_variable", 1000, 64, (2, 2), 128, ("fwd", "bwd")),
    ("vsa-triton", "block_sparse_uniform", 1024, 64, (2, 2), 128, ("fwd", "bwd")),
    ("vsa-triton", "block_sparse_uniform", 1000, 64, (2, 2), 64, ("fwd", "bwd")),
    ("vsa-triton", "block_sparse_variable", 1000, 64, (2, 2), 128, ("fwd", "bwd")),
    ("fa2-sparse", "block_sparse_uniform", 1024, 128, (4, 4), 128, ("fwd", "bwd")),
    ("fa2-sparse", "block_sparse_uniform", 1000, 128, (4, 2), 64, ("fwd", "bwd")),
    ("flashinfer", "block_sparse_uniform", 1024, 64, (4, 4), 128, ("fwd",)),
    ("flashinfer", "block_sparse_uniform", 1024, 128, (8, 2), 128, ("fwd",)),
    ("flashinfer", "block_sparse_variable", 1000, 64, (4, 4), 128, ("fwd",)),
    ("flashinfer", "block_sparse_variable", 1000, 128, (8, 2), 64, ("fwd",)),
    ("flex-sparse", "block_sparse_uniform", 1024, 64, (4, 4), 128, ("fwd", "bwd")),
    ("flex-sparse", "block_sparse_uniform", 1024, 128, (4, 2), 128, ("fwd", "bwd")),
    ("flex-sparse", "block_sparse_uniform", 1024, 256, (4, 2), 64, ("fwd", "bwd")),
    ("flex-sparse", "block_sparse_variable", 1000, 64, (4, 2), 128, ("fwd", "bwd")),
    ("flex-sparse", "block_sparse_variable", 1000, 128, (4, 4), 128, ("fwd", "bwd")),
]


def _params():
    for kernel, mask, seqlen, block, heads, head_dim, directions in CASES:
        for direction in directions:
            yield pytest.param(kernel, mask, seqlen, block, heads, head_dim, direction,
                               id=f"{kernel}-{mask}-S{seqlen}-b{block}-{heads[0]}:{heads[1]}-d{head_dim}-{direction}")


@pytest.mark.parametrize("kernel,mask,seqlen,block,heads,head_dim,direction", list(_params()))
def test_sparse_kernel_matches_reference(kernel, mask, seqlen, block, heads, head_dim, direction):
    problem = Problem(kernel=kernel, mask=mask, seqlen=seqlen, heads_q=heads[0], heads_kv=heads[1],
                      head_dim=head_dim, dtype="bfloat16", direction=direction, device="cuda",
                      mask_params={"block": block, "density": 0.4})
    row = run_problem(problem, OPTIONS)
    if is_unavailable(row):
        pytest.skip(row["reason"])
    if row["status"] == "unsupported" and kernel in VERSION_REFUSALS and VERSION_REFUSALS[kernel] in row["reason"]:
        pytest.skip(f"installed library too old: {row['reason']}")
    assert row["status"] == "ok", f"{row['status']}: {row['reason']} (errors {row.get('rel_err_detail')})"
    assert row["tflops"] and row["peak_mem_bytes"]
