"""Where a CP strategy's time goes at world size 1: its step against its inner kernel alone.

At world size 1 a strategy should cost what its inner kernel costs. This runs each strategy's
step (as `longca_runner.cp.measure` does: `prepare`, `dispatch`, then `attention` forward or its
backward) and the inner kernel's own plugin call (`prepare` + `run`, the sweep's baseline), and
times them with `longca_runner.timing.time_interleaved`: the kernel alone and every strategy take turns
call by call, so a ratio is not the drift of the GPU's clock between two blocks of calls (on the
H200 the same 52 ms kernel read 52.1-57.5 ms in blocks timed one after another). With
`--profile-steps` it also runs each step under `torch.profiler` and writes its device time per
step by kernel name, largest first. One process, one rank (a process group of size 1).

Every (kernel, mask, length, direction) is one case; a strategy or kernel that refuses a case,
or fails in it, is a row with its reason and the run goes on. Writes `rows.jsonl` (one row per
strategy and case: `ratio` = kernel alone ms / strategy step ms, 1.0 = no cost), `table.md` and
`profile.md`.

    python benchmarks/cp_profile.py --kernels fa4,fa3 --masks full,causal --seqlens 8k,32k \
        --directions fwd,bwd --out prof
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from longca.capability import strategy_unsupported as unsupported
from longca.errors import LongcaError, UnsupportedError
from longca.plugins import get_registry
from longca.problem import Problem, build_mask, make_inputs
from longca.sizes import format_size, parse_heads, parse_size
from longca_cp.inner import inner_kernel
from longca_runner.cp.measure import resolve
from longca_runner.measure import make_step, seeded_dout, unsupported_reason
from longca_runner.timing import time_interleaved


def strategy_parts(problem: Problem, registry, options: dict | None = None):
    """(spec, plan, this rank's q/k/v shards, its dout or None) of a strategy's step, made as
    `longca_runner.cp.measure` makes them: `prepare` (collective), then `dispatch` of the seeded inputs."""
    spec = registry.strategy(problem.strategy)
    inner = inner_kernel(problem, registry)
    mask = build_mask(problem, 0, registry)
    options = resolve(problem, options or {}, registry)
    q, k, v = make_inputs(problem, 0)
    plan = spec.prepare(problem, mask, inner, dist.group.WORLD, options)
    grad = problem.direction != "fwd"
    local = tuple(spec.dispatch(t, plan).detach().requires_grad_(grad) for t in (q, k, v))
    dout = spec.dispatch(seeded_dout(problem, 0), plan) if grad else None
    return spec, plan, local, dout


def strategy_step(problem: Problem, registry) -> Callable[[], object]:
    spec, plan, (ql, kl, vl), dout = strategy_parts(problem, registry)
    return make_step(lambda: spec.attention(ql, kl, vl, plan), (ql, kl, vl), problem.direction, dout)


def kernel_step(problem: Problem, registry) -> Callable[[], object]:
    problem = problem.with_(strategy=None, world_size=1)
    spec = registry.kernel(problem.kernel)
    mask = build_mask(problem, 0, registry)
    grad = problem.direction != "fwd"
    q, k, v = make_inputs(problem, 0, requires_grad=grad)
    state = spec.prepare(problem, mask, q, k, v)
    dout = seeded_dout(problem, 0) if grad else None
    return make_step(lambda: spec.run(state, q, k, v), (q, k, v), problem.direction, dout)


def kernel_table(step: Callable[[], object], steps: int) -> list[tuple[str, float, int]]:
    """[(kernel name, device ms per step, launches per step)] of `steps` calls, largest first."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    per_kernel: dict[str, list[float]] = collections.defaultdict(list)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[event.name].append(event.device_time_total / 1e3)
    rows = [(name, sum(t) / steps, round(len(t) / steps)) for name, t in per_kernel.items()]
    return sorted(rows, key=lambda r: -r[1])


def report(label: str, rows: list[tuple[str, float, int]], top: int) -> str:
    busy = sum(r[1] for r in rows)
    lines = [f"### {label}: device busy {busy:.3f} ms a step (profiler)", "",
             "| device ms | launches | kernel |", "|---|---|---|"]
    lines += [f"| {t:.3f} | {n} | {name[:110]} |" for name, t, n in rows[:top]]
    return "\n".join(lines) + "\n"


def case_problem(case: dict, args) -> Problem:
    """The inner kernel's problem for one case (raises LongcaError on a bad direction, dtype or size)."""
    hq, hkv = parse_heads(args.heads)
    return Problem(kernel=case["kernel"], mask=case["mask"], seqlen=case["seqlen"], heads_q=hq, heads_kv=hkv,
                   head_dim=args.head_dim, dtype=args.dtype, direction=case["direction"], device=args.device,
                   sampler=args.sampler)


def case_rows(case: dict, strategies: list[str], args, registry) -> tuple[list[dict], str]:
    """The rows of one (kernel, mask, seqlen, direction): every strategy's step against the kernel alone."""
    base = case_problem(case, args)
    reason = unsupported_reason(registry.kernel(base.kernel), base, registry)
    if reason:
        return [{**case, "strategy": None, "status": "unsupported", "reason": reason}], ""
    steps = {"alone": kernel_step(base, registry)}
    steps["alone"]()  # compile / JIT outside the timings
    rows: dict[str, dict] = {}
    for name in strategies:
        problem = base.with_(strategy=name, world_size=1)
        reason = unsupported(problem, resolve(problem, {}, registry), registry)
        if reason:
            rows[name] = {**case, "strategy": name, "status": "unsupported", "reason": reason}
            continue
        try:
            step = strategy_step(problem, registry)
            step()  # the first call compiles, and a refusal in the backward surfaces here
        except UnsupportedError as exc:
            rows[name] = {**case, "strategy": name, "status": "unsupported", "reason": str(exc)}
        except Exception as exc:  # noqa: BLE001 - one failing strategy is a row, the others are timed
            traceback.print_exc()
            rows[name] = {**case, "strategy": name, "status": "error", "reason": f"{type(exc).__name__}: {exc}"[:300]}
        else:
            steps[name] = step
    device = torch.device(args.device)
    if len(steps) == 1:  # every strategy refused or failed: nothing to compare the kernel with
        return [rows[name] for name in strategies], ""
    times = time_interleaved(steps, device, warmup=args.warmup, repeat=args.repeat)
    alone = statistics.median(times["alone"])
    for name, t in times.items():
        if name != "alone":
            step_ms = statistics.median(t)
            rows[name] = {**case, "strategy": name, "status": "ok", "alone_ms": alone, "step_ms": step_ms,
                          "ratio": alone / step_ms, "calls": len(t)}
    text = ""
    if args.profile_steps and device.type == "cuda":
        label = f"{case['kernel']} {case['mask']} {format_size(case['seqlen'])} {case['direction']}"
        text = "".join(report(f"{label}: {name}", kernel_table(step, args.profile_steps), args.top)
                       for name, step in steps.items())
    return [rows[name] for name in strategies], text


def table(rows: list[dict], strategies: list[str]) -> str:
    """One line per case: alone ms, then each strategy's ratio (alone / step) or why it has none."""
    lines = ["| inner | mask | S | dir | alone ms | " + " | ".join(strategies) + " |",
             "|---|---|---|---|---|" + "---|" * len(strategies)]
    cases: dict[tuple, dict] = {}
    for r in rows:
        cases.setdefault((r["kernel"], r["mask"], r["seqlen"], r["direction"]), {})[r["strategy"]] = r
    for (kernel, mask, seqlen, direction), by in cases.items():
        alone = next((f"{r['alone_ms']:.3f}" for r in by.values() if r["status"] == "ok"), "")
        cells = []
        for name in strategies:
            r = by.get(name) or by.get(None) or {"status": "not run"}
            cells.append(f"{r['ratio']:.3f}" if r["status"] == "ok" else r["status"])
        head = f"| {kernel} | {mask} | {format_size(seqlen)} | {direction} | {alone} | "
        lines.append(head + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", default="fa4")
    parser.add_argument("--strategies", default="ulysses,ring-p2p,ring-allgather,usp,loongtrain")
    parser.add_argument("--masks", default="full")
    parser.add_argument("--seqlens", default="32k")
    parser.add_argument("--directions", default="fwd")
    parser.add_argument("--heads", default="64:8")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--sampler", default="prolong512k")
    parser.add_argument("--device", default="cuda", help="cuda (NCCL); cpu (gloo) only tests this script")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20, help="timed calls of each step (interleaved)")
    parser.add_argument("--profile-steps", type=int, default=0, help="profile this many calls of each step")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--max-minutes", type=float, default=None, help="start no case after this many minutes")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    registry = get_registry()
    strategies = args.strategies.split(",")
    for name in args.kernels.split(","):  # unknown names, sizes and values fail here, before a GPU is touched
        registry.kernel(name)
    for name in strategies:
        registry.strategy(name)
    for name in args.masks.split(","):
        registry.mask(name)
    if args.repeat < 1 or args.warmup < 0 or args.profile_steps < 0:
        raise SystemExit("cp_profile: --repeat must be at least 1, --warmup and --profile-steps at least 0")
    seqlens = [parse_size(s) for s in args.seqlens.split(",")]
    cases = [{"kernel": kernel, "mask": mask, "seqlen": seqlen, "direction": direction, "heads": args.heads,
              "head_dim": args.head_dim, "dtype": args.dtype}
             for kernel in args.kernels.split(",") for mask in args.masks.split(",") for seqlen in seqlens
             for direction in args.directions.split(",")]
    for case in cases:
        case_problem(case, args)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("cp_profile: needs a CUDA GPU (it profiles CUDA kernels over NCCL); --device cpu tests it")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=0, world_size=1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start, rows = time.time(), []
    with open(out / "rows.jsonl", "a") as f, open(out / "profile.md", "a") as prof:
        for case in cases:
            if args.max_minutes is not None and time.time() - start > 60 * args.max_minutes:
                break
            t0 = time.time()
            try:
                got, text = case_rows(case, strategies, args, registry)
            except Exception as exc:  # noqa: BLE001 - a failed case is a row, the run goes on
                traceback.print_exc()
                got, text = [{**case, "strategy": None, "status": "error",
                              "reason": f"{type(exc).__name__}: {exc}"[:300]}], ""
            for row in got:
                row["wall_s"] = round(time.time() - t0, 2)
                f.write(json.dumps(row) + "\n")
            f.flush()
            prof.write(text)
            prof.flush()
            rows += got
            print(table(got, strategies).splitlines()[-1], f"({time.time() - t0:.0f} s)", flush=True)
            if args.device == "cuda":
                torch.cuda.empty_cache()
    (out / "table.md").write_text(table(rows, strategies))
    print(table(rows, strategies))
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except LongcaError as exc:  # an unknown kernel, strategy, mask or size: one line, not a traceback
        raise SystemExit(f"cp_profile: {exc}") from None
