"""longca-sim: what a CP case would cost, without running it.

- `costmodel`: kernel time of any call shape (a tile model fitted per kernel on one-GPU rows,
  `data/cp_kernel_fit.json`, written by docs/scripts/cp_fit.py).
- `topology`: links and their bandwidths (presets per cluster); `simulate`: a schedule of longca-cp
  priced step by step on a topology; `calibrate`: per-call overheads; `recommend`: strategies and
  their variants ranked for a mask, length and cluster; `commbench`: collective bandwidths measured
  on a real group (what a topology is calibrated with).

Used by `longca simulate`, `longca recommend` and `longca comm-bench` (docs/cp-simulator.md).
"""
