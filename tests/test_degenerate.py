"""Every page (AppTest) and every report format on degenerate audits (issue 8 item 6):
scores up to 1e9, one candidate with one draw, all scores equal, every call failed, a candidate
with 2 runs among candidates with 30. Each shows numbers or says why they are withheld; none
raises. Time and memory are measured in benchmarks/bench_degenerate.py, not asserted here.
"""

from __future__ import annotations

import json
import re

import pytest

from core.audit import analyze
from core.errors import GuardError
from core.report import FORMATS, render
from core.store import Store
from tests.apptest_helpers import app_on, open_page, plain
from tests.degenerate import AUDITS, build

PAGES = ("freeze", "sample", "run", "criteria", "flip", "band", "drift")


@pytest.fixture(scope="module")
def deg(tmp_path_factory):
    db = tmp_path_factory.mktemp("deg") / "deg.duckdb"
    return db, build(db)


def _said(at) -> str:
    """Everything a user reads on the page: metrics, messages, captions, Markdown."""
    parts = [f"{m.label}: {m.value}" for m in at.metric]
    for kind in (at.error, at.warning, at.info, at.success, at.caption, at.markdown):
        parts += [plain(e.value) for e in kind]
    return "\n".join(parts)


@pytest.mark.parametrize("name", AUDITS)
def test_every_page_renders_numbers_or_a_reason(deg, monkeypatch, name):
    db, ids = deg
    monkeypatch.setenv("AUDIT_DB", str(db))
    at = app_on(ids[name])
    for page in PAGES:
        at = open_page(at, page)           # asserts no exception
        said = _said(at)
        assert said.strip(), page
        assert not re.search(r"\bnan\b|\binf\b", said, re.I), (page, said[:500])
        if page in ("criteria", "flip", "band"):
            shows_numbers = len(at.metric) > 0 or len(at.dataframe) > 0
            says_why = any(k in said.lower() for k in ("withheld", "no draws", "only one",
                                                       "at least 2", "need"))
            assert shows_numbers or says_why, (name, page, said[:500])


def test_huge_scores_keep_bands_and_sliders_in_the_score_range(deg, monkeypatch):
    db, ids = deg
    monkeypatch.setenv("AUDIT_DB", str(db))
    at = open_page(app_on(ids["huge"]), "band")
    band = next(m for m in at.metric if m.label.startswith("Manual-review band")).value
    low, high = (float(x.replace(",", "")) for x in band.split(" – "))
    assert 0 <= low <= high
    sliders = {s.label: s for s in at.slider}
    cut = next(s for lbl, s in sliders.items() if lbl.startswith("Cutoff"))
    assert cut.min >= 0 and cut.max <= 1.5e9 + 1
    at = open_page(at, "flip")
    assert any(m.label.startswith("Candidates with any flip") for m in at.metric)


@pytest.mark.parametrize("name", AUDITS)
def test_every_report_format_gives_numbers_or_withheld(deg, name):
    db, ids = deg
    store = Store(db, read_only=True)
    try:
        result = analyze(store, ids[name])
    except GuardError as exc:                       # every call failed
        assert name == "failed"
        assert str(exc).startswith("withheld:") and "parse_error: 24" in str(exc)
        return
    for fmt in FORMATS:
        out = render(result, fmt)
        low = out.lower().split("<script")[0]
        assert not re.search(r"\b(nan|infinity)\b", low), (name, fmt)
        if fmt != "json":
            assert "statistics withheld" in low or "flip rate at cutoff" in low, (name, fmt)
        else:
            d = json.loads(out)
            assert d["guards"]["statistics_withheld"] or d["flip"]["candidates"] >= 1
            if d["band"] and d["band"]["low"] is not None:
                lo, hi = result.live.score_range
                assert lo <= d["band"]["low"] <= d["band"]["high"] <= hi
            assert all(d["null_reasons"].values())


def test_cli_report_of_an_audit_whose_calls_all_failed_is_one_line(deg):
    from tests.support import run_cli

    db, ids = deg
    r = run_cli("report", "--db", str(db), "--audit", ids["failed"])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: withheld:") and len(r.stderr.strip().splitlines()) == 1
