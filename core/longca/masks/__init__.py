"""Mask patterns: the slice representation, the 14 patterns, and building a mask for a problem."""
