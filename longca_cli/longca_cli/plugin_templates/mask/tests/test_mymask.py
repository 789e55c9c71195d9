"""Tests of the mymask plugin: longca's mask suite, plus the pattern's own rule checked pair by pair."""
import numpy as np
import pytest

import longca_testing as testing
from longca import plugin

# One test per suite case: registered, spec, build (several lengths and seeds, each build validated),
# deterministic, area (against the dense count), forms (block maps, crops, windows, FlashMask bounds).
test_mask = testing.mask_conformance_tests("mymask")


def _rule(seqlen: int, window: int, sinks: int) -> np.ndarray:
    q, k = np.arange(seqlen)[:, None], np.arange(seqlen)[None, :]
    return (k <= q) & ((q - k <= window) | (k < sinks))


@pytest.mark.parametrize("seqlen,window,sinks", [(64, 8, 2), (100, 0, 3), (50, 60, 4), (33, 5, 0)])
def test_pairs_follow_the_rule(seqlen, window, sinks):
    mask = testing.build_mask("mymask", seqlen, seed=0, window=window, sinks=sinks)  # drawn and validated as a run does
    allowed = plugin.dense(mask.slices, (0, seqlen), (0, seqlen))
    assert np.array_equal(allowed, _rule(seqlen, window, sinks))
    assert mask.area == int(_rule(seqlen, window, sinks).sum())


def test_flex_mask_mod_is_the_same_rule():
    torch = pytest.importorskip("torch")
    mask = testing.build_mask("mymask", 96, seed=0, w=10, sinks=3)  # `w` is the alias of window
    mod = plugin.get_registry().mask("mymask").flex_mask_mod(mask, "cpu")
    q, k = torch.arange(96)[:, None], torch.arange(96)[None, :]
    assert np.array_equal(mod(0, 0, q, k).numpy(), plugin.dense(mask.slices, (0, 96), (0, 96)))


def test_negative_window_is_refused():
    with pytest.raises(plugin.LongcaError, match="window=-1 must be >= 0"):
        testing.build_mask("mymask", 64, seed=0, window=-1)
