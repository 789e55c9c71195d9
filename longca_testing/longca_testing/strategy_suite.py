"""Conformance of a context-parallel strategy: on CPU with gloo, world sizes 2 and 4, every mask it
claims, output and gradients against the single-device reference, dispatch/undispatch round trip.

    test_strategy = plugin.strategy_conformance_tests("allgather_demo")

Cases: `registered`, `spec`, then `world-W` per world size: one process group of W ranks runs
every claimed static mask (fwd and bwd through the `reference` inner kernel, or `inner=` for a strategy
that names its own kernels in `inner_kernels`, documents ragged),
and checks that `undispatch(dispatch(x))` gives `x` back. The inputs come from a seed rank 0
draws in secret (a strategy must communicate K/V, not regenerate them), and for a strategy with a
`schedule` the bytes its passes move through `longca_cp.comm` must be what the schedule accounts.
A mask refused by `supports()` with a reason is listed, not failed, unless every mask is refused;
one refused only for its backward (a kernel with no backward on CPU) is checked forward: out and
the round trip. Strategies not installed yet can be checked from their module:
`plugin_modules=("my_package.cp_hooks",)`.
"""
from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any

from longca.plugins import Registry, get_registry
from longca.specs import CPStrategySpec
from longca_testing.conformance import Case, ConformanceSkip, Report, kind_cases, registered_spec, run_cases

WORLD_SIZES = (2, 4)
SEQLEN = 512  # or the mask's seqlen_multiple
HEADS = (4, 4)
HEAD_DIM = 16
TOLERANCE = 1e-4  # float32 against the float32 reference
TIMEOUT_S = 600


def claimed_static_masks(spec: CPStrategySpec, registry: Registry) -> list[str]:
    return [m for m in registry.claimed_masks(spec.masks)
            if m in registry.entries["masks"] and registry.mask(m).kind != "block_sparse"]


def _ranges(flags: Any) -> str:
    """`a..b` runs of the True positions of a 1-D bool tensor, at most four."""
    idx = flags.nonzero().flatten().tolist()
    runs: list[list[int]] = []
    for i in idx:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(f"{a}..{b}" if a != b else f"{a}" for a, b in runs[:4])
    return text + (f" (+{len(runs) - 4} more runs)" if len(runs) > 4 else "")


def _where_wrong(got: dict, want: dict, layout: Any) -> str:
    """Which query rows (out, dq) and key rows (dk, dv) differ, and which ranks hold them."""
    def owners(flags: Any) -> str:
        ranks = sorted({r for r, runs in enumerate(layout.runs) for a, b in runs if flags[a:b].any()})
        return f"held by rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"

    parts = []
    if "dk" in got:  # keys that get no gradient at all although the reference gives them one
        silent = ((got["dk"].abs().amax(dim=(0, 2, 3)) == 0) & (got["dv"].abs().amax(dim=(0, 2, 3)) == 0)
                  & (want["dv"].abs().amax(dim=(0, 2, 3)) > 0))
        if silent.any():
            parts.append(f"no gradient reaches keys {_ranges(silent)} ({owners(silent)}): no query attends them")
    for name in got:
        diff = (got[name].float() - want[name]).abs().amax(dim=(0, 2, 3))
        bad = diff > TOLERANCE * 10 * (1 + want[name].abs().amax(dim=(0, 2, 3)))
        if not bad.any():
            continue
        kind = "keys" if name in ("dk", "dv") else "query rows"
        parts.append(f"{name} wrong on {kind} {_ranges(bad)} ({owners(bad)})")
    return "; ".join(parts)


def rank_checks(device: str, name: str, problems: list[dict], plugin_modules: tuple[str, ...],
                paths: tuple[str, ...]) -> list[dict]:
    """On every rank of the group: each problem checked (rank 0 keeps the findings)."""
    import torch
    import torch.distributed as dist

    from longca.capability import strategy_unsupported as unsupported
    from longca.problem import Problem, build_mask
    from longca_cp.accounting import schedule_of
    from longca_cp.inner import inner_kernel
    from longca_runner.cp.check import outputs, secret_inputs
    from longca_runner.cp.measure import resolve
    from longca_runner.measure import rel_err, seeded_dout

    for path in paths:
        if path not in sys.path:
            sys.path.insert(0, path)
    registry = get_registry()
    register_modules(registry, plugin_modules)
    spec = registry.strategy(name)
    world = dist.get_world_size()
    found = []
    for fields in problems:
        problem = Problem(**{**fields, "device": device, "world_size": world})
        try:
            options = resolve(problem, {}, registry)
            reason = unsupported(problem, options, registry)
            forward_only = None
            if reason:  # a strategy (or its kernel) without a backward here is still checked forward
                fwd = problem.with_(direction="fwd")
                fwd_options = resolve(fwd, {}, registry)
                if unsupported(fwd, fwd_options, registry) is not None:
                    found.append({"mask": problem.mask, "refused": reason})
                    continue
                problem, options, forward_only = fwd, fwd_options, reason
            mask = build_mask(problem, 0, registry)
            plan = spec.prepare(problem, mask, inner_kernel(problem, registry), dist.group.WORLD, options)
            q, k, v = secret_inputs(problem)  # a strategy cannot regenerate other ranks' K/V from the seed
            moved: dict[str, list] = {}
            both = outputs(spec, plan, problem, mask, q, k, v, None if forward_only else seeded_dout(problem), moved)
            x = torch.randn(q.shape, generator=torch.Generator().manual_seed(5))
            back = spec.undispatch(spec.dispatch(x, plan), plan)
            if both is None:
                continue
            got, want = both
            item: dict[str, Any] = {"mask": problem.mask, "errors": {n: rel_err(got[n], want[n]) for n in got}}
            if forward_only:
                item["forward_only"] = forward_only
            if spec.schedule is not None and any(moved.values()):  # it communicates through longca_cp.comm
                gap = accounting_gap(schedule_of(problem, mask, options, registry), dist.get_rank(), moved)
                if gap:
                    item["accounting"] = gap
            if tuple(back.shape) != tuple(x.shape) or not torch.equal(back, x):
                item["roundtrip"] = (f"undispatch(dispatch(x)) != x (shape {tuple(back.shape)}, "
                                     f"expected {tuple(x.shape)})")
            if max(item["errors"].values()) > TOLERANCE or any(e != e for e in item["errors"].values()):
                item["where"] = _where_wrong(got, want, plan.layout)
            found.append(item)
        except Exception as exc:  # noqa: BLE001 - one case's failure is its finding; the others ranks raise too
            found.append({"mask": problem.mask, "error": f"{type(exc).__name__}: {exc}"})
    return found


def accounting_gap(schedule: Any, rank: int, moved: dict[str, list]) -> str | None:
    """Where this rank's transfers of a pass (`comm.recording`: kind, bytes, peer or group size) differ
    from what its schedule accounts (`schedule.comm`, which balance figures and `simulate` price), or
    None. A strategy that moves fewer bytes than it accounts (K/V made up rather than received) or
    more (transfers its accounting leaves out) fails."""
    from collections import Counter

    def total(c: Counter) -> str:
        return f"{sum(key[1] * n for key, n in c.items())} bytes in {sum(c.values())} transfers"

    for phase, ledger in moved.items():
        want: Counter = Counter()
        for op in schedule.comm(rank):
            if op.phase == phase:
                want[(op.kind, op.nbytes, op.ranks[1] if op.kind == "p2p" else op.group_size)] += op.count
        got = Counter(tuple(t) for t in ledger)
        if got != want:
            return (f"rank {rank}'s {phase} moved {total(got)}, its schedule accounts {total(want)} "
                    f"(moved but not accounted: {dict(got - want) or 'none'}; accounted but not moved: "
                    f"{dict(want - got) or 'none'})")
    return None


def register_modules(registry: Registry, modules: tuple[str, ...]) -> None:
    """Register plugin modules not installed as distributions (a strategy under development)."""
    from importlib import import_module

    from longca.plugins import PluginInfo, _register

    assert registry.pm is not None, "a registry from get_registry() or Registry.discover() has a plugin manager"
    for module in modules:
        if any(p.module == module for p in registry.plugins):
            continue
        info = PluginInfo(module.rsplit(".", 1)[-1], "(not installed)", "0", module)
        registry.plugins.append(info)
        _register(registry, registry.pm, info, import_module(module))


def _problems(spec: CPStrategySpec, registry: Registry, inner: str = "reference") -> list[dict]:
    from longca.problem import Problem

    out = []
    for mask in claimed_static_masks(spec, registry):
        m = registry.mask(mask).seqlen_multiple
        seqlen = -(-SEQLEN // m) * m
        params = {"window": 40} if "window" in registry.mask(mask).params else {}
        problem = Problem(kernel=inner, strategy=spec.name, mask=mask, seqlen=seqlen, heads_q=HEADS[0],
                          heads_kv=HEADS[1], head_dim=HEAD_DIM, dtype="float32", direction="fwdbwd",
                          sampler="uniform", sampler_params={"min_len": 1, "max_len": seqlen // 3}, seed=1,
                          mask_params=params)
        out.append({k: v for k, v in asdict(problem).items() if k not in ("device", "world_size")})
    return out


def check_spec(name: str, registry: Registry) -> list[dict]:
    spec = registered_spec(registry, "strategies", name)
    problems = []
    if not str(spec.description).strip():
        problems.append("description is empty")
    for attr in ("prepare", "dispatch", "attention", "undispatch"):
        if not callable(getattr(spec, attr)):
            problems.append(f"{attr} must be callable")
    for attr in ("supports", "resolve_options"):
        if getattr(spec, attr) is not None and not callable(getattr(spec, attr)):
            problems.append(f"{attr} must be None or callable")
    if not claimed_static_masks(spec, registry):
        problems.append(f"claims no registered static mask: masks={spec.masks!r}")
    if problems:
        raise AssertionError(f"CP strategy {name}: malformed CPStrategySpec:\n  " + "\n  ".join(problems))
    return []


def check_world(name: str, world: int, registry: Registry, plugin_modules: tuple[str, ...],
                inner: str = "reference") -> list[dict]:
    """Every claimed mask at `world` gloo ranks: out, dq, dk, dv vs the reference; the round trip."""
    from longca_runner.cp.launch import spawn

    spec = registered_spec(registry, "strategies", name)
    problems = _problems(spec, registry, inner)
    try:
        found = spawn(rank_checks, world, "gloo", "cpu", (name, problems, tuple(plugin_modules), tuple(sys.path)),
                      TIMEOUT_S)[0]
    except Exception as exc:  # noqa: BLE001 - a rank died: say which and why
        lines = [x for x in str(exc).strip().splitlines() if x.strip() and not x.startswith(" ")]
        raise AssertionError(f"CP strategy {name} at {world} ranks: a rank failed: "
                             f"{lines[-1] if lines else type(exc).__name__}") from None
    failures, refused = [], []
    for item in found:
        where = f"mask {item['mask']} at {world} ranks"
        if "refused" in item:
            refused.append(f"{where}: refused: {item['refused']}")
        elif "error" in item:
            failures.append(f"{where}: raised {item['error']}")
        else:
            bad = {n: e for n, e in item["errors"].items() if e != e or e > TOLERANCE}
            if bad:
                detail = ", ".join(f"{n} {e:.3g}" for n, e in bad.items())
                failures.append(f"{where}: relative errors {detail} > {TOLERANCE:g}; {item.get('where', '')}")
            if "roundtrip" in item:
                failures.append(f"{where}: {item['roundtrip']}")
            if "accounting" in item:
                failures.append(f"{where}: bytes moved differ from the accounting: {item['accounting']}")
    if failures:
        raise AssertionError(f"CP strategy {name}:\n  " + "\n  ".join(failures + refused))
    if refused and len(refused) == len(found):
        raise ConformanceSkip(f"CP strategy {name}: every claimed mask refused at {world} ranks: {refused[0]}")
    return []


def strategy_conformance_cases(name: str, registry: Registry | None = None,
                               world_sizes: tuple[int, ...] = WORLD_SIZES,
                               plugin_modules: tuple[str, ...] = (), inner: str = "reference") -> list[Case]:
    registry = registry or get_registry()
    register_modules(registry, plugin_modules)
    worlds = [(f"world-{w}", lambda n, r, w=w: check_world(n, w, r, plugin_modules, inner)) for w in world_sizes]
    return kind_cases("strategies", name, registry, [("spec", check_spec), *worlds])


def check_strategy(name: str, registry: Registry | None = None, world_sizes: tuple[int, ...] = WORLD_SIZES,
                   plugin_modules: tuple[str, ...] = (), inner: str = "reference") -> Report:
    """The strategy suite as a Report (never raises for failures)."""
    registry = registry or get_registry()
    cases = strategy_conformance_cases(name, registry, world_sizes, plugin_modules, inner)
    return run_cases(cases, registry, Report(name, kind="CP strategy"))
