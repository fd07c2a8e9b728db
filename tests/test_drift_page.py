"""The drift page runs headless (AppTest) and shows real numbers from core.drift."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from streamlit.testing.v1 import AppTest

from core.drift.analysis import analyse_drift
from core.drift.panel import read_panel

PAGE = Path(__file__).resolve().parents[1] / "pages" / "drift.py"


def _drift_page() -> AppTest:
    """The Drift page as the router runs it (app.py marks the session routed; a page started
    alone re-routes itself through app.py, which the browser tests cover)."""
    at = AppTest.from_file(str(PAGE), default_timeout=60)
    at.session_state["_routed_by_app"] = True
    return at


def _metric(at: AppTest, label: str) -> str:
    for m in at.metric:
        if m.label == label:
            return m.value
    raise AssertionError(f"no metric {label!r}; have {[m.label for m in at.metric]}")


def test_page_loads_demo_panel_and_shows_reference_rater_q_and_reaudit_date():
    at = _drift_page().run()
    assert not at.exception
    assert any("Upload a ratings panel" in i.value for i in at.info)
    at.button(key="drift_demo").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert _metric(at, "Reference rater") == "A"
    # the numbers on the page are core.drift's numbers for the shipped demo panel
    panel = read_panel(str(Path(__file__).resolve().parents[1] / "data" / "demo_panel.csv"))
    a = analyse_drift(panel, deployments="2026-04-12, 2026-07-16, 2026-07-29", reps=0)
    assert _metric(at, "q (per week)") == f"{a.stage2.q:.5f}"
    assert float(_metric(at, "q (per week)")) > 0
    # the demo's re-audit date has passed: it reads as overdue (warning colour), with how long
    due = a.horizon.date
    today = datetime.now(timezone.utc).date()
    assert due < today
    weeks = (today - due).days // 7
    warned = [w.value for w in at.warning if w.value.startswith("Re-audit overdue since")]
    assert warned and f"overdue since {due.isoformat()}" in warned[0]
    assert (f"{weeks} weeks ago" in warned[0] or "months ago" in warned[0]
            or "days ago" in warned[0])
    assert not any(s.value.startswith("Re-audit by") for s in at.success)
    assert _metric(at, "Break-even share") == "18.2%"


def test_page_shows_input_errors_without_traceback():
    at = _drift_page()
    at.session_state["drift_panel_bytes"] = b"batch,rater,score\n2026-01-01,A,1\n2026-01-08,A,x\n"
    at.session_state["drift_panel_name"] = "bad.csv"
    at.session_state["drift_panel_sha"] = "bad"
    at.run()
    assert not at.exception
    assert len(at.error) == 1
    msg = at.error[0].value
    assert "bad" in msg and "nothing was stored" in msg
    # every fault in a table, by the line a spreadsheet shows (data row 2 is line 3)
    table = at.table[0].value
    assert table.iloc[0].tolist()[:2] == ["3", "score"] and "x" in table.iloc[0, 2]


def test_page_outcome_check_with_demo_series():
    at = _drift_page().run()
    at.button(key="drift_demo").click().run()
    at.button(key="drift_outcome_demo").click().run()
    assert not at.exception and not at.error
    pct = _metric(at, "Log ratio, % per month")
    assert pct.startswith("-") and pct.endswith("%")


def test_saved_drift_date_is_carried_into_the_audit_report(tmp_path, monkeypatch):
    """'Save to audit reports' stores the analysis; the demo audit's report then says
    're-audit by <the page's date>' under WHAT INVALIDATES THIS AUDIT."""
    from core.audit import analyze
    from core.report import render_text
    from core.store import Store

    db = tmp_path / "audits.duckdb"
    monkeypatch.setenv("AUDIT_DB", str(db))
    at = _drift_page().run()
    at.button(key="drift_demo").click().run()
    date = next(w.value for w in at.warning if w.value.startswith("Re-audit overdue since "))
    date = date.split()[3].rstrip(",")
    assert at.text_input(key="drift_save_screener").value == "acme-screener"
    at.button(key="drift_save").click().run()
    assert not at.exception and not at.error
    assert any("now carry this re-audit date" in s.value for s in at.success)
    # the page's cached store holds the file; release it before reading it here
    import streamlit as st
    st.cache_resource.clear()
    store = Store(db)
    saved = store.latest_drift_result("acme-screener")
    assert saved["horizon"]["date"] == date
    text = render_text(analyze(store, "demo-ENG-2291"))
    # every report format says the date has passed
    assert f"OVERDUE since {date}" in text and f"re-audit was due by {date}" in text
    import re

    from core.report import render
    for fmt in ("md", "json", "html"):
        out = render(analyze(store, "demo-ENG-2291"), fmt)
        if fmt == "md":   # as the Markdown renders: user and report text is escaped there
            out = re.sub(r"\\(.)", r"\1", out)
        assert f"OVERDUE since {date}" in out, fmt


def test_panel_built_from_the_stored_audits(tmp_path, monkeypatch):
    """'Build from the stored audits' reads this database: the demo audit is one batch scored
    by its one model snapshot, 600 draws over 40 candidates."""
    monkeypatch.setenv("AUDIT_DB", str(tmp_path / "audits.duckdb"))
    at = _drift_page().run()
    at.button(key="drift_stored").click().run()
    assert not at.exception
    panel_line = next(t.value for t in at.text if t.value.startswith("Panel: stored audits"))
    assert "1 batches, 1 raters" in panel_line
    assert _metric(at, "Reference rater") == "sim-screener-2026-11-01"
    assert any("One rater only" in i.value for i in at.info)


def test_a_fault_table_shows_user_text_literally_never_as_markdown():
    """The fault table is a static table whose cells are Markdown: a value like a link or bold
    text is escaped, so it reads as written and nothing in it becomes a link."""
    at = _drift_page()
    at.session_state["drift_panel_bytes"] = (b"batch,rater,score\n[x](http://evil.test),A,1\n"
                                             b"2026-01-08,**B**,oops\n")
    at.session_state["drift_panel_name"] = "md.csv"
    at.session_state["drift_panel_sha"] = "md"
    at.run()
    assert not at.exception
    cells = at.table[0].value.astype(str).values.ravel().tolist()
    from core.format import md_cell
    assert md_cell("'[x](http://evil.test)'") in cells, cells     # every markup char escaped
    assert not any("[x](http" in c or "http://" in c for c in cells)
