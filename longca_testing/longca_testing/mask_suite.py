"""Conformance of a mask plugin: its spec, its builds, and every form kernels derive from them.

    test_mask = plugin.mask_conformance_tests("chunked_causal")

Cases: `registered`, `spec`, `build` (several lengths, odd ones included, and seeds: each build
passes `longca.masks.validate` (types, ranges, pair-disjoint slices, or a well-formed layout)),
`deterministic` (one seed, one mask), `area` (the area equals the dense count at small lengths),
`forms` (block maps, crops, document boundaries, windows and, where the mask has them, FlashMask
bounds agree with the dense mask).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from longca.masks import slices as sl
from longca.masks.mask import Mask
from longca.plugins import Registry, get_registry
from longca.problem import Problem
from longca.specs import MASK_KINDS, MaskSpec
from longca_testing.builders import build_mask
from longca_testing.conformance import Case, Report, common_spec_problems, kind_cases, registered_spec, run_cases

LENGTHS = (256, 999, 2048)  # rounded up to the mask's seqlen_multiple
SEEDS = (0, 1, 2)
HEADS = (4, 2)
BLOCK = 64  # block-sparse masks: tokens per block (the `block` parameter, when the mask takes it)


def _lengths(spec: MaskSpec) -> list[int]:
    m = max(1, spec.seqlen_multiple)
    return list(dict.fromkeys(-(-s // m) * m for s in LENGTHS))


def _build(spec: MaskSpec, seqlen: int, seed: int, registry: Registry) -> Mask:
    params: dict[str, Any] = {"block": BLOCK} if "block" in spec.params and spec.kind == "block_sparse" else {}
    try:
        return build_mask(spec.name, seqlen, seed=seed, heads=HEADS, registry=registry,
                          sampler_params={"min_len": 1, "max_len": max(1, seqlen // 3)}, **params)
    except Exception as exc:  # noqa: BLE001 - the validation error names the fault
        raise AssertionError(f"mask {spec.name} at S={seqlen}, seed {seed}: {exc}") from None


def check_spec(name: str, registry: Registry) -> list[dict]:
    spec = registered_spec(registry, "masks", name)
    problems = []
    if not isinstance(spec, MaskSpec):
        problems.append(f"registered a {type(spec).__name__}, expected MaskSpec")
    else:
        if spec.kind not in MASK_KINDS:
            problems.append(f"kind {spec.kind!r} is not one of {', '.join(MASK_KINDS)}")
        problems += common_spec_problems(spec, "build", "build(ctx) -> Mask")
        if not isinstance(spec.seqlen_multiple, int) or spec.seqlen_multiple < 1:
            problems.append(f"seqlen_multiple {spec.seqlen_multiple!r} must be a positive int")
    if problems:
        raise AssertionError(f"mask {name}: malformed MaskSpec:\n  " + "\n  ".join(problems))
    return []


def check_builds(name: str, registry: Registry) -> list[dict]:
    """Every build at several lengths and seeds is valid (the build-time validation passes)."""
    spec = registered_spec(registry, "masks", name)
    for seqlen in _lengths(spec):
        for seed in SEEDS:
            mask = _build(spec, seqlen, seed, registry)
            if (mask.layout is not None) != (spec.kind == "block_sparse"):
                raise AssertionError(f"mask {name}: kind {spec.kind!r} but build returned a "
                                     f"{'block-sparse layout' if mask.layout is not None else 'static mask'}")
    return []


def _same(a: Mask, b: Mask) -> bool:
    if a.slices is not None:
        return b.slices is not None and np.array_equal(a.slices, b.slices)
    la, lb = a.block_layout(), b.layout
    return lb is not None and la.causal == lb.causal and all(np.array_equal(x, y) for x, y in (
        (la.q_bounds, lb.q_bounds), (la.k_bounds, lb.k_bounds), (la.keep, lb.keep)))


def check_deterministic(name: str, registry: Registry) -> list[dict]:
    """The same seed gives the same mask (every machine measures the same pairs)."""
    spec = registered_spec(registry, "masks", name)
    seqlen = _lengths(spec)[1]
    for seed in SEEDS[:2]:
        if not _same(_build(spec, seqlen, seed, registry), _build(spec, seqlen, seed, registry)):
            raise AssertionError(f"mask {name}: two builds with seed {seed} at S={seqlen} differ; draw every "
                                 f"random choice from ctx.rng (seeded from the problem), never from global state")
    return []


def _dense_count(mask: Mask) -> float:
    dense = mask.dense()
    return float(dense.sum(axis=(1, 2)).mean()) if dense.ndim == 3 else float(dense.sum())


def check_area(name: str, registry: Registry) -> list[dict]:
    """mask.area (from which FLOPs are computed) equals the count of attended pairs."""
    spec = registered_spec(registry, "masks", name)
    for seqlen in _lengths(spec)[:2]:
        mask = _build(spec, seqlen, 0, registry)
        count = _dense_count(mask)
        if abs(mask.area - count) > 1e-6 * max(1.0, count):
            raise AssertionError(f"mask {name} at S={seqlen}: area {mask.area:g} but the dense mask has "
                                 f"{count:g} attended pairs; FLOPs and TFLOP/s would be off by "
                                 f"{mask.area / max(count, 1):.3g}x")
        if mask.area > seqlen * seqlen:
            raise AssertionError(f"mask {name} at S={seqlen}: area {mask.area:g} exceeds S^2 = {seqlen * seqlen}")
    return []


def _block_map_from_dense(dense: np.ndarray, block: int) -> np.ndarray:
    n = -(-dense.shape[0] // block)
    out = np.zeros((n, n), dtype=np.int8)
    for i in range(n):
        for j in range(n):
            tile = dense[i * block:(i + 1) * block, j * block:(j + 1) * block]
            out[i, j] = sl.FULL_BLOCK if tile.all() else sl.PARTIAL if tile.any() else sl.EMPTY
    return out


def _flashmask_dense(bounds: dict[str, np.ndarray], seqlen: int) -> np.ndarray:
    rows = np.arange(seqlen)[:, None]
    masked = ((rows >= bounds["UTS"][None]) & (rows < bounds["UTE"][None])) | \
             ((rows >= bounds["LTS"][None]) & (rows < bounds["LTE"][None]))
    return ~masked


def check_forms(name: str, registry: Registry) -> list[dict]:
    """Block maps, crops, document boundaries, windows and FlashMask bounds agree with the dense mask."""
    spec = registered_spec(registry, "masks", name)
    seqlen = _lengths(spec)[1]
    mask = _build(spec, seqlen, 1, registry)
    where = f"mask {name} at S={seqlen}"
    if mask.layout is not None:
        return []  # a layout is its own only form: the builds' validation covers it
    dense = mask.dense()
    for block in (64, 128):
        got = mask.block_map(block)
        want = _block_map_from_dense(dense, block)
        if not np.array_equal(got, want):
            i, j = (int(x[0]) for x in np.nonzero(got != want))
            raise AssertionError(f"{where}: block_map({block}) says {int(got[i, j])} for block ({i}, {j}), the "
                                 f"dense mask says {int(want[i, j])} (0 empty, 1 partial, 2 full)")
    third, half = seqlen // 3, seqlen // 2
    for rows, cols in (((third, seqlen), (0, half)), ((0, half), (third, seqlen))):
        cropped = sl.dense(mask.crop(rows, cols), (0, rows[1] - rows[0]), (0, cols[1] - cols[0]))
        if not np.array_equal(cropped, dense[rows[0]:rows[1], cols[0]:cols[1]]):
            raise AssertionError(f"{where}: crop(rows {rows}, keys {cols}) differs from the dense mask there")
    cu = mask.cu_seqlens()
    if cu is not None and (cu[0] != 0 or cu[-1] != seqlen or (np.diff(cu) <= 0).any()):
        raise AssertionError(f"{where}: params['doc_lens'] must be positive lengths summing to {seqlen}")
    window = mask.window()
    if window is not None and not (len(window) == 2 and all(isinstance(w, (int, np.integer)) for w in window)):
        raise AssertionError(f"{where}: params['window_size'] must be (left, right) ints, got {window!r}")
    try:
        bounds = mask.flashmask_bounds()
    except ValueError:
        bounds = None  # not expressible as two masked row intervals per key column
    if bounds is None and _flashmask_claims(name, mask, registry):
        raise AssertionError(f"{where}: a FlashMask kernel claims this mask but it has no FlashMask bounds")
    if bounds is not None and not np.array_equal(_flashmask_dense(bounds, seqlen), dense):
        raise AssertionError(f"{where}: the FlashMask bounds describe another mask than the slices")
    return []


def _flashmask_claims(name: str, mask: Mask, registry: Registry) -> bool:
    """Whether the FlashMask kernel truly claims this mask: by name, or by a wildcard (`any:static`)
    whose `supports_mask` accepts it. A wildcard means "every mask of this kind I can express": the
    kernel refuses the others with a reason, and a mask it refuses is not at fault for it (nor is a
    mask another plugin's broken `supports_mask` raises on)."""
    entry = registry.entries["kernels"].get("flashmask")
    if entry is None:
        return False
    spec = entry.spec
    if name in spec.masks:
        return True
    if name not in registry.claimed_masks(spec.masks):
        return False
    if spec.supports_mask is None:
        return True
    problem = Problem(kernel=spec.name, mask=name, seqlen=mask.seqlen, heads_q=HEADS[0], heads_kv=HEADS[1])
    try:
        return spec.supports_mask(problem, mask) is None
    except Exception:  # noqa: BLE001 - the kernel's fault, judged by its own suite
        return False


def mask_conformance_cases(name: str, registry: Registry | None = None) -> list[Case]:
    return kind_cases("masks", name, registry or get_registry(), [
        ("spec", check_spec), ("build", check_builds), ("deterministic", check_deterministic),
        ("area", check_area), ("forms", check_forms)])


def check_mask(name: str, registry: Registry | None = None) -> Report:
    """The mask suite as a Report (never raises for failures)."""
    registry = registry or get_registry()
    return run_cases(mask_conformance_cases(name, registry), registry, Report(name, kind="mask"))
