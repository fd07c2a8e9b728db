"""Each guard rule exists once (core.guards): the Run page, the command line and the report give
the same verdict for the same stored audit — including the cases where the two copies of the
cache rule that existed before (runner and audit) disagreed."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest

from core import guards
from core.audit import analyze
from core.demo import demo_freeze_sheet
from core.ingest import criteria_frame
from core.report import render_text, report_dict
from core.run.writer import calls_frame, draws_frame
from core.store import Store
from tests.apptest_helpers import app_on, open_page, plain

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def db(tmp_path, monkeypatch):
    path = tmp_path / "audits.duckdb"
    monkeypatch.setenv("AUDIT_DB", str(path))
    return path


def _audit(db: Path, audit_id: str, calls: dict[str, list[tuple[str, str]]]) -> None:
    """An audit whose candidates got the given (payload, reported model) per run, each a
    successful call with its draws (total = 50 + run)."""
    sheet = demo_freeze_sheet()
    store = Store(db)
    store.save_audit(audit_id, sheet.to_dict(), sheet.hash, {"runs": 2, "cutoff": 50})
    store.set_criteria(audit_id, criteria_frame(list(sheet.criteria)))
    store.set_candidates(audit_id, pd.DataFrame({
        "candidate_id": list(calls), "stratum": "band", "first_pass_score": 50.0,
        "application": "text"}))
    call_rows, draw_rows = [], []
    for cid, runs in calls.items():
        for run, (payload, model) in enumerate(runs, start=1):
            rid = f"{cid}-{run}"
            call_rows.append({"request_id": rid, "candidate_id": cid, "run": run,
                              "attempts": 1, "started_at": datetime(2026, 1, 1),
                              "finished_at": datetime(2026, 1, 1), "latency_ms": 5.0,
                              "http_status": 200, "status": "ok", "raw_payload": payload,
                              "payload_sha256": str(hash(payload)), "model": model,
                              "source": "runner"})
            for c in sheet.criteria:
                draw_rows.append({"candidate_id": cid, "run": run, "criterion": c.name,
                                  "score": 1.0 + run, "request_id": rid, "model": model,
                                  "clipped": False})
            draw_rows.append({"candidate_id": cid, "run": run, "criterion": "total",
                              "score": 50.0 + run + len(cid), "request_id": rid,
                              "model": model, "clipped": False})
    store.write_results(audit_id, calls_frame(call_rows), draws_frame(draw_rows))
    store.close()


def _cli_report(db: Path, audit_id: str) -> dict:
    res = subprocess.run([sys.executable, "-m", "core", "report", "--db", str(db), "--audit",
                          audit_id, "--format", "json"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _page_texts(audit_id: str) -> list[str]:
    at = open_page(app_on(audit_id), "run")
    return [plain(e.value) for e in [*at.caption, *at.error]]


def test_page_cli_and_report_give_one_cache_verdict_while_a_candidate_lacks_two_calls(db):
    """Two candidates with one payload each on both runs, a third with one call: the guard
    has not spoken yet. (The audit's old copy of the rule withheld the statistics here while
    the runner's said "not judged yet".)"""
    model = demo_freeze_sheet().model
    _audit(db, "partial", {"A": [("same", model), ("same", model)],
                           "B": [("x", model), ("x", model)],
                           "C": [("c1", model)]})
    store = Store(db, read_only=True)
    verdict = guards.cache_verdict_of(store, "partial")
    result = analyze(store, "partial")
    store.close()
    assert not verdict.checked and not verdict.cache_test
    assert verdict.message == ("not judged yet: 2 of 3 candidate(s) have the two successful "
                               "calls the cache guard needs")
    # the report (in-process and through the CLI) carries the same verdict, not a second one
    assert report_dict(result)["guards"]["cache"] == verdict.to_dict()
    assert not result.withheld
    assert _cli_report(db, "partial")["guards"]["cache"] == verdict.to_dict()
    assert f"cache: {verdict.label}" in render_text(result)
    # and the Run page shows the same sentence
    assert any(f"Cache guard: {verdict.message}." in t for t in _page_texts("partial"))


def test_page_cli_and_report_give_one_cache_verdict_and_one_model_verdict(db):
    """Every candidate byte-identical on both runs (a cache), and one draw from another
    model: one verdict of each guard, word for word, on the page, in the CLI and report."""
    model = demo_freeze_sheet().model
    _audit(db, "cached", {"A": [("a", model), ("a", model)],
                          "B": [("b", model), ("b", "other-snapshot-2026")]})
    store = Store(db, read_only=True)
    verdict = guards.cache_verdict_of(store, "cached")
    pops = guards.model_populations_of(store, "cached")
    result = analyze(store, "cached")
    store.close()
    assert verdict.cache_test and verdict.label == "cache test, not a variance test"
    assert pops.split and pops.excluded_draws == 1 and "other-snapshot-2026" in pops.message
    d = report_dict(result)
    assert d["guards"]["cache"] == verdict.to_dict()
    assert d["guards"]["statistics_withheld"] == guards.CACHE_WITHHELD
    assert d["guards"]["populations"] == pops.to_dict()
    cli = _cli_report(db, "cached")
    assert cli["guards"]["cache"] == verdict.to_dict()
    assert cli["guards"]["populations"] == pops.to_dict()
    texts = _page_texts("cached")
    assert any(f"Cache guard: {verdict.message}." in t for t in texts)
    assert any(pops.message[1:] in t and t.startswith("The screener reported")
               for t in texts)


def test_the_pre_flight_verdicts_come_from_the_guards():
    counts = pd.DataFrame({"candidate_id": ["A", "B"], "calls_with_payload": [3, 2],
                           "distinct_payloads": [1, 2]})
    judged, stop = guards.determinism_verdict(counts, "A", 3)
    assert judged and stop == guards.DETERMINISM_MESSAGE.format(n=3, cid="A")
    assert guards.determinism_verdict(counts, "B", 3) == (False, None)   # 2 of 3 runs so far
    assert guards.preflight_model_verdict(["m-alias"], "m") == guards.MODEL_MESSAGE.format(
        reported="m-alias", frozen="m")
    assert guards.preflight_model_verdict(["m", "m-alias"], "m") is None
    assert guards.preflight_model_verdict([], "m") is None
