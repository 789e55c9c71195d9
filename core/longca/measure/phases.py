"""Where a case is: each stage of a measurement names itself, so a supervisor that has to stop
a stuck case (`longca.supervisor`, `longca_cp.group`) can say where it was stuck.

An object handed down the measurement, not a module global: two measurements in one process
(tests, a CP rank and its inner kernel) each keep their own."""
from __future__ import annotations

from collections.abc import Callable


class Phases:
    """`phases("timing")` records the stage and tells the listener (a worker forwards it to its supervisor)."""

    def __init__(self, listener: Callable[[str], None] | None = None,
                 on_estimate: Callable[[float], None] | None = None) -> None:
        self.listener = listener
        self.on_estimate = on_estimate  # hears the case's default deadline (`longca.estimate`) once it is known
        self.current: str | None = None

    def __call__(self, name: str) -> None:
        self.current = name
        if self.listener is not None:
            self.listener(name)

    def estimated(self, deadline_s: float) -> None:
        """The case's default deadline from its estimate, for the supervisor."""
        if self.on_estimate is not None:
            self.on_estimate(deadline_s)
