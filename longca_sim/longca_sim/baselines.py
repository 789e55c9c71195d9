"""Pricing variant for the published baselines: what MagiAttention's benchmark code does around the kernel.

The published CP figures longca is checked against (docs/cp-simulator/anchors-*.md) were produced by
MagiAttention's own implementations of Ulysses, Ring P2P, Ring All-Gather, USP and LoongTrain
(`exps/dist_attn/baselines/` of SandAI-org/MagiAttention). Their calls and transfers are the ones longca's
schedules count, but their code moves more device memory around each kernel call than longca's strategies do.
This module prices that traffic, byte for byte as read from their code, at the topology's memory bandwidth
(`Topology.hbm_gbs`), the same physics the simulator uses for longca's own merges and copies. Nothing here is
fitted: every count below is a tensor operation of their code. It is used only when validating against their
published figures (`docs/scripts/cp_validate.py`); longca's strategies, `simulate` and `recommend` never use it.

Their H100 runs used FlashAttention-3 (`backend="fa3"`), their B200 runs TransformerEngine's fused attention
(`backend="te"`; `AttnBackend` in exps/dist_attn/benchmark_conf.py). Counted (file and line of their code at
commit 2c6413571c2c: docs/cp-simulator.md section 3):

- FA3 path, around every varlen call (`_fa3_varlen_forward` / `_fa3_varlen_backward`, `baselines/utils_cp.py`):
  an unpad `torch.gather` of each input (read and write: 2 bytes moved per byte of the tensor) and a pad of each
  output (`torch.zeros` of the padded shape, then `scatter_`: 3): forward q, k, v in and out; backward q, out,
  dout, k, v in and dq, dk, dv out;
- TE path, backward of Ring P2P, USP's and LoongTrain's rings and Ring All-Gather: K and V repeated to the
  query heads (`repeat_interleave`, "we switch to computing it using MHA"), so the kernel writes MHA-shaped
  dK and dV, summed back to the KV heads (`.sum(2)`);
- Ring All-Gather (`FA3RingAGAttnFunc`, `TERingAGAttnFunc` in `baselines/ring_attn.py`): two calls a rank,
  one per half of its queries, each against the whole gathered K and V (each document's keys up to the
  half's causal bound); the forward and backward read each half of q (and dout) into a contiguous copy and
  write each half's output (and dq) back (`thd_read_half_tensor`, `_collect_result_varlen`); the backward
  zero-fills full-length bf16 dK and dV, pads each call's dK and dV to the whole sequence (FA3 path: one
  more full-length zero fill than the per-call count), adds both calls' into them (`add_`: read both, write
  one), then reorders and reduce-scatters them in bf16 (the reorder copies are the simulator's `COPY_BYTES`,
  as for longca's own); and its backward kernel time is counted per key block
  (`PublishedBaselines.gather_backward_kernel_ms` says why).

Not counted, and why: the `rearrange(...).contiguous()` before and after every all-to-all
(`_varlen_all2all_before_attn` / `_after_attn`, utils_cp.py) moves 4 bytes per byte of the collective, which
is what the simulator already charges longca's own all-to-all (`simulate.COPY_BYTES`); the float32 lse pad and
unpad (1/64 of the output's bytes at head dim 128); the ring steps' half reads (longca's crops and merges are
priced instead).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from longca.problem import Problem
from longca_cp.calls import CallTable
from longca_cp.schedule import ELEMENT_BYTES, CommOp

from .costmodel import FLOORS, TILE, KernelFit, _slice_work, call_shapes, empty_of, grid_empty_blocks, table_features

# bytes moved per byte of a tensor: `fa_varlen_thd_unpad` (torch.gather: read + write) and `fa_varlen_thd_pad`
# (torch.zeros of the padded shape: write; scatter_: read + write)
UNPAD, PAD = 2, 3
# FA3 path, per call: query-side and key-side bytes moved per byte of one such tensor (utils_cp.py)
FWD_ROWS = 1 * UNPAD + 1 * PAD  # q in, out out
FWD_KEYS = 2 * UNPAD  # k, v in
BWD_ROWS = 3 * UNPAD + 1 * PAD  # q, out, dout in; dq out
BWD_KEYS = 2 * UNPAD + 2 * PAD  # k, v in; dk, dv out
# Ring All-Gather, per rank, both paths: query-side copies of the two halves in units of the local q's bytes (a
# half read into a contiguous copy: read + write; a half's result written back: read + write)
GATHER_FWD_ROWS = 2 + 2  # q halves read, out halves written back
GATHER_BWD_ROWS = 2 * 2 + 2  # q and dout halves read, dq halves written back
GATHER_CALLS = 2  # one kernel call per half of the local queries
# ... and full-length key-side traffic in units of one full-length bf16 K (S x KV heads x head dim):
# dK and dV zero-filled (2); each call's dK and dV added into them (2 calls x 2 tensors x 3: read both, write one)
GATHER_BWD_FULL = 2 + GATHER_CALLS * 2 * 3
# FA3 path: each call pads its dK and dV to the whole sequence, where the per-call count has one pad over the
# call's keys (one more zero fill of each per rank)
FA3_GATHER_BWD_FULL = GATHER_BWD_FULL + 2
BACKENDS = ("fa3", "te")
# The source's baselines whose backward goes through its TE ring function, which repeats K and V to the query
# heads, also on a ring of one (USP and LoongTrain on one node of 8): names of the source's implementations, not a
# property of a schedule (a ring of one is priced as Ulysses' single call otherwise). Only the published-figure
# validation prices with this module; another strategy has no published baseline to price.
TE_RING_BASELINES = ("ring-p2p", "usp", "loongtrain")


def source_gather_segments(lengths: np.ndarray, world: int, rank: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The source's two FA3 Ring All-Gather calls of `rank` (`FA3RingAGAttnFunc`), per half (chunk `rank`, then
    `2W - 1 - rank`): every document's query rows and keys, as `get_cu_seqlens_on_cp_rank` and
    `generate_cu_seqlens_kv_ag_causal` compute them, each document padded to a multiple of 2W
    (`shard.get_pad_factor`); a document with no query row or no key stays in the batch at length zero
    (`generate_valid_cu_seqlens`)."""
    n = np.asarray(lengths, dtype=np.int64)
    piece = -(-n // (2 * world))
    out = []
    for chunk in (rank, 2 * world - 1 - rank):
        q = np.clip(n - chunk * piece, 0, piece)
        k = np.minimum(n, piece * (chunk + 1))
        valid = (q > 0) & (k > 0)
        out.append((np.where(valid, q, 0), np.where(valid, k, 0)))
    return out


def te_repeat_units(group: int) -> tuple[int, int, int]:
    """TE path, in units of the K (or dK) of the call's keys at its KV heads, for K and V (dK and dV) together:
    `repeat_interleave` to the query heads (read 1, write `group`), the MHA-shaped dK and dV the kernel writes
    beyond the GQA-shaped ones the fit prices (`group - 1`), their `.sum(2)` back (read `group`, write 1)."""
    return 2 * (1 + group), 2 * (group - 1), 2 * (group + 1)


@dataclass(frozen=True)
class PublishedBaselines:
    """The published baselines' extra memory traffic (`Pricing.baseline`); see the module docstring. `backend`:
    the inner path their runs used, `fa3` (H100: FlashAttention-3 varlen with unpad and pad) or `te` (B200:
    TransformerEngine's fused attention on the padded THD layout, backward on K and V repeated to MHA)."""

    backend: str = "fa3"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"published-baselines backend {self.backend!r}: one of {', '.join(BACKENDS)}")

    @property
    def empty_blocks_priced(self) -> bool:
        """Whether the empty blocks of the backward's launch grid (`costmodel.EMPTY_GRID_KERNELS`) are priced: on
        the FA3 path, whose kernel launches them (read from its code); not on the TE path, whose cuDNN kernel's
        grid longca has neither read nor measured, so its calls are priced without them."""
        return self.backend == "fa3"

    def call_ms(self, problem: Problem, rows: np.ndarray, keys: np.ndarray, heads_q: int, heads_kv: int,
                hbm_bytes_per_ms: float) -> tuple[np.ndarray, np.ndarray]:
        """(forward, backward) ms of the copies around each call of a rank: `rows`, `keys` its query and key
        tokens, `heads_q`, `heads_kv` the rank's heads."""
        elem = problem.batch * problem.head_dim * ELEMENT_BYTES[problem.dtype]
        q = rows * heads_q * elem
        k = keys * heads_kv * elem
        if self.backend == "fa3":
            return (FWD_ROWS * q + FWD_KEYS * k) / hbm_bytes_per_ms, (BWD_ROWS * q + BWD_KEYS * k) / hbm_bytes_per_ms
        zero = np.zeros_like(q)
        if problem.strategy not in TE_RING_BASELINES or heads_kv >= heads_q:
            return zero, zero  # TE's Ulysses calls the kernel on its inputs as they are; Ring All-Gather: gather_ms
        repeat, written, summed = te_repeat_units(heads_q // heads_kv)
        return zero, (repeat + written + summed) * k / hbm_bytes_per_ms

    def gather_ms(self, problem: Problem, hbm_bytes_per_ms: float) -> tuple[float, float]:
        """(forward, backward) ms per rank of Ring All-Gather's half copies and full-length dK/dV traffic."""
        elem = problem.batch * problem.head_dim * ELEMENT_BYTES[problem.dtype]
        local_q = problem.seqlen // problem.world_size * problem.heads_q * elem
        full_k = problem.seqlen * problem.heads_kv * elem
        if self.backend == "fa3":
            full = FA3_GATHER_BWD_FULL
        else:  # K and V repeated once; each call's MHA-shaped dK and dV written for every key and summed back
            repeat, written, summed = te_repeat_units(problem.heads_q // problem.heads_kv)
            full = GATHER_BWD_FULL + repeat + GATHER_CALLS * (written + summed)
        fwd = GATHER_FWD_ROWS * local_q
        bwd = GATHER_BWD_ROWS * local_q + full * full_k
        return fwd / hbm_bytes_per_ms, bwd / hbm_bytes_per_ms

    def gather_comm(self, problem: Problem, ops: list[CommOp]) -> list[CommOp]:
        """Ring All-Gather's transfers as the source makes them: dK and dV reduce-scattered in the inputs' dtype
        (`reduce_scatter_along_first_dim` on the bf16 sums), where longca's own are float32."""
        size = ELEMENT_BYTES[problem.dtype]
        return [replace(op, nbytes=op.nbytes * size // 4, what=f"dk,dv ({problem.dtype})")
                if op.kind == "reduce_scatter" else op for op in ops]

    def gather_backward_kernel_ms(self, table: CallTable, buf: np.ndarray, ranks: np.ndarray, heads_q: int,
                                  fit: KernelFit, lengths: np.ndarray, world: int) -> np.ndarray:
        """Per rank (calls of rank b: `buf == b`), the change in Ring All-Gather's backward kernel time when its
        calls are priced as the source makes them: `GATHER_CALLS` calls, and each priced by key blocks. The
        backward of FlashAttention-style kernels runs one thread block per key block of 128 (FA3 and TE's cuDNN
        alike; FA3's hdim-128 backward tiles 64 query rows x 128 keys), loads its keys, sweeps the query rows
        that see them and writes that block's dK and dV: its fixed cost is per key block. The fit's per-row-block
        and floor terms were fitted on one-GPU rows whose segments have as many keys as queries, where a row
        block and a key block are the same count; the gathered calls have a few queries of each document
        against every key of its prefix, so here those terms are counted per key block instead. Nothing is
        refitted: the same coefficients, attributed to the unit the backward kernel launches.

        And the empty blocks of the backward's launch grid (`costmodel.EMPTY_GRID_KERNELS`) are the source's two
        calls', every document of the pack in each (`source_gather_segments`; `lengths` the documents, `ranks`
        the global ranks of the pass), in place of longca's own call's that the plain price counts; on the TE
        path none (`empty_blocks_priced`)."""
        count = len(ranks)
        grid: np.ndarray = np.zeros(count)
        if self.empty_blocks_priced:
            source = np.array([sum(grid_empty_blocks(q, k, heads_q)
                                   for q, k in source_gather_segments(lengths, world, int(rank))) for rank in ranks])
            own = np.bincount(buf, weights=empty_of(call_shapes(table), heads_q), minlength=count)
            grid = fit.empty_block_ms * (source - own)
        if not len(table):
            return grid
        by_rows = fit.price(table_features(table, heads_q))
        s = table.slices
        lk = (s[:, 3] - s[:, 2]).astype(float)
        nk = -(-lk // TILE)
        _, base, _, _ = _slice_work(s)
        floors = [np.maximum(0.0, nk * TILE * TILE - base)]
        floors += [np.maximum(0.0, int(f.split()[1]) * lk * TILE - base) for f in FLOORS[1:]]
        feats = table_features(table, heads_q)
        first = table.start[:-1]
        feats[:, 1] = np.add.reduceat(nk, first) * heads_q
        feats[:, 6:] = np.add.reduceat(np.column_stack(floors), first, axis=0) * heads_q
        by_keys = fit.price(feats)
        calls = np.bincount(buf, minlength=count)
        return (np.bincount(buf, weights=by_keys - by_rows, minlength=count)
                + np.maximum(0, GATHER_CALLS - calls) * fit.launch_ms + grid)
