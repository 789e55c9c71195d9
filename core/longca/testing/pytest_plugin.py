"""pytest plugin of longca: registers the `gpu` marker (the conformance fixtures join it later)."""
from __future__ import annotations


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped without one")
