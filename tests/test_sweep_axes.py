"""`mask_grid` in sweep specs: mask parameters swept as axes, on top of `mask_params`."""
from pathlib import Path

import pytest

from longca.errors import LongcaError
from longca_runner.sweep import load_spec, problems

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path, body):
    path = tmp_path / "spec.toml"
    path.write_text("[sweep]\nkernels = [\"reference\"]\nseqlens = [\"1k\"]\ndevice = \"cpu\"\n" + body)
    return path


def test_grid_crosses_axes_over_mask_params(tmp_path):
    spec = load_spec(write(tmp_path, """masks = ["block_sparse_uniform", "causal"]
directions = ["fwd"]
heads = ["4:4"]
[sweep.mask_params.block_sparse_uniform]
density = 0.3
block = 32
[sweep.mask_grid.block_sparse_uniform]
block = [64, 128]
"""))
    rows = [(p.mask, p.mask_params) for p in problems(spec)]
    assert rows == [("block_sparse_uniform", {"density": 0.3, "block": 64}),
                    ("block_sparse_uniform", {"density": 0.3, "block": 128}),
                    ("causal", {})]


def test_without_grid_the_problems_are_unchanged(tmp_path):
    spec = load_spec(write(tmp_path, "masks = [\"sliding_window\"]\n[sweep.mask_params.sliding_window]\nwindow = 64\n"))
    assert [p.mask_params for p in problems(spec)] == [{"window": 64}] * 2  # fwd and bwd


def test_grid_errors(tmp_path):
    with pytest.raises(LongcaError, match="at least one value"):
        load_spec(write(tmp_path, "masks = [\"block_sparse_uniform\"]\n"
                                  "[sweep.mask_grid.block_sparse_uniform]\nblock = []\n"))
    with pytest.raises(LongcaError, match="unknown mask|no_such_mask"):
        load_spec(write(tmp_path, "masks = [\"causal\"]\n[sweep.mask_grid.no_such_mask]\nblock = [1]\n"))
    with pytest.raises(LongcaError, match="has no parameter 'blok'"):
        load_spec(write(tmp_path, "masks = [\"block_sparse_uniform\"]\n"
                                  "[sweep.mask_grid.block_sparse_uniform]\nblok = [1]\n"))


def test_paper_sparse_spec():
    spec = load_spec(ROOT / "contrib/specs/paper-sparse.toml", installed_kernels_only=True)
    cases = list(problems(spec))
    per_kernel = 2 * 2 * 2 * 6 * 5  # heads x directions x masks x (block, density) x seqlens
    assert len(cases) == per_kernel * len(spec.kernels)
    assert {(p.mask_params["block"], p.mask_params["density"]) for p in cases} == {
        (b, d) for b in (64, 128) for d in (0.2, 0.5, 0.8)}
    assert {p.seqlen for p in cases} == {16384, 32768, 49152, 65536, 131072}


def test_cp_case_identity_does_not_depend_on_the_host(monkeypatch):
    """USP's default degree reads LOCAL_WORLD_SIZE; the case id (what --resume matches) must not."""
    from longca.results import case_id
    from longca_runner.sweep import SweepSpec, problems

    spec = SweepSpec(kernels=["reference"], masks=["causal"], seqlens=[512], strategies=["usp", "loongtrain"],
                     world_sizes=[8], device="cpu", dtypes=["float32"])
    ids = []
    for ranks_per_node in ("2", "8"):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", ranks_per_node)
        ids.append([case_id(p) for p in problems(spec)])
    assert ids[0] == ids[1]
