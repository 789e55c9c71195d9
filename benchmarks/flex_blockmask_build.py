"""Time building a FlexAttention BlockMask from mask slices against `create_block_mask`.

`create_block_mask` evaluates the mask function at all S² (query, key) pairs; the slice route
(`longca_plugin_flex.blockmask.block_mask_from_slices`) classifies blocks from the slices and
gives the same `mask_mod` (FlashMask column bounds). Both BlockMasks are checked to agree block
by block. Prints a table and writes JSON lines.

    python benchmarks/flex_blockmask_build.py --seqlens 8k,16k,32k,48k --out results.jsonl
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from longca.problem import Problem, build_mask
from longca.sizes import parse_size
from longca_plugin_flex.blockmask import block_mask_from_slices, flashmask_mask_mod

MASKS = ("causal", "causal_document", "sliding_window", "share_question", "prefix_lm_document",
         "global_sliding_window", "block_causal_document")


def timed(fn, device, repeat: int):
    """(median ms, last result) over `repeat` runs after one warm-up run."""
    def once():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return (time.perf_counter() - start) * 1e3, result

    first_ms, result = once()
    times = [once()[0] for _ in range(repeat)]
    return statistics.median(times), first_ms, result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqlens", default="8k,16k,32k,48k")
    parser.add_argument("--masks", default=",".join(MASKS))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compiled", action="store_true", help="also time create_block_mask(_compile=True)")
    parser.add_argument("--out", default=None, help="append JSON lines here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    rows = []
    print(f"{'mask':24} {'seqlen':>7} {'slices ms':>10} {'create ms':>10} {'speedup':>8} "
          f"{'blocks':>8} {'partial':>8} {'agree':>6}")
    for seqlen in [parse_size(s) for s in args.seqlens.split(",")]:
        for name in args.masks.split(","):
            mask = build_mask(Problem(kernel="flex", mask=name, seqlen=seqlen, sampler="auto", seed=0))
            ours_ms, ours_first, ours = timed(
                lambda mask=mask, seqlen=seqlen: block_mask_from_slices(mask.slices, seqlen, seqlen, device),
                device, args.repeat)
            mod = flashmask_mask_mod(mask.slices, seqlen, seqlen, device)
            from torch.nn.attention.flex_attention import create_block_mask

            theirs_ms, theirs_first, theirs = timed(
                lambda mod=mod, seqlen=seqlen: create_block_mask(mod, None, None, seqlen, seqlen, device=device),
                device, args.repeat)
            row = {"mask": name, "seqlen": seqlen, "device": str(device), "slices_ms": ours_ms,
                   "slices_first_ms": ours_first, "create_block_mask_ms": theirs_ms,
                   "create_block_mask_first_ms": theirs_first,
                   "blocks_kept": int((ours.to_dense() > 0).sum()),
                   "partial_blocks": int(ours.kv_num_blocks.sum()),
                   "agree": bool(torch.equal(ours.to_dense() > 0, theirs.to_dense() > 0))}
            if args.compiled:
                compiled_ms, compiled_first, _ = timed(
                    lambda mod=mod, seqlen=seqlen: create_block_mask(mod, None, None, seqlen, seqlen, device=device,
                                                                  _compile=True),
                    device, args.repeat)
                row.update(create_block_mask_compiled_ms=compiled_ms,
                           create_block_mask_compiled_first_ms=compiled_first)
            rows.append(row)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
            print(f"{name:24} {seqlen:>7} {ours_ms:>10.2f} {theirs_ms:>10.2f} {theirs_ms / ours_ms:>7.1f}x "
                  f"{row['blocks_kept']:>8} {row['partial_blocks']:>8} {str(row['agree']):>6}", flush=True)
            del ours, theirs


if __name__ == "__main__":
    main()
