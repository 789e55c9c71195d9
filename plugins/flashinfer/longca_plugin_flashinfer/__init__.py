"""longca kernel plugin `flashinfer`: flashinfer.sparse's block-sparse attention wrappers."""
