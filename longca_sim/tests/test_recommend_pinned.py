"""`longca recommend` gives what it gave before the simulator was vectorised (rings and gathers priced a chunk of
positions at a time): the pinned files hold the output of the per-position code (commit ea99d93) for two small
cases. Ranking, status, flags and bands must match exactly, every number to 1e-12 (the new code does the same
arithmetic; only a different BLAS could move a last bit). A change of the shipped fit or validation bands changes
these numbers: regenerate the files then, with the case's `longca recommend ... --format json` ("lines")."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from longca_sim.request import Asked, recommendations

DATA = Path(__file__).parent / "data"
CASES = sorted(DATA.glob("recommend_*.json"))


def _same(got, want, where: str) -> None:
    if isinstance(want, float) or isinstance(got, float):
        if math.isnan(want):
            assert math.isnan(got), where
        else:
            assert got == pytest.approx(want, rel=1e-12, abs=1e-12), where
    elif isinstance(want, dict):
        assert set(got) == set(want), where
        for key in want:
            _same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{where}[{i}]")
    else:
        assert got == want, where


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_recommend_output_is_pinned(path: Path) -> None:
    pinned = json.loads(path.read_text())
    lines, _ = recommendations(Asked(**pinned["asked"]))
    got = json.loads(json.dumps([ln.as_dict() for ln in lines], default=str))
    # strategies installed since (a plugin without a schedule) add unranked lines: compare the pinned ones
    known = {line["strategy"] for line in pinned["lines"]}
    got = [line for line in got if line["strategy"] in known]
    _same(got, pinned["lines"], path.stem)


def test_pinned_cases_exist() -> None:
    assert len(CASES) == 2
