"""Fixtures shared by tests/: the GPU suites' (tests/test_gpu_*.py) and a free port for rank groups."""
from __future__ import annotations

import json
import os
import socket

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


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now: a rank group's own, since make test runs
    tests in parallel processes (-n 2) and a fixed port could collide."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
