"""Context parallelism: what every strategy shares, free of any kernel library.

- `layout`: which global tokens each rank holds (contiguous, sequence-level zigzag, subdivided).
- `calls`: the (query run, key run) rectangles of a mask that hold work, cropped in local coordinates.
- `merge`: lse-corrected merging of partial outputs and float32 gradient sums.
- `inner`: the inner kernel (any registered kernel with forward_lse/backward_lse).
- `attend`: running a list of calls forward and backward.
- `comm`: subgroups, sequence all-gather / reduce-scatter, Ulysses all-to-all, batched ring P2P.
- `ring`: single and double ring attention (autograd); `hybrid`: head parallel around the ring.
- `plan`: the plan every strategy builds, generic dispatch/undispatch, option resolution.
- `check`, `measure`, `launch`: correctness against the reference, per-rank timing and its
  reduction, starting process groups (spawned on one host or under torchrun).

The strategies themselves are plugins (`longca-plugin-ulysses`, `-ring-p2p`, `-ring-allgather`,
`-usp`, `-loongtrain`) registered through `longca_cp_strategies`. Nothing here is imported by
`import longca`, so the core stays light.
"""
