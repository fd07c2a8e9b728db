"""Links, history, small screens and offline, in a real browser.

One server on a fresh folder holding the demo and a second audit whose planned run is not
complete ("partial": 5 candidates × 6 runs, 12 of 30 draws). Screenshots of every page at 1400
and 800 px go to docs/screenshots/ (<page>.png, <page>-800.png).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from core.demo import DEMO_AUDIT_ID, ensure_demo
from core.freeze import Criterion, FreezeSheet
from core.store import Store
from tests.browser.conftest import AppServer, open_page, screenshot, wait_idle

pytestmark = pytest.mark.browser

PARTIAL = "partial-run"
TITLES = {"freeze": "Freeze the harness", "sample": "Frame the sample", "run": None,
          "criteria": "Noise per criterion", "flip": "Flip rate at the cutoff",
          "band": "Manual-review band", "drift": None}
LINKS = {"freeze": "1 · Freeze", "sample": "2 · Sample", "run": "3 · Run",
         "criteria": "4 · Criteria", "flip": "5 · Flip", "band": "6 · Band", "drift": "Drift"}
# an element whose text is cut off with "…" is wider inside than it shows
TRUNCATED_JS = """() => {
  const out = [];
  const sel = '[data-testid="stMetricValue"], [data-testid="stMetricValue"] *, ' +
              '[data-testid="stMetricLabel"], [data-testid="stMetricLabel"] *, ' +
              '[data-testid="stMain"] button, [data-testid="stMain"] button *';
  for (const el of document.querySelectorAll(sel)) {
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1)
      out.push(el.innerText.slice(0, 60));
  }
  return out;
}"""


def _build_partial(db: Path) -> None:
    store = Store(db)
    ensure_demo(store)
    sheet = FreezeSheet(req_id="REQ-7", side_effect_free=True, result_cache_off=True,
                        criteria=(Criterion("a", 10.0), Criterion("b", 10.0)))
    store.save_audit(PARTIAL, sheet.to_dict(), sheet.hash, {"runs": 6, "cutoff": 10.0})
    ids = [f"c{i}" for i in range(5)]
    store.set_candidates(PARTIAL, pd.DataFrame({"candidate_id": ids, "stratum": "band"}))
    rng = np.random.default_rng(3)
    rows = [{"candidate_id": cid, "run": run, "criterion": crit,
             "score": float(np.clip(round(3 + i + rng.normal(0, 1)), 0, 10)),
             "request_id": f"{cid}:{run}", "model": None, "clipped": False}
            for i, cid in enumerate(ids[:3]) for run in range(1, 5) for crit in ("a", "b")]
    store.write_results(PARTIAL, None, pd.DataFrame(rows))
    store.close()


@pytest.fixture(scope="module")
def two_audits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    srv = AppServer(tmp_path_factory.mktemp("links"))
    _build_partial(srv.db)
    srv.start()
    yield srv
    srv.stop()


def _active(page) -> str:
    return page.locator('[data-testid="stSidebar"]').get_by_role(
        "combobox", name="Active audit").input_value()


def _h1(page) -> str:
    return page.locator('[data-testid="stMain"] h1').first.inner_text()


def _sidebar_open(page) -> bool:
    return page.locator('[data-testid="stSidebar"]').evaluate(
        "el => el.getBoundingClientRect().width > 50 && el.getAttribute('aria-expanded') "
        "!== 'false'")


def _click_link(page, url_path: str) -> None:
    """Switch pages through the sidebar's links (opening the sidebar first when collapsed)."""
    narrow = page.viewport_size["width"] <= 800
    if not _sidebar_open(page):
        page.locator('[data-testid="stExpandSidebarButton"]').click()
        page.wait_for_function("() => document.querySelector('[data-testid=\"stSidebar\"]')"
                               ".getBoundingClientRect().width > 50")
    page.locator('[data-testid="stSidebar"] a[data-testid="stPageLink-NavLink"]',
                 has_text=LINKS[url_path]).first.click()
    page.wait_for_url(re.compile(rf"/{url_path}\b"))
    wait_idle(page, settle=0.6)
    if narrow and _sidebar_open(page):
        page.locator('[data-testid="stSidebarCollapseButton"] button').click()
        time.sleep(0.4)


def test_every_page_opens_by_its_own_url_on_a_fresh_server(tmp_path_factory, browser):
    """The very first request after a start is a shared link to /freeze?audit=partial-run: the
    Freeze page opens (no 'Page not found'), with the sidebar, on that audit. Then every page's
    own URL opens that page on the audit the link names.

    Each of these loads starts on a page's URL, and none asks a wrong address: no 404 (such as
    Streamlit asking /band/_stcore/health before /_stcore/health), no failed request, no error
    in the browser's console."""
    srv = AppServer(tmp_path_factory.mktemp("deeplink"))
    _build_partial(srv.db)
    srv.start()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[tuple[int | str, str]] = []
    page.on("response", lambda r: errors.append((r.status, r.url)) if r.status >= 400 else None)
    page.on("requestfailed", lambda r: errors.append(("failed", r.url)))
    page.on("console", lambda m: errors.append(("console", m.text)) if m.type == "error" else None)
    try:
        open_page(page, srv, f"freeze?audit={PARTIAL}")
        assert _h1(page) == TITLES["freeze"]
        assert "Page not found" not in page.content()
        assert _active(page) == PARTIAL
        for url_path, title in TITLES.items():
            open_page(page, srv, f"{url_path}?audit={PARTIAL}")
            assert "Page not found" not in page.content(), url_path
            assert page.url.split("?")[0].endswith(f"/{url_path}")
            assert _active(page) == PARTIAL, url_path
            if title:
                assert _h1(page) == title, url_path
        # "/" is Freeze too
        open_page(page, srv, "")
        assert _h1(page) == TITLES["freeze"]
        assert errors == []
    finally:
        context.close()
        srv.stop()


@pytest.mark.parametrize("url_path", [u for u in TITLES if u != "freeze"])
def test_a_first_request_to_any_page_gets_the_apps_sidebar(url_path, tmp_path_factory,
                                                            browser):
    """A link opened right after a server start, to any page (not only Freeze): the page comes
    with the app's own sidebar (the audit picker, the numbered steps), never Streamlit's list
    of the files in pages/ ('app', 'band', … — what /drift showed, as Drift did not route
    itself through app.py)."""
    srv = AppServer(tmp_path_factory.mktemp(f"first-{url_path}"))
    _build_partial(srv.db)
    srv.start()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        open_page(page, srv, f"{url_path}?audit={PARTIAL}")
        assert _active(page) == PARTIAL
        nav = page.locator('[data-testid="stSidebarNav"] a').all_inner_texts()
        assert not {"app", "band", "drift"} & {n.strip() for n in nav}, nav
        sidebar = page.locator('[data-testid="stSidebar"]').inner_text()
        assert LINKS[url_path] in sidebar
    finally:
        context.close()
        srv.stop()


def test_back_takes_one_press_per_page_and_undoes_an_audit_switch(two_audits, page):
    open_page(page, two_audits, "")
    assert _active(page) == DEMO_AUDIT_ID
    start = page.evaluate("history.length")
    visited = ["sample", "criteria", "flip", "band"]
    for i, url_path in enumerate(visited, start=1):
        _click_link(page, url_path)
        assert page.evaluate("history.length") == start + i, url_path
        assert f"audit={DEMO_AUDIT_ID}" in page.url
    # switching the audit is one step of history, and the link now carries it
    page.locator('[data-testid="stSidebar"]').get_by_role("combobox", name="Active audit") \
        .click()
    page.get_by_role("option", name=PARTIAL).click()
    wait_idle(page, settle=0.8)
    assert _active(page) == PARTIAL and f"audit={PARTIAL}" in page.url
    assert page.evaluate("history.length") == start + len(visited) + 1
    page.go_back()
    wait_idle(page, settle=1.0)
    assert _active(page) == DEMO_AUDIT_ID and f"audit={DEMO_AUDIT_ID}" in page.url
    assert page.url.split("?")[0].endswith("/band")
    for url_path in reversed(visited[:-1]):
        page.go_back()
        wait_idle(page, settle=1.0)
        assert page.url.split("?")[0].endswith(f"/{url_path}"), page.url
        assert _h1(page) == TITLES[url_path]


def test_reload_keeps_the_slider_view(two_audits, page):
    """k moved with the keyboard on Band, not saved: a reload shows the same k and band."""
    open_page(page, two_audits, f"band?audit={DEMO_AUDIT_ID}")
    k = page.locator('[data-testid="stSlider"]', has_text="Band width k") \
        .locator('input[type="range"]')
    k.focus()
    k.press("ArrowRight")
    k.press("ArrowRight")
    wait_idle(page, settle=1.0)
    band = page.locator('[data-testid="stMetric"]', has_text="Manual-review band").inner_text()
    assert float(k.input_value()) == 2.2
    page.reload()
    page.wait_for_selector('[data-testid="stMain"] h1')
    wait_idle(page, settle=1.0)
    k = page.locator('[data-testid="stSlider"]', has_text="Band width k") \
        .locator('input[type="range"]')
    assert float(k.input_value()) == 2.2
    assert page.locator('[data-testid="stMetric"]', has_text="Manual-review band") \
        .inner_text() == band
    # put it back for the other tests
    k.focus()
    k.press("ArrowLeft")
    k.press("ArrowLeft")
    wait_idle(page, settle=1.0)


def test_statistics_pages_show_one_provisional_banner_in_the_browser(two_audits, page):
    open_page(page, two_audits, f"criteria?audit={PARTIAL}")
    for url_path in ("criteria", "flip", "band"):
        if url_path != "criteria":
            _click_link(page, url_path)
        banners = page.locator(".st-key-provisional-banner")
        assert banners.count() == 1, url_path
        assert "Provisional: 12 of 30 draws" in banners.inner_text(), url_path
    screenshot(page, "band-provisional")


@pytest.mark.parametrize("width", [1400, 800])
def test_walking_every_page_stays_local_with_nothing_cut_off(two_audits, browser, width):
    """Every page through the sidebar: no request leaves 127.0.0.1, no response is a 404 (or any
    error), no metric or button text is cut off; at 800 px the sidebar is collapsed.
    Screenshots of each page at this width."""
    context = browser.new_context(viewport={"width": width, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    outside: list[str] = []
    errors: list[tuple[int | str, str]] = []
    local = two_audits.url
    page.on("request", lambda r: outside.append(r.url)
            if not r.url.startswith((local, "data:", "blob:", "about:")) else None)
    page.on("response", lambda r: errors.append((r.status, r.url)) if r.status >= 400 else None)
    page.on("requestfailed", lambda r: errors.append(("failed", r.url)))
    suffix = "" if width == 1400 else f"-{width}"
    try:
        open_page(page, two_audits, "")
        if width <= 800:
            page.wait_for_function(
                "() => document.querySelector('[data-testid=\"stSidebar\"]')"
                ".getBoundingClientRect().width < 50", timeout=10_000)
        for url_path in LINKS:
            if url_path != "freeze":
                _click_link(page, url_path)
            if url_path == "drift":
                page.get_by_role("button", name="Load the demo panel").click()
                page.wait_for_selector(".st-key-reaudit", timeout=90_000)
                wait_idle(page, settle=1.0)
            cut = page.evaluate(TRUNCATED_JS)
            assert cut == [], (url_path, width, cut)
            if width <= 800:
                assert not _sidebar_open(page), url_path
            screenshot(page, f"{url_path}{suffix}")
    finally:
        context.close()
    assert outside == []
    assert errors == []
