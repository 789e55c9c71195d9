"""The torch-cp strategy against torch's context parallel called directly, in the same processes.

Issue 29: every wrapped library is timed against a direct call of it. For `torch-cp` the plugin
path is what `longca dist-run --strategy torch-cp` runs on each rank: the strategy's `prepare`,
`dispatch` and `attention` (`cp_profile.strategy_parts`, made as `longca_runner.cp.measure` makes them),
in longca's step (`make_step`). The direct path is written as torch's own CP tests and torchtitan
write it, on the same global q, k, v (as (B, H, S, D)), the same load balancer and rotate method:

- `--inner sdpa`: a DeviceMesh, `context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2])`
  around a module calling `F.scaled_dot_product_attention` (K/V heads repeated for GQA);
  head-tail balancing through `_cp_options.enable_load_balance`, `set_rotate_method(rotate)`.
- `--inner flex`: `context_parallel` patches SDPA only (it takes no BlockMask), so as torch's flex CP
  test does: a module calling `flex_attention` (compiled on CUDA, eager on CPU) under
  `parallelize_module(..., _ContextParallel(seq_dim=2, FLEX))`, and `_context_parallel_shard(mesh,
  [q, k, v, block_mask], ...)`, which builds the CP BlockMask from the global `create_block_mask` over
  the mask_mod a Flex user writes (`plugin_vs_direct.user_mask_mod`, not longca's mask_mods).

The two take turns by rounds (direct, plugin; then plugin, direct; ...), each round `--round-calls`
calls timed by `longca_runner.timing.time_ms` (CUDA events, L2 flushed; the host clock on CPU), every rank
entering each round together. Per rank the median of each; a row holds the mean of the rank medians
(as `longca dist-run` reports), `ratio` = direct ms / plugin ms (1.0: the plugin costs nothing) and
`rel_diff` = |out_plugin - out_direct| / |out_direct| of the gathered outputs. Writes `rows.jsonl`
and `table.md` under --out and prints the table.

    python benchmarks/torch_cp_direct.py --nproc 1 --inner sdpa --mask causal --seqlen 16k \\
        --heads 64:8 --direction fwdbwd --out torch-cp-direct
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import statistics
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from longca.capability import strategy_unsupported as unsupported
from longca.errors import LongcaError
from longca.plugins import get_registry
from longca.problem import Problem, build_mask, make_inputs
from longca.sizes import format_size, parse_heads, parse_size
from longca_runner.cp.launch import default_backend, init_group, spawn
from longca_runner.cp.measure import resolve
from longca_runner.launcher import under_torchrun
from longca_runner.measure import make_step, seeded_dout
from longca_runner.timing import synchronize, time_ms


def _sibling(name: str):
    """benchmarks/NAME.py as a module (the scripts are not a package)."""
    loader = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / f"{name}.py")
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


cp_profile = _sibling("cp_profile")  # strategy_parts: the plugin's step as longca_runner.cp.measure makes it
pvd = _sibling("plugin_vs_direct")  # user_mask_mod (the mask_mod a Flex user writes), rel_diff

DIRECTIONS = ("fwd", "fwdbwd")
# on CPU both paths run flex eagerly, as the plugin does there: torch's advice to compile it is not news here
warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")


def _cp():
    from torch.distributed.tensor.experimental import _context_parallel as cp

    return cp


class _SDPA(torch.nn.Module):
    def forward(self, q, k, v, *, is_causal: bool, scale: float):
        import torch.nn.functional as F

        group = q.shape[1] // k.shape[1]
        if group > 1:  # GQA: K/V heads repeated before SDPA, as torchtitan's attention does
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)


class _Flex(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, q, k, v, *, block_mask, scale: float):
        return self.fn(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])


class Direct:
    """torch's context parallel on the global (B, H, S, D) q, k, v, written as torch's CP tests write it."""

    def __init__(self, problem: Problem, options: dict[str, Any], registry) -> None:
        from torch.distributed.device_mesh import init_device_mesh

        cp = _cp()
        self.problem, self.options, self.cp = problem, options, cp
        world, seqlen, device = problem.world_size, problem.seqlen, torch.device(problem.device)
        self.mesh = init_device_mesh(problem.device_type, (world,), mesh_dim_names=("cp",))
        self.balanced = options["load_balance"] == "head-tail"
        self.balancer = cp._HeadTailLoadBalancer(seqlen, world, device) if self.balanced else None
        self.grad = problem.direction != "fwd"
        self.scale = 1.0 / math.sqrt(problem.head_dim)  # longca_cp's inner_kernel scale
        q, k, v = make_inputs(problem, 0)
        self.qkv = [t.transpose(1, 2).contiguous() for t in (q, k, v)]  # global (B, H, S, D)
        self.dout = seeded_dout(problem, 0).transpose(1, 2).contiguous() if self.grad else None
        if problem.kernel == "sdpa":
            self.module: torch.nn.Module = _SDPA()
            self.is_causal = problem.mask == "causal"
            return
        from torch.distributed.tensor.parallel import parallelize_module
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        fn = torch.compile(flex_attention, dynamic=False) if device.type == "cuda" else flex_attention
        self.module = parallelize_module(_Flex(fn), self.mesh, cp._ContextParallel(
            seq_dim=2, attention_type=cp._ContextParallel.AttentionType.FLEX))
        mask_mod = pvd.user_mask_mod(build_mask(problem, 0, registry), device)
        block_mask = create_block_mask(mask_mod, 1, 1, seqlen, seqlen, device=device)
        *local, self.block_mask = cp._context_parallel_shard(self.mesh, [*self.qkv, block_mask], [2] * 4,
                                                             load_balancer=self.balancer)
        self.local = [t.detach().requires_grad_(self.grad) for t in local]
        (self.local_dout,) = (cp._context_parallel_shard(self.mesh, [self.dout], [2], self.balancer)
                              if self.grad else (None,))

    def _call(self, q, k, v):
        if self.problem.kernel == "sdpa":
            return self.module(q, k, v, is_causal=self.is_causal, scale=self.scale)
        return self.module(q, k, v, block_mask=self.block_mask, scale=self.scale)

    @contextlib.contextmanager
    def round(self):
        """(step, call) of one round: inside torch's `context_parallel` for SDPA (it shards the buffers on entry),
        on the shards cut once for flex. `call()` is this rank's output (B, H, S/W, D)."""
        if self.problem.kernel != "sdpa":
            call = lambda: self._call(*self.local)  # noqa: E731
            yield make_step(call, self.local, self.problem.direction, self.local_dout), call
            return
        cp = self.cp
        cp._attention._cp_options.enable_load_balance = self.balanced  # context_parallel's head-tail switch
        cp.set_rotate_method(self.options["rotate"])
        buffers = [t.clone() for t in self.qkv] + ([self.dout.clone()] if self.grad else [])
        try:
            with cp.context_parallel(self.mesh, buffers=buffers, buffer_seq_dims=[2] * len(buffers),
                                     no_restore_buffers=set(buffers)):
                q, k, v = (t.requires_grad_(self.grad) for t in buffers[:3])
                call = lambda: self._call(q, k, v)  # noqa: E731
                yield make_step(call, (q, k, v), self.problem.direction, buffers[3] if self.grad else None), call
        finally:
            cp._enable_context_parallel_dispatcher()  # its exit turned off the dispatcher the plugin's modules use

    def output(self) -> torch.Tensor:
        """The global (B, S, H, D) output, gathered in sequence order (`context_parallel_unshard`)."""
        with self.round() as (_, call), torch.no_grad():
            (full,) = self.cp.context_parallel_unshard(self.mesh, [call()], [2], self.balancer)
        return full.transpose(1, 2)


def case_row(case: dict, run: dict, device: str) -> dict:
    """One case on every rank of the group (collective): the row on rank 0, {} elsewhere."""
    registry = get_registry()
    problem = Problem(**{**case["problem"], "device": device})
    options = case["options"]
    spec, plan, local, dout = cp_profile.strategy_parts(problem, registry, options)
    plugin_step = make_step(lambda: spec.attention(*local, plan), local, problem.direction, dout)
    direct = Direct(problem, options, registry)
    torch_device = torch.device(device)
    times: dict[str, list[float]] = {"direct": [], "plugin": []}

    def timed_round(name: str, calls: int) -> None:
        dist.barrier()
        if name == "plugin":
            times["plugin"] += time_ms(plugin_step, torch_device, warmup=0, repeat=calls)
            return
        with direct.round() as (step, _):
            times["direct"] += time_ms(step, torch_device, warmup=0, repeat=calls)

    for name in ("direct", "plugin"):  # compile / first calls, untimed
        timed_round(name, run["warmup"])
    for calls in times.values():
        calls.clear()
    for i in range(run["rounds"]):
        for name in (("direct", "plugin") if i % 2 == 0 else ("plugin", "direct")):
            timed_round(name, run["round_calls"])
    synchronize(torch_device)
    with torch.no_grad():
        plugin_out = spec.undispatch(spec.attention(*local, plan), plan)
    direct_out = direct.output()
    # every rank's two medians as one float64 tensor: no object collective, so nothing is unpickled
    on = torch_device if dist.get_backend() == "nccl" else torch.device("cpu")
    mine = torch.tensor([statistics.median(times["direct"]), statistics.median(times["plugin"])],
                        dtype=torch.float64, device=on)
    gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    ranks = [dict(zip(("direct", "plugin"), g.cpu().tolist(), strict=True)) for g in gathered]
    if dist.get_rank() != 0:
        return {}
    direct_ms = statistics.fmean(r["direct"] for r in ranks)
    plugin_ms = statistics.fmean(r["plugin"] for r in ranks)
    return {**case["row"], "status": "ok", "direct_ms": direct_ms, "plugin_ms": plugin_ms,
            "ratio": direct_ms / plugin_ms, "direct_ms_max_rank": max(r["direct"] for r in ranks),
            "plugin_ms_max_rank": max(r["plugin"] for r in ranks), "calls": len(times["plugin"]),
            "rel_diff": pvd.rel_diff(plugin_out, direct_out), "options": options}


def rank_main(device: str, cases: list[dict], run: dict) -> list[dict]:
    """Every case on this rank: rows on rank 0 (a case that fails is a row with its error)."""
    rows = []
    for case in cases:
        t0 = time.time()
        try:
            row = case_row(case, run, device)
        except Exception as exc:  # noqa: BLE001 - one failing case is a row; the ranks fail it together
            traceback.print_exc()
            row = {**case["row"], "status": "error", "reason": f"{type(exc).__name__}: {exc}"[:300]}
        if dist.get_rank() == 0:
            rows.append({**row, "wall_s": round(time.time() - t0, 2)})
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| W | inner | mask | S | heads | dir | direct ms | plugin ms | direct/plugin | rel diff |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = (f"| {r['world_size']} | {r['inner']} | {r['mask']} | {format_size(r['seqlen'])} | {r['heads']} "
                f"| {r['direction']} |")
        if r["status"] == "ok":
            lines.append(f"{head} {r['direct_ms']:.3f} | {r['plugin_ms']:.3f} | {r['ratio']:.3f} "
                         f"| {r['rel_diff']:.1e} |")
        else:
            lines.append(f"{head} {r['status']}: {r['reason']} | | | |")
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", default="1", help="world sizes, comma-separated (one launch each)")
    parser.add_argument("--inner", default="sdpa", help="sdpa or flex (torch's attention under CP)")
    parser.add_argument("--mask", default="causal", help="masks, comma-separated")
    parser.add_argument("--seqlen", default="16k", help="lengths, comma-separated")
    parser.add_argument("--heads", default="64:8")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", default=None, help="default bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--direction", default="fwd", help="fwd and/or fwdbwd, comma-separated")
    parser.add_argument("--device", default="cuda", help="cuda (NCCL) or cpu (gloo)")
    parser.add_argument("--backend", default=None, help="default: nccl on CUDA, gloo on CPU")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="torch-cp option (load_balance, rotate), as for longca dist-run")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls of each before the rounds")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of each (alternating)")
    parser.add_argument("--round-calls", type=int, default=5, help="timed calls per round")
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def plan_cases(args: argparse.Namespace, world: int, registry) -> list[dict]:
    """Every (mask, seqlen, direction) of one world size: problem fields, resolved options, row head, refusal."""
    hq, hkv = parse_heads(args.heads)
    given: dict[str, Any] = {}
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep:
            raise LongcaError(f"--option {item!r}: expected NAME=VALUE")
        given[name] = value
    cases = []
    for mask in args.mask.split(","):
        registry.mask(mask)
        for seqlen in (parse_size(s) for s in args.seqlen.split(",")):
            for direction in args.direction.split(","):
                if direction not in DIRECTIONS:
                    raise LongcaError(f"direction {direction!r}: this benchmark times {', '.join(DIRECTIONS)}")
                problem = Problem(kernel=args.inner, mask=mask, seqlen=seqlen, heads_q=hq, heads_kv=hkv,
                                  head_dim=args.head_dim, dtype=args.dtype, direction=direction, device=args.device,
                                  strategy="torch-cp", world_size=world, strategy_options=given)
                options = resolve(problem, given, registry)
                row = {"world_size": world, "inner": args.inner, "mask": mask, "seqlen": seqlen, "heads": args.heads,
                       "head_dim": args.head_dim, "dtype": args.dtype, "direction": direction, "device": args.device}
                fields = {f: getattr(problem, f) for f in ("kernel", "mask", "seqlen", "heads_q", "heads_kv",
                                                           "head_dim", "direction", "strategy", "world_size")}
                fields["dtype"] = args.dtype
                cases.append({"problem": fields, "options": options, "row": row,
                              "refusal": unsupported(problem, options, registry)})
    return cases


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse(argv)
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    registry = get_registry()
    if args.inner not in ("sdpa", "flex"):
        raise LongcaError(f"--inner {args.inner!r}: torch-cp computes with torch's own attention, sdpa or flex")
    if min(args.warmup + 1, args.rounds, args.round_calls) < 1:
        raise LongcaError("--rounds and --round-calls must be at least 1, --warmup at least 0")
    worlds = [int(w) if w.isdigit() and int(w) > 0 else 0 for w in args.nproc.split(",")]
    if 0 in worlds:
        raise LongcaError(f"--nproc {args.nproc!r}: expected positive world sizes, e.g. 1,2")
    plans = {w: plan_cases(args, w, registry) for w in worlds}  # every bad value fails here, before a rank starts
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise LongcaError("--device cuda: no CUDA GPU here (--device cpu runs flex forward over gloo)")
    if under_torchrun() and worlds != [int(os.environ["WORLD_SIZE"])]:
        raise LongcaError(f"--nproc {args.nproc}: torchrun started {os.environ['WORLD_SIZE']} ranks")
    writer = not under_torchrun() or int(os.environ["RANK"]) == 0  # rank 0 writes the rows
    backend = args.backend or default_backend(args.device)
    run = {"warmup": args.warmup, "rounds": args.rounds, "round_calls": args.round_calls}
    out = Path(args.out)
    rows: list[dict] = []
    for world, cases in plans.items():
        todo = [c for c in cases if c["refusal"] is None]
        got: list[dict] = []
        if todo and under_torchrun():
            local = init_group(backend, args.device)
            try:
                got = rank_main(local, todo, run)
            finally:
                dist.destroy_process_group()
        elif todo:
            got = spawn(rank_main, world, backend, args.device, (todo, run))[0]
        if not writer:
            continue
        out.mkdir(parents=True, exist_ok=True)
        measured = iter(got)
        for case in cases:
            row = ({**case["row"], "status": "unsupported", "reason": case["refusal"]} if case["refusal"]
                   else next(measured))
            rows.append(row)
            with open(out / "rows.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
    if writer:
        (out / "table.md").write_text(table(rows))
        print(table(rows), flush=True)
    return rows

if __name__ == "__main__":
    try:
        main()
    except LongcaError as exc:  # a bad name, size or value: one line, not a traceback
        raise SystemExit(f"torch_cp_direct: {exc}") from None
