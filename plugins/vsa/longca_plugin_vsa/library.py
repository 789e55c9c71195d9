"""Finding VSA's kernels: in fastvideo-kernel (>= 0.3.0, preferred) or in the older vsa package.

Two kinds: "tk", the ThunderKittens kernel for sm90 (a compiled extension that must match the
installed torch), and "triton", the Triton kernel of the same attention. Both take head-major
(B, H, S_pad, D) tensors and 64-token tiles (see `tiles`). fastvideo-kernel takes compact
per-row block indices, made in prepare with its own `map_to_index`; vsa 0.0.x takes the bool
block map and makes the indices inside the call.
"""
from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from longca.plugin import installed_version

KINDS = {"tk": "ThunderKittens sm90", "triton": "Triton"}
PACKAGES = {"fastvideo-kernel": "fastvideo_kernel", "vsa": "vsa"}


@dataclass(frozen=True)
class Backend:
    """One usable kernel: `attn(q, k, v, *index, block_sizes) -> (out, lse)` on (B, H, S_pad, D)."""

    package: str
    kind: str
    attn: Callable[..., Any]
    to_index: Callable[[Any], tuple] | None  # block map -> index tensors; None: attn takes the map
    exact_variable_backward: bool = True  # False: the backward is wrong unless every tile is full

    @property
    def name(self) -> str:
        return f"{self.package} ({KINDS[self.kind]})"


def installed() -> list[str]:
    """The VSA distributions whose import package is present."""
    return [dist for dist, module in PACKAGES.items() if importlib.util.find_spec(module) is not None]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _fastvideo(kind: str) -> tuple[Backend | None, str]:
    package = f"fastvideo-kernel {installed_version('fastvideo-kernel')}"
    try:  # the package re-exports the function block_sparse_attn under the module's name: import the module
        bsa = importlib.import_module("fastvideo_kernel.block_sparse_attn")
        from fastvideo_kernel.triton_kernels.index import map_to_index
    except Exception as exc:  # noqa: BLE001 - any import failure is the reason
        return None, f"{package} does not import ({_first_line(exc)})"
    if not hasattr(bsa, "block_sparse_attn_from_indices"):
        return None, f"{package} is too old: longca needs >= 0.3.0 (block_sparse_attn_from_indices)"
    if kind == "triton":
        return Backend(package, kind, bsa.block_sparse_attn_triton, map_to_index), ""
    try:
        from fastvideo_kernel._C import fastvideo_kernel_ops as ops
    except Exception as exc:  # noqa: BLE001 - a compiled extension fails to import in many ways; each is a reason
        import torch

        return None, (f"{package}: its CUDA extension does not load ({_first_line(exc)}); build fastvideo-kernel "
                      f"from FastVideo's source for torch {torch.__version__} on an sm90 (Hopper) GPU")
    if not (hasattr(ops, "block_sparse_fwd") and hasattr(ops, "block_sparse_bwd")):
        return None, f"{package}: its CUDA extension was built without the sm90 block-sparse kernels"
    return Backend(package, kind, bsa.block_sparse_attn_sm90, map_to_index), ""


def _vsa(kind: str) -> tuple[Backend | None, str]:
    package = f"vsa {installed_version('vsa')}"
    try:
        import vsa
        from vsa import block_sparse_wrapper as wrapper
    except Exception as exc:  # noqa: BLE001 - a compiled extension fails to import in many ways; each is a reason
        why = f"{package} does not import ({_first_line(exc)})"
        if kind == "triton":
            why += ("; its __init__ loads the CUDA extension on sm90 before the Triton path, so use "
                    "fastvideo-kernel >= 0.3.0 or build vsa for this torch")
        return None, why
    if kind == "triton":
        return Backend(package, kind, wrapper.block_sparse_attn_triton, None, exact_variable_backward=False), ""
    attn = getattr(wrapper, "block_sparse_attn_SM90", None)
    if attn is None or getattr(vsa, "block_sparse_fwd", None) is None:
        return None, f"{package} defines its ThunderKittens kernel only on sm90 (compute capability 9.0)"
    return Backend(package, kind, attn, None), ""


@functools.cache
def find(kind: str) -> tuple[Backend | None, str | None]:
    """(backend, None), or (None, why this kind of VSA kernel cannot run here)."""
    import torch

    present = installed()
    if not present:
        return None, ("neither fastvideo-kernel (>= 0.3.0) nor vsa is installed: the kernel needs an sm90 "
                      "(Hopper, compute capability 9.0) GPU and fastvideo-kernel built for the installed torch "
                      f"{torch.__version__} (pip install fastvideo-kernel where its wheel matches that torch, "
                      "else build it from FastVideo's source)")
    if not torch.cuda.is_available():
        return None, (f"{' and '.join(present)} installed, but no CUDA GPU is visible (torch {torch.__version__}, "
                      f"CUDA build: {torch.version.cuda or 'none'})")
    reasons = []
    for dist, finder in (("fastvideo-kernel", _fastvideo), ("vsa", _vsa)):
        if dist in present:
            backend, why = finder(kind)
            if backend is not None:
                return backend, None
            reasons.append(why)
    return None, "; ".join(reasons)


def env_info(info: dict) -> None:
    """Record the versions of the VSA distributions present."""
    for dist in PACKAGES:
        found = installed_version(dist)
        if found:
            info[dist] = found
