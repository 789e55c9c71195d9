"""flashmask against FlexAttention, side by side in one run; flashmask's split and fused backward.

Both kernels are measured through `longca_runner.measure.run_problem` on the same problems (same mask
draw, same inputs, same timing: CUDA events, L2 flushed, median). `--flex direct` (the default)
times the hand-written direct Flex call of `benchmarks/plugin_vs_direct.py` (its attention-gym
style mask_mod, `create_block_mask`, compiled `flex_attention`), what a Flex user runs;
`--flex plugin` the `flex` plugin; `--flex builtin` this script's compiled FlexAttention over a
mask_mod built from the FlashMask column bounds. `--no-flex` times flashmask alone (no Flex
compiles: fast). `--bwd split,fused` times each flashmask backward (configs.py:
split = dK/dV then dQ kernel, fused = dQ by atomics in the dK/dV pass); the forward is the same
for both and is timed once. Writes results.jsonl, table.md, plot.png and run.json.
`--flex-rows` takes the Flex columns from the direct-call timings of a `plugin_vs_direct.py`
run instead (same mask draw and shapes, another process: Flex compiles there, with --prewarm);
`--table-only results.jsonl` rebuilds the table and plot from an earlier run, on any machine.

    python benchmarks/flashmask_vs_flex.py --out results/fm --no-flex --masks all --seqlens 16k,32k,48k
    python benchmarks/flashmask_vs_flex.py --out results/fm_vs_flex --masks all --seqlens 16k,32k,48k
    python benchmarks/flashmask_vs_flex.py --out results/fm_tune --no-flex --tune --seqlens 16k
    python benchmarks/flashmask_vs_flex.py --out results/fm_table --table-only results/fm/results.jsonl \
        --flex-rows results/pvd/rows.jsonl
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import math
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from longca.masks.catalog import STATIC_MASKS
from longca.plugins import PluginInfo, Registry, get_registry
from longca.problem import Problem, build_mask, make_inputs
from longca.sizes import format_size, parse_heads, parse_size
from longca.specs import KernelSpec
from longca_runner.measure import RunOptions, make_step, run_problem, seeded_dout
from longca_runner.timing import summarize, time_ms

log = logging.getLogger("flashmask_vs_flex")
HETEROGENEOUS = ("share_question", "causal_blockwise", "prefix_lm_causal", "prefix_lm_document",
                 "global_sliding_window", "block_causal_document")
MASKS = HETEROGENEOUS + ("causal_document",)
BWD_MODES = ("split", "fused")
TUNE_TOLERANCE = 1e-2  # --tune: largest relative difference of a candidate's gradients from the split defaults
# --tune: split backward schedules tried on the H200 (the tiles were swept in an earlier run, see the README)
BWD_CANDIDATES = [dict(dkv_head_minor=m, bwd_streams=s) for m in (0, 1) for s in (1, 2)]
# --tune: fused backward tiles (fused_m x fused_n, warps, stages), rotated walks, dQ by TMA reductions;
# all compile for sm_90 within the shared memory (128 x 128 does not); 4 warps spill heavily
FUSED_CANDIDATES = [dict(fused_m=m, fused_n=n, fused_warps=8, fused_stages=st, dkv_head_minor=1, fused_rotate=rot,
                         fused_tma=tma)
                    for m, n, st, rot, tma in ((64, 128, 2, 0, 0), (64, 128, 2, 1, 0), (64, 128, 3, 0, 0),
                                               (32, 128, 2, 0, 0), (32, 128, 3, 0, 0), (64, 64, 2, 0, 0),
                                               (64, 128, 2, 0, 1), (64, 128, 2, 1, 1), (32, 128, 3, 0, 1),
                                               (64, 64, 2, 0, 1))]


# ---------------------------------------------------------------- FlexAttention fallback


def builtin_flex_spec() -> KernelSpec:
    """Compiled FlexAttention with a BlockMask from create_block_mask over the FlashMask bounds."""
    import torch._functorch.config as functorch_config
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

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


def direct_flex_spec() -> KernelSpec:
    """The hand-written direct Flex call of benchmarks/plugin_vs_direct.py as a kernel spec."""
    import torch._functorch.config as functorch_config

    path = Path(__file__).resolve().parent / "plugin_vs_direct.py"
    loader = importlib.util.spec_from_file_location("plugin_vs_direct", path)
    assert loader is not None and loader.loader is not None
    pvd = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(pvd)
    functorch_config.donated_buffer = False  # run_problem repeats backward over one graph

    return KernelSpec(name="flex", family="dense", masks=STATIC_MASKS,
                      prepare=lambda problem, mask, q, k, v: pvd.flex_direct(mask, q, k, v),
                      run=lambda direct, q, k, v: direct(q, k, v),
                      description="direct Flex call (benchmarks/plugin_vs_direct.py: user mask_mod, "
                                  "create_block_mask, compiled flex_attention)",
                      dtypes=("bfloat16", "float16", "float32"), devices=("cuda",),
                      backend=lambda: f"torch.nn.attention.flex_attention (torch {torch.__version__}, "
                                      "compiled; direct call of benchmarks/plugin_vs_direct.py)")


def choose_flex(registry: Registry, mode: str) -> str:
    """Register the Flex to compare with (`direct`, `builtin`, or keep the `flex` plugin); returns a label.

    `auto`: the plugin if installed, else the builtin one."""
    installed = "flex" in registry.entries["kernels"]
    if mode == "plugin" and not installed:
        raise SystemExit("--flex plugin: the flex plugin is not installed (pip install -e plugins/flex)")
    if installed and mode in ("plugin", "auto"):
        return "plugin"
    if installed:
        del registry.entries["kernels"]["flex"]
    info = PluginInfo(name="flashmask_vs_flex", distribution="benchmarks/flashmask_vs_flex.py", version="0",
                      module=__name__)
    spec = direct_flex_spec() if mode == "direct" else builtin_flex_spec()
    registry._add("kernels", spec, info)  # noqa: SLF001 - a benchmark-local kernel
    return "direct" if mode == "direct" else "builtin"


# ---------------------------------------------------------------- tuning


def _time(spec: KernelSpec, problem: Problem, warmup: int, repeat: int) -> tuple[float, Any]:
    """Median ms of the problem's direction, and what one call returns (the gradients, for bwd)."""
    mask = build_mask(problem)
    needs_grad = problem.direction != "fwd"
    q, k, v = make_inputs(problem, requires_grad=needs_grad)
    prepared = spec.prepare(problem, mask, q, k, v)
    device = torch.device(problem.device)
    dout = seeded_dout(problem) if needs_grad else None  # the same dout for every setting
    step = make_step(lambda: spec.run(prepared, q, k, v), (q, k, v), problem.direction, dout)
    result = step()
    return summarize(time_ms(step, device, warmup, repeat))[0], result


def tune(registry: Registry, base: Problem, masks: list[str], mode: str,
         warmup: int = 3, repeat: int = 10) -> tuple[dict[str, int], list[str]]:
    """The fastest backward setting of one mode (BWD_CANDIDATES split, FUSED_CANDIDATES fused) on `masks`.

    Each candidate's gradients are compared with those of the split backward's defaults on the
    same inputs; a candidate more than TUNE_TOLERANCE away (or failing) is not chosen."""
    from longca_plugin_flashmask import configs
    from longca_runner.measure import rel_err

    spec = registry.kernel("flashmask")
    problems = [base.with_(mask=m, direction="bwd") for m in masks]
    with configs.override(bwd_fused=0):
        want = [_time(spec, p, 0, 1)[1] for p in problems]
    candidates = BWD_CANDIDATES if mode == "split" else FUSED_CANDIDATES
    lines = [f"{mode} backward, S={base.seqlen}, masks {', '.join(masks)}; max rel diff of dq, dk, dv "
             "against the split defaults", "",
             "| setting | " + " | ".join(f"{m} ms" for m in masks) + " | sum ms | max rel diff |",
             "|---|" + "---|" * (len(masks) + 2)]
    results = []
    for cand in candidates:
        times: list[float] = []
        diffs: list[float] = []
        try:
            with configs.override(**cand, bwd_fused=configs.BWD_MODES[mode]):
                for problem, ref in zip(problems, want, strict=True):
                    ms, grads = _time(spec, problem, warmup, repeat)
                    times.append(ms)
                    diffs += [rel_err(g, r) for g, r in zip(grads, ref, strict=False)]
                    del grads
        except Exception as exc:  # noqa: BLE001 - a setting that fails is skipped
            log.warning("%s failed: %s", cand, str(exc).splitlines()[0][:200])
        total = sum(times) if len(times) == len(problems) else math.inf
        diff = max(diffs) if diffs else math.nan
        ok = math.isfinite(total) and diff <= TUNE_TOLERANCE  # NaN is not <=
        results.append((total if ok else math.inf, sorted(cand.items())))
        cells = [f"{t:.3f}" for t in times] + ["-"] * (len(problems) - len(times))
        lines.append(f"| {cand} | " + " | ".join(cells) + f" | {total:.3f} | {diff:.2e}"
                     + ("" if ok else " (not chosen)") + " |")
        print(lines[-1], flush=True)
    ms, best = min(results)
    chosen = dict(best) if math.isfinite(ms) else {}
    lines.append(f"\nchosen: {chosen}\n")
    return chosen, lines


# ---------------------------------------------------------------- measurement and outputs


def measure(registry: Registry, base: Problem, masks: list[str], seqlen: int, options: RunOptions,
            settings: dict[str, dict[str, int]], with_flex: bool, f) -> list[dict[str, Any]]:
    """flashmask forward, its backward in each mode of `settings` (mode -> config override), and Flex
    forward and backward unless not `with_flex`, on every mask at one length; rows appended to the file f."""
    from longca_plugin_flashmask import configs

    cases = []
    for mask in masks:
        first = next(iter(settings.values()))
        cases.append(("flashmask", "flashmask", "fwd", mask, first))
        cases += [(f"flashmask-{mode}", "flashmask", "bwd", mask, over) for mode, over in settings.items()]
        if with_flex:
            cases += [("flex", "flex", d, mask, {}) for d in ("fwd", "bwd")]
    rows = []
    for label, kernel, direction, mask, over in cases:
        problem = base.with_(kernel=kernel, mask=mask, seqlen=seqlen, direction=direction)
        start = time.perf_counter()
        with configs.override(**over):
            row = run_problem(problem, options, registry).as_dict()
        row.update(label=label, wall_s=round(time.perf_counter() - start, 2))
        if kernel == "flashmask":
            row["flashmask_config"] = over
        rows.append(row)
        f.write(json.dumps(row, default=str) + "\n")
        f.flush()
        tf = row.get("tflops")
        print(f"{mask:22s} {seqlen:6d} {label:16s} {direction} {row['status']:11s} "
              f"{(tf or 0):7.1f} TFLOP/s  {row.get('ms_median') or 0:9.3f} ms  "
              f"({row['wall_s']} s) {row.get('reason') or ''}", flush=True)
    return rows


def _get(rows, label, mask, seqlen, direction) -> dict | None:
    for r in rows:
        if (r["label"], r["mask"], r["seqlen"], r["direction"]) == (label, mask, seqlen, direction):
            return r
    return None


def _tf(row: dict | None) -> float | None:
    return row.get("tflops") if row and row.get("status") == "ok" else None


def _cell(x: float | None, fmt: str) -> str:
    return format(x, fmt) if x else "-"


def table(rows, masks, seqlens, modes) -> tuple[str, list[dict]]:
    """Markdown table of TFLOP/s and ratios (flashmask / flex; fused / split); and the ratios as records."""
    head = ["mask", "S", "flashmask fwd", "flex fwd", "fwd ratio"]
    head += [f"bwd {m}" for m in modes] + ["flex bwd"] + [f"{m} / flex" for m in modes]
    if set(BWD_MODES) <= set(modes):
        head.append("fused / split")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratios = []
    for mask in masks:
        for seqlen in seqlens:
            fwd = _tf(_get(rows, "flashmask", mask, seqlen, "fwd"))
            flex_fwd = _tf(_get(rows, "flex", mask, seqlen, "fwd"))
            bwd = {m: _tf(_get(rows, f"flashmask-{m}", mask, seqlen, "bwd")) for m in modes}
            flex_bwd = _tf(_get(rows, "flex", mask, seqlen, "bwd"))
            rec = {"mask": mask, "seqlen": seqlen, "fwd": fwd / flex_fwd if fwd and flex_fwd else None}
            rec.update({m: bwd[m] / flex_bwd if bwd[m] and flex_bwd else None for m in modes})
            cells = [mask, format_size(seqlen), _cell(fwd, ".1f"), _cell(flex_fwd, ".1f"), _cell(rec["fwd"], ".3f")]
            cells += [_cell(bwd[m], ".1f") for m in modes] + [_cell(flex_bwd, ".1f")]
            cells += [_cell(rec[m], ".3f") for m in modes]
            if set(BWD_MODES) <= set(modes):
                rec["fused/split"] = bwd["fused"] / bwd["split"] if bwd["fused"] and bwd["split"] else None
                cells.append(_cell(rec["fused/split"], ".3f"))
            ratios.append(rec)
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n", ratios


def plot(rows, masks, seqlens, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted({r["label"] for r in rows})
    styles = dict(zip(labels, ("o-", "s--", "^-.", "d:"), strict=False))
    fig, axes = plt.subplots(2, len(masks), figsize=(3.2 * len(masks), 6), sharey="row", squeeze=False)
    for col, mask in enumerate(masks):
        for row_i, direction in enumerate(("fwd", "bwd")):
            ax = axes[row_i][col]
            for label in labels:
                xs, ys = [], []
                for s in seqlens:
                    tf = _tf(_get(rows, label, mask, s, direction))
                    if tf:
                        xs.append(s / 1024)
                        ys.append(tf)
                if xs:
                    ax.plot(xs, ys, styles.get(label, "x-"), label=label)
            ax.set_title(f"{mask}\n{direction}", fontsize=9)
            ax.set_xticks([s / 1024 for s in seqlens])
            ax.set_xlabel("S (K tokens)", fontsize=8)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel("TFLOP/s")
    for ax in axes.flat:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    kernels = ("flashmask", "flex") if flex_mode != "none" else ("flashmask",)
    info["backends"] = {k: registry.kernel(k).backend() for k in kernels}
    return info


def _names(text: str, known: tuple[str, ...], what: str) -> list[str]:
    names = list(known) if text.strip() == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SystemExit(f"unknown {what} {', '.join(unknown) or '(none)'}; known: {', '.join(known)} (or all)")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seqlens", default="8k,16k,32k,48k")
    parser.add_argument("--masks", default=",".join(MASKS), help="comma-separated, or all (the 12 static masks)")
    parser.add_argument("--heads", default="64:8")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda", help="cuda; cpu only tests this script (TRITON_INTERPRET=1)")
    parser.add_argument("--flex", choices=("direct", "plugin", "builtin", "auto"), default="direct",
                        help="direct: the hand-written call of plugin_vs_direct.py (default)")
    parser.add_argument("--no-flex", action="store_true", help="flashmask only: no Flex rows, no Flex compiles")
    parser.add_argument("--bwd", default="split,fused", help="flashmask backward modes to time: split, fused")
    parser.add_argument("--tune", action="store_true",
                        help="pick each backward mode's setting first (at --tune-seqlen on --tune-masks)")
    parser.add_argument("--tune-seqlen", default="16k")
    parser.add_argument("--tune-masks", default="share_question,causal_blockwise,prefix_lm_causal")
    parser.add_argument("--flex-rows", default=None,
                        help="rows.jsonl of benchmarks/plugin_vs_direct.py: its direct Flex timings are the flex "
                             "columns (measured in that process); no Flex is timed here")
    parser.add_argument("--table-only", default=None, metavar="RESULTS",
                        help="measure nothing: the table and plot from this script's results.jsonl (and --flex-rows)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.table_only:
        return table_only(Path(args.table_only), Path(args.out), args.flex_rows)

    masks = _names(args.masks, STATIC_MASKS, "mask")
    modes = _names(args.bwd, BWD_MODES, "backward mode")
    tune_masks = _names(args.tune_masks, STATIC_MASKS, "mask")
    try:
        seqlens = [parse_size(s) for s in args.seqlens.split(",")]
        tune_seqlen = parse_size(args.tune_seqlen)
        hq, hkv = parse_heads(args.heads)
    except Exception as exc:  # noqa: BLE001 - bad input is one line
        raise SystemExit(f"bad size: {exc}") from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    registry = get_registry()
    no_flex = args.no_flex or bool(args.flex_rows)
    flex_rows = read_flex_rows(Path(args.flex_rows)) if args.flex_rows else []
    flex_mode = "none" if no_flex else choose_flex(registry, args.flex)
    base = Problem(kernel="flashmask", mask=masks[0], seqlen=seqlens[0], heads_q=hq, heads_kv=hkv,
                   head_dim=args.head_dim, dtype=args.dtype, device=args.device, seed=args.seed)
    env = environment(flex_mode, registry)
    print(json.dumps(env), flush=True)
    from longca_plugin_flashmask import configs

    settings = {mode: {"bwd_fused": configs.BWD_MODES[mode]} for mode in modes}
    if args.tune:
        tuning = []
        for mode in modes:
            best, lines = tune(registry, base.with_(seqlen=tune_seqlen), tune_masks, mode, args.warmup, args.repeat)
            settings[mode].update(best)
            tuning += lines
        (out / "tuning.md").write_text("\n".join(tuning))
    mode_name = "interpreter" if args.device == "cpu" else "cuda"
    env["flashmask_config"] = vars(configs.config(args.head_dim, mode_name, max(seqlens)))
    env["flashmask_backward_settings"] = settings
    (out / "run.json").write_text(json.dumps(env, indent=1, default=str) + "\n")
    options = RunOptions(warmup=args.warmup, repeat=args.repeat, samples=1)
    flex_label = f"direct Flex of {args.flex_rows}, another process" if flex_rows else flex_mode
    title = (f"flashmask vs flex ({flex_label}), {env.get('gpu', '?')}, {args.dtype}, heads {args.heads}, "
             f"head_dim {args.head_dim}")
    rows: list[dict[str, Any]] = []
    with (out / "results.jsonl").open("w") as f:
        for seqlen in seqlens:  # outputs rewritten after each length: an interrupted run keeps them
            rows += measure(registry, base, masks, seqlen, options, settings, not no_flex, f)
            write_outputs(rows + flex_rows, masks, seqlens, modes, out, title)


def write_outputs(rows, masks, seqlens, modes, out: Path, title: str) -> None:
    """table.md and plot.png; the table and the lowest ratios against Flex printed."""
    text, ratios = table(rows, masks, seqlens, modes)
    (out / "table.md").write_text(f"{title}\n\n{text}")
    plot(rows, masks, seqlens, out / "plot.png", title)
    print(title)
    print(text)
    for key in ("fwd", *modes):
        worst = min(((r[key], r["mask"], r["seqlen"]) for r in ratios if r[key] and r["seqlen"] >= 16384),
                    default=None)
        if worst:
            print(f"lowest flashmask/flex ratio at S >= 16K, {key}: {worst}")


def read_flex_rows(path: Path) -> list[dict[str, Any]]:
    """plugin_vs_direct.py's measured Flex rows as this script's flex rows (its direct call's timings)."""
    try:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--flex-rows {path}: {exc}") from None
    rows = [{"label": "flex", "kernel": "flex", "mask": r["mask"], "seqlen": r["seqlen"], "direction": r["direction"],
             "status": "ok", "tflops": r["direct_tflops"], "ms_median": r["direct_ms"], "source": str(path)}
            for r in records if r.get("kernel") == "flex" and r.get("status") == "ok" and r.get("direct_tflops")]
    if not rows:
        raise SystemExit(f"--flex-rows {path}: no measured flex rows (kernel flex, status ok)")
    return rows


def table_only(results: Path, out: Path, flex_rows_path: str | None) -> None:
    """The table and plot again from a results.jsonl of this script, with Flex from --flex-rows if given."""
    try:
        rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--table-only {results}: {exc}") from None
    if not rows or any("label" not in r for r in rows):
        raise SystemExit(f"--table-only {results}: not a results.jsonl of this script (rows without a label)")
    if flex_rows_path:
        rows = [r for r in rows if r["label"] != "flex"] + read_flex_rows(Path(flex_rows_path))
    masks = list(dict.fromkeys(r["mask"] for r in rows if r["label"] != "flex"))
    seqlens = sorted({r["seqlen"] for r in rows if r["label"] != "flex"})
    modes = [m for m in BWD_MODES if any(r["label"] == f"flashmask-{m}" for r in rows)]
    out.mkdir(parents=True, exist_ok=True)
    flex = f"direct Flex of {flex_rows_path}, another process" if flex_rows_path else "as measured"
    write_outputs(rows, masks, seqlens, modes, out, f"flashmask vs flex ({flex}), from {results}")


if __name__ == "__main__":
    main()
