"""Running CP cases: the runner part of context parallelism, on top of the engine in longca-cp.

- `launch`: starting process groups (spawn, torchrun); `group`: the supervised rank group that runs a
  sweep's CP cases; `cases`: a batch of CP cases as rows; `request`: what `longca dist-run` asks for.
- `measure`: per-rank timing and its reduction; `check`: correctness against the reference.

The strategies, layouts, calls and schedules they run are longca-cp's (the engine strategy plugins
import); a sweep imports this package only when it has CP cases.
"""
