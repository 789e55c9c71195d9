"""Simulating a CP case at any world size: every rank's calls priced, transfers priced, each strategy's overlap.

Per rank, the strategy's schedule (`schedule`) gives the calls of each step and the transfers.
Calls are priced by the inner kernel's fit (`costmodel`, from measured one-GPU rows), plus the
lse merges and gradient sums the code does in float32 (bytes counted from its tensor operations,
priced at the device's memory bandwidth); transfers by the topology (`topology`). The overlap
rules are the code's:

- ring steps (Ring P2P, USP, LoongTrain): the next block is posted before the step's calls and
  waited for after them, so a step ends at max(own compute, block arrival from the previous rank);
  in the backward a block's dK/dV follow it one step behind; the outer ring of the double ring is
  posted at the start of an outer step and waited for after its inner ring;
- all-to-all (Ulysses, USP, LoongTrain) and all-gather / reduce-scatter (Ring All-Gather): exposed,
  and a collective starts when its last member arrives.

All ranks of a head group make the same calls, so one per ring position is priced. Times are
simulated on a common clock from a synchronised start; a rank's time is when it finishes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from longca.errors import LongcaError, UnsupportedError
from longca.flops import attention_flops
from longca.plugins import Registry, get_registry
from longca.problem import Problem, build_mask
from longca.results import ResultRow, new_row
from longca_cp.accounting import balance_of, median_balance, rank_totals, schedule_of
from longca_cp.calls import buffer_passes, buffers_table, key_buffers
from longca_cp.layout import document_bounds
from longca_cp.schedule import ELEMENT_BYTES, GatherSchedule, RankCalls, RingSchedule, Schedule, merged_calls
from longca_runner.timing import L2_FLUSH_BYTES

from .baselines import PublishedBaselines
from .costmodel import (
    DECLARED_SPEEDS,
    KernelFit,
    call_shapes,
    declared_fit,
    empty_of,
    kernel_fit,
    table_features,
    tflops,
)
from .ringcalls import FeaturedCalls, from_table, ring_passes
from .topology import Topology

# the float32 lse merge of one call (`merge.merge_`), per output element, as the bytes whose time at the
# preset's HBM figure it takes: measured on an H200 (docs/results/h200/cp-merge, benchmarks/cp_merge.py:
# the slope over 2,048-8,192 rows at 64 heads, 8.7e-9 ms per element = 33 bytes at 3.84 TB/s; its tensor
# operations alone count 18, the rest is the small lse operations and the kernels' own efficiency; the
# ~0.03 ms fixed per merge is in the per-call overhead); a gradient sum and a cast by their counted bytes
MERGE_BYTES, GRAD_BYTES, CAST_BYTES = 33, 10, 6
# the merge longca's measured CP rows (docs/results/h200x2, docs/context-parallel) ran: before this one, a
# float copy of the output and separate multiply and add, measured the same way at 45 bytes (34 counted);
# those rows are re-simulated (and the per-call overhead fitted from them) with it
MERGE_BYTES_MEASURED_ROWS = 45
# device-memory bytes moved per byte of a collective by the copies around it in `comm`: the all-to-all
# makes its input contiguous and permutes its output (read + write each); the all-gather's output is
# reordered into the global sequence (`Layout.assemble`); the reduce-scatter's input is stacked first
COPY_BYTES = {"all_to_all": 4, "all_gather": 2, "reduce_scatter": 2}
# ring positions (or gather ranks) are built and priced together, a pass at a time, as many as hold this many
# candidate (slice, query run, key run) triples (`calls.buffer_passes`): memory holds one pass's calls, so this
# bounds the peak (a few hundred bytes a candidate), and passes whose arrays stay in the CPU's cache run faster
# (1.5-2x for doc_zigzag rings at 64K candidates against 512K); the numbers do not depend on it
PASS_CANDIDATES = 1 << 16


@dataclass
class Pricing:
    """How calls and transfers are priced. `call_overhead_ms`: the host and bookkeeping cost of each
    inner call beyond a lone one (cropping, packing, the Python of the step), per direction; fitted
    from measured two-GPU rows (`costmodel.fit_call_overhead`). `merge_bytes`: memory traffic per output
    element of one lse merge (the code's, `MERGE_BYTES`; `MERGE_BYTES_MEASURED_ROWS` for rows measured
    before the compiled merge). `baseline`: the published baselines' extra copies (`baselines`), only to
    validate against their published figures; None for longca's own strategies."""

    fwd: KernelFit
    bwd: KernelFit
    topology: Topology
    calibrated: bool = False
    call_overhead_ms: dict[str, float] | None = None
    merge_bytes: int = MERGE_BYTES
    baseline: PublishedBaselines | None = None


def _step_times(rc: RankCalls, pricing: Pricing, problem: Problem) -> tuple[np.ndarray, np.ndarray, float]:
    """(forward ms per step, backward ms per step, share of kernel time inside the fitted range)."""
    if "table" not in rc.features:
        rc.features["table"] = table_features(rc.table, rc.heads_q)
    feats = rc.features["table"]
    if "shapes" not in rc.features:
        rc.features["shapes"] = call_shapes(rc.table)
    kernel_f = pricing.fwd.price(feats)
    kernel_b = pricing.bwd.price(feats)
    if pricing.baseline is None or pricing.baseline.empty_blocks_priced:  # (`baselines`: not on the TE path)
        kernel_b = kernel_b + pricing.bwd.empty_block_ms * empty_of(rc.features["shapes"], rc.heads_q)
    t = rc.table
    rows = (t.q1 - t.q0).astype(float)
    keys = (t.k1 - t.k0).astype(float)
    elem = problem.batch * problem.head_dim
    local_rows = problem.seqlen / (problem.world_size / max(1, problem.heads_q // rc.heads_q))
    single = len(t) == 1 and rows[0] == local_rows  # one call over every row: kept as it is, no merge
    hbm = pricing.topology.hbm_gbs * 1e6  # bytes per ms
    order = np.lexsort((np.arange(len(t)), rc.step, t.qi))
    first = np.zeros(len(t), dtype=bool)  # the first call on a query run copies, the later ones merge
    first[order[np.r_[True, t.qi[order][1:] != t.qi[order][:-1]]] if len(t) else order] = True
    per_row = np.where(first, CAST_BYTES, pricing.merge_bytes)
    merge = 0.0 if single else per_row * rows * rc.heads_q * elem / hbm
    grads = 0.0 if single else GRAD_BYTES * (rows * rc.heads_q + 2 * keys * rc.heads_kv) * elem / hbm
    if pricing.baseline is not None:  # the published baselines' copies around each call (`baselines`)
        copy_f, copy_b = pricing.baseline.call_ms(problem, rows, keys, rc.heads_q, rc.heads_kv, hbm)
        merge, grads = merge + copy_f, grads + copy_b
    extra = pricing.call_overhead_ms or {}
    over_f, over_b = (0.0, 0.0) if single else (extra.get("fwd", 0.0), extra.get("bwd", 0.0))
    fwd = np.bincount(rc.step, weights=kernel_f + merge + over_f, minlength=rc.steps)
    bwd = np.bincount(rc.step, weights=kernel_b + grads + over_b, minlength=rc.steps)
    if not single and len(t):
        fwd[-1] += CAST_BYTES * local_rows * rc.heads_q * elem / hbm
    priced = kernel_f.sum() + kernel_b.sum()
    inside = pricing.fwd.inside(feats, rc.features["shapes"])
    share = float((kernel_f[inside].sum() + kernel_b[inside].sum()) / priced) if priced > 0 else 1.0
    return fwd, bwd, share


def _kernel_prices(feats: np.ndarray, shapes: np.ndarray, bounds: np.ndarray, pricing: Pricing,
                   heads_q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kernel ms of every call, forward and backward (with the backward's empty blocks, `costmodel.empty_of`),
    and each rank's share inside the fitted range (ranks' calls from `bounds[b]` to `bounds[b + 1]`), each rank's
    priced and summed on its own as `_step_times` does (a matrix product's last bits depend on the rows it is
    given)."""
    nbuf = len(bounds) - 1
    kernel_f = np.concatenate([np.zeros(0)] + [pricing.fwd.price(feats[bounds[b]:bounds[b + 1]]) for b in range(nbuf)])
    kernel_b = np.concatenate([np.zeros(0)] + [pricing.bwd.price(feats[bounds[b]:bounds[b + 1]]) for b in range(nbuf)])
    if pricing.baseline is None or pricing.baseline.empty_blocks_priced:
        kernel_b = kernel_b + pricing.bwd.empty_block_ms * empty_of(shapes, heads_q)
    inside = pricing.fwd.inside(feats, shapes)
    share = np.ones(nbuf)
    for b in range(nbuf):
        lo, hi = bounds[b], bounds[b + 1]
        kf, kb, ins = kernel_f[lo:hi], kernel_b[lo:hi], inside[lo:hi]
        priced = kf.sum() + kb.sum()
        share[b] = float((kf[ins].sum() + kb[ins].sum()) / priced) if priced > 0 else 1.0
    return kernel_f, kernel_b, share


def _buffer_step_times(t: FeaturedCalls, step: np.ndarray, nbuf: int, nsteps: int, heads: tuple[int, int],
                       pricings: list[Pricing], problem: Problem,
                       cache: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_step_times` of the calls of many ranks at once (call i made by rank `t.buf[i]`, calls grouped by rank),
    for every pricing: (forward ms (pricings, ranks, steps), backward ms, share (pricings, ranks)). Call for call
    and sum for sum the same arithmetic as `_step_times` of each rank's own calls, so the same numbers.
    `heads`: (query, KV) heads of a rank. `cache`: a dict kept for one pass of calls: its kernel prices per query
    heads, shared by schedules of other windows."""
    heads_q, heads_kv = heads
    n = len(pricings)
    buf = t.buf
    feats = t.unit * heads_q
    feats[:, 0] = t.unit[:, 0]
    rows = (t.q1 - t.q0).astype(float)
    keys = (t.k1 - t.k0).astype(float)
    elem = problem.batch * problem.head_dim
    local_rows = problem.seqlen / (problem.world_size / max(1, problem.heads_q // heads_q))
    count = np.bincount(buf, minlength=nbuf)
    bounds = np.concatenate([[0], np.cumsum(count)])
    first_call = np.minimum(bounds[:-1], max(len(t) - 1, 0))
    single = (count == 1) & (rows[first_call] == local_rows if len(t) else False)  # one call over every row
    single_call = single[buf]
    order = np.argsort(t.qi * nsteps + step, kind="stable")  # by query run, then step, then call
    first = np.zeros(len(t), dtype=bool)  # the first call on a query run copies, the later ones merge
    first[order[np.r_[True, t.qi[order][1:] != t.qi[order][:-1]]] if len(t) else order] = True
    cell = buf * nsteps + step
    fwd, bwd, share = np.zeros((n, nbuf, nsteps)), np.zeros((n, nbuf, nsteps)), np.ones((n, nbuf))
    cache = {} if cache is None else cache
    for i, pricing in enumerate(pricings):
        if (heads_q, i) not in cache:
            cache[heads_q, i] = _kernel_prices(feats, t.shapes, bounds, pricing, heads_q)
        kernel_f, kernel_b, share[i] = cache[heads_q, i]
        hbm = pricing.topology.hbm_gbs * 1e6  # bytes per ms
        per_row = np.where(first, CAST_BYTES, pricing.merge_bytes)
        merge = np.where(single_call, 0.0, per_row * rows * heads_q * elem / hbm)
        grads = np.where(single_call, 0.0, GRAD_BYTES * (rows * heads_q + 2 * keys * heads_kv) * elem / hbm)
        if pricing.baseline is not None:  # the published baselines' copies around each call (`baselines`)
            copy_f, copy_b = pricing.baseline.call_ms(problem, rows, keys, heads_q, heads_kv, hbm)
            merge, grads = merge + copy_f, grads + copy_b
        extra = pricing.call_overhead_ms or {}
        over_f = np.where(single_call, 0.0, extra.get("fwd", 0.0))
        over_b = np.where(single_call, 0.0, extra.get("bwd", 0.0))
        fwd[i] = np.bincount(cell, weights=kernel_f + merge + over_f, minlength=nbuf * nsteps).reshape(nbuf, nsteps)
        bwd[i] = np.bincount(cell, weights=kernel_b + grads + over_b, minlength=nbuf * nsteps).reshape(nbuf, nsteps)
        fwd[i, ~single & (count > 0), -1] += CAST_BYTES * local_rows * heads_q * elem / hbm
    return fwd, bwd, share


def _ring_forward(c: np.ndarray, start: np.ndarray, sched: RingSchedule, x_in, x_out, prev_in, prev_out):
    """End time of every position; `c` (steps, positions) or (steps, kernels, positions) for several at once (steps
    first: each step's times lie together in memory). The step loop writes into buffers it keeps (the same
    arithmetic as new arrays, without allocating them)."""
    s = np.broadcast_to(start, c.shape[1:]).copy()
    w = sched.window
    x_in, x_out = x_in[prev_in], x_out[prev_out]  # what reaches each position from its previous one
    arrived = np.empty_like(s)
    for o in range(sched.windows):
        posted_outer = s.copy()
        for t in range(w):
            if t + 1 < w:  # the next block arrives when the previous position had it, plus the transfer
                np.take(s, prev_in, axis=-1, out=arrived)
                arrived += x_in
            s += c[o * w + t]
            if t + 1 < w:
                np.maximum(s, arrived, out=s)
        if o + 1 < sched.windows:
            s = np.maximum(s, posted_outer[..., prev_out] + x_out)
    return s


def _ring_backward(c: np.ndarray, start: np.ndarray, sched: RingSchedule, x_in, x_out, prev_in, prev_out):
    """As the forward, plus each block's dK/dV sum sent after its step and waited for after the next."""
    s = np.broadcast_to(start, c.shape[1:]).copy()
    w, windows = sched.window, sched.windows
    x_in, x_out = x_in[prev_in], x_out[prev_out]
    outer_sum: np.ndarray | None = None
    arrived, summed = np.empty_like(s), np.empty_like(s)
    done = (np.empty_like(s), np.empty_like(s))  # each step's end, in turn (the previous one is `sent`)
    for o in range(windows):
        posted_outer = s.copy()
        sent: np.ndarray | None = None
        for t in range(w):
            d = done[t % 2]
            np.add(s, c[o * w + t], out=d)
            if sent is not None:
                np.take(sent, prev_in, axis=-1, out=summed)
                summed += x_in
                np.maximum(d, summed, out=d)
            sent = d if w > 1 else None
            if t + 1 < w:
                np.take(s, prev_in, axis=-1, out=arrived)
                arrived += x_in
                np.maximum(d, arrived, out=s)
            else:
                s[...] = d
        if sent is not None:
            s = np.maximum(s, sent[..., prev_in] + x_in)
        if outer_sum is not None:
            s = np.maximum(s, outer_sum[..., prev_out] + x_out)
        if windows > 1:
            outer_sum = s.copy()
        if o + 1 < windows:
            s = np.maximum(s, posted_outer[..., prev_out] + x_out)
    if outer_sum is not None:
        s = np.maximum(s, outer_sum[..., prev_out] + x_out)
    return s


def _op_ms(ops, topo: Topology, phase: str, kind: str, ring: str = "") -> float:
    """Exposed time of these collectives, with the copies the code makes around each (`COPY_BYTES`)."""
    hbm = topo.hbm_gbs * 1e6
    return sum((topo.op_ms(op) + COPY_BYTES.get(op.kind, 0) * op.nbytes / hbm) * op.count for op in ops
               if op.phase == phase and op.kind == kind and (not ring or op.ring == ring))


def _position_comm(sched: RingSchedule,
                   topo: Topology) -> tuple[dict[str, np.ndarray], dict[tuple[str, str], np.ndarray]]:
    """Per position, the slowest rank of its head group: the exposed all-to-all time of each phase, and per (phase,
    ring) the time of one transfer step on its link to the next. In the backward, a block and its dK/dV sum travel
    on the same link at the same time, so both take the time of their bytes together. A rank's ops differ from
    another's only by the ranks they name, and a price depends on those only through their nodes (how many nodes
    its head group spans, whether each ring's next rank is on its node): one rank of each such class is priced."""
    r, h = sched.ring_size, sched.head_degree
    node = np.array([topo.node(rank) for rank in range(sched.world)])
    group = node.reshape(r, h)
    spans = np.repeat(1 + (np.diff(np.sort(group, axis=1), axis=1) != 0).sum(axis=1), h)  # nodes of its head group
    nexts = sched.next_ranks()
    same = [node == node[nexts[ring]] if ring in nexts else np.zeros(sched.world, dtype=bool)
            for ring in ("inner", "outer")]
    keys = np.stack([spans, same[0], same[1]], axis=1).astype(np.int64)
    classes, first, which = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    a2a_rank = {phase: np.zeros(len(classes)) for phase in ("fwd", "bwd")}
    link_rank = {(phase, ring): np.zeros(len(classes)) for phase in ("fwd", "bwd") for ring in ("inner", "outer")}
    for k, rep in enumerate(first):
        ops = sched.comm(int(rep))
        for phase in ("fwd", "bwd"):
            a2a_rank[phase][k] = _op_ms(ops, topo, phase, "all_to_all")
            for ring in ("inner", "outer"):
                mine = [op for op in ops if op.phase == phase and op.ring == ring]
                if mine:
                    total = sum(op.nbytes for op in mine)
                    link_rank[phase, ring][k] = topo.op_ms(type(mine[0])(phase, "p2p", "", total, mine[0].ranks))
    which = which.reshape(-1)
    a2a = {phase: v[which].reshape(r, h).max(axis=1) for phase, v in a2a_rank.items()}
    links = {key: v[which].reshape(r, h).max(axis=1) for key, v in link_rank.items()}
    return a2a, links


def _timeline(run, c: np.ndarray, sched: RingSchedule, x_in, x_out, prev_in, prev_out, a2a, frac):
    start = a2a * frac
    return run(c, start, sched, x_in, x_out, prev_in, prev_out) + a2a * (1 - frac)


class _Pricer:
    """Prices a schedule for several inner kernels at once (`Schedule.priced_by`): one rank's calls are
    built, priced by every kernel and dropped before the next rank's, so memory holds one rank's calls."""

    def __init__(self, pricings: list[Pricing]) -> None:
        self.pricings = pricings

    def ring(self, sched: RingSchedule) -> list[dict[str, Any]]:
        return self.rings([sched])[0]

    def rings(self, scheds: list[RingSchedule]) -> list[list[dict[str, Any]]]:
        """Several ring schedules of one mask draw, ring size and layout (their calls are the same; the step
        order differs with the windows, the heads per rank with the head degree): each position's calls are
        built and their features computed once, then priced for every schedule and kernel."""
        first = scheds[0]
        if any((s.ring_size, s.layout_kind, s.problem.seqlen) != (first.ring_size, first.layout_kind,
                                                                    first.problem.seqlen)
               or s.mask_slices is not first.mask_slices for s in scheds):
            raise LongcaError("rings(): the schedules must share the mask draw, ring size and layout")
        r, n = first.ring_size, len(self.pricings)
        # per schedule: forward and backward ms (steps, kernels, positions), steps first as the timelines read them;
        # each position's sum over its steps (kernels, positions) forward and backward; the shares
        costs = [(np.zeros((r, n, r)), np.zeros((r, n, r)), np.zeros((n, r)), np.zeros((n, r)), np.zeros((n, r)))
                 for _ in scheds]
        for positions, calls in ring_passes(first.mask_slices, first.layout_kind, first.problem.seqlen,
                                            first.ring_layout.runs, PASS_CANDIDATES):
            count = np.bincount(calls.buf, minlength=len(positions))  # calls per position
            sums = np.diff(np.concatenate([[0], np.cumsum(calls.area)])[np.concatenate([[0], np.cumsum(count)])])
            cache: dict = {}
            at = slice(int(positions[0]), int(positions[-1]) + 1)  # (a block of positions: copied whole)
            for sched, (cf, cb, sum_f, sum_b, shares) in zip(scheds, costs, strict=True):
                heads = (sched.problem.heads_q // sched.head_degree,
                         sched.problem.heads_kv * sched.kv_repeat // sched.head_degree)
                step = sched.step_of(positions[calls.buf], calls.source)
                f, b, sh = _buffer_step_times(calls, step, len(positions), r, heads, self.pricings, sched.problem,
                                              cache)
                cf[:, :, at], cb[:, :, at] = np.moveaxis(f, -1, 0), np.moveaxis(b, -1, 0)
                sum_f[:, at], sum_b[:, at], shares[:, at] = f.sum(axis=2), b.sum(axis=2), sh
                for k, p in enumerate(positions):
                    sched.totals[int(p) * sched.head_degree] = (int(sums[k]), int(count[k]), heads[0])
            del calls
        return [self._ring_times(s, *c) for s, c in zip(scheds, costs, strict=True)]

    def _ring_times(self, sched: RingSchedule, cf: np.ndarray, cb: np.ndarray, sum_f: np.ndarray, sum_b: np.ndarray,
                    shares: np.ndarray) -> list[dict[str, Any]]:
        """Per kernel, each phase's (end, busy, end with free transfers) per rank: `cf`, `cb` (steps, kernels,
        positions), `sum_f`, `sum_b` each position's busy time (kernels, positions)."""
        topo = self.pricings[0].topology
        r, n = sched.ring_size, len(self.pricings)
        w = sched.window
        pos = np.arange(r)
        a, b_ = np.divmod(pos, w)
        prev_in = a * w + (b_ - 1) % w
        prev_out = ((a - 1) % sched.windows) * w + b_
        a2a, link = _position_comm(sched, topo)
        ops0 = sched.comm(0)
        before = {"fwd": _op_ms([op for op in ops0 if op.what in ("q", "k,v")], topo, "fwd", "all_to_all"),
                  "bwd": _op_ms([op for op in ops0 if op.what == "dout"], topo, "bwd", "all_to_all")}
        total0 = {phase: _op_ms(ops0, topo, phase, "all_to_all") for phase in ("fwd", "bwd")}
        frac = {phase: (before[phase] / total0[phase] if total0[phase] > 0 else 0.0) for phase in ("fwd", "bwd")}
        links = {phase: (link[phase, "inner"], link[phase, "outer"]) for phase in ("fwd", "bwd")}
        zero = np.zeros(r)
        timelines = {}
        for phase, c, busy, run in (("fwd", cf, sum_f, _ring_forward), ("bwd", cb, sum_b, _ring_backward)):
            x_in, x_out = links[phase]  # (every kernel at once)
            end = _timeline(run, c, sched, x_in, x_out, prev_in, prev_out, a2a[phase], frac[phase])
            # the same steps with every transfer free: what is left of waiting is waiting for slower ranks
            alone = _timeline(run, c, sched, zero, zero, prev_in, prev_out, zero, 0.0)
            timelines[phase] = (end, busy, alone)
        outs = []
        for i in range(n):
            out: dict[str, Any] = {}
            for phase, (end, busy, alone) in timelines.items():
                out[phase] = tuple(np.repeat(x, sched.head_degree) for x in (end[i], busy[i], alone[i]))
            out["measured_share"] = float(np.mean(shares[i]))
            outs.append(out)
        return outs

    def gather(self, sched: GatherSchedule) -> list[dict[str, Any]]:
        problem = sched.problem
        topo = self.pricings[0].topology
        world, n = sched.world, len(self.pricings)
        cf, cb, shares = np.zeros((n, world)), np.zeros((n, world)), np.zeros((n, world))
        runs, whole = sched.layout.runs, [((0, problem.seqlen),)]
        buffers = key_buffers(whole)
        lengths = np.diff(document_bounds(sched.mask_slices, problem.seqlen))
        for chunk in buffer_passes(sched.mask_slices, runs, buffers, PASS_CANDIDATES):
            ranks = np.arange(chunk.start, chunk.stop)
            table, buf, source = buffers_table(sched.mask_slices, [runs[k] for k in ranks], whole, buffers,
                                               merged_calls(sched.layout_kind))
            calls = from_table(table, buf, source)
            f, b, shares[:, ranks] = _buffer_step_times(calls, np.zeros(len(table), dtype=np.int64), len(ranks), 1,
                                                        (problem.heads_q, problem.heads_kv), self.pricings, problem)
            cf[:, ranks], cb[:, ranks] = f.sum(axis=2), b.sum(axis=2)
            for i, pricing in enumerate(self.pricings):  # the published baselines' calls (`baselines`)
                if pricing.baseline is not None:
                    cb[i, ranks] += pricing.baseline.gather_backward_kernel_ms(table, buf, ranks, problem.heads_q,
                                                                               pricing.bwd, lengths, world)
            count = np.bincount(buf, minlength=len(ranks))
            sums = np.diff(np.concatenate([[0], np.cumsum(table.area)])[np.concatenate([[0], np.cumsum(count)])])
            for k, rank in enumerate(ranks):
                sched.totals[int(rank)] = (int(sums[k]), int(count[k]), problem.heads_q)
        ops = sched.comm(0)
        gather_f = _op_ms(ops, topo, "fwd", "all_gather")
        gather_b = _op_ms(ops, topo, "bwd", "all_gather")
        scatter = _op_ms(ops, topo, "bwd", "reduce_scatter")
        outs = []
        for i in range(n):
            base, rs = self.pricings[i].baseline, scatter
            if base is not None:  # the published baselines' half copies, full-length dK/dV, bf16 reduce-scatter
                extra_f, extra_b = base.gather_ms(problem, topo.hbm_gbs * 1e6)
                cf[i], cb[i] = cf[i] + extra_f, cb[i] + extra_b
                rs = _op_ms(base.gather_comm(problem, ops), topo, "bwd", "reduce_scatter")
            fwd = gather_f + cf[i]
            bwd = np.full(world, (gather_b + cb[i]).max() + rs)  # the reduce-scatter waits for the last rank
            outs.append({"fwd": (fwd, cf[i], cf[i].copy()), "bwd": (bwd, cb[i], np.full(world, cb[i].max())),
                         "measured_share": float(np.mean(shares[i]))})
        return outs


def peak_memory(sched: Schedule, direction: str) -> int:
    """Modelled peak bytes per GPU (`Schedule.peak_memory`): inputs, the strategy's buffers and accumulators."""
    return sched.peak_memory(direction)


def harness_memory(sched: Schedule, direction: str) -> int:
    """Bytes `longca dist-run` holds on every rank besides the strategy (`cp.measure._sample`): the global
    q, k, v it dispatches from and, for a backward, the global dout, and the buffer the timing loop zeroes
    to flush the L2 cache (`timing.L2_FLUSH_BYTES`, kept once the process has timed anything, so in the
    peak of every row but a process's first). A training step holds none of them, so
    `peak_memory` (what `recommend` checks) leaves them out; a measured row's peak includes them. Where
    every rank holds one run, the dispatched shards are views of these (`Layout.take`), which
    `peak_memory` counts already: they are not counted twice."""
    p = sched.problem
    per_token = p.batch * p.head_dim * ELEMENT_BYTES[p.dtype]
    heads = p.heads_q + 2 * p.heads_kv + (p.heads_q if direction != "fwd" else 0)
    held = per_token * p.seqlen * heads
    if all(len(runs) == 1 for runs in sched.layout.runs):
        held -= per_token * (p.seqlen // p.world_size) * heads
    return int(held + L2_FLUSH_BYTES)


def simulate_mask(problem: Problem, mask, options: dict[str, Any], pricing: Pricing,
                  registry: Registry | None = None) -> dict[str, Any]:
    """Figures of one mask draw: per-phase critical and mean times, compute, balance."""
    return simulate_schedule(schedule_of(problem, mask, options, registry), mask.area, pricing)


def simulate_schedule(sched: Schedule, area: float, pricing: Pricing) -> dict[str, Any]:
    """`simulate_mask` of a schedule already built."""
    return simulate_schedule_all(sched, area, [pricing])[0]


def flags_of(sched: Schedule, topology: Topology, peak_bytes: int) -> list[str]:
    """What a training engineer should know about a case beyond its time: KV heads replicated by the head
    split, an all-to-all that crosses nodes, modelled memory above the GPU's."""
    p = sched.problem
    out = []
    if sched.kv_repeat > 1:
        out.append(f"KV heads replicated x{sched.kv_repeat} (head degree {sched.head_degree} > "
                   f"{p.heads_kv} KV heads)")
    if sched.head_degree > 1 and topology.node(0) != topology.node(sched.head_degree - 1):
        out.append(f"all-to-all across nodes ({sched.head_degree} ranks, {topology.gpus_per_node} per node)")
    if peak_bytes > topology.memory_gb * 1e9:
        out.append(f"over memory: {peak_bytes / 1e9:.0f} GB modelled per GPU > {topology.memory_gb:.0f} GB")
    return out


def simulate_schedule_all(sched: Schedule, area: float, pricings: list[Pricing]) -> list[dict[str, Any]]:
    """The figures of one schedule for each pricing (inner kernels priced in one pass over the ranks)."""
    return _figures(sched, area, pricings, sched.priced_by(_Pricer(pricings)))


def simulate_schedules_all(items: list[tuple[Schedule, float]], pricings: list[Pricing]) -> list[list[dict[str, Any]]]:
    """`simulate_schedule_all` of several (schedule, mask area) pairs: ring schedules of the same mask draw, ring
    size and layout share one pass over their positions (each position's calls built and featured once)."""
    pricer = _Pricer(pricings)
    fresh = [sched for sched, _ in items if sched.memo is None]
    for sched in fresh:  # every rank's transfers are read several times: kept while these are priced
        sched.memo = {}
    sims: dict[int, list[dict[str, Any]]] = {}
    groups: dict[tuple, list[int]] = {}
    for j, (sched, _) in enumerate(items):
        if isinstance(sched, RingSchedule):
            groups.setdefault((id(sched.mask_slices), sched.ring_size, sched.layout_kind), []).append(j)
        else:
            sims[j] = sched.priced_by(pricer)
    for index in groups.values():
        for j, sim in zip(index, pricer.rings([items[j][0] for j in index]), strict=True):  # type: ignore[misc]
            sims[j] = sim
    out = [_figures(sched, area, pricings, sims[j]) for j, (sched, area) in enumerate(items)]
    for sched in fresh:
        sched.memo = None
    return out


def _figures(sched: Schedule, area: float, pricings: list[Pricing], sims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    problem = sched.problem
    balance = balance_of(rank_totals(sched))
    peaks = {phase: sched.peak_memory(phase) for phase in ("fwd", "bwd")}
    flags = flags_of(sched, pricings[0].topology, max(peaks.values()))
    outs = []
    for sim in sims:
        out: dict[str, Any] = {"balance": balance, "measured_share": sim["measured_share"], "flags": flags}
        for phase in ("fwd", "bwd"):
            end, compute, alone = sim[phase]
            critical = int(np.argmax(end))
            # repeated steps: a rank's next step meets the others in its first transfer, so every rank
            # waits for the slowest (the measured rows' ms_max_rank and mean agree within 1 %)
            mean = float(end.max()) if problem.world_size > 1 else float(end.mean())
            waiting_ranks = max(0.0, float(alone[critical] - compute[critical]))
            out[phase] = {"ms_max": float(end.max()), "ms_mean": mean, "critical_rank": critical,
                          "compute_ms": float(compute[critical]),
                          "exposed_ms": float(end[critical] - compute[critical]),
                          "wait_data_ms": max(0.0, float(end[critical] - compute[critical]) - waiting_ranks),
                          "wait_ranks_ms": waiting_ranks, "peak_mem_bytes": peaks[phase]}
        out["area"] = area
        outs.append(out)
    return outs


def pricing_for(kernel: str, fits, topology: Topology, calibrated: bool = False,
                call_overhead_ms: dict[str, float] | None = None, merge_bytes: int = MERGE_BYTES) -> Pricing:
    """The kernel's fits on `topology`; on a GPU longca has no rows of (`DECLARED_SPEEDS`, e.g. the `b200`
    preset) at its declared speed, the fit's kernel then named `kernel@gpu`."""
    fwd, bwd = kernel_fit(fits, kernel, "fwd"), kernel_fit(fits, kernel, "bwd")
    if topology.name in DECLARED_SPEEDS:
        fwd, bwd = declared_fit(fwd, topology.name), declared_fit(bwd, topology.name)
    return Pricing(fwd, bwd, topology, calibrated, call_overhead_ms, merge_bytes)


def default_pricing(kernel: str, topology: Topology, fit_path=None, results=None, calibrated: bool = False) -> Pricing:
    """Pricing from the shipped fit file (or `fit_path`), kernels refitted from `results` rows if given."""
    from .costmodel import fit_rows, load_fits, read_rows

    fits, doc = load_fits(fit_path)
    if results:
        fits = {**fits, **fit_rows(read_rows(results))}
    overhead = {k: float(v) for k, v in (doc.get("call_overhead_ms") or {}).items() if k in ("fwd", "bwd")}
    return pricing_for(kernel, fits, topology, calibrated, overhead)


# how the figures of several mask draws become one: `median` of each figure over draws (as longca's measured rows
# report document masks), or `mean`: the mean over draws of each draw's figure, which is how MagiAttention's CP
# benchmark reports a cell (exps/dist_attn/run_benchmark.py: each pack's TFLOP/s from the slowest rank's median
# iteration, `perf_dict_total["flops"]` summed over its packs and divided by `mask_nums`)
AGGREGATES = {"median": np.median, "mean": np.mean}


def aggregate_of(name: str):
    """The reduction over draws a name gives; an unknown name is an input error."""
    if name not in AGGREGATES:
        raise LongcaError(f"unknown aggregate {name!r}; known: {', '.join(AGGREGATES)}")
    return AGGREGATES[name]


def simulate(problem: Problem, options: dict[str, Any], pricing: Pricing, samples: int = 1,
             registry: Registry | None = None, aggregate: str = "median") -> ResultRow:
    """A simulated result row (`simulated: true`) for `problem.direction`, with every figure in `sim`.

    `ms_median` is the mean rank time and `tflops` TFLOP/s per GPU from it, as in measured CP
    rows; `ms_max_rank` the critical rank's. Document masks: over `samples` draws, each figure the
    median over draws, or with `aggregate="mean"` the mean over draws of each draw's figure.
    """
    reduce = aggregate_of(aggregate)
    registry = registry or get_registry()
    row = new_row(problem, status="ok", strategy_options=dict(options), simulated=True)
    row.case_id = f"sim-{row.case_id}"  # never taken for the measured row of the same case
    try:
        draws = samples if registry.mask(problem.mask).uses_documents else 1
        results = [simulate_mask(problem, build_mask(problem, i, registry), options, pricing, registry)
                   for i in range(max(1, draws))]
    except UnsupportedError as exc:
        row.status, row.reason = "unsupported", str(exc)
        return row
    phases = ("fwd", "bwd") if problem.direction == "fwdbwd" else (problem.direction,)
    med = lambda f: float(reduce([f(r) for r in results]))  # noqa: E731
    per_gpu = lambda r, ph: attention_flops(r["area"], problem.heads_q, problem.head_dim, problem.batch,  # noqa: E731
                                            ph) / problem.world_size
    area = float(np.mean([r["area"] for r in results]))
    flops = attention_flops(area, problem.heads_q, problem.head_dim, problem.batch, problem.direction)
    sim: dict[str, Any] = {"measured_share": med(lambda r: r["measured_share"]), "flags": results[0]["flags"],
                           "comm": "calibrated" if pricing.calibrated else f"preset {pricing.topology.name}",
                           "gpus_per_node": pricing.topology.gpus_per_node, "fit_kernel": pricing.fwd.kernel}
    if aggregate != "median":  # rows of the default keep their old fields
        sim["aggregate"] = aggregate
    for phase in ("fwd", "bwd"):
        figures: dict[str, Any] = {key: med(lambda r, k=key, ph=phase: r[ph][k])
                                   for key in ("ms_max", "ms_mean", "compute_ms", "exposed_ms", "wait_data_ms",
                                               "wait_ranks_ms")}
        figures["critical_rank"] = int(results[0][phase]["critical_rank"])
        figures["peak_mem_bytes"] = int(results[0][phase]["peak_mem_bytes"])
        # as measured rows: the median (or mean) over draws of each draw's own FLOPs / time
        figures["tflops"] = med(lambda r, ph=phase: tflops(per_gpu(r, ph), r[ph]["ms_mean"]))
        figures["tflops_slowest"] = med(lambda r, ph=phase: tflops(per_gpu(r, ph), r[ph]["ms_max"]))
        sim[phase] = figures
    total = lambda r, key: sum(r[p][key] for p in phases)  # noqa: E731
    for name, value in dict(area=area, flops=flops, ms_median=med(lambda r: total(r, "ms_mean")),
                            ms_max_rank=med(lambda r: total(r, "ms_max")), samples=len(results),
                            tflops=med(lambda r: tflops(sum(per_gpu(r, p) for p in phases), total(r, "ms_mean"))),
                            peak_mem_bytes=max(sim[p]["peak_mem_bytes"] for p in phases),
                            balance=median_balance([r["balance"] for r in results]), sim=sim).items():
        setattr(row, name, value)
    return row


def check_world(world: int) -> None:
    if not 1 <= world <= 1024:
        raise LongcaError(f"world size {world} is outside 1-1,024")


def resolve_for(problem: Problem, options: dict[str, Any], gpus_per_node: int,
                registry: Registry | None = None) -> dict[str, Any]:
    """The strategy's options as a torchrun launch on nodes of `gpus_per_node` would resolve them.

    The defaults of USP and LoongTrain keep the all-to-all on one node through LOCAL_WORLD_SIZE.
    """
    import os

    from longca_runner.cp.measure import resolve

    saved = os.environ.get("LOCAL_WORLD_SIZE")
    os.environ["LOCAL_WORLD_SIZE"] = str(min(gpus_per_node, problem.world_size))
    try:
        return resolve(problem, options, registry)
    finally:
        if saved is None:
            del os.environ["LOCAL_WORLD_SIZE"]
        else:
            os.environ["LOCAL_WORLD_SIZE"] = saved


@dataclass
class Grid:
    """What `longca simulate` runs: strategies x world sizes for one mask, lengths and heads."""

    strategies: list[str]
    world_sizes: list[int]
    mask: str
    inner: str
    heads_q: int
    heads_kv: int
    head_dim: int = 128
    seqlen: int | None = None  # global; or
    seqlen_per_rank: int | None = None
    dtype: str = "bfloat16"
    direction: str = "fwdbwd"
    sampler: str = "auto"
    seed: int = 0
    batch: int = 1
    samples: int = 3
    options: dict[str, Any] | None = None
    sampler_params: dict[str, Any] | None = None
    aggregate: str = "median"  # over draws: `AGGREGATES`

    def problems(self) -> list[Problem]:
        out = []
        for world in self.world_sizes:
            check_world(world)
            seqlen = self.seqlen if self.seqlen else (self.seqlen_per_rank or 0) * world
            for strategy in self.strategies:
                out.append(Problem(kernel=self.inner, mask=self.mask, seqlen=seqlen, heads_q=self.heads_q,
                                   heads_kv=self.heads_kv, head_dim=self.head_dim, batch=self.batch,
                                   dtype=self.dtype, direction=self.direction, device="cuda", sampler=self.sampler,
                                   sampler_params=dict(self.sampler_params or {}), seed=self.seed,
                                   strategy=strategy, world_size=world))
        return out


def simulate_grid(grid: Grid, pricing: Pricing, registry: Registry | None = None) -> list[ResultRow]:
    """One simulated row per (world size, strategy); options each strategy declares are passed to it."""
    registry = registry or get_registry()
    rows = []
    for problem in grid.problems():
        declared = registry.strategy(problem.strategy).options
        given = {k: v for k, v in (grid.options or {}).items() if k in declared or len(grid.strategies) == 1}
        options = resolve_for(problem, given, pricing.topology.gpus_per_node, registry)
        rows.append(simulate(problem.with_(strategy_options=options), options, pricing, grid.samples, registry,
                             grid.aggregate))
    return rows
