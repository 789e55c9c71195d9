"""Fit the cost model of `longca simulate` from measured rows.

    python docs/scripts/cp_fit.py [--segments DIR] [RESULTS ...]

With `--segments`, a kernel the short-segment benchmark did not measure takes a measured kernel's rows as
a declared proxy (`SEGMENT_PROXY`): fa3 (the FA3-class kernel of the published H100 runs) would take fa4's,
fa4 and fa3 costing the same per tile on the H200 dense sweep (within 2 %, both directions). The fit file
records any proxy (`segment_proxies`); today none applies: fa3's own short-segment rows were measured on
the H200 (docs/results/h200/varlen-segments).

The inner kernels from the H200 dense sweep (one-GPU rows) and, with `--segments DIR`, the rows of
`benchmarks/varlen_segments.py` (one-GPU short-segment calls; the lead's H200 run goes to
docs/results/h200/varlen-segments); then the per-call overhead of CP steps from the two-GPU CP rows
of full and causal only (docs/results/h200x2/cp, fa2 inside): document CP rows are never fitted on. Writes
longca_sim/longca_sim/data/cp_kernel_fit.json (shipped with longca-sim) and prints each fit's error.
"""
from __future__ import annotations

import sys
from pathlib import Path

from longca.plugins import get_registry
from longca_sim.calibrate import call_overhead_misses, fit_call_overhead
from longca_sim.costmodel import FIT_PATH, fit_rows, read_rows, save_fits
from longca_sim.segments import segment_rows
from longca_sim.simulate import MERGE_BYTES_MEASURED_ROWS, pricing_for
from longca_sim.topology import preset

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = [ROOT / "docs/results/h200/dense-sweep" / d
           for d in ("short", "short-rest", "16k", "32k", "fa3-fa4", "long", "long-fa34")]
CP_ROWS = ROOT / "docs/results/h200x2/cp"
SEGMENT_PROXY = {"fa3": "fa4"}  # kernel without short-segment rows -> the measured kernel whose rows it takes


def main(paths: list[Path], segments: list[Path]) -> None:
    registry = get_registry()
    inner = {n for n in registry.names("kernels")  # kernels a strategy can call
             if registry.kernel(n).forward_lse is not None and registry.kernel(n).backward_lse is not None}
    seg_rows = [r for folder in segments for r in segment_rows(folder)]
    measured = {r["kernel"] for r in seg_rows}
    proxies = {k: p for k, p in SEGMENT_PROXY.items() if seg_rows and k not in measured and p in measured}
    seg_rows += [{**r, "kernel": k, "proxy_of": p} for k, p in proxies.items() for r in seg_rows if r["kernel"] == p]
    fits = {k: by for k, by in fit_rows(read_rows(paths), registry, seg_rows).items() if k in inner}
    # those rows ran the merge before it was compiled: priced with its bytes, the overhead is the calls' own
    misses = call_overhead_misses(read_rows([CP_ROWS]), pricing_for("fa2", fits, preset("h200-sxm"),
                                                                     merge_bytes=MERGE_BYTES_MEASURED_ROWS))
    overhead = {**fit_call_overhead(misses), "rows": len(misses), "source": str(CP_ROWS.relative_to(ROOT))}
    print(f"per-call overhead of CP steps: {overhead}")
    save_fits(fits, FIT_PATH, [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
                               for p in paths + segments], overhead,
              {k: f"short-segment rows of {p} (declared proxy: {k} was not measured)" for k, p in proxies.items()})
    for kernel, by in fits.items():
        for direction, fit in by.items():
            sel = fit.selection
            form = (f"floor {sel['floor']}, {sel['segment_model'] or 'dense'}"
                    f"{' + diagonal' if sel['diagonal'] else ''}")
            print(f"{kernel:10s} {direction}  rows {fit.rows:3d}  median |err| {fit.median_err_pct:5.1f} %  "
                  f"max {fit.max_err_pct:5.1f} %  held out {sel['heldout_err_pct']['score']:5.1f} % "
                  f"(of {len(sel['candidates'])} forms, in the fit file)  chosen: {form}")
    print(f"wrote {FIT_PATH}")


if __name__ == "__main__":
    args = sys.argv[1:]
    segs: list[Path] = []
    while "--segments" in args:
        i = args.index("--segments")
        if i + 1 >= len(args) or not Path(args[i + 1]).is_dir():
            print(f"cp_fit: --segments needs a folder holding rows.jsonl, got {args[i + 1:i + 2] or 'nothing'}",
                  file=sys.stderr)
            sys.exit(2)
        segs.append(Path(args[i + 1]))
        del args[i:i + 2]
    main([Path(a) for a in args] or DEFAULT, segs)
