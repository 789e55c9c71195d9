"""The public face for kernel, mask and sampler authors: what such a plugin imports from the core.

    from longca import plugin

    @plugin.hookimpl
    def longca_kernels():
        return [plugin.KernelSpec(name="mykernel", ..., masks=(plugin.ANY_STATIC,))]

    test_conformance = longca_testing.conformance_tests("mykernel")   # in the plugin's tests

Names here are the stable API (docs/writing-a-plugin.md uses nothing else). Importing this
module is light: the reference kernel, autograd helper and mask catalog load on first use. CP
strategy authors import `longca_cp.plugin`, FlashAttention-style kernels `longca_flashplan.plugin`,
plugins' tests `longca_testing` (docs/architecture.md: a face per distribution).
"""
from __future__ import annotations

from .errors import LongcaError, UnsupportedError
from .faces import lazy_getattr
from .hookspecs import hookimpl
from .masks.mask import BlockSparseLayout, Mask
from .masks.slices import (
    CAUSAL,
    FULL,
    FULL_BLOCK,
    PARTIAL,
    band_to_slices,
    block_map,
    crop,
    dense,
    flashmask_bounds,
    masked_row_intervals,
    visible_key_intervals,
)
from .masks.slices import as_array as slices_array
from .specs import (
    ANY_BLOCK_SPARSE,
    ANY_STATIC,
    Device,
    KernelSpec,
    MaskSpec,
    SamplerSpec,
)

# name -> (module, attribute): loaded on first use (they import torch or numpy-heavy modules).
# tests/test_public_face.py resolves every entry. Names of the other distributions live on their
# own faces: longca_cp.plugin (CP strategies), longca_flashplan.plugin (FlashAttention-style
# planning), longca_testing (the conformance kit and what plugins' tests compare with).
_LAZY = {
    "lse_attention": ("longca.autograd", "lse_attention"),
    "reference_forward_lse": ("longca.reference", "forward_lse"),
    "reference_backward_lse": ("longca.reference", "backward_lse"),
    "reference_attention": ("longca.reference", "attention"),
    "Problem": ("longca.problem", "Problem"),
    "problem_mask": ("longca.problem", "build_mask"),
    "make_inputs": ("longca.problem", "make_inputs"),
    "installed_version": ("longca.plugins", "installed_version"),
    "gpu_reason": ("longca.capability", "gpu_reason"),
    "UNAVAILABLE": ("longca.results", "UNAVAILABLE"),
    "linear_memory": ("longca.memory", "linear"),
    "quadratic_memory": ("longca.memory", "quadratic"),
    "SlicesCache": ("longca.lru", "SlicesCache"),
    "STATIC_MASKS": ("longca.masks.catalog", "STATIC_MASKS"),
    "BLOCK_SPARSE_MASKS": ("longca.masks.catalog", "BLOCK_SPARSE_MASKS"),
    "TOKEN_SPARSE_MASKS": ("longca.masks.catalog", "TOKEN_SPARSE_MASKS"),
    "natural_mask_mod": ("longca.masks.mask_mods", "natural_mask_mod"),
    "mask_mod_builder": ("longca.masks.mask_mods", "mask_mod_builder"),
    "get_registry": ("longca.plugins", "get_registry"),
    # FP8 (docs/fp8.md): per-tensor scaled copies of the bfloat16 inputs, made in prepare
    "quantize_fp8": ("longca.fp8", "quantize_fp8"),
    "dequantize_fp8": ("longca.fp8", "dequantize_fp8"),
}

__all__ = [
    "hookimpl", "KernelSpec", "MaskSpec", "SamplerSpec", "Device", "ANY_STATIC", "ANY_BLOCK_SPARSE",
    "Mask", "BlockSparseLayout", "FULL", "CAUSAL", "PARTIAL", "FULL_BLOCK",
    "slices_array", "band_to_slices", "block_map", "crop", "dense", "flashmask_bounds", "masked_row_intervals",
    "visible_key_intervals",
    "LongcaError", "UnsupportedError", *_LAZY,
]

__getattr__ = lazy_getattr(__name__, _LAZY, globals())
