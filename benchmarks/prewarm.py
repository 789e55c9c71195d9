"""Compile a sweep's kernels before the sweep, in parallel processes (compilation is serial per kernel).

`torch.compile` kernels (flex, flex-fa4, flashmask's Triton kernels) compile once per mask_mod,
shape and direction; a sweep of many masks and lengths spends most of its wall time compiling, one
kernel after another. This runs each case of the spec once (no timing, one mask sample) in
`--workers` processes, which fills inductor's and Triton's caches on disk; the sweep that follows
then loads the compiled kernels. It changes no measurement: timings come from the sweep itself.

    python benchmarks/prewarm.py SPEC.toml --workers 8 [--kernels flex-fa4]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from pathlib import Path

from longca.errors import LongcaError
from longca.measure import RunOptions, run_problem
from longca.results import ResultsWriter
from longca.sweep import case_id, load_spec, problems


def _worker(items: list) -> list[str]:
    lines = []
    for problem in items:
        t0 = time.time()
        try:
            status = run_problem(problem, RunOptions(warmup=0, repeat=1, samples=1)).status
        except Exception as exc:  # noqa: BLE001 - the sweep reports it
            status = f"{type(exc).__name__}: {str(exc)[:160]}"
        lines.append(f"{problem.kernel} {problem.mask} {problem.seqlen} {problem.direction}: {status} "
                     f"({time.time() - t0:.1f} s)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--kernels", default=None, help="only these kernels (comma-separated)")
    parser.add_argument("--max-minutes", type=float, default=5.0,
                        help="stop waiting after this; the sweep compiles the rest")
    parser.add_argument("--skip-done", metavar="RESULTS", default=None,
                        help="skip the cases that have a row in this results.jsonl (what `sweep --resume` skips)")
    args = parser.parse_args()
    if args.workers < 1:
        raise SystemExit("prewarm: --workers must be at least 1")
    if args.skip_done and not Path(args.skip_done).is_file():
        raise SystemExit(f"prewarm: --skip-done {args.skip_done}: no such file")
    spec = load_spec(args.spec, installed_kernels_only=True)
    wanted = set(args.kernels.split(",")) if args.kernels else None
    done = ResultsWriter(Path(args.skip_done)).done_ids() if args.skip_done else set()
    todo = [p for p in problems(spec) if not p.strategy and (wanted is None or p.kernel in wanted)
            and case_id(p) not in done]
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "2")
    start = time.time()
    pool = mp.get_context("spawn").Pool(args.workers)
    pending = pool.map_async(_worker, [todo[i::args.workers] for i in range(args.workers)])
    try:
        for lines in pending.get(timeout=60 * args.max_minutes):
            print("\n".join(lines), flush=True)
        pool.close()
    except mp.TimeoutError:
        print(f"prewarm: stopped after {args.max_minutes} min", flush=True)
        pool.terminate()
    pool.join()
    print(f"prewarm: {len(todo)} cases, {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    try:
        main()
    except LongcaError as exc:  # a spec that does not load: one line, not a traceback
        raise SystemExit(f"prewarm: {exc}")
