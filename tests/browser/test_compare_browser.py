"""The Compare page in a real browser: the demo's two audits on first start, the shared cutoff
slider moving both sides at once, the Plotly charts drawn, and screenshots at two widths."""

from __future__ import annotations

import time

import pytest

from core.audit import analyze
from core.comparison import Comparison
from core.demo import DEMO_AUDIT_ID, DEMO_V2_AUDIT_ID, ensure_demo
from core.format import COMPARE_LINE_RE
from core.store import Store
from tests.browser.conftest import open_page, screenshot, wait_idle

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def comparison():
    """The demo's comparison computed in this process: the numbers the page must show."""
    store = Store(":memory:")
    ensure_demo(store)
    return Comparison(analyze(store, DEMO_AUDIT_ID), analyze(store, DEMO_V2_AUDIT_ID))


def _line(page) -> dict[str, str]:
    text = page.locator(".st-key-compare-live").inner_text()
    m = COMPARE_LINE_RE.search(text)
    assert m, f"no compare line in {text!r}"
    return m.groupdict()


def _expected(comparison: Comparison, cutoff: float) -> dict[str, str]:
    v = comparison.view(cutoff)
    return {"cutoff": f"{cutoff:g}",
            "flips_a": str(v.view_a.flip.candidates_with_flip),
            "flips_b": str(v.view_b.flip.candidates_with_flip),
            "of_a": "40", "of_b": "40",
            "dis_a": f"{100 * v.disagreement.a:.1f}", "dis_b": f"{100 * v.disagreement.b:.1f}",
            "band_a": f"{v.view_a.band.low:.1f} to {v.view_a.band.high:.1f}",
            "band_b": f"{v.view_b.band.low:.1f} to {v.view_b.band.high:.1f}"}


def test_shared_slider_moves_both_sides(server, page, comparison):
    open_page(page, server, f"compare?a={DEMO_AUDIT_ID}&b={DEMO_V2_AUDIT_ID}")
    first = _line(page)
    assert first == _expected(comparison, 78.0)
    main = page.locator('[data-testid="stMain"]')
    assert "B reduces the decision noise at 78" in main.inner_text()
    main.locator(".js-plotly-plot").nth(1).wait_for(timeout=30_000)  # charts draw after the text
    assert main.locator(".js-plotly-plot").count() == 2
    page.locator(".st-key-compare-live").scroll_into_view_if_needed()
    thumb = page.locator('[data-testid="stSlider"] input[type="range"]').first
    thumb.focus()
    for _ in range(3):
        thumb.press("ArrowRight")
    deadline = time.monotonic() + 20
    now = first
    while time.monotonic() < deadline:
        wait_idle(page)
        now = _line(page)
        if now["cutoff"] == "81":
            break
    assert now == _expected(comparison, 81.0)
    # both sides moved: A's and B's flips, disagreement and band all differ from cutoff 78
    for key in ("dis_a", "dis_b", "band_a", "band_b"):
        assert now[key] != first[key], key
    assert "at 81" in main.inner_text()
    side_b = page.locator(".st-key-side-b").inner_text()
    assert f"{now['flips_b']} of 40" in side_b


def test_screenshots_at_two_widths(server, page):
    open_page(page, server, f"compare?a={DEMO_AUDIT_ID}&b={DEMO_V2_AUDIT_ID}")
    page.wait_for_selector(".js-plotly-plot")
    # Streamlit scrolls inside its own container: a tall viewport shows the whole page
    page.set_viewport_size({"width": 1400, "height": 3150})
    wait_idle(page, settle=1.0)
    screenshot(page, "compare")
    page.set_viewport_size({"width": 800, "height": 4200})
    wait_idle(page, settle=1.0)
    screenshot(page, "compare-800")
    text = page.locator('[data-testid="stMain"]').inner_text()
    assert "Traceback" not in text and "improved" in text
