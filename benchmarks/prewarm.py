"""Compile a sweep's kernels before the sweep, in parallel processes (compilation is serial per kernel).

A thin script over `longca_runner.prewarm` (which `longca bench` also runs on CUDA for the kernels that
declare `compiles`): each case of the spec runs once (no timing, one mask sample) in `--workers`
processes, which fills inductor's and Triton's caches on disk; the sweep that follows then loads
the compiled kernels. It changes no measurement: timings come from the sweep itself.

    python benchmarks/prewarm.py SPEC.toml --workers 8 [--kernels flex-fa4]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from longca.errors import LongcaError
from longca.results import ResultsWriter
from longca_runner import prewarm
from longca_runner.sweep import load_spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec")
    parser.add_argument("--workers", type=int, default=prewarm.WORKERS)
    parser.add_argument("--kernels", default=None, help="only these kernels (comma-separated)")
    parser.add_argument("--max-minutes", type=float, default=prewarm.MAX_MINUTES,
                        help="stop waiting after this; the sweep compiles the rest")
    parser.add_argument("--skip-done", metavar="RESULTS", default=None,
                        help="skip the cases that have a row in this results.jsonl (what `sweep --resume` skips)")
    args = parser.parse_args()
    if args.workers < 1:
        raise SystemExit("prewarm: --workers must be at least 1")
    if args.skip_done and not Path(args.skip_done).is_file():
        raise SystemExit(f"prewarm: --skip-done {args.skip_done}: no such file")
    spec = load_spec(args.spec, installed_kernels_only=True)
    done = ResultsWriter(Path(args.skip_done)).done_ids() if args.skip_done else set()
    todo = prewarm.select(spec, kernels=args.kernels.split(",") if args.kernels else None, done=done)
    prewarm.warm(todo, args.workers, args.max_minutes, say=lambda line: print(line, flush=True))


if __name__ == "__main__":
    try:
        main()
    except LongcaError as exc:  # a spec that does not load: one line, not a traceback
        raise SystemExit(f"prewarm: {exc}") from None
