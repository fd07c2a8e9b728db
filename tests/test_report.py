"""Reports: JSON keys, text sections, no standard error anywhere, self-contained escaped HTML."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from core.audit import Settings, analyze_frames
from core.report import FORMATS, NOT_ESTABLISHED, render, render_json, report_dict
from tests.support import anchored_totals, long_frame, totals_frame

EVIL = "<script>alert(1)</script>"


def _keys(d: dict, *names: str) -> None:
    missing = [n for n in names if n not in d]
    assert not missing, f"missing keys {missing}"


def test_json_keys(demo_result):
    d = json.loads(render_json(demo_result))
    _keys(d, "sample", "guards", "criteria", "total", "flip", "band", "remediation",
          "not_established")
    _keys(d["sample"], "candidates", "evaluations", "band", "high_anchors", "low_anchors")
    for c in d["criteria"]:
        _keys(c, "criterion", "within_sd", "between_sd", "share_of_within_variance", "verdict")
    _keys(d["total"], "within_sd", "between_sd", "within_sd_ci95", "icc1", "icc1_ci95",
          "reliability_withheld")
    f = d["flip"]
    _keys(f, "cutoff", "candidates", "candidates_with_flip", "worst", "flip_interval",
          "per_candidate")
    _keys(f["worst"], "candidate_id", "passes", "runs", "flip_rate")
    assert len(f["per_candidate"]) == 40
    for r in f["per_candidate"]:
        _keys(r, "candidate_id", "passes", "runs", "flip_rate", "disagreement", "mean", "ci95")
    _keys(d["band"], "k", "two_sd", "empirical", "low", "high", "bound_by", "share_of_pool",
          "applications_per_req", "manual_reviews_per_req")
    _keys(d["band"]["bound_by"], "low", "high")
    assert d["not_established"] == NOT_ESTABLISHED


def test_json_numbers_unrounded_and_consistent(demo_result):
    d = json.loads(render_json(demo_result))
    assert d["total"]["within_sd"] == pytest.approx(demo_result.live.within_sd, abs=0)
    assert d["total"]["icc1"] == pytest.approx(demo_result.icc.icc1, abs=0)
    b = d["band"]
    assert b["low"] <= d["flip"]["cutoff"] <= b["high"]
    assert b["manual_reviews_per_req"] == pytest.approx(b["share_of_pool"] *
                                                        b["applications_per_req"])
    w = d["flip"]["worst"]
    assert w["flip_rate"] == pytest.approx(max(r["flip_rate"] for r in d["flip"]["per_candidate"]))


SECTIONS = ["PER-CRITERION", "FLIP RATE AT CUTOFF 78 (single draw, not mean)", "RECOMMENDED",
            "REMEDIATE FIRST", "SCOPE", "WHAT INVALIDATES THIS AUDIT",
            "NOT ESTABLISHED BY THIS REPORT"]


def test_text_sections_in_order(demo_result):
    text = render(demo_result, "text")
    lines = text.splitlines()
    assert lines[0] == 'SCREENING SCORE VARIANCE AUDIT — req ENG-2291 "Senior Backend Engineer"'
    pos = [next(i for i, line in enumerate(lines) if line.startswith(s)) for s in SECTIONS]
    assert pos == sorted(pos)
    assert "Harness hash: " + demo_result.harness_hash in text
    assert "binds" in text or "bind to req ENG-2291" in text
    for item in NOT_ESTABLISHED:
        assert item in text


def test_markdown_has_the_sections(demo_result):
    md = render(demo_result, "md")
    for h in ("## Per-criterion", "## Flip rate at cutoff 78 (single draw, not mean)",
              "## Recommended", "## Remediate first", "## Scope",
              "## What invalidates this audit", "## Not established by this report"):
        assert h in md
    assert "| criterion | within-SD | between-SD |" in md


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_standard_error_anywhere(demo_result, fmt):
    out = render(demo_result, fmt).lower()
    assert "standard error" not in out
    assert not re.search(r"\bs\.?e\.?m\b", out)
    if fmt == "json":
        flat = json.dumps(json.loads(out))
        assert '"se"' not in flat and '"sem"' not in flat and "std_err" not in flat


def test_html_self_contained_with_inline_plotly(demo_result):
    page = render(demo_result, "html")
    assert page.lstrip().startswith("<!DOCTYPE html>")
    assert not re.search(r"<script[^>]+src\s*=\s*[\"']?https?:", page, re.I)
    assert not re.search(r"<link[^>]+href\s*=\s*[\"']?https?:", page, re.I)
    assert "Plotly.newPlot" in page
    assert "plotly.js v" in page or "Plotly=" in page or "window.Plotly" in page
    assert page.count('class="chart"') == 3  # criteria, draws strip, pool histogram
    assert "NOT ESTABLISHED BY THIS REPORT" in page


def _evil_result():
    data = {EVIL: {"skill": [1, 2, 3, 4], "x<b>y": [1, 1, 2, 2]},
            "b": {"skill": [8, 9, 10, 11], "x<b>y": [5, 5, 5, 6]}}
    return analyze_frames(long_frame(data), settings=Settings(cutoff=3))


def test_user_text_escaped_in_html():
    res = _evil_result()
    assert report_dict(res)["flip"]["worst"]["candidate_id"] == EVIL
    page = render(res, "html")
    assert EVIL not in page
    assert "<b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_user_text_escaped_in_markdown():
    md = render(_evil_result(), "md")
    assert EVIL not in md and "<b>" not in md


def test_total_only_report_says_criteria_skipped():
    res = analyze_frames(totals_frame({"A": [1, 2, 3], "B": [5, 6, 8]}),
                         settings=Settings(cutoff=4))
    text = render(res, "text")
    assert "PER-CRITERION" in text and "skipped" in text
    assert "FLIP RATE AT CUTOFF 4" in text


def test_withheld_reliability_reason_in_report():
    totals = anchored_totals(np.random.default_rng(4), band=6, high=2, low=6)
    res = analyze_frames(totals_frame(totals), settings=Settings(cutoff=50))
    d = report_dict(res)
    assert d["total"]["icc1"] is None and "2 high" in d["total"]["reliability_withheld"]
    assert d["flip"]["candidates"] == 14


def test_dead_tolerance_shown_is_the_setting():
    # thresholds are settings shown next to the table: at dead_tol_frac 0.10 the legend says 10%
    res = analyze_frames(long_frame({"A": {"a": [1, 2]}, "B": {"a": [3, 4]}}),
                         settings=Settings(cutoff=2, dead_tol_frac=0.10))
    text = render(res, "text")
    assert "10% of max points" in text and "5% of max points" not in text


def test_cutoff_set_by_score_is_not_called_effective(demo_result):
    """The demo audits top 40 (effective 78); a report at a slider cutoff of 80 must not say
    'effective' but name the config field."""
    d = report_dict(demo_result, cutoff=80.0)
    assert d["cutoff"]["audited"] == 80.0 and d["cutoff"]["effective"] is False
    text = render(demo_result, "text", cutoff=80.0)
    line = next(x for x in text.splitlines() if x.startswith("Cutoff audited"))
    assert line == "Cutoff audited: 80 (config field reads 70)"
    default = next(x for x in render(demo_result, "text").splitlines()
                   if x.startswith("Cutoff audited"))
    assert "effective" in default and "top 40" in default


def test_user_text_in_charts_is_escaped():
    """Plotly renders <b>/<a> tags in labels: criterion names and candidate ids are escaped."""
    import pandas as pd

    from core import charts
    table = pd.DataFrame({"criterion": ["<b>bold</b>", "total"], "within_sd": [1.0, 1.0],
                          "between_sd": [2.0, 2.0], "verdict": ["WORKING", ""]})
    fig = charts.criteria_chart(table)
    assert list(fig.data[0].x) == ["&lt;b&gt;bold&lt;/b&gt;"]
    ids = np.array(["<a href='x'>c1</a>", "c2"], dtype=object)
    fig = charts.draws_strip(ids, np.array([0, 0, 1, 1]), np.array([1.0, 2.0, 3.0, 4.0]),
                             np.array([1.5, 3.5]), np.array([False, False]), 2.5)
    shown = {str(v) for tr in fig.data for v in tr.customdata}
    assert "&lt;a href=&#x27;x&#x27;&gt;c1&lt;/a&gt;" in shown and not any("<a" in v for v in shown)


def test_a_newline_or_pipe_in_a_name_forges_no_heading_or_column_in_markdown():
    """Issue 12 point 8: a criterion named "skill\\n## NOT ESTABLISHED…" (or a candidate id with
    a newline) must not start a line of its own in the Markdown report, and a pipe must not
    split a table row."""
    forged = "skill\n## NOT ESTABLISHED BY THIS REPORT: nothing"
    data = {f"c{i}\n## FORGED": {forged: [i, i + 1, i + 3, i + 2], "b|c": [i, i, i + 1, i + 2]}
            for i in range(8)}
    md = render(analyze_frames(long_frame(data), settings=Settings(cutoff=4)), "md")
    lines = md.splitlines()
    assert not any(line.startswith("## FORGED") for line in lines)
    assert not any(line.startswith("## NOT ESTABLISHED") for line in lines)
    assert sum(line.startswith("## ") for line in lines) == sum(
        line.startswith("## ") for line in render(_evil_result(), "md").splitlines())
    rows = [line for line in lines if line.startswith("| b")]
    assert rows and all(r.startswith("| b\\|c |") for r in rows), rows
