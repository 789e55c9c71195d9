"""This repository's tests: a test still marked `gpu` (the marker's old name here) counts as
`longca_gpu`, which longca's pytest plugin skips without CUDA. Installed longca leaves every
other project's `gpu` marker alone."""
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("gpu") and not item.get_closest_marker("longca_gpu"):
            item.add_marker(pytest.mark.longca_gpu)
