"""Testing helpers for kernel plugins (the conformance kit)."""
