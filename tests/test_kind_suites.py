"""The mask and sampler suites pass every built-in mask and sampler (the wrong ones fail:
tests/test_wrong_plugins.py); the strategy suite's honest run is the docs example's
(tests/test_plugin_docs.py) and tests/test_cp_strategies.py covers the built-in strategies."""
from __future__ import annotations

import pytest

import longca_testing as testing
from longca.plugins import get_registry


@pytest.mark.parametrize("mask", get_registry().names("masks"))
def test_builtin_mask_passes_its_suite(mask):
    report = testing.check_mask(mask)
    assert not report.failures and len(report.passed) == 6, report.summary()


@pytest.mark.parametrize("sampler", get_registry().names("samplers"))
def test_builtin_sampler_passes_its_suite(sampler):
    report = testing.check_sampler(sampler)
    assert not report.failures and len(report.passed) == 5, report.summary()


test_causal_document_cases = testing.mask_conformance_tests("causal_document")
test_topk_sparse_cases = testing.mask_conformance_tests("topk_sparse")
test_uniform_cases = testing.sampler_conformance_tests("uniform")
