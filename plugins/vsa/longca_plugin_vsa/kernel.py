"""prepare/run shared by the `vsa` and `vsa-triton` kernels (they differ in the backend kind)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import library
from .tiles import Tiles, block_map, block_reason, from_tiles, make_tiles, to_tiles


@dataclass
class Prepared:
    backend: library.Backend
    tiles: Tiles
    index: tuple  # (q2k_idx, q2k_num) for fastvideo-kernel, (block_map,) for vsa 0.0.x


def layout_reason(problem: Any) -> str | None:
    """What both kernels refuse about the mask, before anything is built."""
    return block_reason(problem)


def prepare(kind: str, problem: Any, mask: Any, q: Any) -> Prepared:
    """Tile placement and block indices on q's device (timed apart as prepare_ms)."""
    backend, reason = library.find(kind)
    if backend is None:
        raise RuntimeError(f"VSA {library.KINDS[kind]} kernel unavailable: {reason}")
    if mask.layout is None:
        raise ValueError(f"mask {mask.name!r} is not block-sparse")
    tiles = make_tiles(mask.layout, q.device)
    bmap = block_map(mask.layout, q.shape[0], q.shape[2], q.device)
    index = tuple(backend.to_index(bmap)) if backend.to_index is not None else (bmap,)
    return Prepared(backend, tiles, index)


def run(prepared: Prepared, q: Any, k: Any, v: Any) -> Any:
    """The timed call: (B, S, H, D) in and out, VSA's head-major tiles in between."""
    t = prepared.tiles
    out, _lse = prepared.backend.attn(to_tiles(q, t), to_tiles(k, t), to_tiles(v, t), *prepared.index,
                                      t.block_sizes)
    return from_tiles(out, t)


def backend_name(kind: str) -> str:
    backend, _ = library.find(kind)
    return backend.name if backend else ""


def kernel_spec(kind: str, name: str, description: str, supports: Any, min_compute_capability: tuple) -> Any:
    """The KernelSpec of one kind of VSA kernel: what the ThunderKittens and Triton kernels share."""
    from longca.plugin import BLOCK_SPARSE_MASKS, KernelSpec

    return KernelSpec(
        name=name, family="sparse", description=description, masks=BLOCK_SPARSE_MASKS,
        prepare=lambda problem, mask, q, k, v: prepare(kind, problem, mask, q), run=run,
        dtypes=("bfloat16",), head_dims=(64, 128), gqa=False, backward=True, devices=("cuda",),
        min_compute_capability=min_compute_capability, available=lambda: library.find(kind)[1],
        supports=supports, backend=lambda: backend_name(kind),
        url="https://github.com/hao-ai-lab/FastVideo/tree/main/fastvideo-kernel")
