"""With longca_cp (and flashplan, sim, cli) unimportable, a one-case CPU sweep with no CP strategy
runs: the core and the runner point only down (issue 36)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("longca_cp", "longca_flashplan", "longca_sim", "longca_cli"):
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
"""

SPEC = """
[sweep]
name = "t"
kernels = ["reference"]
masks = ["causal"]
seqlens = ["128"]
heads = ["2:1"]
head_dims = [16]
dtypes = ["float32"]
directions = ["fwd"]
device = "cpu"
samples = 1
warmup = 0
"""


def test_a_one_case_cpu_sweep_runs_without_longca_cp(tmp_path):
    (tmp_path / "spec.toml").write_text(textwrap.dedent(SPEC))
    code = BLOCK + textwrap.dedent("""
        from pathlib import Path
        from longca_runner.sweep import load_spec, run_sweep
        rows = run_sweep(load_spec("spec.toml"), Path("out"))
        import json; print(json.dumps([r.status for r in rows]))
        assert not any(m.split(".")[0] == "longca_cp" for m in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["ok"]
