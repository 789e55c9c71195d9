"""Varlen calls with many short segments, through the kernels' CP primitives, forward and backward.

The calls a CP step makes on document masks are varlen calls over many short pieces (with the
per-document layout a ring of R cuts every document into 2R pieces). This times such calls with
each kernel's `forward_lse` / `backward_lse` (exactly what a strategy calls, `longca_cp.attend`):

- `segments` cases: `segments` diagonal blocks of `seg_len` tokens, causal or full, in one call
  (segment lengths 8-1,024 tokens, 1-4,096 segments, at most `--max-tokens` tokens a call);
- `crop` cases: the call ring rank 0 makes at step 0 (its own pieces, causal) and step 1 (the
  previous rank's pieces, full) with `layout=doc_zigzag` on causal_document, 8K tokens per rank,
  at 8-64 ranks (`--crop-worlds`); the documents come from `--crop-sampler` (default `magi` when
  registered, else prolong512k cut at a quarter of the length), and every crop's slices are
  written to crops.json so the rows can be priced again.

Each time is the median of `--repeat` calls after `--warmup` (CUDA events, L2 flushed before each
call; on CPU wall clock). `bwd` times `backward_lse` alone, given the forward's out and lse.
flex-fa4 compiles for every shape, so it runs the `--flex-cases` subset. Rows go to
OUTPUT/rows.jsonl as they finish (a kernel that cannot run gives `unsupported` rows with the
reason, a failing call an `error` row), then OUTPUT/table.md; `--resume` skips cases already
there; `--max-minutes` starts no case after that long.

On the H200 (the default grid, GQA 64:8, head_dim 128, bf16; about 5 minutes):

    python benchmarks/varlen_segments.py --output results/varlen-segments --kernels fa2,fa3,fa4,flex-fa4

On a CPU (the `reference` kernel, tiny sizes; what tests/test_varlen_segments.py runs):

    python benchmarks/varlen_segments.py --device cpu --grid tiny --kernels reference --output /tmp/vs

Read back by `longca_sim.segments.segment_rows` and fitted by `docs/scripts/cp_fit.py --segments DIR`.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

GRIDS: dict[str, dict[str, Any]] = {
    # lengths x counts, kept where a call holds at most max_tokens, plus each length's full call
    "default": dict(lengths=(8, 32, 128, 512, 1024), counts=(1, 16, 256, 4096), max_tokens=32768,
                    crop_worlds=(8, 16, 32, 64), per_rank=8192, heads="64:8", head_dim=128, dtype="bfloat16",
                    warmup=3, repeat=10),
    "tiny": dict(lengths=(8, 32), counts=(1, 4), max_tokens=128, crop_worlds=(2, 4), per_rank=64, heads="4:2",
                 head_dim=16, dtype="float32", warmup=1, repeat=2),
}
# flex-fa4 compiles per shape: these (kind, seg_len, segments) and the crops of the first and last world
FLEX_CASES = (("causal", 8, 4096), ("causal", 32, 1024), ("causal", 128, 256), ("causal", 1024, 32),
              ("full", 128, 256))


def fail(message: str) -> None:
    print(f"varlen_segments: {message}", file=sys.stderr)
    sys.exit(2)


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        fail(f"{what}: expected comma-separated integers, got {text!r}")
    if not values or min(values) < 1:
        fail(f"{what}: expected positive integers, got {text!r}")
    return values


def segment_cases(grid: dict[str, Any]) -> list[dict[str, Any]]:
    cases = []
    for kind in ("causal", "full"):
        for length in grid["lengths"]:
            counts = sorted({c for c in grid["counts"] if c * length <= grid["max_tokens"]}
                            | {max(1, grid["max_tokens"] // length)})
            for count in counts:
                cases.append(dict(case="segments", kind=kind, seg_len=length, segments=count,
                                  id=f"seg-{kind}-{length}x{count}"))
    return cases


def crop_cases(grid: dict[str, Any], sampler: str, seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Ring rank 0's call at steps 0 and 1 with doc_zigzag on causal_document, per world size."""
    from longca.plugins import get_registry
    from longca.problem import Problem, build_mask
    from longca_cp.schedule import RingSchedule

    registry = get_registry()
    hq, hkv = (int(x) for x in grid["heads"].split(":"))
    cases, crops = [], {}
    for world in grid["crop_worlds"]:
        seqlen = grid["per_rank"] * world
        name, params = sampler, {}
        if sampler == "auto-crop":
            name = "magi" if "magi" in registry.names("samplers") else "prolong512k"
            params = {} if name == "magi" else {"max_len": seqlen // 4, "split": 1}
        problem = Problem(kernel="reference", mask="causal_document", seqlen=seqlen, heads_q=hq, heads_kv=hkv,
                          head_dim=grid["head_dim"], sampler=name, seed=seed, sampler_params=params,
                          strategy="ring-p2p", world_size=world)
        mask = build_mask(problem, 0, registry)
        schedule = RingSchedule(problem, mask.static_slices(), 1, 1, "doc_zigzag")
        calls = schedule.rank_calls(0)
        for step in (0, 1):
            for i, call in enumerate(calls.calls_of_step(step)):
                crop_id = f"crop-w{world}-s{step}-{i}"
                crops[crop_id] = dict(world=world, step=step, sampler=name, sampler_params=params, seed=seed,
                                      q_len=call.q1 - call.q0, k_len=call.k1 - call.k0,
                                      slices=np.asarray(call.slices).tolist())
                cases.append(dict(case="crop", crop_id=crop_id, world=world, step=step, id=crop_id,
                                  segments=len(call.slices), kind="causal" if step == 0 else "full"))
    return cases, crops


def time_call(fn: Callable[[], object], device, warmup: int, repeat: int) -> list[float]:
    from longca_runner.timing import time_ms

    return time_ms(fn, device, warmup=warmup, repeat=repeat)


def measure(spec, case: dict[str, Any], crops: dict[str, Any], grid: dict[str, Any], direction: str,
            device) -> dict[str, Any]:
    import torch

    from longca_sim.costmodel import pair_table, table_features
    from longca_sim.segments import case_slices

    hq, hkv = (int(x) for x in grid["heads"].split(":"))
    d = grid["head_dim"]
    dtype = getattr(torch, grid["dtype"])
    slices, q_len, k_len = case_slices(case, crops)
    gen = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(1, q_len, hq, d, generator=gen).to(device, dtype)
    k = torch.randn(1, k_len, hkv, d, generator=gen).to(device, dtype)
    v = torch.randn(1, k_len, hkv, d, generator=gen).to(device, dtype)
    scale = 1.0 / math.sqrt(d)
    with torch.no_grad():
        out, lse = spec.forward_lse(q, k, v, slices, scale)
        if direction == "fwd":
            fn: Callable[[], object] = lambda: spec.forward_lse(q, k, v, slices, scale)  # noqa: E731
        else:
            dout = torch.randn(out.shape, generator=gen).to(device, dtype)
            fn = lambda: spec.backward_lse(dout, q, k, v, out, lse, slices, scale)  # noqa: E731
        times = time_call(fn, device, grid["warmup"], grid["repeat"])
    area = sum(int(x) for x in np.atleast_1d(_areas(slices)))
    feats = table_features(pair_table(slices, [(0, q_len)], [(0, k_len)]), hq).sum(axis=0)
    ms = statistics.median(times)
    flops = 4.0 * area * hq * d * (2.5 if direction == "bwd" else 1.0)
    return dict(status="ok", ms_median=ms, ms_min=min(times), ms_max=max(times), times=times, area=area,
                tflops=flops / (ms * 1e-3) / 1e12 if ms > 0 else 0.0, features=[float(x) for x in feats])


def _areas(slices: np.ndarray) -> int:
    from longca.masks import slices as sl

    return int(sl.area(slices))


def write_table(folder: Path, rows: list[dict[str, Any]]) -> None:
    lines = ["# Varlen calls with many short segments (benchmarks/varlen_segments.py)", "",
             "One call of each kernel's forward_lse / backward_lse; ms is the median of the timed calls, us/seg the "
             "time per segment, TFLOP/s on the exact area (backward counted as 2.5 x the forward's FLOPs).", "",
             "| kernel | dir | case | kind | seg len | segments | tokens | ms | us/seg | TFLOP/s | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["kernel"], r["direction"], r["case"], r.get("kind", ""),
                                         r.get("seg_len") or 0, r.get("world") or 0, r.get("segments") or 0)):
        if r["status"] == "ok":
            timing = (f"{r['ms_median']:.4f} | {1e3 * r['ms_median'] / max(1, r['segments']):.2f} | "
                      f"{r['tflops']:.3g}")
        else:
            timing = "- | - | -"
        what = f"w{r['world']} step {r['step']}" if r["case"] == "crop" else "segments"
        tokens = r.get("tokens", "")
        lines.append(f"| {r['kernel']} | {r['direction']} | {what} | {r.get('kind', '')} | {r.get('seg_len') or '-'} | "
                     f"{r.get('segments', '')} | {tokens} | {timing} | {r['status']}"
                     f"{': ' + r['reason'] if r.get('reason') else ''} |")
    (folder / "table.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="folder for rows.jsonl, crops.json, table.md")
    parser.add_argument("--kernels", default="fa2,fa3,fa4,flex-fa4")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--grid", default="default", help="default (H200) or tiny (CPU)")
    parser.add_argument("--directions", default="fwd,bwd")
    parser.add_argument("--crop-worlds", default="", help="world sizes of the doc_zigzag crops (default: the grid's)")
    parser.add_argument("--crop-sampler", default="auto-crop",
                        help="document sampler of the crops (default magi if registered, else prolong512k cut at S/4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-minutes", type=float, default=5.5, help="start no case after this long")
    parser.add_argument("--resume", action="store_true", help="skip cases already in OUTPUT/rows.jsonl")
    args = parser.parse_args(argv)

    if args.grid not in GRIDS:
        fail(f"unknown grid {args.grid!r}; known: {', '.join(GRIDS)}")
    grid = dict(GRIDS[args.grid])
    if args.crop_worlds:
        grid["crop_worlds"] = parse_ints(args.crop_worlds, "--crop-worlds")
    directions = [d for d in args.directions.split(",") if d]
    if not directions or set(directions) - {"fwd", "bwd"}:
        fail(f"--directions: expected fwd, bwd or both, got {args.directions!r}")
    if args.device not in ("cuda", "cpu") and not args.device.startswith("cuda:"):
        fail(f"--device: expected cuda or cpu, got {args.device!r}")
    if args.max_minutes <= 0:
        fail(f"--max-minutes must be positive, got {args.max_minutes}")

    import torch

    from longca.errors import LongcaError
    from longca.plugins import get_registry

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        fail("--device cuda: no CUDA GPU here (use --device cpu --grid tiny --kernels reference)")
    device = torch.device(args.device)
    registry = get_registry()
    kernels = [k for k in args.kernels.split(",") if k]
    known = set(registry.names("kernels"))
    unknown = [k for k in kernels if k not in known]
    if not kernels or unknown:
        fail(f"unknown kernel(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(sorted(known))}")
    folder = Path(args.output)
    if folder.exists() and not folder.is_dir():
        fail(f"--output {folder} exists and is not a folder")
    rows_path = folder / "rows.jsonl"
    if rows_path.exists() and not args.resume:
        fail(f"{rows_path} exists: use --resume to continue it, or another --output")
    folder.mkdir(parents=True, exist_ok=True)

    try:
        cases, crops = crop_cases(grid, args.crop_sampler, args.seed)
    except LongcaError as exc:
        fail(str(exc))
    cases = segment_cases(grid) + cases
    crops_path = folder / "crops.json"
    if crops_path.exists():
        crops = {**json.loads(crops_path.read_text()), **crops}
    crops_path.write_text(json.dumps(crops) + "\n")
    done = set()
    rows: list[dict[str, Any]] = []
    if rows_path.exists():
        rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
        done = {(r["kernel"], r["direction"], r["id"]) for r in rows}
    flex_worlds = {min(grid["crop_worlds"]), max(grid["crop_worlds"])}
    start = time.monotonic()
    hq, hkv = (int(x) for x in grid["heads"].split(":"))
    with rows_path.open("a") as sink:
        for kernel in kernels:
            spec = registry.kernel(kernel)
            reason = spec.available() if spec.forward_lse and spec.backward_lse else "no forward_lse/backward_lse"
            for case in cases:
                if kernel == "flex-fa4" and not ((case["case"] == "segments" and (case["kind"], case["seg_len"],
                                                                                  case["segments"]) in FLEX_CASES)
                                                 or (case["case"] == "crop" and case["world"] in flex_worlds)):
                    continue
                for direction in directions:
                    if (kernel, direction, case["id"]) in done:
                        continue
                    if time.monotonic() - start > 60 * args.max_minutes:
                        print(f"varlen_segments: --max-minutes {args.max_minutes} reached; --resume continues",
                              file=sys.stderr)
                        write_table(folder, rows)
                        return
                    slices_len = (case["seg_len"] * case["segments"] if case["case"] == "segments"
                                  else crops[case["crop_id"]]["q_len"])
                    row: dict[str, Any] = dict(kernel=kernel, direction=direction, device=str(device),
                                               heads_q=hq, heads_kv=hkv, head_dim=grid["head_dim"],
                                               dtype=grid["dtype"], tokens=slices_len, **case)
                    if reason:
                        row.update(status="unsupported", reason=str(reason).splitlines()[0])
                    else:
                        try:
                            row.update(measure(spec, case, crops, grid, direction, device))
                        except torch.cuda.OutOfMemoryError:
                            row.update(status="oom")
                        except Exception as exc:  # noqa: BLE001 - a failing call is a row, not a stop
                            row.update(status="error", reason=f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
                        if device.type == "cuda":
                            torch.cuda.empty_cache()
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                    rows.append(row)
                    print(f"{kernel:9s} {direction} {case['id']:24s} {row['status']:11s} "
                          f"{row.get('ms_median', float('nan')):.4f} ms", flush=True)
    write_table(folder, rows)
    print(f"wrote {rows_path} ({len(rows)} rows) and {folder / 'table.md'} in {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
