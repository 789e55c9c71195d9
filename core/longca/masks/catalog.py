"""The 14 mask patterns of LongCA-bench and topk_sparse, each with one definition used by every kernel.

S = total tokens, documents from the sampler, w = window (default 1024). See docs/masks.md.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import LongcaError
from ..hookspecs import hookimpl
from ..memory import host_available
from ..specs import MaskKind, MaskSpec
from . import slices as sl
from .mask import BlockSparseLayout, Mask, MaskContext
from .mask_mods import BUILDERS as MASK_MODS

DEFAULT_WINDOW = 1024
DOC_BLOCK = 1024
ALIASES = {"w": "window", "p": "prefix", "g": "global_tokens"}  # each mask registers those of its parameters


def _int(ctx: MaskContext, name: str, draw, lo: int, hi: int) -> int:
    value = ctx.param(name, draw)
    try:
        value = int(value)
    except (TypeError, ValueError):
        raise LongcaError(f"mask parameter {name}={value!r} is not a whole number") from None
    if not lo <= value <= hi:
        raise LongcaError(f"mask parameter {name}={value} is out of range [{lo}, {hi}]")
    return value


def _documents(ctx: MaskContext) -> np.ndarray:
    lens = ctx.param("doc_lens", lambda: ctx.sample_documents(ctx.seqlen))
    if isinstance(lens, str):
        lens = [int(x) for x in lens.replace(";", ",").split(",") if x.strip()]
    lens = np.asarray(lens, dtype=np.int64)
    if (lens <= 0).any() or lens.sum() != ctx.seqlen:
        raise LongcaError(f"mask parameter doc_lens must be positive lengths summing to {ctx.seqlen}, "
                          f"got {len(lens)} lengths summing to {int(lens.sum())}")
    return lens


def _bounds(lens: np.ndarray) -> list[tuple[int, int]]:
    ends = np.cumsum(lens).tolist()
    return list(zip([0] + ends[:-1], ends, strict=False))


def _window(ctx: MaskContext) -> int:
    return _int(ctx, "window", lambda: DEFAULT_WINDOW, 0, 1 << 40)


def _mask(ctx: MaskContext, name: str, slices: list, **params: Any) -> Mask:
    return Mask(name, ctx.seqlen, params, sl.as_array(slices))


def full(ctx):
    return _mask(ctx, "full", [(0, ctx.seqlen, 0, ctx.seqlen, sl.FULL)])


def causal(ctx):
    return _mask(ctx, "causal", [(0, ctx.seqlen, 0, ctx.seqlen, sl.CAUSAL)])


def full_document(ctx):
    lens = _documents(ctx)
    return _mask(ctx, "full_document", [(a, b, a, b, sl.FULL) for a, b in _bounds(lens)], doc_lens=lens)


def causal_document(ctx):
    lens = _documents(ctx)
    return _mask(ctx, "causal_document", [(a, b, a, b, sl.CAUSAL) for a, b in _bounds(lens)], doc_lens=lens)


def sliding_window(ctx):
    w, s = _window(ctx), ctx.seqlen
    return _mask(ctx, "sliding_window", sl.band_to_slices(0, s, 0, s, -w, w), window=w, window_size=(w, w))


def sliding_window_causal(ctx):
    w, s = _window(ctx), ctx.seqlen
    return _mask(ctx, "sliding_window_causal", sl.band_to_slices(0, s, 0, s, -w, 0), window=w, window_size=(w, 0))


def share_question(ctx):
    lens = _documents(ctx)
    (q0, q1), *answers = _bounds(lens)
    slices = [(q0, q1, q0, q1, sl.CAUSAL)]
    for a, b in answers:
        slices += [(a, b, q0, q1, sl.FULL), (a, b, a, b, sl.CAUSAL)]
    return _mask(ctx, "share_question", slices, doc_lens=lens)


def causal_blockwise(ctx):
    lens = _documents(ctx)
    *docs, (a, b) = _bounds(lens)
    slices = [(x, y, x, y, sl.CAUSAL) for x, y in docs] + [(a, b, 0, b, sl.CAUSAL)]
    return _mask(ctx, "causal_blockwise", slices, doc_lens=lens)


def prefix_lm_causal(ctx):
    s = ctx.seqlen
    p = _int(ctx, "prefix", lambda: int(ctx.rng.integers(1, s + 1)), 0, s)
    slices = [(0, p, 0, p, sl.FULL), (p, s, 0, s, sl.CAUSAL)]
    return _mask(ctx, "prefix_lm_causal", slices, prefix=p)


def prefix_lm_document(ctx):
    lens = _documents(ctx)
    p = _int(ctx, "prefix", lambda: int(ctx.rng.integers(1, int(lens[0]) + 1)), 0, ctx.seqlen)
    slices = []
    for a, b in _bounds(lens):
        cut = min(a + p, b)
        slices += [(a, cut, a, cut, sl.FULL), (cut, b, a, b, sl.CAUSAL)]
    return _mask(ctx, "prefix_lm_document", slices, doc_lens=lens, prefix=p)


def global_sliding_window(ctx):
    s = ctx.seqlen
    w = _window(ctx)
    g = _int(ctx, "global_tokens", lambda: int(ctx.rng.integers(1, max(1, s // 8) + 1)), 0, s)
    slices = [(0, g, 0, s, sl.FULL), (g, s, 0, g, sl.FULL)] + sl.band_to_slices(g, s, g, s, -w, w)
    return _mask(ctx, "global_sliding_window", slices, window=w, window_size=(w, w), global_tokens=g)


def block_causal_document(ctx):
    s = ctx.seqlen
    lens = _documents(ctx)
    if "doc_lens" not in ctx.params:  # round document boundaries to whole blocks
        ends = np.unique(np.clip(np.rint(np.cumsum(lens) / DOC_BLOCK), 1, s // DOC_BLOCK)) * DOC_BLOCK
        lens = np.diff(np.concatenate([[0], ends])).astype(np.int64)
    elif (lens % DOC_BLOCK).any():
        raise LongcaError(f"block_causal_document: every document length must be a multiple of {DOC_BLOCK}")
    slices = []  # column-wise: key block [c, c+B) is seen by every query from c to the document's end
    for a, b in _bounds(lens):
        slices += [(c, b, c, c + DOC_BLOCK, sl.FULL) for c in range(a, b, DOC_BLOCK)]
    return _mask(ctx, "block_causal_document", slices, doc_lens=lens, block=DOC_BLOCK)


def _block_sparse(ctx: MaskContext, name: str, variable: bool) -> Mask:
    s = ctx.seqlen
    block = _int(ctx, "block", lambda: 128, 1, s)
    density = float(ctx.param("density", lambda: 0.5))
    if not 0 < density <= 1:
        raise LongcaError(f"mask parameter density={density} must be in (0, 1]")
    if variable:  # block sizes uniform in [block/2, block], the same partition for queries and keys
        sizes = _fill_sizes(s, lambda: int(ctx.rng.integers(max(1, block // 2), block + 1)))
    else:
        sizes = np.full(-(-s // block), block, dtype=np.int64)
        sizes[-1] = s - block * (len(sizes) - 1)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    nb = len(sizes)
    groups = _groups(ctx)
    kept = max(1, round(density * nb))
    _check_layout_memory(name, s, block, groups, nb)
    keep = np.zeros((groups, nb, nb), dtype=bool)
    for g in range(groups):
        top = ctx.rng.random((nb, nb), dtype=np.float32).argpartition(nb - kept, axis=1)[:, nb - kept:]
        np.put_along_axis(keep[g], top, True, axis=1)
    params = {"block": block, "density": density, "kept_per_row": kept, "groups": groups}
    return Mask(name, s, params, layout=BlockSparseLayout(bounds, bounds.copy(), keep))


def _fill_sizes(total: int, draw) -> np.ndarray:
    sizes, filled = [], 0
    while filled < total:
        n = min(draw(), total - filled)
        sizes.append(n)
        filled += n
    return np.array(sizes, dtype=np.int64)


def topk_sparse(ctx):
    """Token-level sparse attention as NSA's selected branch: per query block and mask group, the
    diagonal block plus the top-(k-1) earlier key blocks of seeded random scores, causal inside."""
    s = ctx.seqlen
    block = _int(ctx, "block", lambda: 64, 1, s)
    topk = _int(ctx, "topk", lambda: 16, 1, 1 << 20)
    nb = -(-s // block)
    bounds = np.minimum(np.arange(nb + 1, dtype=np.int64) * block, s)
    groups = _groups(ctx)
    _check_layout_memory("topk_sparse", s, block, groups, nb)
    earlier = np.tril(np.ones((nb, nb), dtype=bool), -1)
    keep = np.zeros((groups, nb, nb), dtype=bool)
    take = min(topk, nb)
    for g in range(groups):
        scores = np.where(earlier, ctx.rng.random((nb, nb), dtype=np.float32), -np.inf)
        np.fill_diagonal(scores, np.inf)  # the local block is always selected, as NSA does
        top = scores.argpartition(nb - take, axis=1)[:, nb - take:]
        np.put_along_axis(keep[g], top, True, axis=1)
    keep &= np.tril(np.ones((nb, nb), dtype=bool))  # rows with fewer than k earlier blocks took -inf ones
    params = {"block": block, "topk": topk, "kept_per_row": take, "groups": groups}
    return Mask("topk_sparse", s, params, layout=BlockSparseLayout(bounds, bounds.copy(), keep, causal=True))


def _groups(ctx: MaskContext) -> int:
    """One mask per head (MHA) or per KV-head group (GQA)."""
    return ctx.heads_q if ctx.heads_q == ctx.heads_kv else ctx.heads_kv


def _check_layout_memory(name: str, s: int, block: int, groups: int, nb: int) -> None:
    needs, free = groups * nb * nb + 4 * nb * nb, host_available()
    if free is not None and needs > free:  # checked before allocating
        raise LongcaError(f"mask {name} at S={s} with block {block}: its block layout ({groups} x {nb} x {nb}) "
                          f"needs {needs / 2**30:.1f} GiB, the host has {free / 2**30:.1f} GiB free; "
                          f"use a larger block")


def block_sparse_uniform(ctx):
    return _block_sparse(ctx, "block_sparse_uniform", variable=False)


def block_sparse_variable(ctx):
    return _block_sparse(ctx, "block_sparse_variable", variable=True)


_DOCS = {"doc_lens": "document lengths (comma-separated), drawn from the sampler"}
_WIN = {"window": "window w (default 1024)"}
_TOPK = {"block": "block size (default 64, NSA's selection block)",
         "topk": "key blocks each query block selects, the diagonal one included (default 16, NSA's)"}
_SPARSE = {"block": "block size (default 128)",
           "density": "fraction of key blocks each query block keeps (the paper's 'sparsity ratio'), default 0.5"}

STATIC_MASKS = (
    "full", "causal", "full_document", "causal_document", "sliding_window", "sliding_window_causal",
    "share_question", "causal_blockwise", "prefix_lm_causal", "prefix_lm_document",
    "global_sliding_window", "block_causal_document",
)
BLOCK_SPARSE_MASKS = ("block_sparse_uniform", "block_sparse_variable")  # the paper's two
TOKEN_SPARSE_MASKS = ("topk_sparse",)  # kind block_sparse too, with a causal layout
DOCUMENT_MASKS = ("full_document", "causal_document", "share_question", "causal_blockwise",
                  "prefix_lm_document", "block_causal_document")


@hookimpl
def longca_masks() -> list[MaskSpec]:
    R: MaskKind = "regular"
    H: MaskKind = "heterogeneous"
    B: MaskKind = "block_sparse"
    specs = [
        MaskSpec("full", R, "always", full),
        MaskSpec("causal", R, "k <= q", causal),
        MaskSpec("full_document", R, "q and k in the same document", full_document, _DOCS, True),
        MaskSpec("causal_document", R, "same document and k <= q", causal_document, _DOCS, True),
        MaskSpec("sliding_window", R, "|q - k| <= w", sliding_window, _WIN),
        MaskSpec("sliding_window_causal", R, "0 <= q - k <= w", sliding_window_causal, _WIN),
        MaskSpec("share_question", H, "first document is a question, the rest answers: causal inside each "
                 "document, every answer sees the whole question", share_question, _DOCS, True),
        MaskSpec("causal_blockwise", H, "causal inside each document; the last document sees everything "
                 "before it (k <= q)", causal_blockwise, _DOCS, True),
        MaskSpec("prefix_lm_causal", H, "prefix p: both in [0, p), or k <= q", prefix_lm_causal,
                 {"prefix": "prefix p, drawn uniform in [1, S]"}),
        MaskSpec("prefix_lm_document", H, "per document: full inside its prefix (p clipped to the document), "
                 "causal after it, nothing across documents", prefix_lm_document,
                 {**_DOCS, "prefix": "prefix p, drawn uniform in [1, first document's length]"}, True),
        MaskSpec("global_sliding_window", H, "k < g or q < g or |q - k| <= w", global_sliding_window,
                 {**_WIN, "global_tokens": "global tokens g, drawn uniform in [1, S/8]"}),
        MaskSpec("block_causal_document", H, "documents of whole 1024-token blocks; a block sees its own "
                 "block and all earlier blocks of its document", block_causal_document, _DOCS, True, DOC_BLOCK),
        MaskSpec("block_sparse_uniform", B, "each query block keeps the top-k key blocks of random scores, "
                 "k = max(1, round(density * blocks)); per head (MHA) or per KV group (GQA)",
                 block_sparse_uniform, _SPARSE),
        MaskSpec("block_sparse_variable", B, "as block_sparse_uniform over blocks of random sizes in "
                 "[block/2, block]", block_sparse_variable, _SPARSE),
        MaskSpec("topk_sparse", B, "causal; each query block attends its own block and the top-(k-1) earlier key "
                 "blocks of random scores (NSA's selected attention); per head (MHA) or per KV group (GQA)",
                 topk_sparse, _TOPK),
    ]
    return [replace(spec, aliases={a: p for a, p in ALIASES.items() if p in spec.params},
                    flex_mask_mod=MASK_MODS.get(spec.name)) for spec in specs]
