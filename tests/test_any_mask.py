"""Kernels and strategies that claim `any:static` run masks that third-party plugins register."""
from longca.measure import RunOptions, run_problem
from longca.masks import slices as sl
from longca.masks.mask import Mask
from longca.plugins import PluginInfo, load_registry
from longca.problem import Problem
from longca.specs import MaskSpec


def every_other_block(ctx):
    """A mask no built-in kernel lists by name: 64-token blocks, each sees itself and the block two back."""
    s, b = ctx.seqlen, 64
    slices = [(q, q + b, q, q + b, sl.CAUSAL) for q in range(0, s, b)]
    slices += [(q, q + b, q - 2 * b, q - b, sl.FULL) for q in range(2 * b, s, b)]
    return Mask("every_other_block", s, {}, sl.as_array(slices))


def registry_with_mask():
    registry = load_registry()
    registry._add("masks", MaskSpec("every_other_block", "heterogeneous", "test mask", every_other_block),
                  PluginInfo("test", "test-masks", "0", "tests"))
    return registry


def test_wildcard_kernels_run_a_third_party_mask():
    registry = registry_with_mask()
    for kernel in ("reference", "torch", "sdpa"):
        assert "every_other_block" in registry.claimed_masks(registry.kernel(kernel).masks)
        for direction in ("fwd", "bwd"):
            problem = Problem(kernel=kernel, mask="every_other_block", seqlen=512, heads_q=4, heads_kv=2,
                              head_dim=16, dtype="float32", direction=direction)
            row = run_problem(problem, RunOptions(warmup=0, repeat=1, check=True), registry)
            assert row["status"] == "ok" and row["rel_err"] < 1e-4, row
            assert row["area"] == 8 * 64 * 65 // 2 + 6 * 64 * 64


def test_kernels_listing_names_refuse_it_with_a_reason():
    registry = registry_with_mask()
    if "flex" not in registry.entries["kernels"]:
        return
    problem = Problem(kernel="flex", mask="every_other_block", seqlen=512, heads_q=4, heads_kv=2,
                      head_dim=16, dtype="float32")
    row = run_problem(problem, RunOptions(warmup=0, repeat=1), registry)
    assert row["status"] == "unsupported" and "every_other_block is not supported" in row["reason"]
