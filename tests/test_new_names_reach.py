"""A sixth CP strategy and a new block-sparse mask, registered in-process as a plugin would register
them, reach what reads the registry: the simulator prices the strategy by its schedule (not its name),
and the mask runs on every kernel that claims `ANY_BLOCK_SPARSE` and is part of `masks = "block_sparse"`."""
from __future__ import annotations

import numpy as np
import pytest

import longca_testing as testing
from longca import plugin
from longca.plugins import PluginInfo, load_registry
from longca.problem import Problem
from longca_cp import plugin as cp
from longca_runner.measure import RunOptions, run_problem
from longca_runner.sweep import SweepSpec
from longca_sim.simulate import Grid, default_pricing, simulate_grid
from longca_sim.topology import preset

SIXTH = "sixth-ring"
MASK = "block_tridiagonal"


def _build(ctx):
    """Block-sparse: each query block keeps its own key block and the two next to it."""
    block = int(ctx.param("block", lambda: 64))
    bounds = np.unique(np.r_[np.arange(0, ctx.seqlen, block), ctx.seqlen]).astype(np.int64)
    nb = len(bounds) - 1
    i, j = np.indices((nb, nb))
    keep = (np.abs(i - j) <= 1)[None]
    return plugin.Mask(MASK, ctx.seqlen, {"block": block}, layout=plugin.BlockSparseLayout(bounds, bounds.copy(), keep))


@pytest.fixture(scope="module")
def registry():
    registry = load_registry()
    info = PluginInfo("newnames", "longca-plugin-newnames", "0", "tests")
    registry._add("strategies", cp.hybrid_strategy(SIXTH, "a ring under a sixth name"), info)
    registry._add("masks", plugin.MaskSpec(MASK, "block_sparse", "|q block - k block| <= 1", _build,
                                           params={"block": "tokens per block (default 64)"}), info)
    return registry


def test_the_simulator_prices_a_sixth_strategy_by_its_schedule(registry):
    pricing = default_pricing("fa3", preset("h200-sxm"))
    rows = simulate_grid(Grid([SIXTH, "ring-p2p"], [8], "causal", "fa3", 64, 8, seqlen_per_rank=1024, samples=1),
                         pricing, registry)
    by = {r.strategy: r for r in rows}
    assert by[SIXTH].status == "ok", by[SIXTH].reason
    assert by[SIXTH].ms_median == pytest.approx(by["ring-p2p"].ms_median)  # the same schedule, another name


def test_a_new_block_sparse_mask_is_in_the_group_and_passes_its_suite(registry):
    assert MASK in registry.mask_group("block_sparse") and MASK not in registry.mask_group("static")
    assert MASK in SweepSpec(kernels=["reference"], masks="block_sparse", seqlens=[256]).mask_names(registry)
    report = testing.check_mask(MASK, registry)
    assert not report.failures, report.summary()


def test_a_new_block_sparse_mask_reaches_every_kernel_claiming_any_block_sparse(registry):
    claiming = [n for n in registry.names("kernels") if plugin.ANY_BLOCK_SPARSE in registry.kernel(n).masks]
    assert "reference" in claiming
    for name in registry.names("kernels"):
        claims = registry.kernel(name).masks
        assert (MASK in registry.claimed_masks(claims)) == (plugin.ANY_BLOCK_SPARSE in claims or MASK in claims), name
    ran = []
    for name in claiming:
        spec = registry.kernel(name)
        if "cpu" not in spec.devices or spec.available() is not None:
            continue  # a GPU kernel: claimed above, run by the GPU suites
        problem = Problem(kernel=name, mask=MASK, seqlen=320, heads_q=4, heads_kv=2, head_dim=16, dtype="float32",
                          direction="fwd", device="cpu")
        row = run_problem(problem, RunOptions(warmup=0, repeat=1, samples=1, check=True), registry)
        assert row.status == "ok" and row.checked == "full", (name, row.status, row.reason)
        ran.append(name)
    assert "reference" in ran
