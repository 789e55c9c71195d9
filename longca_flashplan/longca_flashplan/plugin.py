"""The public face for FlashAttention-style kernel authors: what a plugin that runs static masks
through varlen calls with windows (fa2, fa3, fa4, cudnn, flashmask, flex's tests) imports from
longca-flashplan. Its names load on first use; the core's names stay on `longca.plugin`."""
from __future__ import annotations

from longca.faces import lazy_getattr

# name -> (module, attribute); tests/test_public_face.py resolves every entry
_LAZY = {
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
}

__all__ = [*_LAZY]

__getattr__ = lazy_getattr(__name__, _LAZY, globals())
