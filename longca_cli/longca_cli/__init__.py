"""The longca command line (console script `longca`)."""
