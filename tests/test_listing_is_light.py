"""Listing kernels imports no kernel or GPU library (issue 4: listing works on any machine)."""
import json
import os
import subprocess
import sys

GPU_LIBRARIES = ("triton", "flash_attn", "flash_attn_interface", "flash_attn_3", "flashinfer",
                 "block_sparse_attn", "fastvideo_kernel", "vsa", "cudnn", "cutlass")

SCRIPT = """
import json, sys
from longca.inventory import kernel_rows
from longca.plugins import get_registry
rows = kernel_rows(get_registry())
print(json.dumps({"kernels": [r["name"] for r in rows], "imported": [m for m in %r if m in sys.modules]}))
""" % (GPU_LIBRARIES,)


def test_list_kernels_imports_no_gpu_library():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"reference", "torch", "sdpa", "fa2", "fa4", "flex", "flashmask"} <= set(data["kernels"])
    assert data["imported"] == []


TORCH_FREE = """
import json, os, sys
from longca.plugins import get_registry
registry = get_registry()
print(json.dumps({"kernels": registry.names("kernels"), "masks": len(registry.names("masks")),
                  "torch": "torch" in sys.modules}))
"""


def test_loading_the_registry_imports_no_torch():
    """The built-ins (masks, samplers, reference) and plugins that import their library lazily
    register without torch (issue 26: mask_mods and reference imported it at load)."""
    env = {**os.environ, "LONGCA_PLUGINS": "sdpa,torch,flashinfer"}
    out = subprocess.run([sys.executable, "-c", TORCH_FREE], capture_output=True, text=True, check=True, env=env)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"reference", "sdpa", "torch", "flashinfer"} <= set(data["kernels"]) and data["masks"] >= 14
    assert data["torch"] is False
