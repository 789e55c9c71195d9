"""Listing kernels imports no kernel or GPU library (issue 4: listing works on any machine), and
loading the registry, every installed plugin included, imports no torch (issue 26)."""
import json
import os
import subprocess
import sys

GPU_LIBRARIES = ("triton", "flash_attn", "flash_attn_interface", "flash_attn_3", "flashinfer",
                 "block_sparse_attn", "fastvideo_kernel", "vsa", "cudnn", "cutlass")

SCRIPT = """
import json, sys
from longca_cli.inventory import kernel_rows
from longca.plugins import get_registry
rows = kernel_rows(get_registry())
print(json.dumps({"kernels": [r["name"] for r in rows], "imported": [m for m in sys.argv[1:] if m in sys.modules]}))
"""


def test_list_kernels_imports_no_gpu_library():
    out = subprocess.run([sys.executable, "-c", SCRIPT, *GPU_LIBRARIES], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"reference", "torch", "sdpa", "fa2", "fa4", "flex", "flashmask"} <= set(data["kernels"])
    assert data["imported"] == []


TORCH_FREE = """
import json, sys
from importlib import metadata
from longca.plugins import ENTRY_POINT_GROUP, get_registry
registry = get_registry()
print(json.dumps({"kernels": registry.names("kernels"), "strategies": registry.names("strategies"),
                  "masks": len(registry.names("masks")),
                  "installed": sorted({ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}),
                  "loaded": sorted(p.name for p in registry.plugins if not p.builtin and not p.errors),
                  "errors": {p.name: p.errors for p in registry.plugins if p.errors},
                  "torch": "torch" in sys.modules}))
"""


def test_loading_the_registry_imports_no_torch():
    """Every installed plugin registers without torch: the built-ins (masks, samplers, reference),
    kernels that import their library lazily, the flashplan family (fa2, fa3, fa4, cudnn), flex and
    the CP strategies (issue 26: mask_mods, reference, longca_cp.plan, the flashplan executor and
    flex imported it at load)."""
    env = {k: v for k, v in os.environ.items() if k not in ("LONGCA_PLUGINS", "LONGCA_DISABLE_PLUGINS")}
    out = subprocess.run([sys.executable, "-c", TORCH_FREE], capture_output=True, text=True, check=True, env=env)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["errors"] == {}
    assert data["loaded"] == data["installed"]  # the whole registry, not a chosen few
    assert {"reference", "sdpa", "torch", "flashinfer", "fa2", "fa3", "fa4", "cudnn", "flex",
            "flex-fa4"} <= set(data["kernels"]) and data["masks"] >= 14
    assert {"ulysses", "ring-p2p", "usp", "loongtrain", "ring-allgather"} <= set(data["strategies"])
    assert data["torch"] is False
