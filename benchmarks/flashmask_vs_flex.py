"""flashmask against FlexAttention, side by side in one run, on the heterogeneous masks.

Both kernels are measured through `longca.measure.run_problem` on the same problems (same mask
draw, same inputs, same timing: CUDA events, L2 flushed, median). `flex` is the `flex` plugin
when it is installed; otherwise (or with `--flex builtin`) this script registers its own
compiled FlexAttention, whose BlockMask comes from `create_block_mask` over a mask_mod built
from the same FlashMask column bounds. Writes results.jsonl, table.md, plot.png and run.json.

    python benchmarks/flashmask_vs_flex.py --out results/flashmask_vs_flex --tune
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import torch

from longca.measure import RunOptions, run_problem
from longca.masks.catalog import STATIC_MASKS
from longca.plugins import PluginInfo, Registry, get_registry
from longca.problem import Problem, build_mask, make_inputs
from longca.sizes import parse_heads, parse_size
from longca.specs import KernelSpec
from longca.timing import summarize, time_ms

log = logging.getLogger("flashmask_vs_flex")
HETEROGENEOUS = ("share_question", "causal_blockwise", "prefix_lm_causal", "prefix_lm_document",
                 "global_sliding_window", "block_causal_document")
MASKS = HETEROGENEOUS + ("causal_document",)
# --tune: backward schedules tried on the H200 (the tiles were swept in an earlier run, see the README)
BWD_CANDIDATES = [dict(dkv_head_minor=m, bwd_streams=s) for m in (0, 1) for s in (1, 2)]


# ---------------------------------------------------------------- FlexAttention fallback


def builtin_flex_spec() -> KernelSpec:
    """Compiled FlexAttention with a BlockMask from create_block_mask over the FlashMask bounds."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    import torch._functorch.config as functorch_config

    # run_problem times backward repeatedly over one graph (retain_graph=True), which compiled
    # backward graphs with donated buffers refuse
    functorch_config.donated_buffer = False
    compiled = torch.compile(flex_attention, dynamic=False)

    def prepare(problem, mask, q, k, v):
        bounds = mask.flashmask_bounds()
        lts, lte, uts, ute = (torch.as_tensor(bounds[n], dtype=torch.int32, device=q.device)
                              for n in ("LTS", "LTE", "UTS", "UTE"))

        def mask_mod(b, h, q_idx, kv_idx):
            upper = (q_idx >= uts[kv_idx]) & (q_idx < ute[kv_idx])
            lower = (q_idx >= lts[kv_idx]) & (q_idx < lte[kv_idx])
            return ~(upper | lower)

        return create_block_mask(mask_mod, None, None, q.shape[1], k.shape[1], device=q.device, _compile=True)

    def run(block_mask, q, k, v):
        out = compiled(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=block_mask,
                       enable_gqa=q.shape[2] != k.shape[2])
        return out.transpose(1, 2)

    return KernelSpec(name="flex", family="dense", masks=STATIC_MASKS, prepare=prepare, run=run,
                      description="compiled FlexAttention, BlockMask from the FlashMask bounds (benchmark's own)",
                      dtypes=("bfloat16", "float16", "float32"), devices=("cuda",),
                      backend=lambda: f"torch.nn.attention.flex_attention (torch {torch.__version__}, "
                                      "compiled; benchmarks/flashmask_vs_flex.py builtin)")


def choose_flex(registry: Registry, mode: str) -> str:
    """Use the flex plugin if installed (and asked), else register the builtin one; returns a label."""
    installed = "flex" in registry.entries["kernels"]
    if mode == "plugin" and not installed:
        raise SystemExit("--flex plugin: the flex plugin is not installed (pip install -e plugins/flex)")
    if installed and mode != "builtin":
        return "plugin"
    if installed:
        del registry.entries["kernels"]["flex"]
    info = PluginInfo(name="flashmask_vs_flex", distribution="benchmarks/flashmask_vs_flex.py", version="0",
                      module=__name__)
    registry._add("kernels", builtin_flex_spec(), info)  # noqa: SLF001 - a benchmark-local kernel
    return "builtin"


# ---------------------------------------------------------------- tuning


def _time(spec: KernelSpec, problem: Problem, warmup: int, repeat: int) -> float:
    mask = build_mask(problem)
    needs_grad = problem.direction != "fwd"
    q, k, v = make_inputs(problem, requires_grad=needs_grad)
    prepared = spec.prepare(problem, mask, q, k, v)
    device = torch.device(problem.device)
    if problem.direction == "fwd":
        def step():
            with torch.no_grad():
                spec.run(prepared, q, k, v)
    else:
        out = spec.run(prepared, q, k, v)
        dout = torch.randn_like(out)

        def step():
            torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    return summarize(time_ms(step, device, warmup, repeat))[0]


def tune(registry: Registry, base: Problem, masks: list[str]) -> tuple[dict[str, int], list[str]]:
    """Pick the fastest backward schedule (BWD_CANDIDATES) on `masks` at the base problem's size."""
    from longca_plugin_flashmask import configs

    spec = registry.kernel("flashmask")
    lines = [f"backward, S={base.seqlen}, masks {', '.join(masks)}", "",
             "| setting | ms (sum over masks) |", "|---|---|"]
    results = []
    for cand in BWD_CANDIDATES:
        try:
            with configs.override(**cand):
                ms = sum(_time(spec, base.with_(mask=m, direction="bwd"), 3, 10) for m in masks)
        except Exception as exc:  # noqa: BLE001 - a setting that fails is skipped
            log.warning("%s failed: %s", cand, str(exc).splitlines()[0][:200])
            ms = math.inf
        results.append((ms, sorted(cand.items())))
        lines.append(f"| {cand} | {ms:.3f} |")
        print(lines[-1], flush=True)
    ms, best = min(results)
    chosen = dict(best) if math.isfinite(ms) else {}
    lines.append(f"\nchosen: {chosen}")
    return chosen, lines


# ---------------------------------------------------------------- measurement and outputs


def measure(registry: Registry, base: Problem, masks: list[str], seqlens: list[int], options: RunOptions,
            f) -> list[dict[str, Any]]:
    """Both kernels, forward and backward, on every mask and length; rows appended to the file f."""
    rows = []
    for seqlen in seqlens:
        for mask in masks:
            for kernel in ("flashmask", "flex"):
                for direction in ("fwd", "bwd"):
                    problem = base.with_(kernel=kernel, mask=mask, seqlen=seqlen, direction=direction)
                    start = time.perf_counter()
                    row = run_problem(problem, options, registry).as_dict()
                    row["wall_s"] = round(time.perf_counter() - start, 2)
                    rows.append(row)
                    f.write(json.dumps(row, default=str) + "\n")
                    f.flush()
                    tf = row.get("tflops")
                    print(f"{mask:22s} {seqlen:6d} {kernel:9s} {direction} {row['status']:11s} "
                          f"{(tf or 0):7.1f} TFLOP/s  {row.get('ms_median') or 0:9.3f} ms  "
                          f"({row['wall_s']} s) {row.get('reason') or ''}", flush=True)
    return rows


def _get(rows, kernel, mask, seqlen, direction) -> Optional[dict]:
    for r in rows:
        if (r["kernel"], r["mask"], r["seqlen"], r["direction"]) == (kernel, mask, seqlen, direction):
            return r
    return None


def _tf(row: Optional[dict]) -> Optional[float]:
    return row.get("tflops") if row and row.get("status") == "ok" else None


def table(rows, masks, seqlens) -> tuple[str, list[dict]]:
    """Markdown table of TFLOP/s and flashmask/flex ratios; and the ratios as records."""
    lines = ["| mask | S | flashmask fwd | flex fwd | fwd ratio | flashmask bwd | flex bwd | bwd ratio |",
             "|---|---|---|---|---|---|---|---|"]
    ratios = []
    for mask in masks:
        for seqlen in seqlens:
            cells, rec = [], {"mask": mask, "seqlen": seqlen}
            for direction in ("fwd", "bwd"):
                a = _tf(_get(rows, "flashmask", mask, seqlen, direction))
                b = _tf(_get(rows, "flex", mask, seqlen, direction))
                ratio = a / b if a and b else None
                rec[direction] = ratio
                cells += [f"{a:.1f}" if a else "-", f"{b:.1f}" if b else "-", f"{ratio:.2f}" if ratio else "-"]
            ratios.append(rec)
            lines.append(f"| {mask} | {seqlen // 1024}K | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n", ratios


def plot(rows, masks, seqlens, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(masks), figsize=(3.2 * len(masks), 6), sharey="row", squeeze=False)
    for col, mask in enumerate(masks):
        for row_i, direction in enumerate(("fwd", "bwd")):
            ax = axes[row_i][col]
            for kernel, style in (("flashmask", "o-"), ("flex", "s--")):
                xs, ys = [], []
                for s in seqlens:
                    tf = _tf(_get(rows, kernel, mask, s, direction))
                    if tf:
                        xs.append(s // 1024)
                        ys.append(tf)
                ax.plot(xs, ys, style, label=kernel)
            ax.set_title(f"{mask}\n{direction}", fontsize=9)
            ax.set_xticks([s // 1024 for s in seqlens])
            ax.set_xlabel("S (K tokens)", fontsize=8)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel("TFLOP/s")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def environment(flex_mode: str, registry: Registry) -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "cuda": torch.version.cuda, "flex": flex_mode, "argv": sys.argv}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    try:
        commit = subprocess.run(["git", "rev-parse", "--verify", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    info["git_commit"] = commit if len(commit) == 40 else None  # a copy without .git has none
    info["backends"] = {k: registry.kernel(k).backend() for k in ("flashmask", "flex")}
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seqlens", default="8k,16k,32k,48k")
    parser.add_argument("--masks", default=",".join(MASKS))
    parser.add_argument("--heads", default="64:8")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--flex", choices=("auto", "plugin", "builtin"), default="auto")
    parser.add_argument("--tune", action="store_true", help="pick flashmask's tiles first (at --tune-seqlen)")
    parser.add_argument("--tune-seqlen", default="16k")
    parser.add_argument("--tune-masks", default="share_question,causal_blockwise,prefix_lm_causal")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    registry = get_registry()
    flex_mode = choose_flex(registry, args.flex)
    hq, hkv = parse_heads(args.heads)
    masks = [m.strip() for m in args.masks.split(",") if m.strip()]
    seqlens = [parse_size(s) for s in args.seqlens.split(",")]
    base = Problem(kernel="flashmask", mask=masks[0], seqlen=seqlens[0], heads_q=hq, heads_kv=hkv,
                   head_dim=args.head_dim, dtype=args.dtype, device="cuda", seed=args.seed)
    env = environment(flex_mode, registry)
    print(json.dumps(env), flush=True)

    best: dict[str, int] = {}
    if args.tune:
        best, lines = tune(registry, base.with_(seqlen=parse_size(args.tune_seqlen)),
                           [m.strip() for m in args.tune_masks.split(",")])
        (out / "tuning.md").write_text("\n".join(lines) + "\n")
    from longca_plugin_flashmask import configs

    env["flashmask_config"] = {**vars(configs.config(args.head_dim, "cuda", max(seqlens))), **best}
    (out / "run.json").write_text(json.dumps(env, indent=1, default=str) + "\n")
    options = RunOptions(warmup=args.warmup, repeat=args.repeat, samples=1)
    title = (f"flashmask vs flex ({flex_mode}), {env.get('gpu', '?')}, {args.dtype}, heads {args.heads}, "
             f"head_dim {args.head_dim}")
    rows: list[dict[str, Any]] = []
    with configs.override(**best), (out / "results.jsonl").open("w") as f:
        for seqlen in seqlens:  # outputs rewritten after each length: an interrupted run keeps them
            rows += measure(registry, base, masks, [seqlen], options, f)
            text, ratios = table(rows, masks, seqlens)
            (out / "table.md").write_text(f"{title}\n\n{text}")
            plot(rows, masks, seqlens, out / "plot.png", title)
    hetero = [r for r in ratios if r["mask"] in HETEROGENEOUS and r["seqlen"] >= 16384]
    summary = {d: min((r[d] for r in hetero if r[d]), default=None) for d in ("fwd", "bwd")}
    print(title)
    print(text)
    print(f"worst ratio on heterogeneous masks at S >= 16K: fwd {summary['fwd']}, bwd {summary['bwd']}")


if __name__ == "__main__":
    main()
