"""The bytes each CP strategy sends, measured on 4 gloo ranks, equal its schedule's accounting (the runner's
rank launcher drives the strategies of longca_cp)."""
from __future__ import annotations

from collections import Counter

import pytest

from longca.problem import Problem, build_mask
from longca_cp.accounting import schedule_of
from longca_runner.cp.launch import spawn
from longca_runner.cp.measure import resolve

CASES = [("ulysses", {}), ("ring-p2p", {}), ("ring-allgather", {}), ("usp", {"ulysses_degree": 2}),
         ("loongtrain", {"head_degree": 1, "windows": 2}), ("ring-p2p", {"layout": "doc_zigzag"}),
         ("usp", {"ulysses_degree": 2, "layout": "doc_zigzag"})]



def _problem(strategy, world=4, mask="causal_document"):
    return Problem(kernel="reference", mask=mask, seqlen=128, heads_q=4, heads_kv=2, head_dim=8, dtype="float32",
                   direction="bwd", sampler="uniform", strategy=strategy, world_size=world)


@pytest.mark.slow  # spawns 4 gloo ranks
def test_transfers_are_what_the_strategies_send():
    cases = [{"problem": {**_problem(s).__dict__, "world_size": 4}, "options": o} for s, o in CASES]
    per_rank = spawn(__import__("longca_runner.cp.check", fromlist=["transfer_cases"]).transfer_cases, 4, "gloo", "cpu",
                     (cases,), 300)
    for i, (strategy, options) in enumerate(CASES):
        problem = _problem(strategy)
        resolved = resolve(problem, options)
        sched = schedule_of(problem, build_mask(problem, 0), resolved)
        for rank in range(4):
            real = per_rank[rank][i]
            for phase in ("fwd", "bwd"):
                want = Counter()
                for op in sched.comm(rank):
                    if op.phase == phase:
                        peer = op.ranks[1] if op.kind == "p2p" else op.group_size
                        want[(op.kind, op.nbytes, peer)] += op.count
                got = Counter(tuple(t) for t in real[phase])
                assert got == want, (strategy, rank, phase)
