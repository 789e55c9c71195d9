"""The mask suite judges a mask only against kernels that truly claim it: by name, or by a kind
(`any:static`) whose supports_mask accepts it. A correct mask without FlashMask bounds failed the
suite because the flashmask plugin claims every static mask (issue 37)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from longca import plugin
from longca.plugins import PluginInfo, load_registry
from longca_testing.mask_suite import check_forms, check_mask

NAME = "striped_rows"


def striped_rows(ctx):
    """Four bands of rows, each attending every key: a key column has four masked row intervals,
    more than FlashMask's two (a correct mask with no FlashMask bounds)."""
    s, band = ctx.seqlen, max(1, ctx.seqlen // 8)
    rows = [(a, min(a + band, s), 0, s, plugin.FULL) for a in range(0, s, 2 * band)]
    return plugin.Mask(NAME, s, {}, plugin.slices_array(rows))


@pytest.fixture()
def registry():
    registry = load_registry()
    spec = plugin.MaskSpec(NAME, "regular", "bands of rows attending every key", striped_rows)
    registry._add("masks", spec, PluginInfo(NAME, "longca-striped", "0", "tests"))
    if "flashmask" not in registry.entries["kernels"]:
        pytest.skip("the flashmask plugin is not installed")
    return registry


def test_a_mask_a_wildcard_kernel_refuses_passes_its_suite(registry):
    assert plugin.ANY_STATIC in registry.kernel("flashmask").masks
    report = check_mask(NAME, registry)
    assert not report.failures, report.summary()


def test_a_kernel_claiming_it_by_name_still_needs_its_bounds(registry):
    entry = registry.entries["kernels"]["flashmask"]
    registry.entries["kernels"]["flashmask"] = replace(entry, spec=replace(entry.spec, masks=(NAME,)))
    with pytest.raises(AssertionError, match="a FlashMask kernel claims this mask but it has no FlashMask bounds"):
        check_forms(NAME, registry)


def test_a_wildcard_kernel_that_accepts_it_needs_its_bounds(registry):
    entry = registry.entries["kernels"]["flashmask"]
    registry.entries["kernels"]["flashmask"] = replace(entry, spec=replace(entry.spec, supports_mask=None))
    with pytest.raises(AssertionError, match="claims this mask but it has no FlashMask bounds"):
        check_forms(NAME, registry)
