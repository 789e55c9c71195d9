"""How far FP8 inputs alone move attention from the float32 reference (the floor of any FP8 kernel's error).

For seeded problems (the inputs `longca.problem.make_inputs` gives the bfloat16 problem), it runs the
float32 reference once on the bfloat16 inputs and once on the same inputs quantized to FP8 with
per-tensor scaling (`longca.fp8.quantize_fp8`) and dequantized, and prints the relative Frobenius
error of the output and, for the backward, of dq, dk, dv (dout quantized too). These numbers justify
the FP8 tolerances in `longca_runner.measure.TOLERANCE` (docs/fp8.md). CPU is enough:

    python benchmarks/fp8_error.py --seqlens 1024 2048 --seeds 0 1 2
"""
from __future__ import annotations

import argparse
import statistics

import torch

from longca import reference
from longca.fp8 import dequantize_fp8, quantize_fp8
from longca.problem import Problem, build_mask, make_inputs
from longca_runner.measure import rel_err, seeded_dout


def errors(problem: Problem, fp8: str) -> dict[str, float]:
    """Relative errors of the reference on dequantized FP8 inputs against it on the bfloat16 inputs."""
    mask = build_mask(problem)
    q, k, v = make_inputs(problem)
    dout = seeded_dout(problem).float()
    exact = [x.float().requires_grad_() for x in (q, k, v)]
    rounded = [dequantize_fp8(*quantize_fp8(x, fp8)).requires_grad_() for x in (q, k, v)]
    dout8 = dequantize_fp8(*quantize_fp8(dout, fp8))
    out_a, out_b = reference.attention(*exact, mask), reference.attention(*rounded, mask)
    ga = torch.autograd.grad(out_a, exact, dout)
    gb = torch.autograd.grad(out_b, rounded, dout8)
    return {"out": rel_err(out_b, out_a), **{f"d{n}": rel_err(b, a) for n, a, b in zip("qkv", ga, gb, strict=True)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--masks", nargs="+", default=["full", "causal", "causal_document", "sliding_window"])
    ap.add_argument("--seqlens", nargs="+", type=int, default=[1024, 2048])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--heads", default="8:2")
    ap.add_argument("--head-dims", nargs="+", default=["64", "128", "192/128"])
    ap.add_argument("--dtypes", nargs="+", default=["float8_e4m3fn", "float8_e5m2"])
    args = ap.parse_args()
    hq, hkv = (int(x) for x in args.heads.split(":"))
    torch.set_num_threads(max(1, torch.get_num_threads()))
    for fp8 in args.dtypes:
        seen: dict[str, list[float]] = {}
        print(f"# {fp8}: relative error of the reference on FP8-rounded inputs (per-tensor scale)")
        print("mask seqlen head_dims seed out dq dk dv")
        for mask in args.masks:
            for seqlen in args.seqlens:
                for dims in args.head_dims:
                    d, _, dv = dims.partition("/")
                    for seed in args.seeds:
                        problem = Problem(kernel="reference", mask=mask, seqlen=seqlen, heads_q=hq, heads_kv=hkv,
                                          head_dim=int(d), head_dim_v=int(dv) if dv else None, seed=seed,
                                          direction="bwd", device="cpu")
                        e = errors(problem, fp8)
                        for name, value in e.items():
                            seen.setdefault(name, []).append(value)
                        print(mask, seqlen, dims, seed, " ".join(f"{e[n]:.4f}" for n in ("out", "dq", "dk", "dv")))
        for name, values in seen.items():
            values = sorted(values)
            print(f"{fp8} {name}: n={len(values)} min {values[0]:.4f} median {statistics.median(values):.4f} "
                  f"max {values[-1]:.4f}")


if __name__ == "__main__":
    main()
