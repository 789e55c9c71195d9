"""cuDNN's FP8 attention through the frontend: `sdpa_fp8` forward and `sdpa_fp8_backward`, one dense
graph each (full and causal), built in `prepare`.

The recipe (docs/fp8.md): q, k, v are the problem's bfloat16 inputs quantized per tensor in
`prepare` (`longca.plugin.quantize_fp8`, untimed); the softmax probabilities are quantized with the
scale their bound gives (amax 1: scale = the format's largest value). What cuDNN writes depends on
the GPU: on Blackwell the output and the gradients come back in bfloat16 (float16, cast, where this
cuDNN builds no bfloat16 output); on Hopper cuDNN takes only FP8 outputs, so O, dQ, dK and dV are
written in FP8 with their own scales and dequantized to bfloat16 inside the timed call (as
cudnn-frontend's own benchmark runs Hopper: FP8 in, FP8 out). The backward quantizes the output
gradient per tensor in the timed call (as an FP8 training step does). Every scale of a value with no
bound (dP; on Hopper O, dQ, dK, dV too) comes from one calibration run in `prepare` (delayed scaling
with one step of history, as TransformerEngine keeps it), halved for headroom.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from longca.plugin import quantize_fp8

FP8_MASKS = ("full", "causal")  # one dense graph; documents and windows are not wired for FP8 here
MIN_CUDNN = 91400  # sdpa_fp8 with bounds and fp16/bf16 outputs: cudnn-frontend's FP8 tests require cuDNN 9.14
HEADROOM = 0.5  # a calibrated scale maps the calibration call's amax to half of the FP8 range
# the (Q/K, V) head dims cudnn-frontend's FP8 tests draw: 64..192 for Q/K, 64..128 for V
FP8_HEAD_DIMS = ((64, 64), (128, 128), (192, 128))


def fp8_reason(problem) -> str | None:
    """Why the FP8 path cannot run this problem, or None (the frontend itself is checked before)."""
    if problem.mask not in FP8_MASKS:
        return (f"cuDNN FP8 in longca: masks {', '.join(FP8_MASKS)} only (one dense sdpa_fp8 graph; ragged "
                f"documents and bands are not wired for FP8), not {problem.mask}")
    if (problem.head_dim, problem.dv) not in FP8_HEAD_DIMS:
        pairs = ", ".join(f"{d}/{dv}" if d != dv else str(d) for d, dv in FP8_HEAD_DIMS)
        return (f"cuDNN FP8 in longca: head dims {pairs} (what cudnn-frontend's FP8 tests cover), "
                f"not {problem.head_dims_label}")
    if problem.dtype == "float8_e5m2" and problem.direction != "fwd":
        return "cuDNN's FP8 backward takes e4m3 inputs (cudnn-frontend's FP8 backward tests); e5m2 runs forward only"
    import cudnn

    if cudnn.backend_version() < MIN_CUDNN:
        return f"cuDNN {cudnn.backend_version()}: FP8 attention needs cuDNN >= 9.14"
    return _hopper_backward_reason(problem)


def _hopper_backward_reason(problem) -> str | None:
    """cuDNN's FP8 backward on Hopper takes head dim 128 only (measured on an H200, cuDNN 9.19: "hidden_dim
    shoud be equal to 128"; the Blackwell engines that take others require sm100-103)."""
    if problem.direction == "fwd" or (problem.head_dim, problem.dv) == (128, 128) or \
            not problem.device.startswith("cuda"):
        return None
    import torch

    major, minor = torch.cuda.get_device_capability(torch.device(problem.device))
    if major >= 10:
        return None
    return (f"cuDNN's FP8 backward on sm{major}{minor} takes head dim 128 only (cuDNN declines "
            f"{problem.head_dims_label} there; its other FP8 backward engines need sm100-103)")


def output_types(device, fp8):
    """The output dtypes to try, in order: bfloat16 (float16 where this cuDNN builds none) on Blackwell;
    on Hopper the input's FP8 format, the only output cuDNN 9.19 builds there (measured on an H200:
    "sdpa fp8 forward with HALF/BFLOAT16 output is only supported on Blackwell architecture")."""
    import torch

    major, _ = torch.cuda.get_device_capability(device)
    return (torch.bfloat16, torch.float16) if major >= 10 else (fp8,)


def _packed(seqlen: int, heads: int, dim: int) -> list[int]:
    """BHSD strides of a contiguous (batch, seqlen, heads, dim) tensor."""
    return [seqlen * heads * dim, dim, heads * dim, 1]


@dataclass
class Fp8Graphs:
    """The built graphs, their tensors by role, the FP8 copies and every scale of one case."""

    forward: Any
    ft: dict[str, Any]
    backward: Any | None
    bt: dict[str, Any]
    workspace: Any
    handle: Any
    fp8: Any  # torch dtype of the inputs
    out_dtype: Any  # torch dtype cuDNN writes: bfloat16, float16 (cast to bfloat16) or, on Hopper, the FP8 format
    inputs: dict[str, Any] = field(default_factory=dict)  # q, k, v in FP8
    scales: dict[str, Any] = field(default_factory=dict)  # name -> (1, 1, 1, 1) float32 tensor
    amax: dict[str, Any] = field(default_factory=dict)  # the last call's amax_* outputs

    @property
    def fp8_output(self) -> bool:
        return self.out_dtype == self.fp8

    def to_16bit(self, x, role: str, dtype):
        """x as cuDNN wrote it, in `dtype`: an FP8 output times its descale (timed), a 16-bit one cast."""
        if not self.fp8_output:
            return x.to(dtype)
        from longca.plugin import dequantize_fp8

        return dequantize_fp8(x, self.scales[f"descale_{role}"], dtype)


def _scalar(graph, cudnn, name: str):
    return graph.tensor(name=name, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.FLOAT)


def _io_types(cudnn, fp8, out):
    import torch

    to = {torch.float8_e4m3fn: cudnn.data_type.FP8_E4M3, torch.float8_e5m2: cudnn.data_type.FP8_E5M2,
          torch.bfloat16: cudnn.data_type.BFLOAT16, torch.float16: cudnn.data_type.HALF}
    return to[fp8], to[out]


def _graph_with_qkv(cudnn, handle, shape, itype):
    """A new FP8 graph and its q, k, v input tensors (BHSD views of packed BSHD)."""
    b, s, hq, hkv, d, dv = shape
    g = cudnn.pygraph(io_data_type=itype, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    return g, {"q": g.tensor(name="q", dim=[b, hq, s, d], stride=_packed(s, hq, d), data_type=itype),
               "k": g.tensor(name="k", dim=[b, hkv, s, d], stride=_packed(s, hkv, d), data_type=itype),
               "v": g.tensor(name="v", dim=[b, hkv, s, dv], stride=_packed(s, hkv, dv), data_type=itype)}


def build_forward(cudnn, handle, shape, fp8, out, causal: bool, scale: float):
    """(graph, tensors) of `sdpa_fp8` with stats; built."""
    b, s, hq, hkv, d, dv = shape
    itype, otype = _io_types(cudnn, fp8, out)
    g, t = _graph_with_qkv(cudnn, handle, shape, itype)
    for name in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"):
        t[name] = _scalar(g, cudnn, name)
    o, stats, amax_s, amax_o = g.sdpa_fp8(
        q=t["q"], k=t["k"], v=t["v"], descale_q=t["descale_q"], descale_k=t["descale_k"], descale_v=t["descale_v"],
        descale_s=t["descale_s"], scale_s=t["scale_s"], scale_o=t["scale_o"], generate_stats=True,
        attn_scale=scale, use_causal_mask=causal)
    o.set_output(True).set_dim([b, hq, s, dv]).set_stride(_packed(s, hq, dv)).set_data_type(otype)
    stats.set_output(True).set_dim([b, hq, s, 1]).set_stride([hq * s, s, 1, 1]).set_data_type(cudnn.data_type.FLOAT)
    for a in (amax_s, amax_o):
        a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(cudnn.data_type.FLOAT)
    t.update(o=o, stats=stats, amax_s=amax_s, amax_o=amax_o)
    _build(cudnn, g)
    return g, t


def build_backward(cudnn, handle, shape, fp8, out, causal: bool, scale: float, deterministic: bool):
    """(graph, tensors) of `sdpa_fp8_backward` reading the forward's output (in `out`) and stats; built."""
    b, s, hq, hkv, d, dv = shape
    itype, otype = _io_types(cudnn, fp8, out)
    g, t = _graph_with_qkv(cudnn, handle, shape, itype)
    t.update({"o": g.tensor(name="o", dim=[b, hq, s, dv], stride=_packed(s, hq, dv), data_type=otype),
              "dO": g.tensor(name="dO", dim=[b, hq, s, dv], stride=_packed(s, hq, dv), data_type=itype),
              "stats": g.tensor(name="stats", dim=[b, hq, s, 1], stride=[hq * s, s, 1, 1],
                                data_type=cudnn.data_type.FLOAT)})
    names = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_dO", "descale_s", "descale_dP",
             "scale_s", "scale_dQ", "scale_dK", "scale_dV", "scale_dP")
    for name in names:
        t[name] = _scalar(g, cudnn, name)
    extra = {"use_deterministic_algorithm": True} if deterministic else {}
    dq, dk, dv_, amax_dq, amax_dk, amax_dv, amax_dp = g.sdpa_fp8_backward(
        q=t["q"], k=t["k"], v=t["v"], o=t["o"], dO=t["dO"], stats=t["stats"],
        **{n: t[n] for n in names}, attn_scale=scale, use_causal_mask=causal, **extra)
    for role, x, heads, dim in (("dQ", dq, hq, d), ("dK", dk, hkv, d), ("dV", dv_, hkv, dv)):
        x.set_output(True).set_dim([b, heads, s, dim]).set_stride(_packed(s, heads, dim)).set_data_type(otype)
        t[role] = x
    for role, a in (("amax_dQ", amax_dq), ("amax_dK", amax_dk), ("amax_dV", amax_dv), ("amax_dP", amax_dp)):
        a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(cudnn.data_type.FLOAT)
        t[role] = a
    _build(cudnn, g)
    return g, t


def _build(cudnn, graph) -> None:
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()


def _execute(p: Fp8Graphs, graph, tensors, buffers: dict[str, Any]) -> None:
    import cudnn
    import torch

    cudnn.set_stream(handle=p.handle, stream=torch.cuda.current_stream().cuda_stream)
    graph.execute({tensors[role]: x for role, x in buffers.items()}, p.workspace, handle=p.handle)


def _amax_buffers(dev, names) -> dict[str, Any]:
    import torch

    return {n: torch.empty(1, 1, 1, 1, dtype=torch.float32, device=dev) for n in names}


def _forward(p: Fp8Graphs, shape):
    """(o as cuDNN wrote it, stats); the amaxes of this call are kept in `p.amax`."""
    import torch

    b, s, hq, _, _, dv = shape
    dev = p.inputs["q"].device
    o = torch.empty(b, s, hq, dv, dtype=p.out_dtype, device=dev)
    stats = torch.empty(b, hq, s, 1, dtype=torch.float32, device=dev)
    p.amax.update(_amax_buffers(dev, ("amax_s", "amax_o")))
    scales = {n: p.scales[n] for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")}
    _execute(p, p.forward, p.ft, dict(**p.inputs, o=o, stats=stats, amax_s=p.amax["amax_s"],
                                      amax_o=p.amax["amax_o"], **scales))
    return o, stats


def _backward(p: Fp8Graphs, shape, o, stats, dout):
    """(dq, dk, dv) as cuDNN wrote them; the amaxes of this call are kept in `p.amax`."""
    import torch

    do8, do_descale = quantize_fp8(dout, p.fp8)  # in the timed call: an FP8 step quantizes its gradient too
    dq, dk, dv = (torch.empty(x.shape, dtype=p.out_dtype, device=x.device) for x in
                  (p.inputs["q"], p.inputs["k"], p.inputs["v"]))
    names = ("amax_dQ", "amax_dK", "amax_dV", "amax_dP")
    p.amax.update(_amax_buffers(o.device, names))
    scales = {n: p.scales[n] for n in ("descale_q", "descale_k", "descale_v", "descale_o", "descale_s", "descale_dP",
                                       "scale_s", "scale_dQ", "scale_dK", "scale_dV", "scale_dP")}
    _execute(p, p.backward, p.bt, dict(**p.inputs, o=o.contiguous(), dO=do8.contiguous(), stats=stats,
                                       descale_dO=do_descale.view(1, 1, 1, 1), dQ=dq, dK=dk, dV=dv,
                                       **{n: p.amax[n] for n in names}, **scales))
    return dq, dk, dv


@dataclass
class Fp8Prepared:
    graphs: Fp8Graphs
    shape: tuple[int, int, int, int, int, int]


def prepare(problem, mask, q, k, v, dout=None) -> Fp8Prepared:
    """Quantize q, k, v (per tensor), build the forward (and backward) graph, and set the scales of the
    values with no bound from one calibration call (forward; backward on the seeded output gradient);
    nothing of this is timed."""
    import cudnn
    import torch

    from longca_testing import seeded_dout

    from .graphs import handle_for

    fp8 = getattr(torch, problem.dtype)
    shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3])
    causal, scale, handle = problem.mask == "causal", 1.0 / q.shape[-1] ** 0.5, handle_for(q.device)
    backward = problem.direction != "fwd"
    built = None
    candidates = output_types(q.device, fp8)
    for out in candidates:
        try:
            fwd = build_forward(cudnn, handle, shape, fp8, out, causal, scale)
            bwd = build_backward(cudnn, handle, shape, fp8, out, causal, scale, problem.deterministic) \
                if backward else (None, {})
            built = (out, fwd, bwd)
            break
        except Exception:  # noqa: BLE001 - cuDNN refuses the output type: the next one is tried
            if out is candidates[-1]:
                raise
    assert built is not None
    out, (fg, ft), (bg, bt) = built
    size = max(fg.get_workspace_size(), bg.get_workspace_size() if bg is not None else 0, 1)
    p = Fp8Graphs(fg, ft, bg, bt, torch.empty(size, dtype=torch.uint8, device=q.device), handle, fp8, out)
    for name, x in zip("qkv", (q, k, v), strict=True):
        p.inputs[name], descale = quantize_fp8(x, fp8)
        p.scales[f"descale_{name}"] = descale.view(1, 1, 1, 1)
    largest = torch.finfo(fp8).max
    _set_scale(p, "s", largest)  # probabilities are at most 1: the format's largest value is their scale
    for name in ("o", "dQ", "dK", "dV", "dP"):
        _set_scale(p, name, 1.0)  # 16-bit outputs take scale 1; FP8 ones and dP are calibrated next
    calibrated = ("o", "dQ", "dK", "dV") if p.fp8_output else ()
    o, stats = _forward(p, shape)
    if "o" in calibrated:
        _set_scale(p, "o", _delayed(p, "o", largest))
        o, stats = _forward(p, shape)  # the backward reads O written with its own scale
    if backward:
        _backward(p, shape, o, stats, dout if dout is not None else seeded_dout(problem))
        for name in ("dP", *calibrated[1:]):
            _set_scale(p, name, _delayed(p, name, largest))
    return Fp8Prepared(p, shape)


def _delayed(p: Fp8Graphs, name: str, largest: float) -> float:
    """The scale that maps the calibration call's amax of `name` to HEADROOM of the format's range."""
    amax = float(p.amax[f"amax_{name}"].item()) or 1.0
    return largest / amax * HEADROOM


def _set_scale(p: Fp8Graphs, name: str, scale: float) -> None:
    """scale_<name> and descale_<name> = 1 / scale, (1, 1, 1, 1) float32 tensors on the GPU."""
    import torch

    dev = p.workspace.device
    p.scales[f"scale_{name}"] = torch.full((1, 1, 1, 1), scale, dtype=torch.float32, device=dev)
    p.scales[f"descale_{name}"] = torch.full((1, 1, 1, 1), 1.0 / scale, dtype=torch.float32, device=dev)


def run(prepared: Fp8Prepared, q, k, v):
    """The FP8 forward (autograd-aware: the backward runs `sdpa_fp8_backward`); output in q's dtype."""
    return _Fp8Attention.apply(q, k, v, prepared)


def _function():
    import torch

    class Fp8Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, prepared):  # q, k, v: the bfloat16 inputs whose FP8 copies prepare made
            o, stats = _forward(prepared.graphs, prepared.shape)
            ctx.prepared = prepared
            ctx.save_for_backward(o, stats)
            return prepared.graphs.to_16bit(o, "o", q.dtype)

        @staticmethod
        def backward(ctx, dout):
            o, stats = ctx.saved_tensors
            p = ctx.prepared
            dq, dk, dv = _backward(p.graphs, p.shape, o, stats, dout)
            g, dtype = p.graphs, dout.dtype
            return g.to_16bit(dq, "dQ", dtype), g.to_16bit(dk, "dK", dtype), g.to_16bit(dv, "dV", dtype), None

    return Fp8Attention


class _Lazy:
    """`_Fp8Attention.apply`, the autograd Function made on first use (torch is not imported at listing)."""

    _fn: Any = None

    def apply(self, *args):
        if _Lazy._fn is None:
            _Lazy._fn = _function()
        return _Lazy._fn.apply(*args)


_Fp8Attention = _Lazy()
