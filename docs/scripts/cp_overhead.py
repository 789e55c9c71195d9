"""Single-GPU overhead of every CP strategy against its inner kernel alone (world size 1).

For each (mask, direction) it runs, through the `longca` command line in this one process (so
the CUDA context and imports are shared), the inner kernel alone:

    longca run --kernel INNER --mask M --direction D ... --format json
    longca dist-run --strategy all --inner INNER --nproc 1 --backend nccl --mask M --direction D --check ...

then prints each strategy's time over the kernel's. Rows go to OUTPUT/results.jsonl.

usage: python docs/scripts/cp_overhead.py INNER OUTPUT [--device cuda] [--seqlen 8k] [--heads 64:8]
       [--head-dim 128] [--dtype bfloat16] [--masks causal,causal_document] [--directions fwd,bwd]
"""
from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

from longca.results import read_rows
from longca_cli.main import app


def _cli(args: list[str]) -> None:
    print("$ longca " + " ".join(args), flush=True)
    with contextlib.suppress(SystemExit):
        app(args, standalone_mode=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inner")
    parser.add_argument("output", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seqlen", default="8k")
    parser.add_argument("--heads", default="64:8")
    parser.add_argument("--head-dim", default="128")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--masks", default="causal,causal_document")
    parser.add_argument("--directions", default="fwd,bwd")
    parser.add_argument("--samples", default="3")
    a = parser.parse_args()
    backend = "nccl" if a.device.startswith("cuda") else "gloo"
    common = ["--seqlen", a.seqlen, "--heads", a.heads, "--head-dim", a.head_dim, "--dtype", a.dtype,
              "--device", a.device, "--samples", a.samples, "--output", str(a.output), "--format", "json"]
    for mask in a.masks.split(","):
        for direction in a.directions.split(","):
            case = ["--mask", mask, "--direction", direction, *common]
            _cli(["run", "--kernel", a.inner, "--check", *case])
            _cli(["dist-run", "--strategy", "all", "--inner", a.inner, "--nproc", "1", "--backend", backend,
                  "--check", *case])
    rows = read_rows(a.output / "results.jsonl")
    alone = {(r["mask"], r["direction"]): r for r in rows if not r.get("strategy") and r["kernel"] == a.inner}
    print(f"\n{'mask':16} {'dir':4} {'strategy':15} {'status':10} {'ms':>9} {'kernel ms':>9} {'overhead':>9} "
          f"{'rel_err':>9}")
    for r in rows:
        base = alone.get((r["mask"], r["direction"]))
        if not r.get("strategy") or base is None:
            continue
        ratio = (r["ms_median"] / base["ms_median"] - 1) * 100 if r["ms_median"] and base["ms_median"] else None
        print(f"{r['mask']:16} {r['direction']:4} {r['strategy']:15} {r['status']:10} {r['ms_median'] or 0:9.3f} "
              f"{base['ms_median'] or 0:9.3f} {'' if ratio is None else f'{ratio:+8.1f}%':>9} {r['rel_err'] or 0:9.2e}")
    print(json.dumps({"inner": a.inner, "rows": len(rows)}))


if __name__ == "__main__":
    main()
