"""AppTest of every page on a fresh database (the demo audit), asserting real values.

``AUDIT_DB`` points at a temporary folder, so the first run creates the demo. AppTest runs the
whole script on each ``.run()``; fragments and run_every need the browser tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.audit import analyze
from core.demo import DEMO_AUDIT_ID
from core.format import LIVE_LINE_RE, pts, reviews_txt
from core.store import Store
from tests.apptest_helpers import app_on, app_store, open_page, plain

TIMEOUT = 60
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def db(tmp_path, monkeypatch):
    path = tmp_path / "audits.duckdb"
    monkeypatch.setenv("AUDIT_DB", str(path))
    return path


@pytest.fixture()
def app(db) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    assert not at.exception
    return at


def _store(at: AppTest) -> Store:
    return app_store()


_open = open_page
_plain = plain


def _live(at: AppTest) -> dict[str, str]:
    for c in at.caption:
        m = LIVE_LINE_RE.search(c.value)
        if m:
            return m.groupdict()
    raise AssertionError("no live line on the page")


def test_first_start_opens_the_demo_with_its_step_status(app):
    assert app.sidebar.selectbox(key="active_audit").value == DEMO_AUDIT_ID
    steps = " ".join(m.value for m in app.sidebar.markdown)
    for step in ("Freeze", "Sample", "Run", "Criteria", "Flip", "Band"):
        assert step in steps
    assert "done — 600 draws" in steps
    # the freeze page (default) shows the locked sheet with its hash
    assert any("frozen" in s.value for s in app.success)
    assert any(len(c.value) == 64 for c in app.code)


def test_flip_page_matches_the_engine_at_78_and_moves_with_the_slider(app):
    at = _open(app, "flip")
    result = analyze(_store(at), DEMO_AUDIT_ID)
    view = result.view(78.0, 2.0)
    metric = {m.label: m.value for m in at.metric}
    assert metric["Candidates with any flip"] == f"{view.flip.candidates_with_flip} of 40"
    assert metric["Worst candidate"] == f"{view.flip.worst_passes}/{view.flip.worst_runs} pass"
    live = _live(at)
    assert live["cutoff"] == "78"
    assert int(live["flips"]) == view.flip.candidates_with_flip
    assert live["reviews"] == reviews_txt(view.manual_reviews_per_req)
    at.slider(key="w_cutoff").set_value(84.0).run()
    moved = result.view(84.0, 2.0)
    live = _live(at)
    assert live["cutoff"] == "84"
    assert int(live["flips"]) == moved.flip.candidates_with_flip
    assert live["reviews"] == reviews_txt(moved.manual_reviews_per_req)
    assert live["reviews"] != reviews_txt(view.manual_reviews_per_req)
    # the flip table lists every candidate, flipping ones first
    table = at.dataframe[0].value
    assert len(table) == 40
    assert table["flips"].iloc[0] and table["flips"].sum() == moved.flip.candidates_with_flip


def test_flip_page_top_k_gives_the_effective_cutoff(app):
    at = _open(app, "flip")
    at.radio(key="w_mode").set_value("top-k").run()
    assert not at.exception
    at.number_input(key="w_top_k").set_value(60).run()
    pool = _store(at).get_pool(DEMO_AUDIT_ID)["first_pass_score"].sort_values(ascending=False)
    assert _live(at)["cutoff"] == f"{pool.iloc[59]:g}"


def test_strict_comparison_counts_a_draw_on_the_cutoff_as_a_fail(app):
    """Scores clump on integers, so '>' vs '>=' at an integer cutoff changes who flips: the
    page's numbers follow the engine's at cutoff 78 with pass meaning T > 78."""
    at = _open(app, "flip")
    at.toggle(key=f"strict-{DEMO_AUDIT_ID}").set_value(True).run()
    assert not at.exception
    strict = analyze(_store(at), DEMO_AUDIT_ID)
    assert strict.settings.comparison == ">"
    ge = analyze(_store(at), DEMO_AUDIT_ID, comparison=">=")
    s_view, g_view = strict.view(78.0, 2.0), ge.view(78.0, 2.0)
    assert s_view.flip.worst_candidate != g_view.flip.worst_candidate
    assert s_view.flip.flip_interval != g_view.flip.flip_interval
    assert int(_live(at)["flips"]) == s_view.flip.candidates_with_flip
    lo, hi = s_view.flip.flip_interval
    metric = {m.label: m.value for m in at.metric}
    assert metric["Flip interval"] == f"{pts(lo)} – {pts(hi)}"
    assert any(s_view.flip.worst_candidate in _plain(c.value) for c in at.caption)
    assert any(s.label == "Cutoff (passes above it)" for s in at.slider)


def test_criteria_page_shows_verdicts_and_reliability(app):
    at = _open(app, "criteria")
    table = at.dataframe[0].value
    verdicts = dict(zip(table["criterion"], table["verdict"]))
    assert verdicts["experience"] == "DEAD"
    assert verdicts["projects"] == "NOISY"
    assert verdicts["technical_skills"] == "WORKING"
    assert any(w.value.startswith("DEAD — experience returns 20/20 for 36/40") for w in at.warning)
    lines = [t.value for t in at.text]
    assert lines[0].startswith("1. projects") and lines[1].startswith("2. experience")
    result = analyze(_store(at), DEMO_AUDIT_ID)
    icc = {m.label: m.value for m in at.metric}["ICC(1) of the total"]
    assert icc == f"{result.icc.icc1:.2f}"


def test_dead_tolerance_is_a_setting_next_to_the_table(app):
    """At 1% of max points (0.2 of 20) experience's between-SD 0.3 is no longer 'near zero':
    it stops being DEAD, and the legend and the stored setting follow."""
    at = _open(app, "criteria")
    at.number_input(key=f"dead-tol-{DEMO_AUDIT_ID}").set_value(1.0).run()
    assert not at.exception
    table = at.dataframe[0].value
    verdicts = dict(zip(table["criterion"], table["verdict"]))
    assert verdicts["experience"] == "WORKING"
    assert not any(w.value.startswith("DEAD —") for w in at.warning)
    assert any("at most 1% of the criterion's max points" in c.value for c in at.caption)
    assert _store(at).get_audit(DEMO_AUDIT_ID)["settings"]["dead_tol_frac"] == 0.01


def test_band_page_k_slider_capacity_and_report(app):
    at = _open(app, "band")
    result = analyze(_store(at), DEMO_AUDIT_ID)
    metrics = {m.label: m.value for m in at.metric}
    v = result.view(78.0, 2.0)
    assert metrics["Manual-review band"] == f"{pts(v.band.low)} – {pts(v.band.high)}"
    assert v.over_capacity  # the demo's 40 reviews per req are exceeded at k = 2
    assert any("leaves" in w.value and "to chance" in w.value for w in at.warning)
    # said once, not "This is a normal approximation. normal approximation: …"
    notes = [c.value for c in at.caption if "normal approximation" in c.value.lower()]
    assert len(notes) == 1 and notes[0].lower().count("normal approximation") == 1
    # the report preview is rendered only while its expander is open (the user opens it)
    assert not any("NOT ESTABLISHED BY THIS REPORT" in c.value for c in at.code)
    at.session_state["report-preview"] = True
    at.slider(key="w_k").set_value(1.0).run()
    v1 = result.view(78.0, 1.0)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Manual-review band"] == f"{pts(v1.band.low)} – {pts(v1.band.high)}"
    assert _live(at)["reviews"] == reviews_txt(v1.manual_reviews_per_req)
    report = at.code[-1].value
    assert "FLIP RATE AT CUTOFF 78" in report and "NOT ESTABLISHED BY THIS REPORT" in report
    assert "k = 1" in report
    # the manual half-width override wins over both rules
    at.toggle(key="w_override_on").set_value(True).run()
    at.number_input(key="w_override").set_value(5.0).run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Manual-review band"] == "73 – 83"


def test_band_settings_saved_to_the_audit_reach_the_command_line_report(app):
    """Save k = 1.5 and capacity 60 on the Band page: the stored audit's report (what
    'python -m core report --db … --audit …' prints) then uses them."""
    from core.report import render_text
    at = _open(app, "band")
    assert at.button(key="save-band").disabled  # nothing changed yet
    at.slider(key="w_k").set_value(1.5).run()
    at.number_input(key="w_capacity").set_value(60.0).run()
    at.button(key="save-band").click().run()
    assert not at.exception
    stored = _store(at).get_audit(DEMO_AUDIT_ID)["settings"]
    assert stored["k"] == 1.5 and stored["capacity"] == 60.0
    text = render_text(analyze(_store(at), DEMO_AUDIT_ID))
    assert "k = 1.5" in text and "reviewer capacity 60 per req" in text


def test_sample_page_shows_the_saved_sample(app):
    at = _open(app, "sample")
    saved = " ".join(s.value for s in at.success)
    assert saved.startswith("40 candidates:")
    for part in ("24 band", "8 high", "8 low", "locked"):
        assert part in saved


def test_run_page_guard_panel_and_done_state(app):
    at = _open(app, "run")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Calls stored"] == "600"
    assert metrics["Failed or unparsed calls"] == "0"
    assert any("Every candidate has its 15 runs (600 draws)" in s.value for s in at.success)


def test_new_audit_from_the_frozen_sheet_copies_sheet_and_pool(app):
    at = app  # the default page is Freeze, showing the demo's locked sheet
    at.text_input[0].set_value("eng-2291-r8")
    at.button[0].click().run()
    assert not at.exception
    store = _store(at)
    assert store.audit_exists("eng-2291-r8")
    assert store.get_audit("eng-2291-r8")["harness_hash"] == \
        store.get_audit(DEMO_AUDIT_ID)["harness_hash"]
    assert len(store.get_pool("eng-2291-r8")) == 410
    assert store.n_draws("eng-2291-r8") == 0


def _app_on(db, audit_id: str) -> AppTest:
    return app_on(audit_id)


def test_guards_send_a_user_to_the_step_that_fixes_it(db):
    from core.freeze import FreezeSheet

    store = Store(db)
    sheet = FreezeSheet(req_id="blank")
    store.save_audit("blank-audit", sheet.to_dict(), sheet.hash, {})
    store.close()
    at = _app_on(db, "blank-audit")
    assert at.sidebar.selectbox(key="active_audit").value == "blank-audit"
    # the unsaved sheet is editable and its missing clearance blocks a run
    assert any(_plain(e.value).startswith("Blocked because side-effect clearance")
               for e in at.error)
    for page in ("flip", "band", "criteria"):
        at = _open(at, page)
        assert any("no draws yet" in i.value for i in at.info), page
    at = _open(at, "run")
    assert any(_plain(e.value).startswith("Blocked because side-effect clearance")
               for e in at.error)
    at = _open(at, "sample")
    assert any("Upload the pool" in i.value for i in at.info)


def test_sample_can_be_redrawn_until_the_first_draw(app, db):
    """Save a sample for a new audit, redraw it with another seed: the stored sample changes;
    the demo's sample (it has draws) offers no redraw."""
    at = app
    at.text_input[0].set_value("eng-2291-r9")
    at.button[0].click().run()
    at = _app_on(db, "eng-2291-r9")
    at = _open(at, "sample")
    save = next(b for b in at.button if b.label == "Save this sample to the audit")
    save.click().run()
    assert not at.exception
    store = _store(at)
    first = store.get_candidates("eng-2291-r9")["candidate_id"].tolist()
    assert len(first) == 40
    redraw = next(b for b in at.button if b.label == "Draw another sample")
    redraw.click().run()
    seed = next(n for n in at.number_input if n.label == "Seed")
    seed.set_value(7).run()
    next(b for b in at.button if b.label == "Save this sample to the audit").click().run()
    assert not at.exception
    second = store.get_candidates("eng-2291-r9")["candidate_id"].tolist()
    assert len(second) == 40 and second != first
    # the demo has draws: its sample is locked
    at = _open(_app_on(db, DEMO_AUDIT_ID), "sample")
    assert not [b for b in at.button if b.label == "Draw another sample"]


def test_preflight_draws_alone_are_not_an_audit_yet(db):
    """Three draws of one candidate (what a pre-flight leaves): the statistics pages send the
    user to Run, and the sidebar does not call those steps done."""
    import pandas as pd

    from core.freeze import FreezeSheet
    store = Store(db)
    sheet = FreezeSheet(req_id="pf", side_effect_free=True, result_cache_off=True)
    store.save_audit("pf-audit", sheet.to_dict(), sheet.hash, {"runs": 15})
    store.set_candidates("pf-audit", pd.DataFrame({"candidate_id": ["a", "b"],
                                                    "stratum": "band"}))
    store.write_results("pf-audit", None, pd.DataFrame({
        "candidate_id": "a", "run": [1, 2, 3], "criterion": "total", "score": [70., 72., 75.],
        "request_id": ["r1", "r2", "r3"], "model": None, "clipped": False}))
    store.close()
    at = _app_on(db, "pf-audit")
    side = " ".join(m.value for m in at.sidebar.markdown)
    assert "needs draws from at least 2 candidates" in side
    for page in ("flip", "band", "criteria"):
        at = _open(at, page)
        assert any("Only one candidate has draws" in i.value for i in at.info), page


def _partial_audit(db, audit_id: str = "partial") -> None:
    """A planned run of 5 candidates × 6 runs with 12 of its 30 draws stored."""
    import numpy as np
    import pandas as pd

    from core.freeze import Criterion, FreezeSheet
    store = Store(db)
    sheet = FreezeSheet(req_id="p", side_effect_free=True, result_cache_off=True,
                        criteria=(Criterion("a", 10.0), Criterion("b", 10.0)))
    store.save_audit(audit_id, sheet.to_dict(), sheet.hash, {"runs": 6, "cutoff": 10.0})
    ids = [f"c{i}" for i in range(5)]
    store.set_candidates(audit_id, pd.DataFrame({"candidate_id": ids, "stratum": "band"}))
    rng = np.random.default_rng(3)
    rows = []
    for i, cid in enumerate(ids[:3]):
        for run in range(1, 5):
            for crit in ("a", "b"):
                rows.append({"candidate_id": cid, "run": run, "criterion": crit,
                             "score": float(np.clip(round(3 + i + rng.normal(0, 1)), 0, 10)),
                             "request_id": f"{cid}:{run}", "model": None, "clipped": False})
    store.write_results(audit_id, None, pd.DataFrame(rows))
    store.close()


def test_statistics_pages_say_provisional_while_draws_are_incomplete(db):
    """12 of 30 planned draws: Criteria, Flip and Band each show one banner with the count, and
    the verdicts and headline numbers say provisional; the sidebar agrees."""
    _partial_audit(db)
    at = _app_on(db, "partial")
    side = " ".join(m.value for m in at.sidebar.markdown)
    assert "provisional — 12 of 30 draws" in side
    for page in ("criteria", "flip", "band"):
        at = _open(at, page)
        banners = [w.value for w in at.warning if "Provisional" in w.value]
        assert len(banners) == 1, page
        assert "12 of 30 draws" in banners[0], page
    at = _open(at, "criteria")
    verdicts = at.dataframe[0].value["verdict"].tolist()
    assert verdicts and all(v.endswith("(provisional)") for v in verdicts if v)
    at = _open(at, "flip")
    assert any(m.label == "Candidates with any flip (provisional)" for m in at.metric)
    # a complete audit shows no banner
    at = _open(_app_on(db, DEMO_AUDIT_ID), "criteria")
    assert not any("Provisional" in w.value for w in at.warning)


def test_imported_audit_shows_the_steps_that_did_not_happen_as_not_done(db, tmp_path):
    """An upload makes an audit with no frozen harness and no sample drawn from a pool: the
    sidebar says so, with what would do each, instead of 'done'."""
    import pandas as pd

    from core.ingest import commit_draws, validate_draws
    rows = [(f"v{i}", r, "x", float(i + (r % 2))) for i in range(4) for r in (1, 2, 3)]
    path = tmp_path / "vendor.csv"
    pd.DataFrame(rows, columns=["candidate_id", "run", "criterion", "score"]).to_csv(
        path, index=False)
    store = Store(db)
    ensure = validate_draws(str(path))
    commit_draws(store, "vendor", ensure)
    store.close()
    at = _app_on(db, "vendor")
    side = [m.value for m in at.sidebar.markdown]
    freeze = next(_plain(s) for s in side if "Freeze" in s)
    sample = next(_plain(s) for s in side if "Sample" in s)
    run = next(_plain(s) for s in side if "Run" in s)
    assert "not done" in freeze and "no harness recorded" in freeze and "check_circle" not in freeze
    assert "not done" in sample and "upload the pool" in sample
    assert "imported — 12 draws" in run


def test_slider_view_survives_a_reload_and_a_shared_link(db):
    """k moved to 2.2 on Band (not saved to the audit): a new session on the same link — a
    reload, or a colleague opening it — shows k = 2.2 and the band for it."""
    at = _open(_app_on(db, DEMO_AUDIT_ID), "band")
    at.slider(key="w_k").set_value(2.2).run()
    at.number_input(key="w_capacity").set_value(55.0).run()
    assert not at.exception
    assert _store(at).get_audit(DEMO_AUDIT_ID)["settings"].get("k", 2.0) == 2.0  # not saved
    again = _open(_app_on(db, DEMO_AUDIT_ID), "band")
    assert again.slider(key="w_k").value == 2.2
    assert again.number_input(key="w_capacity").value == 55.0
    v = analyze(_store(again), DEMO_AUDIT_ID).view(78.0, 2.2)
    metrics = {m.label: m.value for m in again.metric}
    assert metrics["Manual-review band"] == f"{pts(v.band.low)} – {pts(v.band.high)}"


def test_imported_audit_freeze_page_says_not_frozen_here(db, tmp_path):
    import pandas as pd

    from core.ingest import commit_draws, validate_draws
    rows = [(f"v{i}", r, "x", float(i + (r % 2))) for i in range(3) for r in (1, 2)]
    path = tmp_path / "v.csv"
    pd.DataFrame(rows, columns=["candidate_id", "run", "criterion", "score"]).to_csv(
        path, index=False)
    store = Store(db)
    commit_draws(store, "imp", validate_draws(str(path)))
    store.close()
    at = _open(_app_on(db, "imp"), "freeze")
    assert any(w.value.startswith("Not frozen here") for w in at.warning)
    assert not any("This harness is frozen" in s.value for s in at.success)
    sheet = next(d.value for d in at.dataframe if "field" in d.value.columns)
    assert "None" not in sheet["value"].tolist() and "" not in sheet["value"].tolist()


def test_a_negative_noise_share_reads_negative_with_its_explanation(db):
    """A criterion that moves against the rest of the total between runs has a negative share
    of the total's noise: the table shows it with a minus sign and the page says what it means
    (never '-0%')."""
    import numpy as np
    import pandas as pd

    from core.freeze import Criterion, FreezeSheet
    rng = np.random.default_rng(5)
    rows = []
    for i in range(12):
        base = rng.normal(10, 3)
        for run in range(1, 9):
            e = rng.normal(0, 2)
            rows += [{"candidate_id": f"n{i}", "run": run, "criterion": "a",
                      "score": float(base + e)},
                     {"candidate_id": f"n{i}", "run": run, "criterion": "b",
                      "score": float(5 - 0.3 * e + rng.normal(0, 0.1))}]
    draws = pd.DataFrame(rows).assign(request_id=lambda d: d["candidate_id"] + ":" +
                                      d["run"].astype(str), model=None, clipped=False)
    store = Store(db)
    sheet = FreezeSheet(req_id="neg", side_effect_free=True, result_cache_off=True,
                        criteria=(Criterion("a", 20.0), Criterion("b", 10.0)))
    store.save_audit("neg", sheet.to_dict(), sheet.hash, {"cutoff": 15.0})
    from core.ingest import criteria_frame
    store.set_criteria("neg", criteria_frame(list(sheet.criteria)))
    store.write_results("neg", None, draws)
    store.close()
    at = _open(_app_on(db, "neg"), "criteria")
    table = at.dataframe[0].value
    b_share = dict(zip(table["criterion"], table["share of the total's noise"]))["b"]
    assert b_share.startswith("−") and b_share != "−0%", b_share
    assert any("b:" in _plain(c.value) and "negative share" in c.value for c in at.caption)


@pytest.mark.parametrize("where", ["view", "settings"])
def test_a_band_width_beyond_the_slider_from_a_received_database_still_opens_band(db, where):
    """A database from elsewhere (or an older version, or ``report --k 7`` saved as a
    setting) holding k = 10: the Band page opens with k at the slider's end instead of
    failing with a redacted error."""
    from core.demo import ensure_demo
    store = Store(db)
    ensure_demo(store)
    if where == "view":
        store.set_view(DEMO_AUDIT_ID, {"mode": "score", "cutoff": 78.0, "top_k": None,
                                       "of_n": None, "k": 10.0, "override_on": False,
                                       "override": None, "capacity": 5.0, "apps": 410.0})
    else:
        store.update_settings(DEMO_AUDIT_ID, {"k": 10.0})
    store.close()
    at = _open(_app_on(db, DEMO_AUDIT_ID), "band")
    assert at.slider(key="w_k").value == 4.0
    v = analyze(_store(at), DEMO_AUDIT_ID).view(78.0, 4.0)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Manual-review band"] == f"{pts(v.band.low)} – {pts(v.band.high)}"


def test_the_band_report_downloads_have_distinct_labels_naming_their_format(app):
    """Issue 9: at 800 px the four buttons all read "Download …"; each label now says what it
    gives, and no two are alike (so none depends on its cut-off tail)."""
    at = _open(app, "band")
    labels = [b.proto.label for b in at.get("download_button")]
    assert len(labels) == 4 and len(set(labels)) == 4, labels
    for label, word in zip(labels, ("Text", "Markdown", "JSON", "HTML")):
        assert label.startswith(word) and not label.startswith("Download"), label


def test_the_flip_page_names_the_configured_cutoff_without_jargon(app):
    """Issue 9: "the config field reads 70" is jargon for a manager; the page says what the
    screener's settings say, by score and by top k."""
    at = _open(app, "flip")
    texts = [c.value for c in at.caption]
    assert any("the screener's settings say 70" in t for t in texts)
    at.radio(key="w_mode").set_value("top-k").run()
    texts += [c.value for c in at.caption]
    assert any("best applicant in the pool" in t for t in texts)
    page_text = " ".join(texts + [m.value for m in at.markdown] + [i.value for i in at.info])
    assert "config field" not in page_text


def test_a_stored_top_k_beyond_the_pool_is_the_whole_pool_not_the_inputs_minimum(db):
    """A view saved with top 1,000 for a pool now of 410 (the pool replaced since, or a
    database from elsewhere): the input showed 1 (its minimum), the cutoff was the best
    applicant's score and the caption spoke of "the 1,000th best applicant". Now the input,
    the caption and the cutoff all use the whole pool."""
    from core.demo import ensure_demo
    store = Store(db)
    ensure_demo(store)
    store.set_view(DEMO_AUDIT_ID, {"mode": "top-k", "cutoff": 78.0, "top_k": 1000,
                                   "of_n": 410, "k": 2.0, "override_on": False,
                                   "override": None, "capacity": 40.0, "apps": 410.0})
    pool = store.get_pool(DEMO_AUDIT_ID)["first_pass_score"]
    store.close()
    at = _open(_app_on(db, DEMO_AUDIT_ID), "flip")
    assert at.number_input(key="w_top_k").value == len(pool) == 410
    assert _live(at)["cutoff"] == f"{pool.min():g}"
    assert not any("1,000th" in c.value for c in at.caption)


def test_a_link_to_an_audit_this_database_lacks_says_so_and_names_what_is_shown(db):
    """A colleague's link ?audit=… opened on a database without that audit: the page said
    nothing and showed the demo as if it were the linked audit."""
    at = _app_on(db, "eng-9999-theirs")
    warned = [_plain(w.value) for w in at.warning if "The link names the audit" in w.value]
    assert warned and "'eng-9999-theirs'" in warned[0] and DEMO_AUDIT_ID in warned[0]
    assert at.query_params["audit"] == [DEMO_AUDIT_ID] or \
        at.query_params["audit"] == DEMO_AUDIT_ID
    # a link to an audit it holds says nothing of the kind
    at = _app_on(db, DEMO_AUDIT_ID)
    assert not any("The link names the audit" in w.value for w in at.warning)


def test_an_audit_saved_from_a_config_with_200_runs_opens_on_the_run_page(db, tmp_path):
    """`run --estimate` on a config with runs = 200 (the runner allows up to 1,000): the Run
    page failed with a redacted error (its input stopped at 100)."""
    import os
    import shutil
    import subprocess
    import sys
    cfg = tmp_path / "audit.toml"
    shutil.copy(ROOT / "examples" / "sample.csv", tmp_path / "sample.csv")
    cfg.write_text((ROOT / "examples" / "audit.toml").read_text()
                   .replace("runs = 15 ", "runs = 200 "))
    res = subprocess.run([sys.executable, "-m", "core", "run", "--config", str(cfg), "--db",
                          str(db), "--estimate"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    at = _open(_app_on(db, "eng-2291-sim"), "run")
    assert at.number_input(key="run-eng-2291-sim-runs").value == 200
    assert any(m.label == "Calls to make" and m.value == "2,400" for m in at.metric)


def test_a_saved_top_k_beyond_the_pool_opens_the_sample_page_on_the_whole_pool(db):
    """A top k saved for a larger pool (the pool replaced since): the Sample page failed with
    a redacted error, both over the saved sample's histogram and in the sample form."""
    from core.demo import ensure_demo
    from core.freeze import FreezeSheet
    store = Store(db)
    ensure_demo(store)
    store.update_settings(DEMO_AUDIT_ID, {"top_k": 1000})
    sheet = FreezeSheet(req_id="nk", side_effect_free=True, result_cache_off=True)
    store.save_audit("no-sample", sheet.to_dict(), sheet.hash, {"top_k": 1000, "cutoff": 70})
    store.set_pool("no-sample", store.get_pool(DEMO_AUDIT_ID))
    store.close()
    at = _open(_app_on(db, DEMO_AUDIT_ID), "sample")      # the saved sample's histogram
    assert any("candidates" in s.value for s in at.success)
    at = _open(_app_on(db, "no-sample"), "sample")        # the form
    assert at.number_input(key="smp-no-sample-topk").value == 410


def test_the_view_is_written_off_the_widget_answer_and_the_latest_one_wins(db):
    """A widget's callback queues the view (no file write in the answer); the writer thread
    stores the latest one, and a new session reads it even before it is written."""
    from ui import state
    at = _open(_app_on(db, DEMO_AUDIT_ID), "band")
    at.slider(key="w_k").set_value(2.4).run()
    at.slider(key="w_k").set_value(2.6).run()
    assert not at.exception
    assert state.VIEW_WRITER.flush(10.0)
    assert state.VIEW_WRITER.pending(str(_store(at).path), DEMO_AUDIT_ID) is None
    assert _store(at).get_view(DEMO_AUDIT_ID)["k"] == 2.6


def test_a_dead_tolerance_above_the_usual_range_opens_criteria_and_is_kept(db):
    """A stored DEAD tolerance of 80% (``report --dead-tol``, a received database): the Criteria
    page opens with it (the input stopped at 50% and failed the page) and does not rewrite it."""
    from core.demo import ensure_demo
    store = Store(db)
    ensure_demo(store)
    store.update_settings(DEMO_AUDIT_ID, {"dead_tol_frac": 0.8})
    store.close()
    at = _open(_app_on(db, DEMO_AUDIT_ID), "criteria")
    assert not at.exception
    assert at.number_input(key=f"dead-tol-{DEMO_AUDIT_ID}").value == 80.0
    assert any("80%" in c.value for c in at.caption)
    assert _store(at).get_audit(DEMO_AUDIT_ID)["settings"]["dead_tol_frac"] == 0.8


def test_a_pool_replaced_by_a_smaller_one_in_the_same_session_clamps_the_top_k(db):
    """The recruiter set top 300 on Flip, then a colleague (or the Sample page) replaced the
    pool with one of 100 applicants: the same session's Flip page works the whole new pool."""
    from core.demo import ensure_demo
    store = Store(db)
    ensure_demo(store)
    pool = store.get_pool(DEMO_AUDIT_ID)
    store.close()
    at = _open(_app_on(db, DEMO_AUDIT_ID), "flip")
    at.radio(key="w_mode").set_value("top-k").run()
    at.number_input(key="w_top_k").set_value(300).run()
    small = pool.nlargest(100, "first_pass_score")
    _store(at).set_pool(DEMO_AUDIT_ID, small)
    at.run()
    assert not at.exception
    assert at.number_input(key="w_top_k").value == 100
    assert _live(at)["cutoff"] == f"{small['first_pass_score'].min():g}"
