"""longca kernel plugin `mykernel`."""
