"""Where a CP strategy's time goes at world size 1: its step against its inner kernel alone, kernel by kernel.

At world size 1 a strategy should cost what its inner kernel costs. When a sweep says it does
not (`docs/results/h200/cp-ws1/`), this names the difference: it runs the strategy's step (as
`longca.cp.measure` does: `prepare`, `dispatch`, then `attention` forward or its backward) and
the inner kernel's own plugin call (`prepare` + `run`, the sweep's baseline) under
`torch.profiler`, and prints each one's device time per step by kernel name, largest first.
The step times come from `longca.timing.time_interleaved`: the kernel alone and every strategy
take turns call by call, so a ratio is not the drift of the GPU's clock between two blocks of
calls (on the H200 the same 52 ms kernel read 52.1-57.5 ms in blocks timed one after another). One
process, one rank (a process group of size 1).

    python benchmarks/cp_profile.py --kernel fa4 --strategies ulysses,ring-p2p --mask full --seqlen 32k --out prof
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from longca.cp.check import global_dout
from longca.errors import LongcaError
from longca.cp.inner import inner_kernel
from longca.cp.measure import resolve
from longca.plugins import get_registry
from longca.problem import Problem, build_mask, make_inputs
from longca.sizes import parse_heads, parse_size
from longca.timing import time_interleaved


def strategy_step(problem: Problem, registry) -> Callable[[], object]:
    spec = registry.strategy(problem.strategy)
    inner = inner_kernel(problem, registry)
    mask = build_mask(problem, 0, registry)
    options = resolve(problem, {}, registry)
    q, k, v = make_inputs(problem, 0)
    plan = spec.prepare(problem, mask, inner, dist.group.WORLD, options)
    grad = problem.direction != "fwd"
    ql, kl, vl = (spec.dispatch(t, plan).detach().requires_grad_(grad) for t in (q, k, v))
    if not grad:
        def fwd():
            with torch.no_grad():
                return spec.attention(ql, kl, vl, plan)
        return fwd
    dout = spec.dispatch(global_dout(problem, 0), plan)
    out = spec.attention(ql, kl, vl, plan)
    return lambda: torch.autograd.grad(out, (ql, kl, vl), dout, retain_graph=True)


def kernel_step(problem: Problem, registry) -> Callable[[], object]:
    problem = problem.with_(strategy=None, world_size=1)
    spec = registry.kernel(problem.kernel)
    mask = build_mask(problem, 0, registry)
    grad = problem.direction != "fwd"
    q, k, v = make_inputs(problem, 0, requires_grad=grad)
    state = spec.prepare(problem, mask, q, k, v)
    if not grad:
        def fwd():
            with torch.no_grad():
                return spec.run(state, q, k, v)
        return fwd
    out = spec.run(state, q, k, v)
    dout = global_dout(problem, 0)
    return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", default="fa4")
    parser.add_argument("--strategies", default="ulysses,ring-p2p,ring-allgather,usp,loongtrain")
    parser.add_argument("--mask", default="full")
    parser.add_argument("--seqlen", default="32k")
    parser.add_argument("--directions", default="fwd")
    parser.add_argument("--heads", default="64:8")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--sampler", default="prolong512k")
    parser.add_argument("--steps", type=int, default=3, help="profiled calls of each step")
    parser.add_argument("--repeat", type=int, default=20, help="timed calls of each step (interleaved)")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    registry = get_registry()
    registry.kernel(args.kernel)  # unknown names and sizes fail here, before a GPU is touched
    for name in args.strategies.split(","):
        registry.strategy(name)
    hq, hkv = parse_heads(args.heads)
    parse_size(args.seqlen)
    if not torch.cuda.is_available():
        raise SystemExit("cp_profile: needs a CUDA GPU (it profiles CUDA kernels over NCCL)")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = [f"# {args.kernel}, {args.mask} {args.seqlen}, heads {args.heads}, d{args.head_dim}: strategy steps "
            f"at world size 1 against the kernel alone\n"]
    for direction in args.directions.split(","):
        base = Problem(kernel=args.kernel, mask=args.mask, seqlen=parse_size(args.seqlen), heads_q=hq, heads_kv=hkv,
                       head_dim=args.head_dim, dtype="bfloat16", direction=direction, device="cuda",
                       sampler=args.sampler)
        steps = {f"{args.kernel} alone": kernel_step(base, registry)}
        for name in args.strategies.split(","):
            steps[name] = strategy_step(base.with_(strategy=name, world_size=1), registry)
        times = time_interleaved(steps, torch.device("cuda"), warmup=2, repeat=args.repeat)
        alone = statistics.median(times[f"{args.kernel} alone"])
        lines = [f"## {direction}: step time, all taking turns call by call ({args.repeat} calls each)", "",
                 "| step | median ms | alone / step |", "|---|---|---|"]
        lines += [f"| {name} | {statistics.median(t):.3f} | {alone / statistics.median(t):.3f} |"
                  for name, t in times.items()]
        text.append("\n".join(lines) + "\n")
        for name, step in steps.items():
            text.append(report(f"{direction}: {name}", kernel_table(step, args.steps), args.top))
        print("\n".join(text[-len(steps) - 1:]), flush=True)
        del steps
        torch.cuda.empty_cache()
    (out / f"cp_profile_{args.kernel}_{args.mask}_{args.seqlen}.md").write_text("\n".join(text))
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except LongcaError as exc:  # an unknown kernel, strategy, mask or size: one line, not a traceback
        raise SystemExit(f"cp_profile: {exc}")
