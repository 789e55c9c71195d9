"""TransformerEngine: `DotProductAttention` as a kernel (`te`) and its context parallelism as a CP
strategy (`te-cp`, inner kernel `te`: TE computes with its own fused / flash backends).

Everything that needs no TE (mask forms, options, refusals, TE's token layouts) is checked on CPU; the
calls into TE (runtime.py) ran on an H100 on 2026-12-07 (docs/results/h100/te-ffa-2026-12-07).
"""
from __future__ import annotations

from longca import plugin
from longca_cp import plugin as cp

from .masks import TE_MASKS, te_form
from .options import OPTIONS, refusal, resolve


def available() -> str | None:
    try:
        import transformer_engine.pytorch  # noqa: F401
    except ImportError as exc:
        return (f"transformer_engine is not installed ({exc.msg}); on a CUDA box: pip install --no-build-isolation "
                "'transformer_engine[pytorch]' (see the longca-plugin-te README)")
    return None


# seen on an H100 on 2026-12-07: TE 2.20.2's FusedAttnFunc.backward sets ctx.backward_objects = None, so a second
# backward of one forward fails ("'NoneType' object has no attribute 'grad_output'"). The kernel declares
# backward_once (each timed backward gets a fresh forward); CP ranks time repeated backwards of one forward.
ONE_BACKWARD = ("direction bwd: TE's attention backward runs once per forward (it drops the forward's saved state), "
                "and CP ranks time bwd as repeated backwards of one kept forward; measure fwdbwd")


def supports(problem) -> str | None:
    form = te_form(problem.mask)
    if form is None:
        return f"mask {problem.mask}: TransformerEngine has no attn_mask_type / window / thd form for it"
    if form[0] == "thd" and problem.batch != 1:
        return f"batch {problem.batch}: documents go to TE packed (thd), one sequence"
    return None


def _runtime(name: str):
    """runtime.NAME, imported on the first call (TE is imported only when a case runs)."""
    def call(*args):
        from . import runtime

        return getattr(runtime, name)(*args)
    return call


def cp_supports(problem, options) -> str | None:
    reason = ONE_BACKWARD if problem.direction == "bwd" else refusal(problem, options)
    if reason is None and (te_form(problem.mask) or ("",))[0] == "thd":
        return ("te-cp: document masks need TE's thd format, with every document padded to a multiple of 2W; "
                "longca's tensors are unpadded and the padded dispatch (layout.thd_rank_tokens) is not wired yet")
    if reason is None and (missing := available()):
        return f"unavailable: {missing}"
    return reason


@plugin.hookimpl
def longca_kernels():
    return [plugin.KernelSpec(
        name="te", family="dense",
        description="TransformerEngine DotProductAttention (its own fused/flash backend choice): bshd with "
                    "attn_mask_type and window_size, thd with cu_seqlens for documents",
        masks=tuple(TE_MASKS), prepare=_runtime("prepare"), run=_runtime("run"), dtypes=("bfloat16", "float16"),
        devices=("cuda",),
        min_compute_capability=(8, 0), available=available, supports=supports, backward_once=True,
        backend=lambda: "transformer_engine.pytorch.DotProductAttention", memory=plugin.linear_memory)]


@plugin.hookimpl
def longca_cp_strategies():
    return [cp.CPStrategySpec(
        name="te-cp",
        description="TransformerEngine's context parallelism (cp_comm_type p2p, a2a, a2a+p2p, all_gather) "
                    "on DualChunkSwap (zigzag) shards",
        masks=tuple(TE_MASKS), prepare=_runtime("cp_prepare"), dispatch=cp.dispatch,
        attention=_runtime("cp_attention"),
        undispatch=cp.undispatch, supports=cp_supports, resolve_options=resolve, options=dict(OPTIONS),
        inner_kernels=("te",))]
