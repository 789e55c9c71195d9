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
from .masks.slices import (
    BI_CAUSAL,
    CAUSAL,
    EMPTY,
    FULL,
    FULL_BLOCK,
    INV_CAUSAL,
    PARTIAL,
    TYPE_NAMES,
    band_to_slices,
    block_map,
    crop,
    dense,
    flashmask_bounds,
    normalize,
)
from .masks.slices import area as slices_area
from .masks.slices import as_array as slices_array
from .specs import (
    ANY_BLOCK_SPARSE,
    ANY_MASK,
    ANY_STATIC,
    FP8_DTYPES,
    BackwardFn,
    CPStrategySpec,
    Device,
    Direction,
    DType,
    Family,
    ForwardFn,
    HeadDims,
    KernelSpec,
    MaskKind,
    MaskSpec,
    SamplerSpec,
    head_dims_text,
)

# name -> (module, attribute): loaded on first use (they import torch, numpy-heavy modules, the
# testing kit, or another distribution: longca_cp and longca_flashplan, which a plugin that uses
# their names declares in its pyproject). tests/test_public_face.py resolves every entry.
_LAZY = {
    # kernels
    "lse_attention": ("longca.autograd", "lse_attention"),
    "reference_forward_lse": ("longca.reference", "forward_lse"),
    "reference_backward_lse": ("longca.reference", "backward_lse"),
    "reference_attention": ("longca.reference", "attention"),
    "Problem": ("longca.problem", "Problem"),
    "problem_mask": ("longca.problem", "build_mask"),
    "make_inputs": ("longca.problem", "make_inputs"),
    "installed_version": ("longca_runner.runinfo", "installed_version"),
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
    # FlashAttention-style planning (longca-flashplan): slices -> varlen calls with windows, lse merged
    "FlashAdapter": ("longca_flashplan.family", "FlashAdapter"),
    "flash_kernel": ("longca_flashplan.family", "flash_kernel"),
    "library_public_for": ("longca_flashplan.family", "library_public_for"),
    "public_attention": ("longca_flashplan.family", "public_attention"),
    "FA_HEAD_DIMS": ("longca_flashplan.family", "FA_HEAD_DIMS"),
    "FA_MASKS": ("longca_flashplan.kernel", "FA_MASKS"),
    "FlashPrepared": ("longca_flashplan.kernel", "Prepared"),
    "make_prepare_run": ("longca_flashplan.kernel", "make_prepare_run"),
    "flash_plan_for": ("longca_flashplan.kernel", "plan_for"),
    "cached_flash_plan": ("longca_flashplan.kernel", "cached_plan"),
    "gpu_reason": ("longca_flashplan.kernel", "gpu_reason"),
    "head_dim_reason": ("longca_flashplan.kernel", "head_dim_reason"),
    "plan_reason": ("longca_flashplan.kernel", "plan_reason"),
    "CallArgs": ("longca_flashplan.executor", "CallArgs"),
    "ExecCall": ("longca_flashplan.executor", "ExecCall"),
    "lse_primitives": ("longca_flashplan.executor", "lse_primitives"),
    "resolve_scale": ("longca_flashplan.executor", "resolve_scale"),
    "flash_run_forward": ("longca_flashplan.executor", "run_forward"),
    "any_window": ("longca_flashplan.plan", "any_window"),
    "full_or_square_causal": ("longca_flashplan.plan", "full_or_square_causal"),
    "window_slices": ("longca_flashplan.emulated", "window_slices"),
    # context parallelism (longca-cp): the pieces every strategy shares (docs/context-parallel.md)
    "hybrid_strategy": ("longca_cp.strategy", "hybrid_strategy"),
    "GatherSchedule": ("longca_cp.schedule", "GatherSchedule"),
    "InnerKernel": ("longca_cp.inner", "InnerKernel"),
    "inner_unsupported": ("longca_cp.inner", "inner_unsupported"),
    "CPPlan": ("longca_cp.plan", "CPPlan"),
    "dispatch": ("longca_cp.plan", "dispatch"),
    "undispatch": ("longca_cp.plan", "undispatch"),
    "resolve_strategy_options": ("longca_cp.plan", "resolve_options"),
    "Layout": ("longca_cp.layout", "Layout"),
    "contiguous_layout": ("longca_cp.layout", "contiguous"),
    "zigzag_layout": ("longca_cp.layout", "zigzag"),
    "document_bounds": ("longca_cp.layout", "document_bounds"),
    "Call": ("longca_cp.calls", "Call"),
    "pair_calls": ("longca_cp.calls", "pair_calls"),
    "forward_calls": ("longca_cp.attend", "forward_calls"),
    "backward_calls": ("longca_cp.attend", "backward_calls"),
    "OutputAccumulator": ("longca.merge", "OutputAccumulator"),
    "GradAccumulator": ("longca.merge", "GradAccumulator"),
    "gather_seq": ("longca_cp.comm", "gather_seq"),
    "reduce_scatter_seq": ("longca_cp.comm", "reduce_scatter_seq"),
    # testing: conformance suites and what plugins' own tests compare with
    "build_mask": ("longca_testing.builders", "build_mask"),
    "conformance_tests": ("longca_testing", "conformance_tests"),
    "conformance_cases": ("longca_testing", "conformance_cases"),
    "run_conformance": ("longca_testing", "run_conformance"),
    "check_kernel": ("longca_testing", "check_kernel"),
    "mask_conformance_tests": ("longca_testing", "mask_conformance_tests"),
    "sampler_conformance_tests": ("longca_testing", "sampler_conformance_tests"),
    "strategy_conformance_tests": ("longca_testing", "strategy_conformance_tests"),
    "check_mask": ("longca_testing.mask_suite", "check_mask"),
    "check_sampler": ("longca_testing.sampler_suite", "check_sampler"),
    "check_strategy": ("longca_testing.strategy_suite", "check_strategy"),
    "ConformanceSkip": ("longca_testing.conformance", "ConformanceSkip"),
    "Settings": ("longca_testing.conformance", "Settings"),
    "assert_close": ("longca_testing.compare", "assert_close"),
    "compare_primitives": ("longca_testing.primitives", "compare_primitives"),
    "kernel_rows": ("longca_cli.inventory", "kernel_rows"),
    "rel_err": ("longca_runner.measure", "rel_err"),
    "TOLERANCE": ("longca_runner.measure", "TOLERANCE"),
    "RunOptions": ("longca_runner.measure", "RunOptions"),
    "run_problem": ("longca_runner.measure", "run_problem"),
    "seeded_dout": ("longca_runner.measure", "seeded_dout"),
    "tolerance_for": ("longca_runner.measure", "tolerance_for"),
    # FP8 (docs/fp8.md): per-tensor scaled copies of the bfloat16 inputs, made in prepare
    "quantize_fp8": ("longca.fp8", "quantize_fp8"),
    "dequantize_fp8": ("longca.fp8", "dequantize_fp8"),
    "ask_deterministic": ("longca_flashplan.kernel", "ask_deterministic"),
}

__all__ = [
    "hookimpl", "KernelSpec", "MaskSpec", "SamplerSpec", "CPStrategySpec", "ForwardFn", "BackwardFn",
    "DType", "Device", "Direction", "Family", "MaskKind", "HeadDims", "head_dims_text", "FP8_DTYPES",
    "ANY_STATIC", "ANY_BLOCK_SPARSE", "ANY_MASK", "Mask", "MaskContext", "BlockSparseLayout",
    "FULL", "CAUSAL", "INV_CAUSAL", "BI_CAUSAL", "TYPE_NAMES", "EMPTY", "PARTIAL", "FULL_BLOCK",
    "slices_array", "band_to_slices", "block_map", "crop", "dense", "normalize", "slices_area", "flashmask_bounds",
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
