"""What a strategy does on every rank, without a process group: its calls per step and its communication.

A `Schedule` is built from the problem, the mask and the resolved options by the strategy's own
`schedule` function (`CPStrategySpec.schedule`). The strategy's `prepare` builds its plan from
the same object (layouts, the ring's step order, every call's slices), so the accounting of a
1,024-rank run and a real run on two GPUs come from one piece of code. The bytes of every
collective and send/recv are listed per rank as `CommOp`s; tests/test_cp_schedule.py compares
them with what the real strategies hand to torch.distributed (`comm.recording`).

Two families:

- `RingSchedule` (Ulysses, Ring P2P, USP, LoongTrain): `head_degree` U consecutive ranks share a
  ring position through an all-to-all; R = W / U positions form a ring cut into `windows`
  windows. All U ranks of a position make the same calls, on Hq / U query heads.
- `GatherSchedule` (Ring All-Gather): each rank's query runs against the whole gathered K/V.

Memory is proportional to the number of calls of one rank at a time, never to S².
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from longca.problem import Problem

from .calls import Call, CallTable, key_buffers, pair_table, sources_table
from .layout import Layout, make_layout, subdivide

_built: ContextVar[list[Any] | None] = ContextVar("longca_cp_schedules_built", default=None)


@contextmanager
def capturing() -> Iterator[list[Any]]:
    """The schedules built inside the block. A strategy's `prepare` builds its plan from one, so a
    measured case's accounting reuses it instead of building the same schedule again."""
    built: list[Any] = []
    token = _built.set(built)
    try:
        yield built
    finally:
        _built.reset(token)


def _note(schedule: Any) -> None:
    built = _built.get()
    if built is not None:
        built.append(schedule)


_LAYOUTS: list[tuple[tuple[str, int, int, int], np.ndarray | None, Layout]] = []  # the last few built
_LAYOUTS_KEPT = 16


def shared_layout(kind: str, seqlen: int, parts: int, mask_slices: np.ndarray | None, degree: int = 1) -> Layout:
    """`make_layout`, each part then `subdivide`d into `degree`: the same layout object for schedules of the same
    mask (the same slices object), length, ring size and layout (a layout is immutable). `recommend` builds
    dozens of schedules of one mask draw that share a ring size; a 1,024-part doc_zigzag takes a tenth of a second."""
    key = (kind, seqlen, parts, degree)
    for k, m, layout in _LAYOUTS:
        if k == key and m is mask_slices:
            return layout
    layout = make_layout(kind, seqlen, parts, mask_slices) if degree == 1 else subdivide(
        shared_layout(kind, seqlen, parts, mask_slices), degree)
    _LAYOUTS.append((key, mask_slices, layout))
    del _LAYOUTS[:-_LAYOUTS_KEPT]
    return layout


ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
COLLECTIVES = ("all_to_all", "all_gather", "reduce_scatter", "p2p")


@dataclass(frozen=True)
class CommOp:
    """One kind of transfer a rank makes, `count` times, in one direction of the pass.

    `nbytes` is the size as NCCL's tests define it: a p2p send's bytes; an all-to-all's per-rank
    buffer; an all-gather's output (all ranks' shards); a reduce-scatter's input. `ranks` are the
    global ranks of the group (for p2p: this rank and its peer). `overlapped`: posted before the
    compute it hides behind (ring steps), else exposed.
    """

    phase: str  # "fwd" or "bwd"
    kind: str  # one of COLLECTIVES
    what: str  # e.g. "q", "k,v", "dk,dv (float32)"
    nbytes: int
    ranks: tuple[int, ...]
    count: int = 1
    overlapped: bool = False
    ring: str = ""  # "inner" / "outer" for ring transfers

    @property
    def group_size(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True)
class RankCalls:
    """The calls of one rank: the table, the step of each call, and the query heads they run on."""

    table: CallTable
    step: np.ndarray
    heads_q: int
    heads_kv: int
    steps: int
    features: dict = field(default_factory=dict, compare=False, repr=False)  # the cost model's, made once

    def calls_of_step(self, step: int) -> list[Call]:
        return self.table.calls(self.step == step)


def merged_calls(layout_kind: str) -> bool:
    """Whether a layout's calls are one per (query buffer, key buffer): the per-document layout holds two
    pieces of every document, so per-run calls would be thousands a step; its implementations (TE's THD
    path) make one varlen call over all documents instead. The other layouts call per pair of runs."""
    return layout_kind == "doc_zigzag"


def kv_repeat(heads_q: int, heads_kv: int, degree: int) -> int:
    """How many times each KV head is repeated so `degree` ranks each get whole KV heads."""
    return degree // math.gcd(heads_kv, degree)


def _dims(problem: Problem) -> tuple[int, int]:
    return problem.batch * problem.head_dim, ELEMENT_BYTES[problem.dtype]


def _io_bytes(p: Problem, direction: str) -> int:
    """q, k, v and out of a rank's share (and, for a backward, dout, the gradients and the lse)."""
    e, bd = ELEMENT_BYTES[p.dtype], p.batch * p.head_dim
    local = p.seqlen // p.world_size
    inputs = bd * local * (2 * p.heads_q + 2 * p.heads_kv) * e
    if direction != "fwd":
        inputs += bd * local * (2 * p.heads_q + 2 * p.heads_kv) * e + 4 * local * p.heads_q * p.batch
    return inputs


class Pricer(Protocol):
    """What prices a schedule (`longca_sim.simulate`): each schedule type calls its own method of it."""

    def ring(self, schedule: RingSchedule) -> Any: ...

    def gather(self, schedule: GatherSchedule) -> Any: ...


@dataclass
class RingSchedule:
    """Head parallelism of degree U around a single or double ring (see `longca_cp.ring`)."""

    problem: Problem
    mask_slices: np.ndarray
    head_degree: int
    windows: int
    layout_kind: str
    ring_layout: Layout = field(init=False)
    layout: Layout = field(init=False)
    _buffers: tuple | None = field(init=False, default=None)
    memo: dict | None = field(default=None, repr=False)  # a dict: keep every rank's calls (pricing them often)
    # a dict: keep every position's call table; schedules of one mask, ring size and layout may share it
    # (their calls are the same, only the step order differs with the windows)
    tables: dict | None = field(default=None, repr=False)
    totals: dict = field(default_factory=dict, repr=False)  # rank -> (area, calls, heads) of each rank_calls made

    def __post_init__(self) -> None:
        world = self.problem.world_size
        self.ring_size = world // self.head_degree
        self.ring_layout = shared_layout(self.layout_kind, self.problem.seqlen, self.ring_size, self.mask_slices)
        self.layout = shared_layout(self.layout_kind, self.problem.seqlen, self.ring_size, self.mask_slices,
                                    self.head_degree)
        self.kv_repeat = kv_repeat(self.problem.heads_q, self.problem.heads_kv, self.head_degree)
        _note(self)

    @property
    def world(self) -> int:
        return self.problem.world_size

    def priced_by(self, pricer: Pricer) -> Any:
        return pricer.ring(self)

    def peak_memory(self, direction: str) -> int:
        """Modelled peak bytes per GPU in a training step: inputs, the strategy's buffers and accumulators (not
        the kernel's workspace)."""
        p = self.problem
        e, bd = ELEMENT_BYTES[p.dtype], p.batch * p.head_dim
        u, block = self.head_degree, p.seqlen // self.ring_size
        hq, hkv = p.heads_q // u, p.heads_kv * self.kv_repeat // u
        heads_sharded = bd * block * (2 * hq + 2 * hkv) * e if u > 1 else 0  # q, k, v, out after the all-to-all
        # while one tensor goes through `comm._seq_to_head`: its contiguous send buffer and the all-to-all's
        # output, before the reshape copy that is kept (the largest is q's)
        transient = 2 * bd * block * hq * e if u > 1 else 0
        ring_kv = 3 * 2 * bd * block * hkv * e if self.ring_size > 1 else 0  # block in hand, in flight, received
        # float32 output accumulator (and dq, dK/dV sums): with a ring of one, a rank's one call covers every
        # row and key, and `merge.OutputAccumulator` / `GradAccumulator` keep its results as they are
        acc = bd * block * hq * 4 if self.ring_size > 1 else 0
        if direction != "fwd":
            acc += bd * block * hq * 4 + 5 * 2 * bd * block * hkv * 4 if self.ring_size > 1 else 0
            heads_sharded *= 2  # the gradients of the head-sharded tensors
        return int(_io_bytes(p, direction) + heads_sharded + transient + ring_kv + acc)

    @property
    def window(self) -> int:
        return self.ring_size // self.windows

    def position(self, rank: int) -> tuple[int, int]:
        """(ring position, index in its head group) of a rank: rank = position * U + index."""
        return divmod(rank, self.head_degree)

    def source(self, position: int, o: int, t: int) -> int:
        """The ring position whose K/V block `position` holds at outer step o, inner step t."""
        w = self.window
        a, b = divmod(position, w)
        return ((a - o) % self.windows) * w + (b - t) % w

    def step_of(self, position: int, source: np.ndarray) -> np.ndarray:
        """The step o * w + t at which `position` holds each source's block (inverse of `source`)."""
        w = self.window
        a, b = divmod(position, w)
        sa, sb = np.divmod(source, w)
        return ((a - sa) % self.windows) * w + (b - sb) % w

    def position_calls(self, position: int) -> tuple[CallTable, np.ndarray]:
        """The calls of a position against every source block, and each call's source."""
        if self.tables is not None and position in self.tables:
            return self.tables[position]
        if self._buffers is None:
            self._buffers = key_buffers(self.ring_layout.runs)
        out = sources_table(self.mask_slices, self.ring_layout.runs[position], self.ring_layout.runs,
                            self._buffers, merged_calls(self.layout_kind))
        if self.tables is not None:
            self.tables[position] = out
        return out

    def calls_by_source(self, position: int) -> dict[int, list[Call]]:
        """What `ring.RingPlan` holds: source position -> its calls (local q buffer x that block)."""
        table, source = self.position_calls(position)
        return {j: table.calls(source == j) for j in range(self.ring_size)}

    def rank_calls(self, rank: int) -> RankCalls:
        position = self.position(rank)[0]
        if self.memo is not None and position in self.memo:
            return self.memo[position]
        table, source = self.position_calls(position)
        p = self.problem
        out = RankCalls(table, self.step_of(position, source), p.heads_q // self.head_degree,
                        p.heads_kv * self.kv_repeat // self.head_degree, self.ring_size)
        self.totals[rank] = (int(table.area.sum()), len(table), out.heads_q)
        if self.memo is not None:
            self.memo[position] = out
        return out

    def classes(self) -> Iterator[tuple[int, list[int]]]:
        """(representative rank, ranks with the same calls): the U ranks of each ring position."""
        for position in range(self.ring_size):
            yield position * self.head_degree, [position * self.head_degree + u for u in range(self.head_degree)]

    def peers(self, rank: int) -> dict[str, tuple[int, int]]:
        """Global (next, previous) rank of the inner and outer rings."""
        position, u = self.position(rank)
        w, u_deg = self.window, self.head_degree
        a, b = divmod(position, w)
        out = {}
        if w > 1:
            out["inner"] = ((a * w + (b + 1) % w) * u_deg + u, (a * w + (b - 1) % w) * u_deg + u)
        if self.windows > 1:
            out["outer"] = ((((a + 1) % self.windows) * w + b) * u_deg + u,
                            (((a - 1) % self.windows) * w + b) * u_deg + u)
        return out

    def next_ranks(self) -> dict[str, np.ndarray]:
        """Per ring ("inner", "outer"), every rank's next rank: `peers(rank)[ring][0]` for all ranks at once."""
        rank = np.arange(self.world)
        position, u = np.divmod(rank, self.head_degree)
        w, u_deg = self.window, self.head_degree
        a, b = np.divmod(position, w)
        out = {}
        if w > 1:
            out["inner"] = (a * w + (b + 1) % w) * u_deg + u
        if self.windows > 1:
            out["outer"] = (((a + 1) % self.windows) * w + b) * u_deg + u
        return out

    def comm_classes(self) -> Iterator[tuple[int, np.ndarray]]:
        """(representative rank, ranks): ranks whose `comm` lists are the same but for the ranks they name (the
        same kinds, sizes, counts and group sizes): here every rank, so totals of bytes need one rank's list."""
        yield 0, np.arange(self.world)

    def comm(self, rank: int) -> list[CommOp]:
        if self.memo is None:
            return self._comm(rank)
        key = ("comm", rank)
        if key not in self.memo:
            self.memo[key] = self._comm(rank)
        return self.memo[key]

    def _comm(self, rank: int) -> list[CommOp]:
        p = self.problem
        bd, e = _dims(p)
        u_deg, ring = self.head_degree, self.ring_size
        local, block = p.seqlen // self.world, p.seqlen // ring
        hkv = p.heads_kv * self.kv_repeat
        position, _ = self.position(rank)
        head_group = tuple(position * u_deg + i for i in range(u_deg))
        q_bytes, kv_bytes = bd * local * p.heads_q * e, bd * local * hkv * e
        block_kv = 2 * bd * block * (hkv // u_deg) * e  # the K and V of one ring block, as sent
        block_dkv = 2 * bd * block * (hkv // u_deg) * 4  # their float32 gradient sums
        w, windows = self.window, self.windows
        peers = self.peers(rank)

        def ring_ops(phase: str) -> list[CommOp]:
            ops = []
            if w > 1:
                ops.append(CommOp(phase, "p2p", "k,v", block_kv, (rank, peers["inner"][0]), windows * (w - 1),
                                  True, "inner"))
            if windows > 1:
                ops.append(CommOp(phase, "p2p", "k,v", block_kv, (rank, peers["outer"][0]), windows - 1, True,
                                  "outer"))
            if phase == "bwd" and w > 1:
                ops.append(CommOp(phase, "p2p", "dk,dv (float32)", block_dkv, (rank, peers["inner"][0]),
                                  windows * w, True, "inner"))
            if phase == "bwd" and windows > 1:
                ops.append(CommOp(phase, "p2p", "dk,dv (float32)", block_dkv, (rank, peers["outer"][0]), windows,
                                  True, "outer"))
            return ops

        if u_deg == 1:
            return ring_ops("fwd") + ring_ops("bwd")
        a2a = lambda phase, what, nbytes, count=1: CommOp(phase, "all_to_all", what, nbytes, head_group, count)  # noqa: E731
        return ([a2a("fwd", "q", q_bytes), a2a("fwd", "k,v", kv_bytes, 2)] + ring_ops("fwd")
                + [a2a("fwd", "out", q_bytes), a2a("bwd", "dout", q_bytes)] + ring_ops("bwd")
                + [a2a("bwd", "dq", q_bytes), a2a("bwd", "dk,dv", kv_bytes, 2)])


@dataclass
class GatherSchedule:
    """All-gather K/V, each rank's query runs against the keys they need, reduce-scatter dK/dV."""

    problem: Problem
    mask_slices: np.ndarray
    layout_kind: str
    layout: Layout = field(init=False)
    memo: dict | None = field(default=None, repr=False)
    totals: dict = field(default_factory=dict, repr=False)  # rank -> (area, calls, heads) of each rank_calls made

    def __post_init__(self) -> None:
        self.layout = shared_layout(self.layout_kind, self.problem.seqlen, self.problem.world_size, self.mask_slices)
        _note(self)

    head_degree = 1  # no head parallelism: every rank runs every head
    kv_repeat = 1

    @property
    def world(self) -> int:
        return self.problem.world_size

    def priced_by(self, pricer: Pricer) -> Any:
        return pricer.gather(self)

    def peak_memory(self, direction: str) -> int:
        """Modelled peak bytes per GPU: inputs, the gathered K/V (and float32 dK/dV sums), the accumulators."""
        p = self.problem
        e, bd = ELEMENT_BYTES[p.dtype], p.batch * p.head_dim
        local = p.seqlen // p.world_size
        backward = direction != "fwd"
        gathered = 2 * bd * p.seqlen * p.heads_kv * e * 2  # K and V gathered, and their reordered copies
        sums = 2 * bd * p.seqlen * p.heads_kv * 4 * 2 if backward else 0  # float32 dK/dV and the stacked copy
        acc = bd * local * p.heads_q * 4 * (2 if backward else 1)
        return int(_io_bytes(p, direction) + gathered + sums + acc)

    def _table(self, rank: int):
        return pair_table(self.mask_slices, self.layout.runs[rank], [(0, self.problem.seqlen)],
                          merged_calls(self.layout_kind))

    def calls(self, rank: int) -> list[Call]:
        return self._table(rank).calls()

    def rank_calls(self, rank: int) -> RankCalls:
        if self.memo is not None and rank in self.memo:
            return self.memo[rank]
        table = self._table(rank)
        out = RankCalls(table, np.zeros(len(table), dtype=np.int64), self.problem.heads_q, self.problem.heads_kv, 1)
        self.totals[rank] = (int(table.area.sum()), len(table), out.heads_q)
        if self.memo is not None:
            self.memo[rank] = out
        return out

    def classes(self) -> Iterator[tuple[int, list[int]]]:
        for rank in range(self.world):
            yield rank, [rank]

    def comm_classes(self) -> Iterator[tuple[int, np.ndarray]]:
        """As `RingSchedule.comm_classes`: every rank's transfers have the same sizes."""
        yield 0, np.arange(self.world)

    def comm(self, rank: int) -> list[CommOp]:
        p = self.problem
        if self.world == 1:
            return []
        bd, e = _dims(p)
        everyone = tuple(range(self.world))
        kv_all = bd * p.seqlen * p.heads_kv * e
        dkv_all = bd * p.seqlen * p.heads_kv * 4
        return [CommOp("fwd", "all_gather", "k,v", kv_all, everyone, 2),
                CommOp("bwd", "all_gather", "k,v", kv_all, everyone, 2),
                CommOp("bwd", "reduce_scatter", "dk,dv (float32)", dkv_all, everyone, 2)]


Schedule = RingSchedule | GatherSchedule
