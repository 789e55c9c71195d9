"""`longca report --html` in a real headless Chromium (Debian's, driven by playwright): the table
renders, a filter changes the visible rows and the plots, sorting works, hover shows the record,
and the page asks for nothing over the network. In CI (`LONGCA_REQUIRE_BROWSER=1`, set by .ci/run)
a missing browser fails the test instead of skipping it."""
import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from longca_cli.main import app

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def _browser_or_skip() -> str:
    chromium = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing = "the playwright package is not installed"
    else:
        missing = None if chromium else "no chromium executable (Debian package chromium)"
    if missing:
        if os.environ.get("LONGCA_REQUIRE_BROWSER"):
            pytest.fail(f"LONGCA_REQUIRE_BROWSER is set but {missing}")
        pytest.skip(missing)
    return chromium  # type: ignore[return-value]


def _rows():
    out = []
    for kernel, speed in (("fa2", 300.0), ("sdpa", 200.0), ("flex", 250.0)):
        for mask in ("causal", "full", "sliding_window"):
            for seqlen in (1024, 2048, 4096):
                for direction in ("fwd", "bwd"):
                    out.append({"kernel": kernel, "strategy": None, "world_size": 1, "mask": mask, "mask_params": {},
                                "seqlen": seqlen, "heads_q": 8, "heads_kv": 8, "head_dim": 64, "dtype": "bfloat16",
                                "direction": direction, "status": "ok", "tflops": speed * seqlen / 4096,
                                "ms_median": 1.0, "ms_p20": 0.98, "ms_p80": 1.02, "backend": kernel,
                                "case_id": f"{kernel}-{mask}-{seqlen}-{direction}"})
    out.append({**out[0], "kernel": "torch", "status": "oom", "tflops": None, "backend": None, "case_id": "torch-oom",
                "reason": "OutOfMemoryError"})
    return out


def test_report_page_in_headless_chromium(tmp_path):
    chromium = _browser_or_skip()
    from playwright.sync_api import sync_playwright

    rows = _rows()
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "run.json").write_text(json.dumps({"matmul_peak_tflops": 400.0, "gpu": "NVIDIA H200"}))
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--html", "--no-plots"])
    assert result.exit_code == 0, result.output
    page_path = tmp_path / "report.html"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_page()
        errors, requests = [], []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(page_path.as_uri())
        assert page.locator("#rows tbody tr").count() == len(rows)
        assert page.text_content("#count") == f"{len(rows)} of {len(rows)} rows shown"
        panels = page.locator("#charts svg").count()
        assert panels == 3 * 2 and page.locator("#charts svg circle").count() == 3 * 3 * 3 * 2
        assert page.locator("#charts polyline").count() == 3 * 3 * 2

        page.select_option("#filter-mask", "causal")
        assert page.locator("#rows tbody tr").count() == 3 * 3 * 2 + 1
        page.select_option("#filter-direction", "fwd")
        assert page.locator("#rows tbody tr").count() == 3 * 3 + 1
        assert page.locator("#charts svg").count() == 1 and page.locator("#charts svg circle").count() == 9

        page.click("#rows th:has-text('TFLOP/s')")
        page.click("#rows th:has-text('TFLOP/s')")  # descending
        first = page.locator("#rows tbody tr").first
        assert first.locator("td").first.text_content() == "fa2" and "300.0" in first.text_content()
        first.hover()
        assert page.is_visible("#detail") and '"case_id": "fa2-causal-4096-fwd"' in page.text_content("#detail")
        browser.close()
    assert not errors, errors
    assert all(url.startswith("file:") for url in requests), requests


HOSTILE = '<!--<script>alert(1)</script></script><b>'


def _hostile_folder(tmp_path):
    rows = _rows()
    rows.append({**rows[0], "kernel": '=HYPERLINK("http://x","y")', "status": "error", "tflops": None,
                 "case_id": "hostile-1", "reason": HOSTILE})
    rows.append({**rows[0], "kernel": "+cmd", "status": "error", "tflops": None, "case_id": "hostile-2",
                 "reason": "-2+3", "backend": "@SUM(A1)"})
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--html", "--no-plots"])
    assert result.exit_code == 0, result.output
    return rows


def test_row_strings_are_data_in_the_page_and_the_csv(tmp_path):
    """Without a browser: the embedded data holds no `<` at all, and no CSV text cell starts a formula."""
    import csv

    _hostile_folder(tmp_path)
    page = (tmp_path / "report.html").read_text()
    data = page.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and ">" not in data
    assert HOSTILE in json.dumps(json.loads(data))  # every string comes back whole
    with (tmp_path / "report.csv").open(newline="") as f:
        cells = [cell for line in csv.reader(f) for cell in line]
    assert "'=HYPERLINK(\"http://x\",\"y\")" in cells and "'+cmd" in cells and "'-2+3" in cells and "'@SUM(A1)" in cells
    assert not any(cell[:1] in "=+-@" for cell in cells if cell and not _number(cell))


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_hostile_row_strings_hide_nothing_in_headless_chromium(tmp_path):
    """A reason holding `<!--<script>` leaves every row and plot shown and runs no script."""
    chromium = _browser_or_skip()
    from playwright.sync_api import sync_playwright

    rows = _hostile_folder(tmp_path)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_page()
        errors, dialogs = [], []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto((tmp_path / "report.html").as_uri())
        assert page.locator("#rows tbody tr").count() == len(rows)
        assert page.locator("#charts svg").count() == 3 * 2
        assert page.locator("#rows tbody b").count() == 0  # the reason's <b> is text, not markup
        assert HOSTILE in page.text_content("#rows")
        browser.close()
    assert not errors and not dialogs, (errors, dialogs)
