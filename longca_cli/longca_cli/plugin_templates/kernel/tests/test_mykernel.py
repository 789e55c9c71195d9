"""Tests of the mykernel plugin: longca's conformance suite, plus what is particular to this kernel."""
import longca_testing as testing
from longca import plugin

# One test per conformance case (spec, refusals, every claimed mask and dtype fwd/bwd against the
# reference, the CP primitives); CUDA cases carry the `gpu` marker and skip without a GPU.
test_conformance = testing.conformance_tests("mykernel")


def test_plan_skips_masked_tiles():
    import torch

    from longca_plugin_mykernel.kernel import TILE, plan

    causal = plugin.slices_array([(0, 4 * TILE, 0, 4 * TILE, plugin.CAUSAL)])
    tiles = plan(causal, 4 * TILE, 4 * TILE, torch.device("cpu"))
    assert [len(row) for _, _, row in tiles] == [1, 2, 3, 4]  # lower triangle only
    assert all(part is not None for _, _, row in tiles for k0, _, part in row[-1:])  # diagonal tiles masked
