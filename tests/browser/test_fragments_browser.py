"""What a widget answer redraws, in a real browser.

A slider move reruns only its fragment; what does not depend on the slider stays outside it, so
the browser neither receives nor redraws it: the flip curve on Flip (it covers every cutoff),
the report downloads on Band (their file is made when clicked, from the values the widgets
stored last).
"""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import live_numbers, nav, open_page, wait_idle

pytestmark = pytest.mark.browser

# every Plotly chart of the main area counts its redraws, by its title
COUNT_DRAWS_JS = """() => {
  for (const el of document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot')) {
    el.__draws = 0;
    el.on('plotly_afterplot', () => { el.__draws += 1; });
  }
}"""
DRAWS_JS = """() => Object.fromEntries(
  [...document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot')].map(el =>
    [el._fullLayout.title.text, el.__draws === undefined ? 'new' : el.__draws]))"""
CURVE = "drives the coin flips"
STRIP = "Every single draw"


def _by_title(draws: dict, part: str) -> object:
    found = [v for title, v in draws.items() if part in str(title)]
    assert len(found) == 1, draws
    return found[0]


def test_a_cutoff_move_redraws_the_strip_but_not_the_flip_curve(server, page):
    open_page(page, server, "flip")
    assert live_numbers(page)["cutoff"] == "78"
    page.wait_for_function("() => document.querySelectorAll("
                           "'[data-testid=\"stMain\"] .js-plotly-plot').length === 2")
    page.evaluate(COUNT_DRAWS_JS)
    thumb = page.locator('[data-testid="stSlider"] input[type="range"]').first
    thumb.focus()
    thumb.press("ArrowRight")
    page.wait_for_function("() => /cutoff 79 ·/.test(document.querySelector("
                           "'.st-key-live-numbers')?.innerText || '')")
    wait_idle(page, settle=1.0)
    draws = page.evaluate(DRAWS_JS)
    assert _by_title(draws, CURVE) == 0, draws  # the same chart, never redrawn
    # Streamlit mounts a changed figure afresh ("new"): the strip is drawn again, the curve not
    assert _by_title(draws, STRIP) != 0, draws
    # a full page run (here: coming back to the page) still shows the curve
    nav(page, "6 · Band")
    nav(page, "5 · Flip")
    assert live_numbers(page)["cutoff"] == "79"
    _by_title(page.evaluate(DRAWS_JS), CURVE)
    thumb = page.locator('[data-testid="stSlider"] input[type="range"]').first
    thumb.focus()
    thumb.press("ArrowLeft")
    page.wait_for_function("() => /cutoff 78 ·/.test(document.querySelector("
                           "'.st-key-live-numbers')?.innerText || '')")
    wait_idle(page)


def test_band_downloads_carry_the_k_just_moved(server, page):
    """The download buttons sit outside the slider's fragment; the report they give still uses
    the k set a moment ago, not the k of the page's last full run."""
    open_page(page, server, "band")
    k = page.locator('[data-testid="stSlider"]', has_text="Band width k") \
        .locator('input[type="range"]')
    k.focus()
    k.press("ArrowRight")
    k.press("ArrowRight")
    page.wait_for_function("() => document.querySelector('.st-key-band-live-numbers')")
    wait_idle(page, settle=1.0)
    assert float(k.input_value()) == 2.2
    try:
        with page.expect_download() as dl:
            page.get_by_role("button", name="Text report").click()
        text = open(dl.value.path(), encoding="utf-8").read()
        assert set(re.findall(r"\bk = ([\d.]+)", text)) == {"2.2"}, text
        assert "FLIP RATE AT CUTOFF 78" in text
    finally:
        k.focus()
        k.press("ArrowLeft")
        k.press("ArrowLeft")
        wait_idle(page, settle=1.0)


def test_band_report_preview_is_drawn_when_opened_and_follows_k(server, page):
    """The preview is rendered only while its expander is open: closed, the page carries no
    report text; opened, it shows the report for the k on the page, and a k move updates it."""
    open_page(page, server, "band")
    main = page.locator('[data-testid="stMain"]')
    assert "NOT ESTABLISHED BY THIS REPORT" not in main.inner_text()
    page.get_by_text("Report preview (plain text)").click()
    page.wait_for_function("() => document.querySelector('[data-testid=\"stMain\"]')"
                           ".innerText.includes('NOT ESTABLISHED BY THIS REPORT')")
    wait_idle(page)
    code = main.locator('[data-testid="stCode"]', has_text="FLIP RATE AT CUTOFF")
    assert "k = 2" in code.inner_text()
    k = page.locator('[data-testid="stSlider"]', has_text="Band width k") \
        .locator('input[type="range"]')
    k.focus()
    k.press("ArrowRight")
    try:
        page.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"stCode\"]')]"
                               ".some(e => e.innerText.includes('k = 2.1'))")
    finally:
        wait_idle(page, settle=1.0)
        k.focus()
        k.press("ArrowLeft")
        wait_idle(page, settle=1.0)
        page.get_by_text("Report preview (plain text)").click()
        wait_idle(page)
