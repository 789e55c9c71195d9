"""cuDNN frontend SDPA graphs: the only module that touches the `cudnn` package (nvidia-cudnn-frontend).

A `GraphSpec` says everything a graph depends on: shapes, strides, layout (dense or ragged),
the mask as cuDNN's diagonal band and the softmax scale. `CudnnGraphs` builds one graph per spec
(validate, operation graph, heuristics A then FALLBACK, support check, plans) and executes it
with a variant pack of torch tensors keyed by role: q, k, v, o, stats (forward); q, k, v, o, dO,
stats, dQ, dK, dV (backward); seq_len_q, seq_len_kv, offset_q, offset_kv (ragged layout only);
sink_token (and the backward's dSink_token output) where the spec fuses learnable sinks (`sink`).
A backward with one query and one key per sequence has no graph (cuDNN refuses s_q = s_kv = 1):
`one_pair_backward` computes it in torch.

Layout conventions (cuDNN's): tensors are described as (batch, heads, seqlen, head_dim) with
explicit strides; a ragged tensor holds its sequences back to back and its `offset_*` tensor gives
where sequence i starts, in elements; stats are float32 (batch, heads, seqlen, 1), contiguous,
natural-log logsumexp of the scaled scores (with a sink_token, the sink's term included:
logaddexp(lse, sink), which the backward graph reads back as given); sink_token and dSink_token
are float32 (1, heads_q, 1, 1). `cudnn` is imported only when a graph is built, never
at import, so listing works on any machine; this file has no other dependency at import.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - torch is imported where a graph is built
    import torch

Strides = tuple[int, int, int, int]
SINK_ROLES = ("sink_token", "dSink_token")  # one float32 logit (and its gradient) per query head
TOKEN_ROUNDING = 64  # the backward's max_total_seq_len_* are rounded up to this, as cuDNN's own tests do


@dataclass(frozen=True)
class GraphSpec:
    """Everything one cuDNN SDPA graph depends on (its cache key)."""

    backward: bool
    dtype: str  # "bfloat16" | "float16"
    batch: int  # sequences (ragged) or batch size (dense)
    heads_q: int
    heads_kv: int
    seqlen_q: int  # the S dimension: longest sequence when ragged
    seqlen_kv: int
    head_dim: int
    strides: tuple[tuple[str, Strides], ...]  # (role, BHSD strides) of q, k, v, o (and dO)
    ragged: bool  # packed sequences with offsets and a padding mask (seq_len_q / seq_len_kv)
    total_q: int = 0  # tokens of all sequences, ragged only
    total_kv: int = 0
    top_left: bool = True  # diagonal alignment: TOP_LEFT, else BOTTOM_RIGHT (per sequence)
    left_bound: int | None = None  # cuDNN diagonal_band_left_bound (exclusive), None: unbounded
    right_bound: int | None = None  # cuDNN diagonal_band_right_bound (inclusive), None: unbounded
    scale: float = 1.0
    deterministic: bool = False  # sdpa_backward's use_deterministic_algorithm (Problem.deterministic)
    sink: bool = False  # learnable sinks fused: a sink_token input (and the backward's dSink_token output)

    def stride(self, role: str) -> Strides:
        return dict(self.strides)[role]

    @property
    def one_pair(self) -> bool:
        """Every sequence is one query and one key: cuDNN's sdpa_backward refuses s_q = s_kv = 1."""
        return self.seqlen_q == 1 and self.seqlen_kv == 1

    def dims(self, role: str) -> list[int]:
        """BHSD dims of a role's tensor."""
        if role in ("k", "v", "dK", "dV"):
            return [self.batch, self.heads_kv, self.seqlen_kv, self.head_dim]
        if role == "stats":
            return [self.batch, self.heads_q, self.seqlen_q, 1]
        if role in SINK_ROLES:
            return [1, self.heads_q, 1, 1]
        return [self.batch, self.heads_q, self.seqlen_q, self.head_dim]


def packed_strides(seqlen: int, heads: int, head_dim: int) -> Strides:
    """BHSD strides of a contiguous (batch, seqlen, heads, head_dim) tensor (also a ragged one)."""
    return seqlen * heads * head_dim, head_dim, heads * head_dim, 1


def stats_strides(spec: GraphSpec) -> Strides:
    return spec.heads_q * spec.seqlen_q, spec.seqlen_q, 1, 1


def round_tokens(total: int) -> int:
    return -(-total // TOKEN_ROUNDING) * TOKEN_ROUNDING


# ---------------------------------------------------------------- graph construction


def _new_graph(cudnn, spec: GraphSpec, handle):
    io = {"bfloat16": cudnn.data_type.BFLOAT16, "float16": cudnn.data_type.HALF}[spec.dtype]
    graph = cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    return graph, io


def _inputs(cudnn, graph, spec: GraphSpec, io, roles) -> dict[str, Any]:
    """The graph's input tensors by role, with the ragged layout's offsets and lengths if any."""
    tensors = {role: graph.tensor(name=role, dim=spec.dims(role), stride=list(spec.stride(role)), data_type=io)
               for role in roles}
    if spec.ragged:
        index = dict(dim=[spec.batch + 1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT64)
        length = dict(dim=[spec.batch, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT32)
        tensors.update(offset_q=graph.tensor(name="offset_q", **index),
                       offset_kv=graph.tensor(name="offset_kv", **index),
                       seq_len_q=graph.tensor(name="seq_len_q", **length),
                       seq_len_kv=graph.tensor(name="seq_len_kv", **length))
        for role in roles:
            tensors[role].set_ragged_offset(tensors["offset_kv" if role in ("k", "v") else "offset_q"])
    return tensors


def _mask_args(cudnn, spec: GraphSpec, tensors) -> dict[str, Any]:
    """sdpa / sdpa_backward keyword arguments for the padding mask and the diagonal band."""
    align = cudnn.diagonal_alignment.TOP_LEFT if spec.top_left else cudnn.diagonal_alignment.BOTTOM_RIGHT
    args = dict(attn_scale=spec.scale, diagonal_alignment=align,
                diagonal_band_left_bound=spec.left_bound, diagonal_band_right_bound=spec.right_bound)
    if spec.ragged:
        args.update(use_padding_mask=True, seq_len_q=tensors["seq_len_q"], seq_len_kv=tensors["seq_len_kv"])
    return args


def _output(tensor, spec: GraphSpec, role: str, strides: Strides, ragged_offset=None):
    tensor.set_output(True).set_dim(spec.dims(role)).set_stride(list(strides))
    if ragged_offset is not None:
        tensor.set_ragged_offset(ragged_offset)
    return tensor


def _sink_args(cudnn, graph, spec: GraphSpec, t, roles) -> dict[str, Any]:
    """sdpa / sdpa_backward keyword arguments for fused sinks (none unless `spec.sink`), added to `t` by role."""
    if not spec.sink:
        return {}
    for role in roles:
        t[role] = graph.tensor(name=role, dim=spec.dims(role), stride=[spec.heads_q, 1, 1, 1],
                               data_type=cudnn.data_type.FLOAT)
    if "dSink_token" in roles:
        t["dSink_token"].set_output(True)  # an output the caller allocates, as dQ / dK / dV
    return {role: t[role] for role in roles}


def forward_graph(cudnn, spec: GraphSpec, handle=None):
    """(graph, tensors by role) of `sdpa` with stats (and the sink_token if `spec.sink`); not yet built."""
    graph, io = _new_graph(cudnn, spec, handle)
    t = _inputs(cudnn, graph, spec, io, ("q", "k", "v"))
    o, stats = graph.sdpa(name="sdpa", q=t["q"], k=t["k"], v=t["v"], generate_stats=True,
                          **_mask_args(cudnn, spec, t), **_sink_args(cudnn, graph, spec, t, ("sink_token",)))
    o.set_data_type(io)
    stats.set_data_type(cudnn.data_type.FLOAT)
    t["o"] = _output(o, spec, "o", spec.stride("o"), t.get("offset_q"))
    t["stats"] = _output(stats, spec, "stats", stats_strides(spec))
    return graph, t


def backward_graph(cudnn, spec: GraphSpec, handle=None):
    """(graph, tensors by role) of `sdpa_backward` reading the forward's o and stats (with `spec.sink`, the
    sink_token and a dSink_token output); not yet built."""
    graph, io = _new_graph(cudnn, spec, handle)
    t = _inputs(cudnn, graph, spec, io, ("q", "k", "v", "o", "dO"))
    t["stats"] = graph.tensor(name="stats", dim=spec.dims("stats"), stride=list(stats_strides(spec)),
                              data_type=cudnn.data_type.FLOAT)
    extra = {}
    if spec.ragged:  # bounds the workspace by the real token count instead of batch x longest sequence
        extra = dict(max_total_seq_len_q=round_tokens(spec.total_q), max_total_seq_len_kv=round_tokens(spec.total_kv))
    if spec.deterministic:  # asked for only when set: the default graph is built as before
        extra["use_deterministic_algorithm"] = True
    extra.update(_sink_args(cudnn, graph, spec, t, SINK_ROLES))
    dq, dk, dv = graph.sdpa_backward(name="sdpa_backward", q=t["q"], k=t["k"], v=t["v"], o=t["o"], dO=t["dO"],
                                     stats=t["stats"], **_mask_args(cudnn, spec, t), **extra)
    for role, tensor, seqlen, heads, offset in (("dQ", dq, spec.seqlen_q, spec.heads_q, "offset_q"),
                                                ("dK", dk, spec.seqlen_kv, spec.heads_kv, "offset_kv"),
                                                ("dV", dv, spec.seqlen_kv, spec.heads_kv, "offset_kv")):
        t[role] = _output(tensor, spec, role, packed_strides(seqlen, heads, spec.head_dim), t.get(offset))
    return graph, t


def build_plans(cudnn, graph) -> None:
    """The frontend's build sequence: checks, operation graph, heuristics A then FALLBACK, plans."""
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()


def one_pair_backward(spec: GraphSpec, buffers: dict[str, Any]) -> None:
    """The backward of a spec whose sequences are one query and one key each, in torch.

    cuDNN rejects it ("s_q = s_kv = 1 is not supported", sdpa_backward's validation); it happens
    where a crop's diagonal only touches a corner (a 1 x 1 causal square). The pair is always
    seen (the band keeps the diagonal), so with the merged o and stats it is the usual formula.
    Never with a sink: cuDNN takes no sink_token at s_q = 1, so such plans keep sinks on the lse path
    (frontend.unfused_sinks_reason).
    """
    import torch

    assert not spec.sink, "no fused sinks at s_q = 1"

    n, heads_q, heads_kv, d = spec.batch, spec.heads_q, spec.heads_kv, spec.head_dim
    group = heads_q // heads_kv
    q, o, do = (buffers[r].reshape(n, heads_q, d).float() for r in ("q", "o", "dO"))
    k, v = (buffers[r].reshape(n, heads_kv, d).float().repeat_interleave(group, dim=1) for r in ("k", "v"))
    p = torch.exp((q * k).sum(-1) * spec.scale - buffers["stats"].reshape(n, heads_q).float())
    ds = p * ((do * v).sum(-1) - (do * o).sum(-1)) * spec.scale
    buffers["dQ"].view(n, heads_q, d).copy_(ds[..., None] * k)
    buffers["dK"].view(n, heads_kv, d).copy_((ds[..., None] * q).view(n, heads_kv, group, d).sum(2))
    buffers["dV"].view(n, heads_kv, d).copy_((p[..., None] * do).view(n, heads_kv, group, d).sum(2))


# ---------------------------------------------------------------- building once, executing


_HANDLES: dict[int, Any] = {}


def backend_version() -> int | None:
    """cudnn.backend_version() (91900 for 9.19.0), or None where the frontend or libcudnn cannot load."""
    try:
        import cudnn

        return int(cudnn.backend_version())
    except Exception:  # noqa: BLE001 - no frontend, no library: no version
        return None


def handle_for(device) -> Any:
    """One cuDNN handle per GPU, created on that GPU."""
    import cudnn
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _HANDLES:
        with torch.cuda.device(index):
            _HANDLES[index] = cudnn.create_handle()
    return _HANDLES[index]


class CudnnGraphs:
    """Built graphs by spec and one shared workspace; `limit` bounds how many graphs are kept."""

    def __init__(self, limit: int | None = None):
        self._built: OrderedDict[GraphSpec, tuple[Any, dict[str, Any]]] = OrderedDict()
        self._limit = limit
        self._workspace: torch.Tensor | None = None
        self.builds = 0  # graphs built so far (prepare builds them all; a run should add none)

    def build(self, spec: GraphSpec, device) -> None:
        """Build the graph of `spec` unless it is built already."""
        if spec.backward and spec.one_pair:
            return  # no graph: one_pair_backward
        if spec in self._built:
            self._built.move_to_end(spec)
            return
        import cudnn
        import torch

        graph, tensors = (backward_graph if spec.backward else forward_graph)(cudnn, spec, handle_for(device))
        build_plans(cudnn, graph)
        self.builds += 1
        self._built[spec] = graph, tensors
        size = graph.get_workspace_size()
        if self._workspace is None or self._workspace.numel() < size:
            self._workspace = torch.empty(max(size, 1), dtype=torch.uint8, device=device)
        if self._limit is not None and len(self._built) > self._limit:
            self._built.popitem(last=False)

    @property
    def version(self) -> int | None:
        """The cuDNN these graphs run on: what prepare holds fused sinks to (frontend.unfused_sinks_reason)."""
        return backend_version()

    @property
    def specs(self) -> tuple[GraphSpec, ...]:
        """The specs whose graphs are kept, oldest first."""
        return tuple(self._built)

    def execute(self, spec: GraphSpec, buffers: dict[str, Any]) -> None:
        """Run the graph of `spec` on torch tensors keyed by role, on torch's current stream."""
        if spec.backward and spec.one_pair:
            return one_pair_backward(spec, buffers)
        import cudnn
        import torch

        device = buffers["q"].device
        self.build(spec, device)
        graph, tensors = self._built[spec]
        handle = handle_for(device)
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream(device).cuda_stream)
        graph.execute({tensors[role]: x for role, x in buffers.items()}, self._workspace, handle=handle)
