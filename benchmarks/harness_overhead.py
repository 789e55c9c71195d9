"""The harness's own overhead: `longca`'s timing of a kernel against a bare call of the same function.

The harness side is `longca_runner.measure.run_problem` (the path every case takes); its timing loop is
`longca_runner.measure.time_step`. On a GPU the bare side is `triton.testing.do_bench` (median, its own
L2 flush); on a CPU it is a plain perf_counter loop around the same call. Not a timed test: prints
a table.

    python benchmarks/harness_overhead.py --kernel sdpa --mask causal --seqlen 16k --heads 64:8 --device cuda
"""
from __future__ import annotations

import argparse
import functools
import statistics
import time

from longca.plugins import get_registry
from longca.problem import Problem, build_mask, make_inputs
from longca.sizes import parse_heads, parse_size
from longca_runner.measure import RunOptions, make_step, run_problem, seeded_dout


def bare_ms(fn, device: str, warmup: int, repeat: int) -> float:
    if device.startswith("cuda"):
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=warmup, rep=repeat, return_mode="median"))
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kernel", default="sdpa")
    parser.add_argument("--mask", default="causal")
    parser.add_argument("--seqlen", default="2k")
    parser.add_argument("--heads", default="8:8")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--directions", default="fwd,bwd")
    parser.add_argument("--rounds", type=int, default=3, help="alternate harness and bare this many times")
    args = parser.parse_args()
    hq, hkv = parse_heads(args.heads)
    spec = get_registry().kernel(args.kernel)
    print("| kernel | mask | S | dir | harness ms | bare ms | overhead |")
    print("|---|---|---|---|---|---|---|")
    for direction in args.directions.split(","):
        problem = Problem(kernel=args.kernel, mask=args.mask, seqlen=parse_size(args.seqlen), heads_q=hq,
                          heads_kv=hkv, head_dim=args.head_dim, dtype=args.dtype, direction=direction,
                          device=args.device)
        mask = build_mask(problem)
        q, k, v = make_inputs(problem, requires_grad=direction != "fwd")
        prepared = spec.prepare(problem, mask, q, k, v)
        dout = seeded_dout(problem) if direction != "fwd" else None  # the harness's own dout
        fn = make_step(functools.partial(spec.run, prepared, q, k, v), (q, k, v), direction, dout)
        harness, bare = [], []
        for _ in range(args.rounds):
            row = run_problem(problem, RunOptions(warmup=10, repeat=50, samples=1))
            harness.append(row["ms_median"])
            bare.append(bare_ms(fn, args.device, warmup=25, repeat=200))
        h, b = statistics.median(harness), statistics.median(bare)
        print(f"| {args.kernel} | {args.mask} | {args.seqlen} | {direction} | {h:.4f} | {b:.4f} "
              f"| {(h / b - 1) * 100:+.2f}% |")


if __name__ == "__main__":
    main()
