"""longca-cp: the context-parallel runtime every strategy shares, free of any kernel library.

- `layout`: which global tokens each rank holds (contiguous, sequence-level zigzag, subdivided).
- `calls`: the (query run, key run) rectangles of a mask that hold work, cropped in local coordinates.
- the lse merge of partial outputs lives in the core (`longca.merge`): kernels' conformance uses it too.
- `inner`: the inner kernel (any registered kernel with forward_lse/backward_lse).
- `attend`: running a list of calls forward and backward.
- `comm`: subgroups, sequence all-gather / reduce-scatter, Ulysses all-to-all, batched ring P2P.
- `ring`: single and double ring attention (autograd); `hybrid`: head parallel around the ring.
- `strategy`: `hybrid_strategy`, a strategy on that grid as one table row (the five built-in ones).
- `plan`: the plan every strategy builds, generic dispatch/undispatch, option resolution.
- `schedule`, `accounting`: every rank's calls and transfers per step without a process group, and
  the balance figures of every CP row (what `prepare` and the simulator in longca-sim share).
- `check`, `measure`, `launch`, `group`, `cases`: correctness against the reference, per-rank timing
  and its reduction, starting process groups, the supervised rank group that runs sweeps' CP cases.
- `conformance`: the strategy conformance suite (`longca.plugin.strategy_conformance_tests`).

The strategies themselves are plugins (`longca-plugin-ulysses`, `-ring-p2p`, `-ring-allgather`,
`-usp`, `-loongtrain`) registered through `longca_cp_strategies`. Nothing here is imported by
`import longca`; the core's sweep imports it only for CP cases. Plugins reach it through
`longca.plugin` (the public face), never by importing `longca_cp` themselves.
"""
