"""Sweeps, a module per job: the TOML spec (`spec`), its grid expanded once (`grid`), and running
the cases into results.jsonl (`runner`). Everything is re-exported: `from longca_runner.sweep import X`."""
from __future__ import annotations

from longca.results import case_id  # noqa: F401 - benchmarks/prewarm.py imports it from here
from longca_runner.sweep.grid import Sweep, expand, load_spec, plan, problems
from longca_runner.sweep.runner import CP_BATCH, measure_matmul_peak, run_sweep
from longca_runner.sweep.spec import SAFE_NAME, SpecFile, SweepSpec, default_output, read_spec, select

__all__ = ["CP_BATCH", "SAFE_NAME", "SpecFile", "Sweep", "SweepSpec", "case_id", "default_output", "expand",
           "load_spec", "measure_matmul_peak", "plan", "problems", "read_spec", "run_sweep", "select"]
