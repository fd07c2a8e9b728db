"""core/steps.py: where an audit stands, shared by the sidebar, the banner and (later) the CLI."""

from __future__ import annotations

import pandas as pd

from core.demo import DEMO_AUDIT_ID, ensure_demo
from core.freeze import FreezeSheet
from core.ingest import commit_draws, validate_draws
from core.steps import RunProgress, run_progress, step_status
from core.store import Store


def _store(tmp_path) -> Store:
    store = Store(tmp_path / "a.duckdb")
    ensure_demo(store)
    return store


def test_progress_counts_draws_against_the_plan(tmp_path):
    store = _store(tmp_path)
    sheet = FreezeSheet(req_id="p", side_effect_free=True, result_cache_off=True)
    store.save_audit("p", sheet.to_dict(), sheet.hash, {"runs": 4})
    store.set_candidates("p", pd.DataFrame({"candidate_id": ["a", "b", "c"], "stratum": "band"}))
    store.write_results("p", None, pd.DataFrame({
        "candidate_id": ["a", "a", "b"], "run": [1, 2, 1], "criterion": "total",
        "score": [1.0, 2.0, 3.0], "request_id": ["r1", "r2", "r3"], "model": None,
        "clipped": False}))
    prog = run_progress(store, "p")
    assert prog == RunProgress(done=3, expected=12)
    assert prog.incomplete and prog.label() == "3 of 12 draws"
    # a run going in this process: its total wins, and it is incomplete even when counts match
    assert run_progress(store, "p", running=(3, 12)).running
    done = run_progress(store, DEMO_AUDIT_ID)
    assert not done.incomplete and done.label() == "600 of 600 draws"
    texts = {s.step: s.text for s in step_status(store, "p")}
    assert texts["run"] == "needs 9 more draws (resume)"


def test_an_import_expects_nothing_more_and_names_what_did_not_happen(tmp_path):
    store = _store(tmp_path)
    path = tmp_path / "d.csv"
    pd.DataFrame({"candidate_id": ["x", "x", "y", "y"], "run": [1, 2, 1, 2],
                  "criterion": "total", "score": [1.0, 2.0, 3.0, 5.0]}).to_csv(path, index=False)
    commit_draws(store, "imp", validate_draws(str(path)))
    prog = run_progress(store, "imp")
    assert prog.expected is None and not prog.incomplete and prog.label() == "4 draws"
    steps = {s.step: s for s in step_status(store, "imp")}
    assert steps["freeze"].state == "needs" and "no harness recorded" in steps["freeze"].text
    assert steps["sample"].state == "needs" and "not drawn from a pool" in steps["sample"].text
    assert steps["run"].state == "done" and steps["run"].text == "imported — 4 draws"
