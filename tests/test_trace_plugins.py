"""`LONGCA_TRACE_PLUGINS=1` prints every hook call and its result on stderr (pluggy's tracing)."""
import os
import subprocess
import sys

LOAD = "from longca.plugins import get_registry; get_registry()"


def _stderr(trace: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "LONGCA_TRACE_PLUGINS"}
    env["LONGCA_PLUGINS"] = "sdpa"
    if trace is not None:
        env["LONGCA_TRACE_PLUGINS"] = trace
    return subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, check=True, env=env).stderr


def test_trace_names_each_hook_call_and_what_it_returned():
    err = _stderr("1")
    assert "longca_masks [hook]" in err and "longca_kernels [hook]" in err
    assert "finish longca_kernels --> [[KernelSpec(name='sdpa'" in err


def test_without_the_switch_nothing_is_traced():
    assert "[hook]" not in _stderr() and "[hook]" not in _stderr("0")
