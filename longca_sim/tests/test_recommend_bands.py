"""`recommend`'s bands (issue 39): an interval from the regime's validation errors (their 80th percentile), how far
out of the validated range a request lies, B200 claimed nowhere, and a warning when the first choice is the
strategy the regime's validation data contradict most."""
from __future__ import annotations

import pytest

from longca_sim import recommend as rec
from longca_sim.request import Asked, recommendations

BANDS = [
    {"mask_class": "document", "multi_node": False, "worlds": [1, 2], "quantile": 0.8, "quantile_abs_err_pct": 13.0,
     "median_abs_err_pct": 6.0, "cells": 30, "source": "own H200 rows",
     "strategies": {"ulysses": {"median_abs_err_pct": 4.0, "cells": 6}}},
    {"mask_class": "document", "multi_node": False, "worlds": [8, 8], "quantile": 0.8, "quantile_abs_err_pct": 27.0,
     "median_abs_err_pct": 24.0, "cells": 10, "source": "published h100",
     "strategies": {"ulysses": {"median_abs_err_pct": 50.0, "cells": 2},
                    "ring-p2p": {"median_abs_err_pct": 5.0, "cells": 2}}},
    {"mask_class": "document", "multi_node": True, "worlds": [16, 64], "quantile": 0.8, "quantile_abs_err_pct": 19.0,
     "median_abs_err_pct": 9.0, "cells": 28, "source": "published h100", "strategies": {}},
]


def test_a_validated_regime_gives_its_quantile_not_its_median():
    band, text = rec.regime_of(BANDS, "document", 8, 8, "h100-sxm")
    assert band is BANDS[1]
    assert "80 % of |error| within 27 %, median 24 %, 10 cells" in text


@pytest.mark.parametrize(("world", "per_node", "cls", "said"), [
    (128, 8, "document", "world size 128 is 2x beyond the largest validated, 64"),
    (4, 8, "document", "world size 4 lies between the validated 2 and 8"),
    (1024, 8, "document", "world size 1024 is 16x beyond the largest validated, 64"),
    (16, 8, "other", "mask class other was never validated"),
    (16, 16, "document", "world size 16 is 2x beyond the largest validated, 8"),
])
def test_a_request_out_of_the_validated_range_says_how_far(world, per_node, cls, said):
    band, text = rec.regime_of(BANDS, cls, world, per_node, "h100-sxm")
    assert band is None and said in text


def test_a_node_count_never_validated_says_so():
    one_node = [b for b in BANDS if not b["multi_node"]]
    band, text = rec.regime_of(one_node, "document", 32, 8, "h100-sxm")
    assert band is None
    assert "document masks on several nodes were never validated (validated: world sizes up to 8 on the other)" in text


def test_b200_is_claimed_nowhere():
    band, text = rec.regime_of(BANDS, "document", 8, 8, "b200")
    assert band is None and "B200 is excluded" in text


def test_the_shipped_bands_are_quantiles_of_claimed_sets_with_each_strategy():
    for band in rec.load_bands():
        assert band["quantile"] == 0.8
        assert band["quantile_abs_err_pct"] >= band["median_abs_err_pct"]
        assert "b200" not in band["source"]
        assert band["strategies"] and sum(s["cells"] for s in band["strategies"].values()) == band["cells"]


def _lines(monkeypatch, bands, strategy="ulysses"):
    monkeypatch.setattr(rec, "load_bands", lambda path=None: bands)
    lines, _ = recommendations(Asked("causal_document", "16k", 8, 8, "16:8", 128, "bfloat16", 1, "fa3", strategy,
                                     "magi", None, 1, "h100-sxm", None, None, None))
    return [ln for ln in lines if ln.status == "ok"]


def test_a_first_choice_the_data_contradict_most_is_warned(monkeypatch):
    ok = _lines(monkeypatch, BANDS)
    assert ok[0].strategy == "ulysses" and ok[0].error_pct == 27.0
    assert len(ok[0].warnings) == 1
    assert "ulysses" in ok[0].warnings[0] and "median |error| 50 % over 2 cells" in ok[0].warnings[0]
    assert ok[0].as_dict()["warnings"] == ok[0].warnings
    assert all(not ln.warnings for ln in ok[1:])


def test_no_warning_when_another_strategy_is_the_worst(monkeypatch):
    bands = [dict(b) for b in BANDS]
    bands[1] = {**bands[1], "strategies": {"ulysses": {"median_abs_err_pct": 5.0, "cells": 2},
                                           "ring-p2p": {"median_abs_err_pct": 50.0, "cells": 2}}}
    ok = _lines(monkeypatch, bands)
    assert ok[0].strategy == "ulysses" and not ok[0].warnings


def test_out_of_range_lines_claim_no_band_and_no_tie(monkeypatch):
    ok = _lines(monkeypatch, [b for b in BANDS if b["worlds"] != [8, 8]], strategy="ulysses,ring-p2p")
    assert len(ok) > 1 and all(ln.error_pct is None and not ln.tie and not ln.warnings for ln in ok)
    assert "world size 8 is 4x beyond the largest validated, 2" in ok[0].regime


def test_out_of_range_the_warning_rests_on_the_nearest_validated_regime(monkeypatch):
    # 8 GPUs on one node, the 8-GPU regime gone: the nearest one-node regime is 1-2 GPUs, with one strategy only
    assert rec.nearest_band(BANDS[:1] + BANDS[2:], "document", 8, 8) is BANDS[0]
    assert rec.nearest_band(BANDS, "document", 128, 8) is BANDS[2]
    assert rec.nearest_band(BANDS, "other", 8, 8) is None
    wide = {**BANDS[1], "worlds": [4, 4]}  # the nearest (4 GPUs) names ulysses the worst
    ok = _lines(monkeypatch, [BANDS[0], wide, BANDS[2]])
    assert ok[0].strategy == "ulysses" and ok[0].error_pct is None
    assert ok[0].warnings and "the nearest validated regime (4-4 GPUs)" in ok[0].warnings[0]


def test_the_command_prints_the_warning_under_its_header(monkeypatch):
    from typer.testing import CliRunner

    from longca_cli.main import app

    monkeypatch.setattr(rec, "load_bands", lambda path=None: BANDS)
    out = CliRunner().invoke(app, ["recommend", "--mask", "causal_document", "--seqlen", "16k", "--gpus", "8",
                                   "--heads", "16:8", "--kernels", "fa3", "--strategy", "ulysses", "--sampler", "magi",
                                   "--samples", "1"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[1].startswith("warning: #1 is ulysses") and "80 % of |error| within 27 %" in lines[0]
