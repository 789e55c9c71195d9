"""Compile flashmask's Triton kernels for a GPU architecture on any machine (no GPU needed) and
report, per setting, registers, stack (where spills live), shared memory and how dQ is added
(an H100/H200 SM has 227 KiB of shared memory for one block).

What a tile setting costs in registers and shared memory decides whether it can be fast (a
spilling dK/dV loop is slow) or run at all (over the shared memory of an SM it fails at launch),
before any device time is spent. Settings: the GPU table of `configs.py` and the `--tune`
candidates of `flashmask_vs_flex.py`. Integer arguments are compiled as multiples of 16, as
Triton specializes them at the lengths of the benchmarks; the numbers are those of the Triton
installed here (the H200 box runs 3.6).

    python benchmarks/flashmask_compile_report.py --out results/compile --arch 90
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

POINTERS = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "DO": "*bf16", "DK": "*bf16", "DV": "*bf16",
            "Out": "*bf16", "DQ": "*fp32", "LSE": "*fp32", "LSE2": "*fp32", "DELTA": "*fp32",
            "BOUNDS": "*i32", "CNT": "*i32", "IDX": "*i32", "ORDER": "*i32"}
FLOATS = ("sm_scale", "scale_log2")
DQ_ADD = r"\b(?:atom|red)\.global[\w.]*add[\w.]*|cp\.reduce\.async\.bulk\.tensor[\w.:]*"  # atomics, TMA reductions


def compile_kernel(fn, constexprs: dict[str, Any], warps: int, stages: int, arch: int) -> dict[str, Any]:
    """Compile `fn` with these constexprs; registers, stack and shared memory of its cubin."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature, consts = {}, dict(constexprs)
    for name in fn.arg_names:
        if name == "DQ_DESC":
            if consts.pop("DQ_TMA", False):
                signature[name] = f"tensordesc<fp32[1, {consts['BM']}, 1, {consts['D']}]>"
            else:
                signature[name], consts[name] = "constexpr", None
        elif name in consts:
            signature[name] = "constexpr"
        else:
            signature[name] = POINTERS.get(name) or ("fp32" if name in FLOATS else "i32")
    aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
               if signature[name][0] in "*i"}
    kernel = triton.compile(ASTSource(fn, signature, consts, aligned), target=GPUTarget("cuda", arch, 32),
                            options={"num_warps": warps, "num_stages": stages})
    usage = {**_resource_usage(kernel.asm["cubin"]), "shared_bytes": kernel.metadata.shared}
    ptx = kernel.asm["ptx"]
    usage["dq_add"] = sorted(set(re.findall(DQ_ADD, ptx)))
    return usage


def _resource_usage(cubin: bytes) -> dict[str, Any]:
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        text = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", text)
    if not found:
        return {"usage": text.strip()[-200:]}
    reg, stack, shared, local = (int(x) for x in found.groups())
    return {"registers": reg, "stack_bytes": stack, "static_shared": shared, "local_bytes": local}


def settings() -> list[tuple[str, dict[str, int]]]:
    """(label, config fields): the GPU table's split and fused backward, then the --tune candidates."""
    path = Path(__file__).resolve().parent / "flashmask_vs_flex.py"
    loader = importlib.util.spec_from_file_location("flashmask_vs_flex", path)
    assert loader is not None and loader.loader is not None
    bench = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(bench)
    return ([("split (GPU table)", {"bwd_fused": 0}), ("fused (GPU table)", {"bwd_fused": 1})]
            + [(f"fused candidate {i}", {"bwd_fused": 1, **c}) for i, c in enumerate(bench.FUSED_CANDIDATES)])


def report(head_dim: int, group: int, arch: int, only: int | None = None) -> list[dict[str, Any]]:
    from dataclasses import replace

    from longca_plugin_flashmask import configs, kernels

    rows = []
    chosen = settings() if only is None else settings()[:only]
    for label, fields in chosen:
        cfg = replace(configs.GPU.get(head_dim, configs.GPU[128]), **fields)
        fused = bool(cfg.bwd_fused)
        bm, bn = (cfg.fused_m, cfg.fused_n) if fused else (cfg.dkv_m, cfg.dkv_n)
        warps, stages = (cfg.fused_warps, cfg.fused_stages) if fused else (cfg.dkv_warps, cfg.dkv_stages)
        consts = dict(GROUP=group, D=head_dim, BM=bm, BN=bn, EVEN_M=True, EVEN_N=True,
                      HEAD_MINOR=bool(cfg.dkv_head_minor), FUSED_DQ=fused, ROTATE=fused and bool(cfg.fused_rotate),
                      DQ_TMA=fused and bool(cfg.fused_tma))
        row: dict[str, Any] = {"setting": label, "tile": f"{bm}x{bn}", "warps": warps, "stages": stages,
                               "rotate": int(consts["ROTATE"]), "tma": int(consts["DQ_TMA"])}
        try:
            row.update(compile_kernel(kernels.bwd_dkdv_kernel, consts, warps, stages, arch))
        except Exception as exc:  # noqa: BLE001 - a setting that does not compile is a row
            row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| setting | tile | warps | stages | rotate | tma | registers | stack bytes | shared KiB | dQ added by |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["setting"], r["tile"], r["warps"], r["stages"], r["rotate"], r["tma"],
                 r.get("registers", "-"), r.get("stack_bytes", "-"),
                 f"{r['shared_bytes'] / 1024:.0f}" if "shared_bytes" in r else "-",
                 ", ".join(r.get("dq_add", [])) or r.get("error", "-")]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output folder (rows.jsonl, table.md)")
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90: H100/H200)")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--group", type=int, default=8, help="query heads per KV head (64:8 -> 8)")
    parser.add_argument("--only", type=int, default=None, help="the first N settings only")
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("TRITON_INTERPRET is set: unset it, this script compiles for the GPU")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = report(args.head_dim, args.group, args.arch, args.only)
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = table(rows)
    (out / "table.md").write_text(f"flashmask dK/dV kernels, sm_{args.arch}, head_dim {args.head_dim}, "
                                  f"group {args.group}\n\n{text}")
    print(text)


if __name__ == "__main__":
    main()
