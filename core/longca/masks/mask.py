"""A built mask (one draw of a pattern) and the forms kernels ask for."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from . import slices as sl


@dataclass
class BlockSparseLayout:
    """Block-sparse masks: block boundaries and, per mask group, which (q block, k block) are kept.

    `q_bounds` / `k_bounds` hold the cumulative block boundaries (0 ... S). `keep` is bool
    (groups, num_q_blocks, num_k_blocks); a query head h uses group h // (heads_q // groups).
    `causal`: inside kept blocks only keys k <= q are attended (token-level, as NSA's selected
    attention does); such a layout has one partition for queries and keys and keeps no block
    above the diagonal (`longca.masks.validate.layout_problem`).
    """

    q_bounds: np.ndarray
    k_bounds: np.ndarray
    keep: np.ndarray
    causal: bool = False

    @property
    def groups(self) -> int:
        return self.keep.shape[0]

    def block_areas(self) -> np.ndarray:
        """Attended pairs of each (q block, k block) when kept: b(b+1)/2 on a causal diagonal."""
        areas = np.outer(np.diff(self.q_bounds), np.diff(self.k_bounds))
        if self.causal:
            sizes = np.diff(self.q_bounds)
            np.fill_diagonal(areas, sizes * (sizes + 1) // 2)
        return areas

    def dense(self, rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
        """Bool (groups, rows, cols) window of the expanded mask."""
        q, k = np.arange(*rows), np.arange(*cols)
        qi = np.searchsorted(self.q_bounds, q, side="right") - 1
        ki = np.searchsorted(self.k_bounds, k, side="right") - 1
        out = self.keep[:, qi][:, :, ki]
        if self.causal:
            out &= (k[None, :] <= q[:, None])[None]
        return out


@dataclass
class Mask:
    """One draw of a mask pattern over a sequence of `seqlen` queries and keys.

    Static masks carry `slices` (see `longca.masks.slices`); block-sparse masks carry `layout`.
    `params` holds every parameter, drawn or given: doc_lens, prefix, global_tokens, window, ...
    """

    name: str
    seqlen: int
    params: dict[str, Any] = field(default_factory=dict)
    slices: np.ndarray | None = None
    layout: BlockSparseLayout | None = None
    # what kernels derive from this draw, kept so that a check and prepare do not derive it twice
    cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Slices given as a list become an (n, 5) int64 array; bad types or ranges are refused here
        (overlaps are checked when a mask plugin's build returns, see `longca.masks.validate`)."""
        from .validate import slice_problem

        if self.slices is not None:
            if not isinstance(self.slices, np.ndarray):
                self.slices = sl.as_array(self.slices)
            problem = slice_problem(self.slices, self.seqlen, self.seqlen)
            if problem:
                raise ValueError(f"mask {self.name!r}: {problem}")

    @property
    def is_block_sparse(self) -> bool:
        return self.layout is not None

    @cached_property
    def area(self) -> float:
        """Unmasked pairs; for block-sparse masks the mean over mask groups (so FLOPs = 4*area*heads*d)."""
        if self.layout is not None:
            kept = self.layout.keep * self.layout.block_areas()
            return float(kept.sum(axis=(1, 2)).mean())
        return float(sl.area(self.static_slices()))

    def dense(self, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None) -> np.ndarray:
        """Bool matrix of may-attend, rows x cols (default whole); (groups, rows, cols) if block-sparse."""
        rows = rows or (0, self.seqlen)
        cols = cols or (0, self.seqlen)
        if self.layout is not None:
            return self.layout.dense(rows, cols)
        return sl.dense(self.static_slices(), rows, cols)

    def block_map(self, block_q: int, block_k: int | None = None) -> np.ndarray:
        """int8 map of EMPTY / PARTIAL / FULL_BLOCK per (q block, k block) (static masks)."""
        return sl.block_map(self.static_slices("a block map"), self.seqlen, self.seqlen, block_q, block_k or block_q)

    def flashmask_bounds(self) -> dict[str, np.ndarray]:
        """FlashMask column bounds LTS, LTE, UTS, UTE (static masks)."""
        if "flashmask_bounds" not in self.cache:  # a refusal check and prepare derive them once
            self.cache["flashmask_bounds"] = sl.flashmask_bounds(self.static_slices("FlashMask bounds"),
                                                                 self.seqlen, self.seqlen)
        return self.cache["flashmask_bounds"]

    def flashmask_problem(self) -> str | None:
        """Why this mask has no FlashMask bounds (block-sparse, or a key column with more than two
        masked row intervals), or None: the `supports_mask` of kernels built on the bounds."""
        if self.slices is None:
            return f"mask {self.name!r} is block-sparse: it has no FlashMask bounds"
        try:
            self.flashmask_bounds()
        except ValueError as exc:
            return f"mask {self.name!r} has no FlashMask bounds: {exc}"
        return None

    def cu_seqlens(self) -> np.ndarray | None:
        """Cumulative document boundaries [0, ..., S] for document masks, else None."""
        lens = self.params.get("doc_lens")
        return None if lens is None else np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)

    def window(self) -> tuple[int, int] | None:
        """(left, right) window sizes for sliding-window masks (FlashAttention's window_size), else None."""
        return self.params.get("window_size")

    def crop(self, q_range: tuple[int, int], k_range: tuple[int, int]) -> np.ndarray:
        """Slices of the window q_range x k_range, relative to its corner (static masks)."""
        return sl.crop(self.static_slices("cropping"), q_range, k_range, relative=True)

    def static_slices(self, what: str = "slices") -> np.ndarray:
        """The slices of a static mask; ValueError naming `what` for a block-sparse one."""
        if self.slices is None:
            raise ValueError(f"mask {self.name!r} is block-sparse and has no {what}")
        return self.slices

    def block_layout(self) -> BlockSparseLayout:
        """The layout of a block-sparse mask; ValueError for a static one."""
        if self.layout is None:
            raise ValueError(f"mask {self.name!r} is static and has no block-sparse layout")
        return self.layout

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary: name, length, parameters, area, slices or layout size."""
        out: dict[str, Any] = {"mask": self.name, "seqlen": self.seqlen, "area": self.area,
                               "params": _jsonable(self.params)}
        if self.slices is not None:
            out["slices"] = [[*s[:4], sl.TYPE_NAMES[s[4]]] for s in self.slices.tolist()]
        else:
            layout = self.block_layout()
            out["block_sparse"] = {"groups": layout.groups, "causal": layout.causal,
                                   "q_block_sizes": np.diff(layout.q_bounds).tolist(),
                                   "kept_blocks_per_group": layout.keep.sum(axis=(1, 2)).tolist()}
        return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass
class MaskContext:
    """What a mask builder may draw from: sizes, the seeded generator, documents, overrides."""

    seqlen: int
    rng: np.random.Generator
    sample_documents: Callable[[int], np.ndarray]
    params: dict[str, Any] = field(default_factory=dict)
    heads_q: int = 1
    heads_kv: int = 1

    def param(self, name: str, draw: Callable[[], Any]) -> Any:
        """An overridden parameter if given, else a drawn one. Draws happen in a fixed order."""
        drawn = draw()
        return self.params.get(name, drawn)
