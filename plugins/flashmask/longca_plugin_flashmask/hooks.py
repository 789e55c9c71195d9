"""The `flashmask` kernel spec: FlashMask's column-bound masks as our own Triton kernels.

Heavy imports (triton, the kernels) happen inside the functions, so listing kernels stays fast
and works without triton or a GPU.
"""
from __future__ import annotations

import os

from longca.plugin import ANY_STATIC, Device, KernelSpec, hookimpl

HEAD_DIMS = (64, 128)


def interpreting() -> bool:
    """True when Triton runs its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() not in ("", "0", "false", "no")


def available() -> str | None:
    """None, or why the kernel cannot run here (no triton; no CUDA GPU and no interpreter)."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:  # found, not imported: listing stays light
        return "triton is not installed; pip install triton"
    import torch

    if not torch.cuda.is_available() and not interpreting():
        return ("no CUDA GPU is visible; on a CPU the Triton kernels run only in Triton's interpreter "
                "(set TRITON_INTERPRET=1, slow: small sizes only)")
    return None


def devices() -> tuple[Device, ...]:
    """CUDA always; the CPU too when Triton's interpreter is on (read when the plugin loads)."""
    return ("cpu", "cuda") if interpreting() else ("cuda",)


def interpreter_problem() -> str | None:
    """Why this Triton's interpreter cannot run the kernels, or None.

    Before Triton 3.7 the interpreter turns a loop bound loaded from memory into an int with
    `int(array)`, which NumPy >= 2.3 refuses for one-element arrays.
    """
    import numpy as np

    try:
        int(np.zeros(1, dtype=np.int32))
    except TypeError:
        import triton

        major, minor = (int(x) for x in triton.__version__.split(".")[:2])
        if (major, minor) < (3, 7):
            return (f"Triton {triton.__version__}'s interpreter cannot run these kernels with NumPy "
                    f"{np.__version__}: use triton >= 3.7 or numpy < 2.3")
    return None


def supports(problem) -> str | None:
    """CPU problems need the interpreter (TRITON_INTERPRET=1 may be set after the plugin loaded)."""
    if problem.device_type == "cpu":
        if not interpreting():
            return "on the CPU the Triton kernels run only in Triton's interpreter: set TRITON_INTERPRET=1"
        return interpreter_problem()
    return None


def supports_mask(problem, mask) -> str | None:
    """FlashMask takes a mask with at most two masked row intervals per key column (its bounds)."""
    return mask.flashmask_problem()


def prepare(problem, mask, q, k, v):
    """FlashMask bounds of the mask on the device, with per-block min/max and the tile lists."""
    from .attention import prepare_plan

    return prepare_plan(mask.flashmask_bounds(), q, k)


def run(prepared, q, k, v):
    from .attention import attention

    return attention(q, k, v, prepared)


def forward_lse(q, k, v, slices, softmax_scale=None):
    from .attention import forward_lse as impl

    return impl(q, k, v, slices, softmax_scale)


def backward_lse(dout, q, k, v, out, lse, slices, softmax_scale=None):
    from .attention import backward_lse as impl

    return impl(dout, q, k, v, out, lse, slices, softmax_scale)


def backend() -> str:
    try:
        import triton

        version = triton.__version__
    except Exception:  # noqa: BLE001 - a triton that fails to import in any way reads as missing
        version = "missing"
    mode = "interpreter" if interpreting() else "gpu"
    return f"longca_plugin_flashmask.triton (triton {version}, {mode}, backward {backward_mode()})"


def backward_mode() -> str:
    """"split" or "fused": the backward the GPU table, LONGCA_FLASHMASK_BWD and any override pick."""
    from .configs import BWD_MODES, config

    fused = config(128, "interpreter" if interpreting() else "cuda", 128).bwd_fused
    return next(name for name, value in BWD_MODES.items() if value == fused)


def spec() -> KernelSpec:
    """The kernel spec; its devices depend on TRITON_INTERPRET at the time the hook is called."""
    return KernelSpec(
        name="flashmask",
        family="dense",
        description="FlashMask column bounds (two masked row intervals per key column), our Triton kernels "
                    "with block skipping from per-block min/max of the bounds",
        masks=(ANY_STATIC,),  # any mask with at most two masked row intervals per key column
        prepare=prepare,
        run=run,
        dtypes=("bfloat16", "float16"),
        head_dims=HEAD_DIMS,  # Q/K and V of one head dim
        deterministic="the Triton backward has no deterministic mode (its fused form adds dq atomically)",
        gqa=True,
        backward=True,
        devices=devices(),
        min_compute_capability=(8, 0),
        available=available,
        supports=supports,
        supports_mask=supports_mask,
        forward_lse=forward_lse,
        backward_lse=backward_lse,
        backend=backend,
        compiles=True,
        url="https://arxiv.org/abs/2410.01359",
    )


@hookimpl
def longca_kernels() -> list[KernelSpec]:
    return [spec()]


@hookimpl
def longca_env_info(info) -> None:
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:  # noqa: BLE001 - a triton that fails to import in any way reads as missing
        info["triton"] = None
