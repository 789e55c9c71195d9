"""longca's runner: measurement, timing, peaks, supervised workers and sweeps over what the core defines.

The modules are imported one by one (`from longca_runner.measure import run_problem`); importing this
package loads nothing.
"""
