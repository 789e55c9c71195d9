"""The three timing modes side by side: CUDA events (with the L2 flush), CUDA-graph replay (the
flush between replays) and device time from torch.profiler, for given kernels at given lengths.
Where events read far above the other two, the kernel's launch and host work are in its time.

Each (kernel, length, mode) is one case measured by `longca_runner.measure.run_problem` in a supervised
worker (a kernel that cannot be captured in a graph gives its row with the reason); writes
OUTPUT/rows.jsonl and OUTPUT/table.md (ms per call, and each mode over events).

    python benchmarks/timing_modes.py --kernels sdpa,fa2,fa4,cudnn,flex,flex-fa4 --seqlens 4k,16k \\
        --mask causal --heads 64:8 --head-dim 128 --dtype bfloat16 --device cuda --output results/timing-modes
    python benchmarks/timing_modes.py --kernels sdpa --seqlens 1k --heads 4:2 --head-dim 64 \\
        --dtype float32 --device cpu --modes events,profiler --output /tmp/modes
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from longca.errors import LongcaError
from longca.plugins import get_registry
from longca.problem import Problem
from longca.results import ResultRow, ResultsWriter
from longca.sizes import format_size, parse_heads, parse_size
from longca_runner.measure import RunOptions, check_device
from longca_runner.supervisor import Supervisor
from longca_runner.timing import TIMING_MODES, check_timing

DEFAULT_KERNELS = "sdpa,fa2,fa4,cudnn,flex,flex-fa4"


def _ms(row: ResultRow | None) -> str:
    if row is None:
        return ""
    if row.status != "ok" or row.ms_median is None:
        return f"{row.status}: {(row.reason or '')[:60]}"
    return f"{row.ms_median:.4g}"


def table(rows: list[ResultRow], modes: list[str]) -> str:
    """One line per (kernel, length): ms per call in each mode, and each mode over events."""
    by_case: dict[tuple[str, int], dict[str, ResultRow]] = {}
    for r in rows:
        by_case.setdefault((r.kernel, r.seqlen), {})[r.timing or "events"] = r
    others = [m for m in modes if m != "events"]
    header = ["kernel", "seqlen", *(f"{m} (ms)" for m in modes)]
    if "events" in modes:
        header += [f"{m} / events" for m in others]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (kernel, seqlen), got in by_case.items():
        cells = [kernel, format_size(seqlen), *(_ms(got.get(m)) for m in modes)]
        if "events" in modes:
            base = got.get("events")
            for m in others:
                r = got.get(m)
                ok = base and r and base.ms_median and r.ms_median and base.status == r.status == "ok"
                cells.append(f"{r.ms_median / base.ms_median:.3f}" if ok else "")  # type: ignore[union-attr]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", default=DEFAULT_KERNELS)
    parser.add_argument("--seqlens", default="4k,16k")
    parser.add_argument("--modes", default=",".join(TIMING_MODES))
    parser.add_argument("--mask", default="causal")
    parser.add_argument("--heads", default="64:8")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--direction", default="fwd")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        registry = get_registry()
        kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        if not kernels or not modes:
            raise LongcaError("--kernels and --modes must each name at least one")
        for kernel in kernels:
            registry.kernel(kernel)
        for mode in modes:
            check_timing(mode, args.device)
        check_device(args.device)
        seqlens = [parse_size(s) for s in args.seqlens.split(",") if s.strip()]
        hq, hkv = parse_heads(args.heads)
        problems = [Problem(kernel=k, mask=args.mask, seqlen=s, heads_q=hq, heads_kv=hkv, head_dim=args.head_dim,
                            dtype=args.dtype, direction=args.direction, device=args.device)
                    for k in kernels for s in seqlens]
        rows = []
        args.output.mkdir(parents=True, exist_ok=True)
        writer = ResultsWriter(args.output / "rows.jsonl")
        with Supervisor(isolate=True) as supervisor:
            for problem in problems:
                for mode in modes:
                    options = RunOptions(warmup=args.warmup, repeat=args.repeat, samples=1, timing=mode)
                    row = supervisor.run(problem, options)
                    writer.append(row)
                    rows.append(row)
                    print(f"{problem.kernel} {format_size(problem.seqlen)} {mode}: {_ms(row)}", file=sys.stderr)
    except LongcaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = table(rows, modes)
    (args.output / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
