"""longca CP strategy: all-gather K/V, reduce-scatter dK/dV, zigzag query chunks."""
