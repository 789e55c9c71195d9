"""A case that kills its process becomes an `error` row when the sweep isolates cases."""
import json
import textwrap

from typer.testing import CliRunner

from longca.plugins import get_registry
from longca_cli.main import app

CRASH_HOOKS = '''
import os, signal
from longca import hookimpl
from longca.masks.catalog import STATIC_MASKS
from longca.reference import attention
from longca.specs import KernelSpec


def run(mask, q, k, v):
    if q.shape[1] == 512:  # a kernel bug that kills the process at one length
        os.kill(os.getpid(), signal.SIGSEGV)
    return attention(q, k, v, mask)


@hookimpl
def longca_kernels():
    return [KernelSpec(name="crashy", family="dense", description="segfaults at S=512", masks=STATIC_MASKS,
                       prepare=lambda problem, mask, q, k, v: mask, run=run)]
'''


def install_crash_plugin(root):
    (root / "crashy_plugin").mkdir()
    (root / "crashy_plugin" / "__init__.py").write_text("")
    (root / "crashy_plugin" / "hooks.py").write_text(CRASH_HOOKS)
    dist = root / "crashy_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: crashy-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[longca]\ncrashy = crashy_plugin.hooks\n")


def test_crash_in_isolated_sweep_is_a_row(tmp_path, monkeypatch):
    install_crash_plugin(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # spawned children inherit sys.path
    get_registry(reload=True)
    try:
        spec = tmp_path / "spec.toml"
        spec.write_text(textwrap.dedent("""
            [sweep]
            kernels = ["crashy", "reference"]
            masks = ["causal"]
            seqlens = ["256", "512", "384"]
            heads = ["2:1"]
            head_dims = [16]
            dtypes = ["float32"]
            directions = ["fwd"]
            device = "cpu"
            warmup = 0
            repeat = 1
            isolate = true
        """))
        result = CliRunner().invoke(app, ["sweep", str(spec), "--output", str(tmp_path / "out")])
        assert result.exit_code == 0, result.output
        rows = {(r["kernel"], r["seqlen"]): r for r in
                map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
        assert len(rows) == 6
        crashed = rows[("crashy", 512)]
        assert crashed["status"] == "error" and "killed its process" in crashed["reason"]
        assert all(r["status"] == "ok" for key, r in rows.items() if key != ("crashy", 512))
    finally:
        monkeypatch.undo()
        get_registry(reload=True)
