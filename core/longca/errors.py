"""User-facing errors: raised for bad input, shown by the CLI as one line with no traceback."""
from __future__ import annotations


class LongcaError(Exception):
    """An error whose message is meant for the user: what was wrong, what was expected."""


class UnknownNameError(LongcaError):
    """A kernel, mask, sampler or strategy name that no plugin registered."""

    def __init__(self, what: str, name: str, known: list[str]):
        self.what, self.name, self.known = what, name, sorted(known)
        super().__init__(f"unknown {what} {name!r}; known: {', '.join(self.known) or '(none)'}")


class UnsupportedError(LongcaError):
    """A kernel or strategy cannot run this problem; the message is the reason."""
