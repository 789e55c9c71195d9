"""Time FlashAttention-3's varlen backward where its launch grid, not its work, grows: the cost of an empty tile.

Why: FA3's backward (hopper/flash_bwd_launch_template.h at 0251105a) launches one thread block per
(key block of 128, query head, segment), sized by `max_seqlen_k`, with `SingleTileScheduler`: a block whose key
block lies past its own segment's keys exits at once, but it is launched. Its forward uses a persistent
scheduler over the valid tiles only. MagiAttention's Ring All-Gather backward makes varlen calls of every
document of the pack (a few query rows each) against each document's causal key prefix, so `max_seqlen_k` is
the longest document's prefix and almost every block of the grid is empty; the simulator's kernel fit, fitted on
calls whose segments are of one length, never saw that. This script measures it on one GPU:

- `shapes` (CPU, needs longca): writes the calls of the source's Ring All-Gather backward (the two halves of a
  rank, cu_seqlens as `get_cu_seqlens_on_cp_rank` and `generate_cu_seqlens_kv_ag_causal` make them, documents
  padded to 2W) on the first packs of the `magi-packs` sampler, to a JSON file;
- `bench` (GPU, needs torch and flash_attn_interface): (1) the empty-block cost, the one number the simulator
  takes: the same segments timed with their true `max_seqlen_k` and with a larger one, which adds only empty
  blocks; (2) the calls of `shapes`, a check of the model on the source's own call shapes, never fitted on.
  Rows (JSON lines) to `--out`.

    python docs/scripts/fa3_bwd_grid.py shapes --out docs/results/h200/fa3-bwd-grid/shapes.json
    python docs/scripts/fa3_bwd_grid.py bench --shapes .../shapes.json --out OUT/rows.jsonl
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from itertools import accumulate
from pathlib import Path

HEADS_Q, HEADS_KV, HEAD_DIM, TOKENS_PER_GPU = 64, 8, 128, 8192


def source_gather_calls(lengths: list[int], world: int, rank: int) -> list[dict]:
    """The two backward calls of rank `rank` in the source's FA3 Ring All-Gather, as the simulator's variant
    counts them (`longca_sim.baselines.source_gather_segments`)."""
    from longca_sim.baselines import source_gather_segments

    return [{"chunk": chunk, "q": q.tolist(), "k": k.tolist()}
            for chunk, (q, k) in zip((rank, 2 * world - 1 - rank), source_gather_segments(lengths, world, rank),
                                     strict=True)]


def shapes(out: Path, worlds: list[int], packs: int) -> None:
    from longca.packs import source_packs

    rows = []
    for world in worlds:
        for i, pack in enumerate(source_packs(world * TOKENS_PER_GPU)[:packs]):
            lengths = [int(n) for n in pack]
            for rank in sorted({0, world - 1}):
                rows.append({"world": world, "pack": i, "rank": rank,
                             "calls": source_gather_calls(lengths, world, rank)})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows))
    print(f"{len(rows)} ranks' calls -> {out}")


def _time_backward(q_lens: list[int], k_lens: list[int], max_k: int, iters: int) -> float:
    """Median ms of one FA3 varlen causal backward (64:8 heads, d128, bf16) of these segments."""
    import torch
    from flash_attn_interface import flash_attn_varlen_func

    dev = torch.device("cuda")
    cu_q = torch.tensor([0, *accumulate(q_lens)], dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0, *accumulate(k_lens)], dtype=torch.int32, device=dev)
    tq, tk = int(cu_q[-1]), int(cu_k[-1])
    q = torch.randn(tq, HEADS_Q, HEAD_DIM, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(tk, HEADS_KV, HEAD_DIM, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(tk, HEADS_KV, HEAD_DIM, device=dev, dtype=torch.bfloat16, requires_grad=True)
    out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(q_lens), max_k, causal=True)
    out = out[0] if isinstance(out, tuple) else out
    dout = torch.randn_like(out)
    times = []
    for i in range(iters + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        end.record()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(start.elapsed_time(end))
    del q, k, v, out, dout
    torch.cuda.empty_cache()
    return sorted(times)[len(times) // 2]


def bench(shapes_file: Path, out: Path, iters: int) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        def emit(row: dict) -> None:
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps(row), flush=True)

        # (1) empty blocks alone: the same segments, a larger max_seqlen_k adds only blocks past every segment
        for segments in (64, 512):
            for q_len, k_len in ((64, 256), (16, 1024)):
                base = _time_backward([q_len] * segments, [k_len] * segments, k_len, iters)
                for max_k in (4096, 16384, 65536):
                    ms = _time_backward([q_len] * segments, [k_len] * segments, max_k, iters)
                    extra = segments * HEADS_Q * (math.ceil(max_k / 128) - math.ceil(k_len / 128))
                    emit({"kind": "empty", "segments": segments, "q": q_len, "k": k_len, "max_k": max_k,
                          "ms": ms, "ms_true_max": base, "extra_blocks": extra,
                          "us_per_block": 1e3 * (ms - base) / extra})
        # (2) the source's Ring All-Gather backward calls (check only)
        for row in json.loads(shapes_file.read_text()):
            for call in row["calls"]:
                ms = _time_backward(call["q"], call["k"], max(call["k"]), iters)
                emit({"kind": "gather", "world": row["world"], "pack": row["pack"], "rank": row["rank"],
                      "chunk": call["chunk"], "segments": len(call["q"]), "total_q": sum(call["q"]),
                      "total_k": sum(call["k"]), "max_k": max(call["k"]), "ms": ms})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("shapes")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--worlds", default="8,16,32,64")
    s.add_argument("--packs", type=int, default=3)
    b = sub.add_parser("bench")
    b.add_argument("--shapes", type=Path, required=True)
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--iters", type=int, default=10)
    args = ap.parse_args(argv)
    if args.cmd == "shapes":
        shapes(args.out, [int(w) for w in args.worlds.split(",")], args.packs)
    else:
        bench(args.shapes, args.out, args.iters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
