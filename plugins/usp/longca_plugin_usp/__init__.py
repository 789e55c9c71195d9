"""longca CP strategy: USP (Ulysses inside groups, ring attention across groups)."""
