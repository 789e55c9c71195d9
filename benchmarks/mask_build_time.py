"""How long building each mask takes at long lengths, and its derived forms (not a timed test).

    python benchmarks/mask_build_time.py --seqlen 512k --repeat 5
"""
from __future__ import annotations

import argparse
import statistics
import time

from longca.masks.catalog import BLOCK_SPARSE_MASKS, STATIC_MASKS
from longca.problem import Problem, build_mask
from longca.sizes import parse_size


def timed(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seqlen", default="512k")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--derived", action="store_true", help="also time block map (128) and FlashMask bounds")
    args = parser.parse_args()
    seqlen = parse_size(args.seqlen)
    build_mask(Problem(kernel="reference", mask="full", seqlen=1024))  # load plugins and data first
    print(f"| mask | S | slices | build ms (median of {args.repeat}) | area |"
          + (" block map 128 ms | FlashMask bounds ms |" if args.derived else ""))
    print("|---|---|---|---|---|" + ("---|---|" if args.derived else ""))
    for name in STATIC_MASKS + BLOCK_SPARSE_MASKS:
        problem = Problem(kernel="reference", mask=name, seqlen=seqlen, heads_q=32, heads_kv=8)
        ms, mask = timed(lambda problem=problem: build_mask(problem), args.repeat)
        size = len(mask.slices) if mask.slices is not None else f"{mask.layout.keep.shape} blocks"
        line = f"| {name} | {args.seqlen} | {size} | {ms:.2f} | {mask.area:.4g} |"
        if args.derived and mask.slices is not None:
            bm, _ = timed(lambda mask=mask: mask.block_map(128), 1)
            fb, _ = timed(lambda mask=mask: mask.flashmask_bounds(), 1)
            line += f" {bm:.1f} | {fb:.1f} |"
        elif args.derived:
            line += " | |"
        print(line)


if __name__ == "__main__":
    main()
