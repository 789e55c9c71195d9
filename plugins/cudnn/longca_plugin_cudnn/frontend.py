"""The cuDNN frontend path: cuDNN SDPA graphs built once in `prepare`, only executed in the timed call.

Why: torch's varlen cuDNN ops rebuild the cuDNN graph on every call
(https://github.com/pytorch/pytorch/pull/191576) and its explicit-lse cuDNN backward gave wrong
gradients (see hooks.BACKWARD_REASON). Here the core planner (`longca_flashplan`) turns the mask
into calls (rectangles with a bottom-right FlashAttention window, several per call for
documents), and every call runs as one graph of nvidia-cudnn-frontend (`graphs.py`):

- one rectangle (full, causal, sliding window, a block of a heterogeneous mask): dense tensors,
  the window as cuDNN's diagonal band;
- several rectangles (documents, the pieces of heterogeneous masks): cuDNN's ragged layout, the
  rectangles packed back to back with element offsets, `seq_len_q` / `seq_len_kv` and the padding
  mask, the window per sequence (bottom-right alignment uses each sequence's own lengths).

Windows: FlashAttention's `(left, right)` (query i sees keys i + Lk - Lq - left ..
i + Lk - Lq + right, -1 unbounded) is cuDNN's band with `diagonal_band_left_bound = left + 1`
(cuDNN's left bound is exclusive) and `diagonal_band_right_bound = right`, aligned TOP_LEFT where
every sequence is square (the same thing there) and BOTTOM_RIGHT otherwise. Outputs and lse of
calls that share query rows are merged by the core executor.

Learnable sinks: where one call is the whole attention and this cuDNN takes them, cuDNN's own fused
`sink_token` / `dSink_token` (`fused_sinks.py`, decided and built in `prepare`); else through the
calls' merged lse after them (`unfused_sinks_reason` says why, and the row's caveat with it).
Nothing here imports `cudnn`, nor torch before a call is prepared or run (the plugin registers
without torch).
"""
from __future__ import annotations

import functools
import importlib.util
import os
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from longca_flashplan.plugin import (
    CallArgs,
    FlashPrepared,
    flash_plan_for,
    gpu_reason,
    lse_primitives,
    make_prepare_run,
    resolve_scale,
)

from .graphs import CudnnGraphs, GraphSpec, backend_version, packed_strides

ENV_BACKEND = "LONGCA_CUDNN_BACKEND"  # "frontend" or "torch": force one path
MIN_CUDNN = 90600  # cuDNN 9.6: GQA with ragged offsets, bottom-right bands with padding
MAX_HEAD_DIM = 128  # what cuDNN's fused forward and backward both take on every GPU from sm80
SINK_CUDNN = 91300  # sdpa's sink_token: "SDPA with sink_token is not supported before 9.13"
RAGGED_SINK_BACKWARD_CUDNN = 92600  # "SDPA backward with ragged offsets and a sink token requires cuDNN 9.26.0"


def torch_forced() -> bool:
    """LONGCA_CUDNN_BACKEND=torch: the torch path asked for, slow document masks included."""
    return os.environ.get(ENV_BACKEND, "").strip() == "torch"


def frontend_installed() -> bool:
    """nvidia-cudnn-frontend (module `cudnn`) is installed; found without importing it."""
    return importlib.util.find_spec("cudnn") is not None


def chosen() -> str:
    """'frontend' or 'torch': the path this process runs (fixed at import by hooks)."""
    forced = os.environ.get(ENV_BACKEND, "").strip()
    if forced in ("frontend", "torch"):
        return forced
    return "frontend" if frontend_installed() else "torch"


@functools.cache
def frontend_reason() -> str | None:
    """Why the frontend path cannot run in this process (imports `cudnn`: never call it at listing)."""
    reason = gpu_reason()
    if reason:
        return reason
    try:
        import cudnn
    except Exception as exc:  # noqa: BLE001 - any import failure is the reason
        return f"cannot import the cuDNN frontend (nvidia-cudnn-frontend): {type(exc).__name__}: {exc}"
    if not hasattr(cudnn, "pygraph"):
        return f"module `cudnn` at {getattr(cudnn, '__file__', '?')} is not nvidia-cudnn-frontend"
    try:
        version = cudnn.backend_version()  # raises when the frontend finds no libcudnn.so.9
    except Exception as exc:  # noqa: BLE001 - any failure is the reason
        return f"the cuDNN frontend cannot load the cuDNN library: {type(exc).__name__}: {exc}"
    return cudnn_version_reason(version)


def cudnn_version_reason(version: int) -> str | None:
    """Why this cuDNN (cudnn.backend_version(), e.g. 91900) cannot run the frontend path, or None."""
    if version < MIN_CUDNN:
        return f"the cuDNN frontend path needs cuDNN >= 9.6 (GQA with ragged offsets); this process loads {version}"
    if version in (91000, 91001):  # cudnn-frontend's sdpa_support_surface.h and sdpa_backward refuse every graph
        return (f"cuDNN {version}: cudnn-frontend refuses fp16/bf16 SDPA on 9.10.0/9.10.1 (known bugs); "
                "use 9.10.2 or newer")
    return None


def backend_label() -> str:
    import cudnn
    import torch

    return (f"cuDNN {cudnn.backend_version()} via cudnn-frontend {cudnn.__version__} "
            f"(SDPA graphs built in prepare; ragged layout for documents, diagonal bands for windows), "
            f"torch {torch.__version__}")


# ---------------------------------------------------------------- masks as cuDNN diagonal bands


def band_ok(len_q: int, len_k: int, left: int, right: int) -> bool:
    """Can one cuDNN call take this bottom-right FlashAttention window (the planner's window check)?

    Windows reaching above the bottom-right diagonal by a negative amount have no cuDNN band;
    a bounded window with more queries than keys needs a padding mask cuDNN has only in the
    ragged layout, so the planner cuts such a band into full blocks and causal squares instead.
    """
    if left < -1 or right < -1:
        return False
    return (left, right) == (-1, -1) or len_q <= len_k


def cudnn_bounds(left: int, right: int) -> tuple[int | None, int | None]:
    """FlashAttention's (left, right) as cuDNN's (diagonal_band_left_bound, diagonal_band_right_bound)."""
    if left < -1 or right < -1:
        raise ValueError(f"window ({left}, {right}) has no cuDNN diagonal band")
    return (None if left < 0 else left + 1), (None if right < 0 else right)


def band_settings(left: int, right: int, square: bool) -> tuple[bool, int | None, int | None]:
    """(top_left, left_bound, right_bound): TOP_LEFT alignment where it equals bottom-right."""
    left_bound, right_bound = cudnn_bounds(left, right)
    return square or (left_bound is None and right_bound is None), left_bound, right_bound


# ---------------------------------------------------------------- layouts


@dataclass
class Ragged:
    """Sequences packed back to back (cuDNN's ragged layout), from a call's cumulative lengths."""

    cu_q: np.ndarray  # (n + 1,) int, starting with 0
    cu_kv: np.ndarray

    @property
    def lens_q(self) -> np.ndarray:
        return np.diff(self.cu_q)

    @property
    def lens_kv(self) -> np.ndarray:
        return np.diff(self.cu_kv)

    @property
    def square(self) -> bool:
        """Every sequence has as many queries as keys (top-left and bottom-right agree)."""
        return bool(np.array_equal(self.lens_q, self.lens_kv))

    def offsets(self, cu: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
        """Where each sequence starts in a packed (tokens, heads, head_dim) tensor, in elements."""
        return cu.astype(np.int64) * heads * head_dim

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, position) of every packed query row: where its stats sit in (n, H, S, 1)."""
        seq = np.repeat(np.arange(len(self.lens_q)), self.lens_q)
        return seq, np.arange(int(self.cu_q[-1])) - np.repeat(self.cu_q[:-1], self.lens_q)


class DenseLayout:
    """One rectangle per batch element: tensors as the executor passes them (B, L, H, D)."""

    ragged = False

    def __init__(self, q, k):
        self.buffers: dict = {}
        self.batch, self.seqlen_q, self.seqlen_kv = q.shape[0], q.shape[1], k.shape[1]
        self.total_q = self.total_kv = 0
        self.square = self.seqlen_q == self.seqlen_kv

    def ready(self, x):
        return x if x.stride(-1) == 1 else x.contiguous()

    def strides(self, role: str, x):
        """BHSD strides of a (B, L, H, D) view (a slice of the sequence keeps the full tensor's)."""
        return x.stride(0), x.stride(2), x.stride(1), x.stride(3)

    def lse(self, stats):
        return stats.view(stats.shape[:3])

    def stats(self, lse):
        return lse.reshape(*lse.shape, 1)


class RaggedLayout:
    """A call's sequences in cuDNN's ragged layout, on the device: lengths, offsets, stats rows."""

    ragged = True

    def __init__(self, args: CallArgs, q, k):
        import torch

        heads_q, heads_kv, head_dim = q.shape[1], k.shape[1], q.shape[2]
        assert args.cu_q is not None and args.cu_k is not None  # a varlen call
        layout = Ragged(args.cu_q.cpu().numpy(), args.cu_k.cpu().numpy())
        self.args = args  # kept: the cache below is keyed by its id
        self.batch, self.seqlen_q, self.seqlen_kv = len(layout.lens_q), args.max_q, args.max_k
        self.total_q, self.total_kv = int(layout.cu_q[-1]), int(layout.cu_kv[-1])
        self.square = layout.square
        device = q.device

        def tensor(values, dtype, trailing=(1, 1, 1)):
            return torch.from_numpy(np.ascontiguousarray(values)).to(device=device, dtype=dtype).view(-1, *trailing)

        self.buffers = dict(seq_len_q=tensor(layout.lens_q, torch.int32),
                            seq_len_kv=tensor(layout.lens_kv, torch.int32),
                            offset_q=tensor(layout.offsets(layout.cu_q, heads_q, head_dim), torch.int64),
                            offset_kv=tensor(layout.offsets(layout.cu_kv, heads_kv, head_dim), torch.int64))
        seq, pos = layout.rows()
        self.row_seq, self.row_pos = (tensor(x, torch.int64, ()) for x in (seq, pos))

    def ready(self, x):
        return x.contiguous()

    def strides(self, role: str, x):
        return packed_strides(self.seqlen_kv if role in ("k", "v") else self.seqlen_q, x.shape[1], x.shape[2])

    def lse(self, stats):
        """Padded stats (n, H, S, 1) -> the executor's varlen lse (H, tokens)."""
        return stats[self.row_seq, :, self.row_pos, 0].t().contiguous()

    def stats(self, lse):
        """The executor's lse (H, tokens) -> padded stats (n, H, S, 1), zero where there is no row."""
        out = lse.new_zeros(self.batch, lse.shape[0], self.seqlen_q, 1)
        out[self.row_seq, :, self.row_pos, 0] = lse.t()
        return out


def graph_spec(backward: bool, args: CallArgs, layout, deterministic: bool = False, *, sink: bool = False,
               **tensors) -> GraphSpec:
    """The graph one call needs, from its (ready) tensors by role and its layout; `sink`: fused sinks."""
    q, k = tensors["q"], tensors["k"]
    if tensors["v"].shape[-1] != q.shape[-1]:
        raise ValueError("the cuDNN frontend path needs the same head dim for values as for queries and keys")
    top_left, left_bound, right_bound = band_settings(args.left, args.right, layout.square)
    return GraphSpec(backward=backward, dtype=str(q.dtype).replace("torch.", ""), batch=layout.batch,
                     heads_q=q.shape[-2], heads_kv=k.shape[-2], seqlen_q=layout.seqlen_q, seqlen_kv=layout.seqlen_kv,
                     head_dim=q.shape[-1], strides=tuple((r, tuple(layout.strides(r, x))) for r, x in tensors.items()),
                     ragged=layout.ragged, total_q=layout.total_q, total_kv=layout.total_kv, top_left=top_left,
                     left_bound=left_bound, right_bound=right_bound, scale=float(args.scale),
                     deterministic=backward and deterministic, sink=sink)


# ---------------------------------------------------------------- the executor's adapter


class FrontendAdapter:
    """flashplan adapter: each call's forward / backward as a cuDNN frontend graph.

    `engine` builds and executes graphs (`graphs.CudnnGraphs`; the tests pass a CPU stand-in).
    `build` builds every graph a plan needs, in `prepare`; `fwd` / `bwd` only execute them (a
    graph missing there, e.g. for other strides, is built on first use). With `sink` (the (Hq,)
    sinks as a (1, Hq, 1, 1) float32 tensor) they run the graphs with cuDNN's fused sink_token.
    """

    name = "cudnn-frontend"
    window_ok = staticmethod(band_ok)
    deterministic = False  # backward graphs with use_deterministic_algorithm (set by prepare)
    fused_sinks = False  # this prepare's sinks go through cuDNN's sink_token (set by prepare)

    def __init__(self, engine=None, layouts_kept: int = 256):
        self.engine = engine if engine is not None else CudnnGraphs()
        self._layouts: OrderedDict = OrderedDict()
        self._layouts_kept = layouts_kept

    def layout(self, args: CallArgs, q, k):
        """Dense, or the call's ragged layout (built once per call and head counts)."""
        if not args.varlen:
            return DenseLayout(q, k)
        key = (id(args), q.shape[1], k.shape[1], q.shape[2])
        layout = self._layouts.get(key)
        if layout is None or layout.args is not args:
            layout = self._layouts[key] = RaggedLayout(args, q, k)
            if len(self._layouts) > self._layouts_kept:
                self._layouts.popitem(last=False)
        self._layouts.move_to_end(key)
        return layout

    def build(self, ex, q, k, v, backward: bool, sink: bool = False) -> None:
        """Build the graphs of every call of an ExecPlan (the forward's, and the backward's if asked;
        with `sink`, the graphs with a fused sink_token)."""
        import torch

        for call in ex.calls:
            qc, kc, vc = call.pack_q(q), call.pack_k(k), call.pack_k(v)
            layout = self.layout(call.args, qc, kc)
            qc, kc, vc = (layout.ready(x) for x in (qc, kc, vc))
            # the forward writes a new contiguous output; the backward's out and dout are packed like q
            out = torch.empty(qc.shape, dtype=qc.dtype, device="meta")
            self.engine.build(graph_spec(False, call.args, layout, sink=sink, q=qc, k=kc, v=vc, o=out), q.device)
            if backward:
                self.engine.build(graph_spec(True, call.args, layout, self.deterministic, sink=sink, q=qc, k=kc,
                                             v=vc, o=qc, dO=qc), q.device)

    def fwd(self, q, k, v, args: CallArgs, sink=None):
        """(out, lse); with `sink`, the lse includes the sink (cuDNN's stats: logaddexp(lse, sink))."""
        import torch

        layout = self.layout(args, q, k)
        q, k, v = (layout.ready(x) for x in (q, k, v))
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        spec = graph_spec(False, args, layout, sink=sink is not None, q=q, k=k, v=v, o=out)
        stats = torch.empty(spec.dims("stats"), dtype=torch.float32, device=q.device)
        buffers = dict(q=q, k=k, v=v, o=out, stats=stats, **layout.buffers)
        if sink is not None:
            buffers["sink_token"] = sink
        self.engine.execute(spec, buffers)
        return out, layout.lse(stats)

    def bwd(self, dout, q, k, v, out, lse, args: CallArgs, sink=None, dsink=None):
        """(dq, dk, dv); with `sink`, the sinks' gradient is written into `dsink` (1, Hq, 1, 1) float32."""
        import torch

        layout = self.layout(args, q, k)
        q, k, v, out, dout = (layout.ready(x) for x in (q, k, v, out, dout))
        dq, dk, dv = (torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (q, k, v))
        spec = graph_spec(True, args, layout, self.deterministic, sink=sink is not None, q=q, k=k, v=v, o=out,
                          dO=dout)
        buffers = dict(q=q, k=k, v=v, o=out, dO=dout, stats=layout.stats(lse.float()), dQ=dq, dK=dk, dV=dv)
        if sink is not None:
            # cuDNN does not say whether it overwrites dSink_token or adds into it (its graph reduces over
            # every row into it): zeroed first (Hq floats), the result is right either way
            dsink.zero_()
            buffers.update(sink_token=sink, dSink_token=dsink)
        self.engine.execute(spec, dict(buffers, **layout.buffers))
        return dq, dk, dv


# ---------------------------------------------------------------- the kernel's entry points

_, plan_run = make_prepare_run(FrontendAdapter)  # plan_attention over the prepared adapter and plan


def run(prepared: FlashPrepared, q, k, v, sinks=None):
    """The plan's graphs, merged by lse; `sinks` fused into the one call's graphs where `prepare` chose
    that (`FrontendAdapter.fused_sinks`), else through the merged lse (`plan_attention`)."""
    if sinks is not None and getattr(prepared.adapter, "fused_sinks", False):
        from .fused_sinks import fused_sink_attention  # torch at import: not at plugin listing

        return fused_sink_attention(q, k, v, sinks, prepared.adapter, prepared.ex.single)
    return plan_run(prepared, q, k, v, sinks)


# ---------------------------------------------------------------- learnable sinks: fused or through the lse


def unfused_sinks_reason(ex, direction: str, version: int | None) -> str | None:
    """Why this plan's learnable sinks cannot be cuDNN's fused sink_token, or None where they can.

    A sink enters each row's softmax once, so it is fused only where one call is the whole attention
    (`ExecPlan.single`): calls sharing rows would each add it. Then cuDNN's own limits: sink_token from
    9.13, not at s_q = 1, and a ragged (document) backward with it from 9.26. `direction`: the
    problem's ("fwd" needs no backward graph); `version`: cudnn.backend_version(), None where no
    cuDNN bounds the plan (the CPU stand-in, which has every feature).
    """
    call = ex.single
    if call is None:
        if len(ex.calls) > 1:
            return f"the mask plans into {len(ex.calls)} cuDNN calls, merged by their lse"
        return "the mask's one cuDNN call gathers its rows or keys (not the whole attention in place)"
    if version is not None and version < SINK_CUDNN:
        return f"cuDNN {version} has no fused sink_token (9.13 or newer)"
    if (call.args.max_q if call.args.varlen else call.band[1] - call.band[0]) == 1:
        return "one query per sequence: cuDNN takes no sink_token at s_q = 1"
    if call.args.varlen and direction != "fwd" and version is not None and version < RAGGED_SINK_BACKWARD_CUDNN:
        return (f"the ragged (document) backward with a sink_token needs cuDNN 9.26 or newer; "
                f"this process loads {version}")
    return None


def problem_sinks_reason(problem) -> str | None:
    """`unfused_sinks_reason` of the problem's mask (its first draw) with this process's cuDNN: what
    `prepare` decided, asked again for the row's caveat. Plans the mask on the CPU, builds no graph;
    without a loadable cuDNN (CPU tests, where only the stand-in runs) the plan alone decides."""
    from longca.plugin import problem_mask

    ex = flash_plan_for(FrontendAdapter(), problem_mask(problem), 1, 1.0, "cpu")
    return unfused_sinks_reason(ex, problem.direction, backend_version())


# the graphs every prepare builds, kept across prepares (keyed by `GraphSpec`, all a graph depends on):
# cuDNN users build a graph once per configuration and execute it for every batch. A graph built
# anew for each prepare made the first, slower execution of each fresh graph part of every call on
# fresh inputs (5.8-7.7x a warm call at S=256 on the H200, read as a cached output by the kit)
PREPARED_GRAPHS = CudnnGraphs(limit=256)


def prepare(problem, mask, q, k, v, engine=None) -> FlashPrepared:
    """The plan of the mask, and every cuDNN graph it needs that no earlier prepare built, built now
    (not timed); with sinks, whether they are fused (`unfused_sinks_reason`) and the graphs for that;
    `engine`: where graphs are built and kept (default `PREPARED_GRAPHS`)."""
    adapter = FrontendAdapter(engine if engine is not None else PREPARED_GRAPHS)
    adapter.deterministic = problem.deterministic
    ex = flash_plan_for(adapter, mask, q.shape[0], resolve_scale(q, None), q.device)
    if problem.sinks:
        adapter.fused_sinks = unfused_sinks_reason(ex, problem.direction, adapter.engine.version) is None
    adapter.build(ex, q, k, v, backward=problem.direction != "fwd", sink=adapter.fused_sinks)
    return FlashPrepared(adapter, ex, None)


_SHARED = FrontendAdapter(CudnnGraphs(limit=64))  # the primitives' graphs, kept across calls
forward_lse, backward_lse = lse_primitives(lambda: _SHARED)
