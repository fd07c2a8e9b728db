"""The app in a real browser: demo on first start, live slider, uploads, a background run.

One server (fresh data folder) serves the tests in order; the malformed-upload test has its own
server so the database can be inspected after it stops. Screenshots of every page go to
docs/screenshots/.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from core.audit import analyze
from core.demo import DEMO_AUDIT_ID, DEMO_V2_AUDIT_ID, build_demo, ensure_demo
from core.format import reviews_txt
from core.store import Store
from tests.browser.conftest import AppServer, live_numbers, nav, open_page, screenshot, wait_idle

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def engine():
    """The demo analysed in this process: the numbers the page must show."""
    store = Store(":memory:")
    ensure_demo(store)
    return analyze(store, DEMO_AUDIT_ID)


def _sidebar_text(page) -> str:
    """The sidebar's text, with the active audit picker's current value."""
    side = page.locator('[data-testid="stSidebar"]')
    picked = side.get_by_role("combobox", name="Active audit").input_value()
    return side.inner_text() + "\n" + picked


def test_fresh_folder_opens_into_the_demo(server, page):
    open_page(page, server)
    assert DEMO_AUDIT_ID in _sidebar_text(page)
    main = page.locator('[data-testid="stMain"]').inner_text()
    assert "This harness is frozen" in main
    assert "Harness hash" in _sidebar_text(page)
    screenshot(page, "freeze")


def test_flip_slider_by_keyboard_matches_the_engine(server, page, engine):
    open_page(page, server, "flip")
    first = live_numbers(page)
    view = engine.view(78.0, 2.0)
    assert first["cutoff"] == "78"
    assert int(first["flips"]) == view.flip.candidates_with_flip
    assert first["reviews"] == reviews_txt(view.manual_reviews_per_req)
    screenshot(page, "flip")
    thumb = page.locator('[data-testid="stSlider"] input[type="range"]').first
    thumb.focus()
    thumb.press("ArrowRight")
    thumb.press("ArrowRight")
    deadline = time.monotonic() + 20
    now = first
    while time.monotonic() < deadline:
        wait_idle(page)
        now = live_numbers(page)
        if now["cutoff"] == "80":
            break
    assert now["cutoff"] == "80"
    moved = engine.view(80.0, 2.0)
    assert int(now["flips"]) == moved.flip.candidates_with_flip
    assert now["reviews"] == reviews_txt(moved.manual_reviews_per_req)
    assert now["reviews"] != first["reviews"]
    metric = page.locator('[data-testid="stMetric"]', has_text="Candidates with any flip")
    assert f"{moved.flip.candidates_with_flip} of 40" in metric.inner_text()
    # the band page follows the same cutoff; its k slider moves the band live
    nav(page, "6 · Band")
    assert live_numbers(page, "band-live-numbers")["cutoff"] == "80"
    screenshot(page, "band")
    nav(page, "4 · Criteria")
    text = page.locator('[data-testid="stMain"]').inner_text()
    assert "DEAD — experience" in text and "1. projects" in text
    screenshot(page, "criteria")
    nav(page, "2 · Sample")
    screenshot(page, "sample")


def _grid_text(grid, timeout: float = 15.0) -> str:
    """The cells of a data grid (a canvas that exposes its cells to assistive tech), once drawn."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = grid.text_content() or ""
        if text.strip():
            return text
        grid.scroll_into_view_if_needed()
        time.sleep(0.25)
    return text


def _upload(page, path: Path) -> None:
    page.get_by_role("tab", name="Upload exported draws").click()
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(path))
    wait_idle(page, settle=0.5)


def test_upload_draws_then_criteria_shows_them(server, page, tmp_path):
    rng = np.random.default_rng(7)
    rows = []
    for i in range(12):
        base = rng.normal(5, 2)
        for run in range(1, 6):
            rows.append((f"v-{i:02d}", run, "clarity", round(base + rng.normal(0, 0.3))))
            rows.append((f"v-{i:02d}", run, "depth<b>x</b>", round(5 + rng.normal(0, 2.5))))
    path = tmp_path / "vendor.csv"
    pd.DataFrame(rows, columns=["candidate_id", "run", "criterion", "score"]).to_csv(path,
                                                                                  index=False)
    open_page(page, server, "run")
    _upload(page, path)
    summary = page.locator(".st-key-import-summary")
    assert "12 candidates × 5 runs = 60 evaluations" in summary.inner_text()
    # each criterion's min / median / max before confirming
    ranges = _grid_text(summary.locator('[data-testid="stDataFrame"]').first)
    frame = pd.DataFrame(rows, columns=["candidate_id", "run", "criterion", "score"])
    for name, g in frame.groupby("criterion")["score"]:
        assert name in ranges
        for v in (g.min(), g.median(), g.max()):
            assert f"{v:g}" in ranges, (name, v, ranges)
    assert "median" in ranges and "max points" in ranges
    page.get_by_label("New audit id").fill("vendor-upload")
    page.get_by_label("New audit id").press("Enter")
    wait_idle(page)
    page.get_by_role("button", name=re.compile("Confirm: store these draws")).click()
    page.wait_for_url(re.compile(r"/criteria"))
    wait_idle(page, settle=0.8)
    assert "vendor-upload" in _sidebar_text(page)
    main = page.locator('[data-testid="stMain"]')
    text = main.inner_text()
    assert "12 candidates" in text and "60 evaluations" in text
    # the criteria table (a canvas grid) exposes its cells to assistive tech as a table
    # (it fills its cells after the script is idle: wait for them)
    grid = _grid_text(page.locator('[data-testid="stDataFrame"]').first)
    assert "clarity" in grid
    # user text is never markup: the criterion name shows literally, no <b> element appears
    assert "depth<b>x</b>" in text or "depth<b>x</b>" in grid
    assert main.locator("b", has_text="x").count() == 0


def test_run_survives_page_switch_and_reload_then_resumes(server, page):
    open_page(page, server, "")
    page.get_by_label("New audit id").fill("run-e2e")
    page.get_by_role("button", name="Create the audit").click()
    wait_idle(page, settle=0.8)
    assert "run-e2e" in _sidebar_text(page)
    nav(page, "2 · Sample")
    page.get_by_role("button", name="Save this sample to the audit").click()
    wait_idle(page, settle=0.8)
    assert "40 candidates" in page.locator('[data-testid="stMain"]').inner_text()
    nav(page, "3 · Run")
    for label, value in (("Runs per candidate", "6"), ("Calls in flight", "2"),
                         ("Simulated latency per call (ms)", "100")):
        page.get_by_label(label).fill(value)
        page.get_by_label(label).press("Enter")
        wait_idle(page)
    page.get_by_role("button", name="Start the run").click()
    state = page.locator(".st-key-run-state")
    state.wait_for()
    page.wait_for_function(
        "() => /run state: (preflight|running)/.test(document.querySelector('.st-key-run-state')?.innerText || '')")
    nav(page, "5 · Flip")
    nav(page, "3 · Run")
    page.wait_for_function(
        "() => /run state: running/.test(document.querySelector('.st-key-run-state')?.innerText || '')")
    before = int(re.search(r"draws (\d+) of", state.inner_text()).group(1))
    assert 0 < before < 240
    screenshot(page, "run")
    # reload mid-run: a new session finds the same run (the URL keeps the audit)
    page.reload()
    page.wait_for_selector(".st-key-run-state")
    assert "run-e2e" in _sidebar_text(page)
    assert "running" in page.locator(".st-key-run-state").inner_text()
    page.get_by_role("button", name="Stop the run").click()
    page.wait_for_function(
        "() => /run state: stopped/.test(document.querySelector('.st-key-run-state')?.innerText || '')")
    wait_idle(page, settle=0.8)
    stopped = int(re.search(r"draws (\d+) of",
                            page.locator(".st-key-run-state").inner_text()).group(1))
    assert 0 < stopped < 240
    # one source of truth: the run state, the guard panel and the sidebar give the same count
    # (issue 9: "progress 27/600, 'Calls stored 12', sidebar '0 evaluations'")
    # (a call cancelled by the stop is stored as a failed call, never a draw)
    def metric(label: str) -> int:
        text = page.locator('[data-testid="stMetric"]', has_text=label).inner_text()
        return int(text.split()[-1].replace(",", ""))
    assert metric("Calls stored") == stopped + metric("Failed or unparsed calls")
    assert f"{stopped} evaluations stored" in _sidebar_text(page)
    page.get_by_role("button", name="Resume the run").click()
    page.wait_for_function(
        "() => /Every candidate has its 6 runs \\(240 draws\\)/.test(document.querySelector('[data-testid=\"stMain\"]').innerText)",
        timeout=60_000)


def test_malformed_upload_lists_every_fault_and_writes_nothing(tmp_path_factory, browser):
    """Issue 9: a file with five faults lists all five (spreadsheet line, column, value)."""
    srv = AppServer(tmp_path_factory.mktemp("malformed")).start()
    path = tmp_path_factory.mktemp("files") / "broken.csv"
    rows = [f"c{i:02d},{r},skills,{(i * 3 + r) % 9}" for i in range(30) for r in (1, 2)]
    rows[50] = "c25,1,skills,seven"                       # line 52: not a number
    rows[9] = "c04,2,skills,1e400"                        # line 11: overflow
    rows += ["c07,1,skills,3",                            # line 62: duplicate key
             "loner,1,skills,4",                          # line 63: one run
             '"=HYPERLINK(""http://x"")",1,skills,2']     # line 64: formula-like id
    path.write_bytes(("\ufeff" + "\r\n".join(["candidate_id,run,criterion,score", *rows,
                                                ",,,"]) + "\r\n").encode())
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        open_page(page, srv, "run")
        _upload(page, path)
        panel = page.locator(".st-key-import-error")
        msg = panel.inner_text()
        assert "nothing was stored" in msg and "5 fault(s) in broken.csv" in msg
        grid = panel.locator('[data-testid="stTable"]').first.inner_text()
        for line, column, value in (("11", "score", "1e400"), ("52", "score", "seven"),
                                    ("62", "criterion", "skills"), ("63", "run", "loner"),
                                    ("64", "candidate_id", "=HYPERLINK")):
            assert line in grid and column in grid and value in grid, (line, grid)
        assert "has only 1 run" in grid and "spreadsheet formula" in grid
        assert "Traceback" not in page.locator('[data-testid="stMain"]').inner_text()
        assert page.get_by_role("button", name=re.compile("Confirm")).count() == 0
        screenshot(page, "upload-faults")
    finally:
        context.close()
        srv.stop()
    store = Store(srv.db, read_only=True)
    try:
        assert sorted(store.list_audits()["audit_id"]) == [DEMO_AUDIT_ID, DEMO_V2_AUDIT_ID]
        assert len(store.list_imports(DEMO_AUDIT_ID)) == 0
        demo = build_demo()
        assert store.n_draws(DEMO_AUDIT_ID) == len(demo["draws"])
    finally:
        store.close()


def test_drift_page_demo_panel_shows_graders_q_and_reaudit_date(server, page):
    """Drift in a real browser: the demo panel gives the reference grader, q with its test
    and a re-audit date, with the Plotly charts drawn."""
    open_page(page, server)
    nav(page, "Drift")
    page.get_by_role("button", name="Load the demo panel").click()
    wait_idle(page, settle=1.0)
    page.wait_for_selector(".st-key-reaudit", timeout=60_000)
    wait_idle(page, settle=0.5)
    main = page.locator('[data-testid="stMain"]')
    text = main.inner_text()
    assert "Reference rater" in text and "LR test of q = 0" in text
    assert page.locator('[data-testid="stMetric"]', has_text="Reference rater").inner_text() \
        .strip().endswith("A")
    assert main.locator(".js-plotly-plot").count() >= 2
    screenshot(page, "drift")
