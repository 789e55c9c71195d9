"""Document-length samplers: corpus distributions shipped as package data, uniform, fixed, auto.

Bucket convention: a bucket "[a,b)" is half-open, so a length is drawn uniformly from a..b-1
(the paper's code draws b inclusive); a draw of 0 becomes 1. Each document is clipped to the
tokens still unfilled, so the last one is usually truncated and the lengths sum to the total.
"""
from __future__ import annotations

import json
from functools import cache
from importlib import resources

import numpy as np

from .errors import LongcaError
from .hookspecs import hookimpl
from .packs import MIN_CHUNK, sample_magi_packs
from .specs import SamplerSpec

CORPORA = {
    "pile": "The Pile (LongCA-bench distribution); auto uses it up to 12K tokens",
    "prolong64k": "ProLong 64K mix (LongCA-bench distribution); auto uses it up to 64K tokens",
    "prolong512k": "ProLong 512K mix (LongCA-bench distribution); auto uses it beyond 64K tokens",
}
AUTO_THRESHOLDS = ((12 * 1024, "pile"), (64 * 1024, "prolong64k"))


@cache
def load_buckets(corpus: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lows, highs, probabilities) of a shipped distribution, probabilities normalised."""
    text = resources.files("longca").joinpath("data", "doc_lengths", f"{corpus}.json").read_text()
    items = json.loads(text).items()
    bounds = [tuple(int(x) for x in key.strip("[)").split(",")) for key, _ in items]
    probs = np.array([p for _, p in items], dtype=np.float64)
    lows, highs = (np.array(x, dtype=np.int64) for x in zip(*bounds, strict=False))
    return lows, highs, probs / probs.sum()


def _fill(total: int, draw) -> np.ndarray:
    lengths, filled = [], 0
    while filled < total:
        n = min(max(1, int(draw())), total - filled)
        lengths.append(n)
        filled += n
    return np.array(lengths, dtype=np.int64)


def sample_corpus(corpus: str, total: int, rng: np.random.Generator, max_len: int = 0, split: int = 0) -> np.ndarray:
    """Lengths drawn from the corpus distribution; with `max_len`, each capped at it (0: no cap), or with
    `split`, a longer document cut into documents of max_len and its rest (how MagiAttention's CP
    benchmark packs its data: `chunk_ratio`, exps/dist_attn/benchmark/utils.py)."""
    lows, highs, probs = load_buckets(corpus)
    cap = int(max_len) if max_len else None
    if cap is not None and cap < 1:
        raise LongcaError(f"{corpus} sampler: max_len must be positive, got {max_len}")
    if split and not cap:
        raise LongcaError(f"{corpus} sampler: split needs max_len (the length documents are cut at)")
    pending: list[int] = []

    def draw() -> int:
        if pending:
            return pending.pop()
        i = rng.choice(len(probs), p=probs)
        n = int(rng.integers(lows[i], highs[i]))
        if not cap or n <= cap:
            return n
        if split:
            whole, rest = divmod(n, cap)
            pending.extend(([rest] if rest else []) + [cap] * (whole - 1))
        return cap

    return _fill(total, draw)


@cache
def load_magi() -> tuple[np.ndarray, np.ndarray]:
    """(document length, count) of MagiAttention's CP-benchmark distribution: each bin at its midpoint,
    as that benchmark's sampler takes it (see data/doc_lengths/README.md)."""
    doc = json.loads(resources.files("longca").joinpath("data", "doc_lengths", "magi.json").read_text())
    bins = np.array(doc["bins"], dtype=np.int64)
    return (bins[:, 0] + bins[:, 1]) // 2, bins[:, 2]


def sample_magi(total: int, rng: np.random.Generator, chunk_ratio: float = 0.25) -> np.ndarray:
    """Documents as MagiAttention's CP benchmark packs them (exps/dist_attn/benchmark/utils.py
    `DatasetSampler`): every document of its length histogram at its bin's midpoint, one longer than
    chunk_ratio x total cut into pieces of that length and its rest, pieces drawn by count (that
    sampler shuffles them all and packs them in order: the same draw), the last one truncated."""
    ratio = float(chunk_ratio)
    if not 0 < ratio <= 1:
        raise LongcaError(f"magi sampler: chunk_ratio must be in (0, 1], got {chunk_ratio}")
    chunk = max(1, int(total * ratio))
    lengths, counts = load_magi()
    whole, rest = lengths // chunk, lengths % chunk
    pieces = np.concatenate([[chunk], rest[rest > 0]])
    weights = np.concatenate([[float((whole * counts).sum())], counts[rest > 0].astype(float)])
    keep = weights > 0
    pieces, probs = pieces[keep], weights[keep] / weights[keep].sum()
    return _fill(total, lambda: pieces[rng.choice(len(pieces), p=probs)])


def auto_corpus(total: int) -> str:
    """The corpus `auto` picks for a total length: pile, prolong64k or prolong512k."""
    for limit, corpus in AUTO_THRESHOLDS:
        if total <= limit:
            return corpus
    return "prolong512k"


def _corpus_sampler(corpus: str):
    return lambda total, rng, max_len=0, split=0: sample_corpus(corpus, total, rng, max_len, split)


def sample_packs_or_magi(total: int, rng: np.random.Generator, chunk_ratio: float = 0.25, shuffle_seed: int = 42,
                         first: int = 0, draw: int = 0) -> np.ndarray:
    """The source's packs; below a 1024-token chunk (the source runs no such total, and its list of pieces
    would not fit in memory) the `magi` sampler's documents of the same length histogram instead."""
    if 0 < float(chunk_ratio) <= 1 and int(total) * float(chunk_ratio) < MIN_CHUNK:
        return sample_magi(total, rng, chunk_ratio)
    return sample_magi_packs(total, rng, chunk_ratio, shuffle_seed, first, draw)


def sample_uniform(total: int, rng: np.random.Generator, min_len: int = 1, max_len: int = 0) -> np.ndarray:
    max_len = int(max_len) or max(1, total // 4)
    if not 1 <= int(min_len) <= max_len:
        raise LongcaError(f"uniform sampler: need 1 <= min_len <= max_len, got {min_len}, {max_len}")
    return _fill(total, lambda: rng.integers(int(min_len), max_len + 1))


def sample_fixed(total: int, rng: np.random.Generator, doc_len: int = 0) -> np.ndarray:
    doc_len = int(doc_len) or max(1, total // 8)
    return _fill(total, lambda: doc_len)


def sample_auto(total: int, rng: np.random.Generator) -> np.ndarray:
    return sample_corpus(auto_corpus(total), total, rng)


@hookimpl
def longca_samplers() -> list[SamplerSpec]:
    specs = [SamplerSpec(name, desc, _corpus_sampler(name), {"max_len": "cap on a document's length (default none)",
                                                                "split": "1: cut a longer document into documents of "
                                                                         "max_len and its rest instead of capping it"})
             for name, desc in CORPORA.items()]
    specs.append(SamplerSpec("magi", "MagiAttention's CP-benchmark documents (its training data's length histogram, "
                                     "longer ones cut at chunk_ratio x total)", sample_magi,
                             {"chunk_ratio": "documents longer than this share of the total are cut (default 0.25)"}))
    specs.append(SamplerSpec("magi-packs", "MagiAttention's CP-benchmark packs themselves: draw i is pack first + i "
                                           "of the source's fixed list (pieces cut at chunk_ratio x total, shuffled "
                                           "with shuffle_seed, packed in order, packs shuffled; totals whose chunk "
                                           "is under 1024 tokens, which the source never packs, draw from magi)",
                             sample_packs_or_magi,
                             {"chunk_ratio": "documents longer than this share of the total are cut (default 0.25)",
                              "shuffle_seed": "the source's shuffle seed (default 42, its SEED)",
                              "first": "the pack draw 0 takes (default 0, the source's first)"}, takes_draw=True))
    specs.append(SamplerSpec("uniform", "lengths uniform in [min_len, max_len] (default 1 and total/4)",
                             sample_uniform, {"min_len": "shortest document", "max_len": "longest document"}))
    specs.append(SamplerSpec("fixed", "every document doc_len tokens (default total/8), the last truncated",
                             sample_fixed, {"doc_len": "document length"}))
    specs.append(SamplerSpec("auto", "pile up to 12K tokens, prolong64k up to 64K, prolong512k beyond", sample_auto))
    return specs
