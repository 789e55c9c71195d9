"""The lse merge of ring strategies on one GPU: the code before, the eager merge now, the compiled merge.

A ring step merges each call's output (B, rows, H, D) into a float32 accumulator through the lse
(`longca.merge.merge_`). This times, on the shapes of ring calls at 8K tokens per GPU (GQA 64:8
runs 64 query heads per call, or 8 after an 8-way all-to-all), into a view of a larger accumulator
as `OutputAccumulator` does:

- `before`: the operations merge_ made until this change (a float copy of the output, separate
  multiply and add), 34 bytes of memory traffic per output element by their tensor operations;
- `eager`: `merge_` (mul_ then addcmul_), 18 bytes per element;
- `compiled`: the same operations under torch.compile (dynamic shapes), 10 bytes if fused in one pass.

Each with CUDA events, L2 flushed, median of 30 after 10 warm-up calls; the compiled result is
checked against the eager one. Writes merge.json and merge.md into --out.

    python benchmarks/cp_merge.py --out results/cp_merge
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch

from longca import merge
from longca_runner.timing import time_ms

BYTES = {"before": 34, "eager": 18, "compiled": 10}
COMPILED = torch.compile(merge.merge_, dynamic=True, fullgraph=True)


def merge_before(out_acc, lse_acc, out, lse) -> None:
    """merge_ as it was before the fused merge (the reference point of the table)."""
    new = torch.logaddexp(lse_acc, lse)
    w_old = torch.exp(lse_acc - new).nan_to_num_(0.0).transpose(1, 2).unsqueeze(-1)
    w_new = torch.exp(lse - new).nan_to_num_(0.0).transpose(1, 2).unsqueeze(-1)
    out_acc.mul_(w_old).add_(out.float() * w_new)
    lse_acc.copy_(new)


def case(rows: int, heads: int, dim: int, device: torch.device) -> dict:
    gen = torch.Generator(device=device).manual_seed(0)
    acc = torch.randn(1, 2 * rows, heads, dim, device=device, generator=gen)
    acc_lse = torch.randn(1, heads, 2 * rows, device=device, generator=gen)
    out = torch.randn(1, rows, heads, dim, device=device, generator=gen).bfloat16()
    lse = torch.randn(1, heads, rows, device=device, generator=gen)
    view = lambda: (acc[:, rows:], acc_lse[:, :, rows:])  # noqa: E731 - the second query run of a buffer
    fns = {"before": lambda: merge_before(*view(), out, lse), "eager": lambda: merge.merge_(*view(), out, lse),
           "compiled": lambda: COMPILED(*view(), out, lse)}
    start = time.perf_counter()
    fns["compiled"]()
    torch.cuda.synchronize(device)
    compile_s = time.perf_counter() - start
    saved = acc.clone(), acc_lse.clone()
    merge.merge_(*view(), out, lse)
    want = acc[:, rows:].clone()
    acc.copy_(saved[0])
    acc_lse.copy_(saved[1])
    COMPILED(*view(), out, lse)
    diff = float((acc[:, rows:] - want).abs().max())
    result = {"rows": rows, "heads": heads, "dim": dim, "compile_s": round(compile_s, 2),
              "compiled_max_abs_diff": diff}
    elements = rows * heads * dim
    for name, fn in fns.items():
        acc.copy_(saved[0])
        acc_lse.copy_(saved[1])
        ms = statistics.median(time_ms(fn, device, warmup=10, repeat=30))
        result[f"{name}_ms"] = round(ms, 4)
        result[f"{name}_gbs"] = round(BYTES[name] * elements / ms / 1e6, 1)  # by its byte count
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        raise SystemExit("cp_merge: needs a CUDA GPU")
    device = torch.device("cuda")
    rows = [case(r, h, 128, device) for h in (64, 8) for r in (2048, 4096, 8192)]
    info = {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__, "rows": rows}
    (out / "merge.json").write_text(json.dumps(info, indent=1) + "\n")
    lines = [f"# lse merge on {info['gpu']} (torch {info['torch']})", "",
             "| rows | heads | before ms | eager ms | compiled ms | compiled GB/s (10 B/elem) | max diff |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['rows']} | {r['heads']} | {r['before_ms']} | {r['eager_ms']} | {r['compiled_ms']} | "
              f"{r['compiled_gbs']} | {r['compiled_max_abs_diff']:.2e} |" for r in rows]
    (out / "merge.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if any(not math.isfinite(r["compiled_max_abs_diff"]) or r["compiled_max_abs_diff"] > 1e-4 for r in rows):
        raise SystemExit("cp_merge: the compiled merge disagrees with the eager one (see merge.json)")


if __name__ == "__main__":
    main()
