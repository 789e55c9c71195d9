"""Where a case is: each stage of a measurement names itself, so a supervisor that has to stop
a stuck case (`longca_runner.supervisor`, `longca_runner.cp.group`) can say where it was stuck.

An object handed down the measurement, not a module global: two measurements in one process
(tests, a CP rank and its inner kernel) each keep their own."""
from __future__ import annotations

from collections.abc import Callable


class Phases:
    """`phases("timing")` records the stage and tells the listener (a worker forwards it to its supervisor)."""

    def __init__(self, listener: Callable[[str], None] | None = None,
                 on_estimate: Callable[[float], None] | None = None) -> None:
        self.listener = listener
        self.on_estimate = on_estimate  # hears the case's default deadline (`longca_runner.estimate`) once it is known
        self.current: str | None = None

    def __call__(self, name: str) -> None:
        self.current = name
        if self.listener is not None:
            self.listener(name)

    def estimated(self, deadline_s: float) -> None:
        """The case's default deadline from its estimate, for the supervisor."""
        if self.on_estimate is not None:
            self.on_estimate(deadline_s)


# where a run's minutes go (runs.jsonl `phases_s`, the report's header): each phase a case names
# counts for one of these; the time between no phase and the run's wall time is "other"
PHASE_KINDS = {"first call": "compile", "backward": "compile", "reference": "reference", "check": "check",
               "repeatability": "check", "energy": "timed",
               "peak memory": "timed", "timing": "timed"}
KINDS = ("compile", "reference", "check", "timed", "other")


class PhaseClock:
    """Seconds per kind of phase over a run, from the phases its cases enter (`enter`), plus time added
    whole (`add`: the prewarm's compilation); `wall_s` since the clock was made. Also per kernel
    (`kernels`): each case's wall time and phases, so a slow run says which kernel's cases cost what."""

    def __init__(self) -> None:
        import time

        self._now = time.monotonic
        self.started = self._now()
        self.seconds = dict.fromkeys(KINDS, 0.0)
        self.kernels: dict[str, dict[str, float]] = {}
        self.named: dict[str, float] = {}  # seconds per phase name, every kernel together (`phase_names_s`)
        self._phase: str | None = None
        self._kernel: str | None = None
        self._since = self.started

    def enter(self, phase: str | None, kernel: str | None = None) -> None:
        """The case (of `kernel`) now in `phase` (None: between cases): the phase before it is counted."""
        now = self._now()
        if self._phase is not None:
            kind = PHASE_KINDS.get(self._phase, "other")
            self.add(kind, now - self._since)
            self.named[self._phase] = self.named.get(self._phase, 0.0) + now - self._since
            if self._kernel is not None:
                self._of(self._kernel)[kind] += now - self._since
        self._phase, self._kernel, self._since = phase, kernel, now

    def case(self, kernel: str, seconds: float) -> None:
        """One case of `kernel` took `seconds` from the supervisor's send to its row."""
        self._of(kernel)["wall"] += seconds
        self._of(kernel)["cases"] += 1

    def _of(self, kernel: str) -> dict[str, float]:
        return self.kernels.setdefault(kernel, dict.fromkeys(("cases", "wall", *KINDS), 0.0))

    def kernel_summary(self) -> dict[str, dict[str, float]]:
        """`kernels_s`: per kernel, its cases, their wall seconds and the seconds of each kind of phase
        ("other": inside the cases, in no counted phase: start-up, inputs, messages)."""
        return {name: {k: (int(v) if k == "cases" else round(v, 3)) for k, v in parts.items()}
                for name, parts in self.kernels.items()}

    def names_summary(self) -> dict[str, float]:
        """`phase_names_s`: seconds per phase name as the cases named them ("inputs", "mask", "prepare",
        "timing", ...), the slowest first: what a kind (above all "other") is made of."""
        return {name: round(v, 3) for name, v in sorted(self.named.items(), key=lambda item: -item[1])}

    def add(self, kind: str, seconds: float) -> None:
        self.seconds[kind] += seconds

    def wall_s(self) -> float:
        return self._now() - self.started

    def summary(self) -> dict[str, float]:
        """`phases_s`: seconds per kind, "other" the wall time no kind accounts for."""
        wall = self.wall_s()
        counted = {k: round(v, 1) for k, v in self.seconds.items() if k != "other"}
        return {**counted, "other": round(max(0.0, wall - sum(self.seconds[k] for k in counted)), 1)}
