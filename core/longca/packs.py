"""The fixed document packs of MagiAttention's CP benchmark, rebuilt exactly (the `magi-packs` sampler).

Why: the published CP figures are the mean over the first 20 of these packs of each pack's TFLOP/s, so a
prediction compared with them should be made on the same packs, not on fresh draws of the same histogram
(the `magi` sampler). What the source does (exps/dist_attn/benchmark/utils.py, `DatasetSampler`, with
`SAMPLE_CONFIG` and `SEED` of exps/dist_attn/benchmark_conf.py; read at commit 2c6413571c2c):

- every document of its histogram at its bin's midpoint, as many as the bin counts; a document is cut into
  pieces of `pack_len x chunk_ratio` tokens and its rest (the pieces first, then every rest, bin by bin);
- one `numpy.random.default_rng(seed)` (seed 42) shuffles that list;
- the shuffled list is packed in order into packs of `pack_len` tokens, a piece that does not fit split
  and its remainder opening the next pack: pack k is tokens [k P, (k + 1) P) of the list laid end to end,
  which is how it is computed here (one cumulative sum instead of the source's loop);
- the same rng shuffles the list of packs, and the benchmark takes them in that order.

Draw i of a problem is pack `first + i`. A zero-length piece (only when P x chunk_ratio is not a whole
number) holds no token and is left out.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .errors import LongcaError

# the source lists every piece of its histogram (13.5 million documents, 24 billion tokens): short chunks
# make that list too long to hold; 1,024 tokens gives at most ~37 million pieces
MIN_CHUNK = 1024
KEPT = 32  # packs kept per (length, ratio, seed), doubled when a later pack is asked for


def source_pieces(total: int, chunk_ratio: float) -> np.ndarray:
    """The source's list of pieces before its shuffle, int32 as it builds it."""
    from .samplers import load_magi

    lengths, counts = load_magi()
    lengths, counts = lengths.astype(np.int32), counts.astype(np.int32)
    chunk = total * chunk_ratio  # a float, as the source's `pack_len * chunk_ratio`
    whole = lengths // chunk
    full = np.repeat(chunk, int((whole * counts).sum())).astype(np.int32)
    rests = lengths % chunk
    keep = rests > 0
    return np.concatenate([full, np.repeat(rests[keep], counts[keep]).astype(np.int32)])


@lru_cache(maxsize=8)
def source_packs(total: int, chunk_ratio: float = 0.25, seed: int = 42, kept: int = KEPT) -> tuple[np.ndarray, ...]:
    """The first `kept` packs of `total` tokens in the source's order (each an int64 array of lengths)."""
    if not 0 < chunk_ratio <= 1:
        raise LongcaError(f"magi-packs sampler: chunk_ratio must be in (0, 1], got {chunk_ratio}")
    if total * chunk_ratio < MIN_CHUNK:
        raise LongcaError(f"magi-packs sampler: {total} tokens x chunk_ratio {chunk_ratio} is below {MIN_CHUNK} "
                          f"tokens a chunk; the source's list of pieces would be too long to hold (use the magi "
                          f"sampler for short lengths)")
    rng = np.random.default_rng(seed)
    pieces = source_pieces(total, chunk_ratio)
    rng.shuffle(pieces)
    ends = np.cumsum(pieces, dtype=np.int64)
    count = int(ends[-1]) // total
    order = np.arange(count)
    rng.shuffle(order)  # the same draws as the source's shuffle of its list of packs (same length)
    return tuple(pack_at(ends, int(k), total) for k in order[:kept])


def pack_at(ends: np.ndarray, k: int, total: int) -> np.ndarray:
    """Pack k of pieces laid end to end (`ends`: their cumulative sum): the pieces, cut at k x total and
    (k + 1) x total, that lie between; what packing in order with the overflow carried gives."""
    lo, hi = k * total, (k + 1) * total
    s, e = np.searchsorted(ends, lo, side="right"), np.searchsorted(ends, hi, side="left")
    lengths = np.diff(np.concatenate([[lo], ends[s:e], [hi]]))
    return lengths[lengths > 0]


def pack_count(total: int, chunk_ratio: float = 0.25) -> int:
    """How many packs of `total` tokens the source's list makes."""
    return int(source_pieces(total, chunk_ratio).astype(np.int64).sum()) // total


def sample_magi_packs(total: int, rng: np.random.Generator, chunk_ratio: float = 0.25, shuffle_seed: int = 42,
                      first: int = 0, draw: int = 0) -> np.ndarray:
    """Pack `first + draw` of the source's packs of `total` tokens (the rng is not used: the packs are fixed)."""
    index = int(first) + int(draw)
    if index < 0:
        raise LongcaError(f"magi-packs sampler: first must be >= 0, got {first}")
    kept = KEPT
    while kept <= index:
        kept *= 2
    packs = source_packs(int(total), float(chunk_ratio), int(shuffle_seed), kept)
    if index >= len(packs):
        raise LongcaError(f"magi-packs sampler: pack {index} asked for, the source's list makes {len(packs)} packs "
                          f"of {total} tokens")
    return packs[index].copy()
