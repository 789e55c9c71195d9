"""Tests of the mysampler plugin: longca's sampler suite, plus what this law promises."""
import numpy as np
import pytest

import longca_testing as testing
from longca import plugin

# One test per suite case: registered, spec, sums (1 token to 512K, several seeds), seeded, params.
test_sampler = testing.sampler_conformance_tests("mysampler")


def _sample(total, seed=0, **params):
    return plugin.get_registry().sampler("mysampler").sample(total, np.random.default_rng(seed), **params)


def test_every_document_but_the_last_is_at_least_min_len():
    for seed in range(5):
        lengths = _sample(100_000, seed, min_len=64)
        assert lengths.sum() == 100_000 and (lengths[:-1] >= 64).all() and lengths[-1] >= 1


def test_smaller_alpha_gives_longer_documents():
    heavy = np.concatenate([_sample(200_000, s, alpha=1.1) for s in range(5)])
    light = np.concatenate([_sample(200_000, s, alpha=3.0) for s in range(5)])
    assert heavy.mean() > light.mean() and heavy.max() > light.max()


def test_bad_parameters_are_refused():
    with pytest.raises(plugin.LongcaError, match="min_len=0 must be >= 1"):
        _sample(1000, min_len=0)
