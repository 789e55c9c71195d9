"""Fixtures shared by the GPU suites (tests/test_gpu_*.py)."""
from __future__ import annotations

import json
import os

import pytest

from longca.plugins import get_registry


@pytest.fixture
def available_kernel():
    """`available_kernel(name)`: the kernel's spec, or the test skipped with why it cannot run here."""
    def get(name: str):
        registry = get_registry()
        if name not in registry.names("kernels"):
            pytest.skip(f"kernel {name} is not installed")
        spec = registry.kernel(name)
        reason = spec.available()
        if reason:
            pytest.skip(f"{name}: {reason}")
        return spec
    return get


@pytest.fixture
def record_rows():
    """`record_rows(rows)`: with LONGCA_GPU_TEST_OUT=file.jsonl, append every result row there."""
    def record(rows) -> None:
        path = os.environ.get("LONGCA_GPU_TEST_OUT")
        if path:
            with open(path, "a") as fh:
                fh.writelines((row.to_json() if hasattr(row, "to_json") else json.dumps(row, default=str)) + "\n"
                              for row in rows)
    return record
