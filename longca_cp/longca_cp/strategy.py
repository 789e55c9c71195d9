"""One factory for the strategies on the hybrid grid (head parallel x ring): a strategy is a table row.

Ulysses, Ring P2P, USP, LoongTrain and Ring All-Gather differ only in how their options pick the
grid (head degree, windows, layout), the defaults of those options, and the option sets the
simulator tries; Ring All-Gather brings its own schedule, prepare and attention. So each plugin's
hooks.py is one `hybrid_strategy(...)` call (`longca.plugin.hybrid_strategy`), and a fix to
options, refusals or variants is made once. Nothing heavy is imported until a strategy runs.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from longca.specs import ANY_STATIC, CPStrategySpec

from .plan import dispatch, undispatch

if TYPE_CHECKING:  # pragma: no cover
    from longca.problem import Problem

# where the head-parallel degree comes from: "world" (every rank), a number, or an option's name
Degree = int | str
# layouts the simulator tries for a ring strategy; hybrid ones leave contiguous out
RING_LAYOUTS = ("zigzag", "doc_zigzag", "contiguous")
HYBRID_LAYOUTS = ("zigzag", "doc_zigzag")
LAYOUT_DOC = ("ring layout: zigzag (default), contiguous"
              ", doc_zigzag (each document in 2R pieces, one varlen call a step: TE's THD)")
MAX_TRIED_WINDOWS = 8


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def default_windows(ring: int) -> int:
    """LoongTrain's default: two windows when the ring has an even number >= 4 of ranks, else one."""
    return 2 if ring >= 4 and ring % 2 == 0 else 1


class _Grid:
    """The rules of one row: options -> (head degree, windows, layout), defaults, tried variants."""

    def __init__(self, name: str, head: Degree, windows: Degree, layout: str | None,
                 head_at_most: Callable[[int], int], tried_layouts: tuple[str, ...]):
        self.name, self.head, self.windows, self.layout = name, head, windows, layout
        self.head_at_most, self.tried_layouts = head_at_most, tried_layouts
        self.defaults: dict[str, Any] = {}
        for rule in (head, windows):
            if isinstance(rule, str) and rule != "world":
                self.defaults[rule] = None  # resolved from the problem in `resolve`
        if layout is not None:
            self.defaults["layout"] = layout

    def resolve(self, problem: Problem, options: dict) -> dict:
        from .hybrid import default_head_degree
        from .plan import resolve_options

        out = resolve_options(self.name, options, self.defaults)
        world = problem.world_size
        if isinstance(self.head, str) and self.head != "world" and out[self.head] is None:
            out[self.head] = default_head_degree(problem, max(1, self.head_at_most(world)))
        if isinstance(self.windows, str) and out[self.windows] is None:
            head = self.degree(problem, out)
            out[self.windows] = default_windows(world // head if world % head == 0 else 1)
        return out

    def degree(self, problem: Problem, options: dict) -> int:
        return problem.world_size if self.head == "world" else int(options[self.head] if isinstance(self.head, str)
                                                                   else self.head)

    def grid(self, problem: Problem, options: dict) -> tuple[int, int, str]:
        windows = int(options[self.windows]) if isinstance(self.windows, str) else self.windows
        return self.degree(problem, options), windows, options["layout"] if self.layout else "contiguous"

    def variants(self, world: int, heads_q: int, gpus_per_node: int) -> list[dict[str, Any]]:
        """The option sets `longca recommend` tries: the grids only this strategy reaches, x layouts.

        A head option tries the degrees inside a node that split the heads (USP without 1 and W:
        those are Ring P2P and Ulysses); a windows option tries 1 < windows < ring, at most 8
        (one window is USP)."""
        local = [d for d in _divisors(world) if d <= gpus_per_node and heads_q % d == 0]
        grids: list[dict[str, Any]] = [{}]
        head = self.head if isinstance(self.head, str) and self.head != "world" else None
        if head and isinstance(self.windows, str):
            grids = [{head: d, self.windows: w} for d in local for w in _divisors(world // d)
                     if 1 < w < world // d and w <= MAX_TRIED_WINDOWS]
        elif head:
            grids = [{head: d} for d in local if 1 < d < world]
        layouts = [{"layout": lay} for lay in self.tried_layouts] if self.layout else [{}]
        return [{**g, **lay} for g in grids or [{}] for lay in layouts]


def hybrid_strategy(name: str, description: str, *, head: Degree = 1, windows: Degree = 1,
                    layout: str | None = "zigzag", options: dict[str, str] | None = None,
                    head_at_most: Callable[[int], int] = lambda world: world,
                    tried_layouts: tuple[str, ...] | None = None,
                    schedule: Callable[..., Any] | None = None, prepare: Callable[..., Any] | None = None,
                    attention: Callable[..., Any] | None = None) -> CPStrategySpec:
    """The CPStrategySpec of one row.

    `head`: "world", a number, or the option that sets the head-parallel degree (its default: the
    largest degree <= `head_at_most(world)` that fits, `hybrid.default_head_degree`); `windows`: a
    number or the option that sets the double ring's windows (default `default_windows`);
    `layout`: the default of the `layout` option, or None for a fixed contiguous layout.
    `schedule(problem, mask, options)`, `prepare(schedule, inner, group, options)` and
    `attention(q, k, v, plan)` replace the hybrid ring's (Ring All-Gather's own algorithm).
    `tried_layouts`: the layouts `variants` tries (default: with contiguous only for a pure ring).
    `options` documents each option; a `layout` option left out gets `LAYOUT_DOC`.
    """
    if tried_layouts is None:
        tried_layouts = RING_LAYOUTS if head == 1 else HYBRID_LAYOUTS
    grid = _Grid(name, head, windows, layout, head_at_most, tried_layouts)
    docs = dict(options or {})
    if layout is not None:
        docs.setdefault("layout", LAYOUT_DOC)

    def resolve_options(problem, options):
        return grid.resolve(problem, options)

    def supports(problem, options):
        from .hybrid import hybrid_unsupported

        return hybrid_unsupported(problem, *grid.grid(problem, options))

    def ring_schedule(problem, mask, options):
        from .hybrid import hybrid_schedule

        return hybrid_schedule(problem, mask, *grid.grid(problem, options))

    make_schedule = schedule or ring_schedule

    def make_plan(problem, mask, inner, group, options):
        from .hybrid import prepare_hybrid

        return (prepare or prepare_hybrid)(make_schedule(problem, mask, options), inner, group, options)

    def hybrid_attention(q, k, v, plan):
        from .hybrid import hybrid_attention as run

        return run(q, k, v, plan)

    return CPStrategySpec(
        name=name, description=description,
        masks=(ANY_STATIC,),  # any mask given as slices: every call gets an exact crop
        prepare=make_plan, dispatch=dispatch, attention=attention or hybrid_attention, undispatch=undispatch,
        supports=supports, resolve_options=resolve_options, schedule=make_schedule, options=docs,
        variants=grid.variants,
    )

