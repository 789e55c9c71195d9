"""The public face for plugin authors: everything a plugin and its tests import, from one module.

    from longca import plugin

    @plugin.hookimpl
    def longca_kernels():
        return [plugin.KernelSpec(name="mykernel", ..., masks=(plugin.ANY_STATIC,))]

    test_conformance = plugin.conformance_tests("mykernel")       # in the plugin's tests

Names here are the stable API (docs/writing-a-plugin.md uses nothing else). Importing this
module is light: the conformance kit, autograd helper and CP pieces load on first use.
"""
from __future__ import annotations

from typing import Any

from .errors import LongcaError, UnknownNameError, UnsupportedError
from .hookspecs import hookimpl
from .masks.mask import BlockSparseLayout, Mask, MaskContext
from .masks.slices import BI_CAUSAL, CAUSAL, EMPTY, FULL, FULL_BLOCK, INV_CAUSAL, PARTIAL, TYPE_NAMES
from .masks.slices import as_array as slices_array
from .masks.slices import band_to_slices, block_map, crop, dense, normalize
from .masks.slices import area as slices_area
from .specs import (ANY_BLOCK_SPARSE, ANY_MASK, ANY_STATIC, BackwardFn, CPStrategySpec, ForwardFn, KernelSpec,
                    MaskSpec, SamplerSpec)

# name -> (module, attribute): loaded on first use (they import torch or the whole testing kit)
_LAZY = {
    "lse_attention": ("longca.autograd", "lse_attention"),
    "reference_forward_lse": ("longca.reference", "forward_lse"),
    "reference_backward_lse": ("longca.reference", "backward_lse"),
    "Problem": ("longca.problem", "Problem"),
    "installed_version": ("longca.runinfo", "installed_version"),
    # context parallelism: the pieces every strategy shares (docs/context-parallel.md)
    "InnerKernel": ("longca_cp.inner", "InnerKernel"),
    "CPPlan": ("longca_cp.plan", "CPPlan"),
    "dispatch": ("longca_cp.plan", "dispatch"),
    "undispatch": ("longca_cp.plan", "undispatch"),
    "Layout": ("longca_cp.layout", "Layout"),
    "contiguous_layout": ("longca_cp.layout", "contiguous"),
    "zigzag_layout": ("longca_cp.layout", "zigzag"),
    "Call": ("longca_cp.calls", "Call"),
    "pair_calls": ("longca_cp.calls", "pair_calls"),
    "forward_calls": ("longca_cp.attend", "forward_calls"),
    "backward_calls": ("longca_cp.attend", "backward_calls"),
    "OutputAccumulator": ("longca.merge", "OutputAccumulator"),
    "GradAccumulator": ("longca.merge", "GradAccumulator"),
    "gather_seq": ("longca_cp.comm", "gather_seq"),
    "reduce_scatter_seq": ("longca_cp.comm", "reduce_scatter_seq"),
    "build_mask": ("longca.testing.builders", "build_mask"),
    "conformance_tests": ("longca.testing", "conformance_tests"),
    "run_conformance": ("longca.testing", "run_conformance"),
    "check_kernel": ("longca.testing", "check_kernel"),
    "mask_conformance_tests": ("longca.testing", "mask_conformance_tests"),
    "sampler_conformance_tests": ("longca.testing", "sampler_conformance_tests"),
    "strategy_conformance_tests": ("longca.testing", "strategy_conformance_tests"),
    "check_mask": ("longca.testing.mask_suite", "check_mask"),
    "check_sampler": ("longca.testing.sampler_suite", "check_sampler"),
    "check_strategy": ("longca_cp.conformance", "check_strategy"),
    "ConformanceSkip": ("longca.testing.conformance", "ConformanceSkip"),
    "Settings": ("longca.testing.conformance", "Settings"),
}

__all__ = [
    "hookimpl", "KernelSpec", "MaskSpec", "SamplerSpec", "CPStrategySpec", "ForwardFn", "BackwardFn",
    "ANY_STATIC", "ANY_BLOCK_SPARSE", "ANY_MASK", "Mask", "MaskContext", "BlockSparseLayout",
    "FULL", "CAUSAL", "INV_CAUSAL", "BI_CAUSAL", "TYPE_NAMES", "EMPTY", "PARTIAL", "FULL_BLOCK",
    "slices_array", "band_to_slices", "block_map", "crop", "dense", "normalize", "slices_area",
    "LongcaError", "UnknownNameError", "UnsupportedError", *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        module, attr = _LAZY[name]
        value = getattr(import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'longca.plugin' has no attribute {name!r}")
