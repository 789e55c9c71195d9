"""The float32 emulation of cuDNN's block-sparse attention (`emulate.py`) as a fixture: the tests run
with --import-mode=importlib, where a sibling module is not importable by name."""
import importlib.util
from pathlib import Path

import pytest


def load_emulation():
    spec = importlib.util.spec_from_file_location("longca_cudnn_bsa_emulate", Path(__file__).with_name("emulate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def emulated():
    return load_emulation()
