"""longca kernel plugin `vsa-triton`: the Triton block-sparse attention shipped with VSA."""
