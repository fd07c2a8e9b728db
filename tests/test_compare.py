"""Comparing two audits (issue 11, SPEC §7): the F interval against scipy and a closed form, the
bootstrap against hand-enumerated cases, paired vs unpaired, the guards, unmatched criteria, the
demo's before/after, and the page, the command line and the report agreeing on every number."""

from __future__ import annotations

import json
import math
from itertools import product
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from streamlit.testing.v1 import AppTest

from core.audit import AuditResult, Settings, analyze, analyze_frames
from core.compare import (
    bootstrap_interval,
    bootstrap_weights,
    change_label,
    match_criteria,
    variance_ratio,
)
from core.compare_report import render, report_dict
from core.comparison import Comparison
from core.demo import DEMO_AUDIT_ID, DEMO_V2_AUDIT_ID
from core.errors import InputError
from core.format import COMPARE_LINE_RE, points_change
from core.store import Store
from tests.apptest_helpers import ROOT, TIMEOUT, plain
from tests.support import long_frame, run_cli


def _audit(data: dict[str, dict[str, list[float]]], audit_id: str = "A", *, cutoff: float = 5.0,
           req: str = "R-1", model: str = "m-2026-01-01", payload_counts: pd.DataFrame | None = None,
           long: pd.DataFrame | None = None) -> AuditResult:
    return analyze_frames(long if long is not None else long_frame(data),
                          settings=Settings(cutoff=cutoff),
                          freeze={"req_id": req, "model": model, "rubric_version": audit_id},
                          harness_hash=f"hash-{audit_id}", audit_id=audit_id,
                          payload_counts=payload_counts)


# ============================================================================ the F interval
def test_f_interval_closed_form_at_two_and_two_degrees_of_freedom():
    """F(2, 2) has CDF x/(1+x): its 2.5% and 97.5% quantiles are 1/39 and 39. A has within
    variance 2 and B 0.5 (two candidates, two runs each: df 2 and 2), so F = 4 and the interval
    is [4/39, 4·39]."""
    a = _audit({"c1": {"x": [0, 2]}, "c2": {"x": [0, 2]}}, "A")
    b = _audit({"c1": {"x": [0, 1]}, "c2": {"x": [0, 1]}}, "B")
    row = Comparison(a, b).criteria[0]
    assert (row.criterion, row.df_a, row.df_b) == ("x", 2, 2)
    assert row.within_sd_a == pytest.approx(math.sqrt(2))
    assert row.within_sd_b == pytest.approx(math.sqrt(0.5))
    assert row.f_ratio == pytest.approx(4.0)
    assert row.f_low == pytest.approx(4 / 39) and row.f_high == pytest.approx(4 * 39)
    assert stats.f.ppf(0.975, 2, 2) == pytest.approx(39)
    assert row.change == "no detectable change"   # F = 4, but 2 df each cannot tell


@pytest.mark.parametrize("df_a,df_b", [(14, 29), (560, 560), (3, 120)])
def test_f_interval_equals_scipy(df_a, df_b):
    f, lo, hi = variance_ratio(3.0, df_a, 1.5, df_b)
    assert f == pytest.approx(4.0)
    assert lo == pytest.approx(4.0 / stats.f.ppf(0.975, df_a, df_b))
    assert hi == pytest.approx(4.0 / stats.f.ppf(0.025, df_a, df_b))


def test_f_interval_covers_the_true_ratio_95_percent_of_the_time():
    rng = np.random.default_rng(3)
    df_a, df_b, hits, n = 14, 20, 0, 4000
    for _ in range(n):
        s_a = math.sqrt(2.0 * rng.chisquare(df_a) / df_a)   # σ²_A = 2
        s_b = math.sqrt(1.0 * rng.chisquare(df_b) / df_b)   # σ²_B = 1
        _, lo, hi = variance_ratio(s_a, df_a, s_b, df_b)
        hits += lo <= 2.0 <= hi
    assert abs(hits / n - 0.95) < 0.015


def test_change_is_decided_by_the_interval_not_the_point_estimate():
    assert change_label(1.2, 3.0) == "improved"
    assert change_label(0.2, 0.9) == "worse"
    assert change_label(0.8, 5.0) == "no detectable change"
    assert change_label(math.inf, math.inf) == "improved"     # B has no noise left
    assert change_label(math.nan, math.nan) == "no detectable change"


def test_a_criterion_without_noise_in_b_is_improved_and_both_silent_is_no_change():
    a = _audit({"c1": {"x": [0, 2], "y": [1, 1], "z": [1, 2]},
                "c2": {"x": [1, 3], "y": [2, 2], "z": [2, 3]}}, "A")
    b = _audit({"c1": {"x": [1, 1], "y": [1, 1], "z": [1, 2]},
                "c2": {"x": [2, 2], "y": [2, 2], "z": [2, 3]}}, "B")
    rows = {r.criterion: r for r in Comparison(a, b).criteria}
    assert rows["x"].change == "improved" and rows["x"].f_ratio == math.inf
    assert rows["y"].change == "no detectable change" and math.isnan(rows["y"].f_ratio)
    d = report_dict(Comparison(a, b))
    assert [r["f_ratio"] for r in d["criteria"]][:2] == [None, None]   # JSON-safe, no inf
    assert "B has no noise" in render(Comparison(a, b), "text")


# ============================================================================ the bootstrap
def test_bootstrap_distribution_matches_the_enumerated_resamples():
    """x = (0, 0, 1): the resampled mean is (number of 1s drawn)/3 with the number of 1s
    Binomial(3, 1/3) — 8/27, 12/27, 6/27, 1/27 — enumerated over all 27 ordered resamples."""
    x = np.array([0.0, 0.0, 1.0])
    exact: dict[float, float] = {}
    for pick in product(range(3), repeat=3):
        m = round(float(np.mean(x[list(pick)])), 9)
        exact[m] = exact.get(m, 0.0) + 1 / 27
    reps = 40_000
    w = bootstrap_weights(3, reps, np.random.default_rng(11))
    means = np.round(w @ x / 3, 9)
    observed = np.array([np.sum(means == m) for m in sorted(exact)])
    expected = np.array([exact[m] * reps for m in sorted(exact)])
    assert observed.sum() == reps
    assert stats.chisquare(observed, expected).pvalue > 0.001
    # the percentile interval: P(mean = 0) = 8/27 > 2.5%, P(mean = 1) = 1/27 > 2.5%
    assert bootstrap_interval(means) == (0.0, 1.0)


def _two_run(totals: dict[str, list[float]]) -> dict[str, dict[str, list[float]]]:
    return {c: {"x": v} for c, v in totals.items()}


def test_paired_change_hand_computed():
    """Cutoff 5 with two runs each: a candidate scoring 4 and 6 has d = 2·1·1/(2·1) = 1, one
    scoring 4, 4 or 6, 6 has d = 0. Differences B − A are (0, −1, −1): Δ = −2/3; resampled
    means are −(3 − z)/3 with z ~ Binomial(3, 1/3) zeros, so the 2.5% quantile is −1
    (P = 8/27) and the 97.5% quantile is 0 (P = 1/27)."""
    a = _audit(_two_run({"c1": [4, 6], "c2": [4, 6], "c3": [4, 6]}), "A")
    b = _audit(_two_run({"c1": [4, 6], "c2": [4, 4], "c3": [6, 6]}), "B")
    d = Comparison(a, b, reps=4000).disagreement(5.0)
    assert d.paired and d.candidates == 3
    assert (d.a, d.b) == (1.0, pytest.approx(1 / 3))
    assert d.delta == pytest.approx(-2 / 3)
    assert (d.low, d.high) == (pytest.approx(-1.0), pytest.approx(0.0))


def test_paired_change_with_equal_differences_has_a_zero_width_interval():
    a = _audit(_two_run({"c1": [4, 6], "c2": [4, 6]}), "A")
    b = _audit(_two_run({"c1": [6, 7], "c2": [3, 4]}), "B")
    d = Comparison(a, b).disagreement(5.0)
    assert (d.delta, d.low, d.high) == (-1.0, -1.0, -1.0)


def test_unpaired_change_resamples_each_audit_separately():
    """A: d = (0, 1), B: d = (0, 0) on other candidates. Δ = −1/2; A's resampled mean is 0,
    1/2 or 1 (1/4, 1/2, 1/4) and B's is always 0, so the interval is [−1, 0]."""
    a = _audit(_two_run({"a1": [4, 4], "a2": [4, 6]}), "A")
    b = _audit(_two_run({"b1": [3, 4], "b2": [6, 7]}), "B")
    c = Comparison(a, b)
    d = c.disagreement(5.0)
    assert not d.paired and d.delta == -0.5 and (d.low, d.high) == (-1.0, 0.0)
    assert any("different candidate samples" in w and "0 in both" in w for w in c.warnings)
    text = render(c, "text", cutoff=5.0)
    assert "UNPAIRED" in text and ", unpaired)" in text
    assert report_dict(c, cutoff=5.0)["disagreement"]["paired"] is False


def test_bootstrap_is_close_to_the_normal_interval_on_many_candidates():
    rng = np.random.default_rng(5)
    x = rng.normal(-0.05, 0.2, 400)
    lo, hi = bootstrap_interval(bootstrap_weights(400, 4000, np.random.default_rng(1)) @ x / 400)
    half = 1.96 * x.std(ddof=1) / math.sqrt(400)
    assert lo == pytest.approx(x.mean() - half, abs=0.15 * half)
    assert hi == pytest.approx(x.mean() + half, abs=0.15 * half)


def test_the_seed_reproduces_the_interval_and_another_seed_moves_it(demo_pair):
    a, b = demo_pair
    one = Comparison(a, b, seed=7).disagreement(78.0)
    again = Comparison(a, b, seed=7).disagreement(78.0)
    other = Comparison(a, b, seed=8).disagreement(78.0)
    assert (one.low, one.high) == (again.low, again.high)
    assert (one.low, one.high) != (other.low, other.high)
    assert one.delta == other.delta       # the statistic itself does not depend on the seed
    assert Comparison(a, b, reps=500).disagreement(78.0).reps == 500


# ============================================================================ criteria matching
def test_matching_lists_split_renamed_merged_dropped_and_new():
    m = match_criteria(["skills", "projects", "tone", "legacy", "edu_school", "edu_degree"],
                       ["skills", "projects_scope", "projects_evidence", "tone_v2", "culture",
                        "edu"])
    assert m.matched == ("skills",)
    assert m.split == {"projects": ("projects_scope", "projects_evidence")}
    assert m.renamed == {"tone": "tone_v2"}
    assert m.merged == {"edu": ("edu_school", "edu_degree")}
    assert m.dropped == ("legacy",) and m.new == ("culture",)
    statuses = {(u["criterion"], u["in"]): u["status"] for u in m.unmatched()}
    assert statuses[("legacy", "A")] == "dropped" and statuses[("culture", "B")] == "new"
    assert statuses[("tone", "A")].startswith("renamed to tone_v2")


def test_audits_with_no_common_criterion_still_compare_the_total():
    a = _audit({"c1": {"x": [1, 3], "y": [2, 2]}, "c2": {"x": [3, 5], "y": [3, 3]}}, "A")
    b = _audit({"c1": {"p": [2, 2], "q": [1, 2]}, "c2": {"p": [4, 4], "q": [2, 2]}}, "B")
    c = Comparison(a, b)
    d = report_dict(c)
    assert d["criteria"] == [] and d["total"]["criterion"] == "total"
    assert {(u["criterion"], u["status"]) for u in d["unmatched_criteria"]} == {
        ("x", "dropped"), ("y", "dropped"), ("p", "new"), ("q", "new")}
    assert "not compared one-to-one: x (A only) — dropped" in render(c, "text")


def test_a_split_criterion_is_compared_with_the_sum_of_its_parts():
    a = _audit({"c1": {"p": [0, 4]}, "c2": {"p": [2, 6]}}, "A")
    b = _audit({"c1": {"p_one": [0, 1], "p_two": [1, 0]}, "c2": {"p_one": [2, 2],
                                                                 "p_two": [3, 4]}}, "B")
    row = Comparison(a, b).criteria[0]
    assert row.kind == "split" and row.parts == ("p_one", "p_two")
    # sums per draw in B: c1 (1, 1), c2 (5, 6) → within variance 0.5/2 = 0.25; A: 16/2 = 8
    assert row.within_sd_b == pytest.approx(0.5) and row.f_ratio == pytest.approx(32.0)


# ============================================================================ guards and edges
def _payloads(ids: list[str], distinct: int) -> pd.DataFrame:
    return pd.DataFrame({"candidate_id": ids, "calls_with_payload": 2,
                         "distinct_payloads": distinct})


def test_a_cached_audit_withholds_the_comparison_and_names_the_guard():
    data = _two_run({"c1": [4, 6], "c2": [3, 7]})
    a = _audit(data, "A")
    b = _audit(data, "B", payload_counts=_payloads(["c1", "c2"], 1))
    c = Comparison(a, b)
    assert c.withheld.startswith("cache guard of audit B (B)")
    d = report_dict(c)
    assert d["withheld"] == c.withheld
    assert d["criteria"] is None and d["disagreement"] is None and d["band"] is None
    assert d["reviews_per_req"] is None and d["total"] is None
    text = render(c, "text")
    assert "NOTHING COMPARED" in text and "cache guard" in text and "F =" not in text
    assert "Nothing is compared: cache guard" in render(c, "html")
    with pytest.raises(InputError, match="nothing is compared"):
        c.view(5.0)


def test_a_deterministic_audit_withholds_with_the_determinism_guard():
    a = _audit(_two_run({"c1": [4, 4], "c2": [6, 6]}), "A")
    b = _audit(_two_run({"c1": [4, 6], "c2": [5, 7]}), "B")
    assert Comparison(a, b).withheld.startswith("determinism guard of audit A (A)")


def test_a_second_population_withholds_the_comparison():
    long = long_frame(_two_run({"c1": [4, 6], "c2": [5, 7]})).assign(model="m-2026-01-01")
    long.loc[0, "model"] = "m-2026-02-02"
    a = _audit({}, "A", long=long)
    b = _audit(_two_run({"c1": [4, 6], "c2": [5, 7]}), "B")
    c = Comparison(a, b)
    assert c.withheld.startswith("second-population guard of audit A (A): 1 draw(s)")


def test_an_audit_compared_with_itself_shows_no_change(demo_pair):
    a, _ = demo_pair
    c = Comparison(a, a)
    d = report_dict(c)
    assert any("same audit" in w for w in d["warnings"])
    assert d["total"]["f_ratio"] == pytest.approx(1.0) and d["total"]["change"] == \
        "no detectable change"
    assert all(r["change"] == "no detectable change" for r in d["criteria"])
    dis = d["disagreement"]
    assert dis["paired"] and dis["delta"] == 0 and dis["low"] == 0 and dis["high"] == 0
    assert d["verdict"].startswith("No detectable change in decision noise at 78")


def test_a_single_candidate_audit_gives_numbers_without_an_interval():
    a = _audit(_two_run({"c1": [4, 6]}), "A")
    b = _audit(_two_run({"c1": [3, 4]}), "B")
    c = Comparison(a, b)
    d = c.disagreement(5.0)
    assert d.delta == -1.0 and d.low is None and "at least 2 candidates" in d.note
    text = render(c, "text", cutoff=5.0)
    assert "no interval: an interval over candidates needs at least 2" in text
    assert json.loads(render(c, "json", cutoff=5.0))["disagreement"]["low"] is None


@pytest.mark.parametrize("cutoff", [500.0, -3.0, float("nan"), float("inf")])
def test_a_cutoff_outside_the_scores_is_refused_with_the_range(cutoff):
    a = _audit(_two_run({"c1": [4, 6], "c2": [3, 7]}), "A")
    c = Comparison(a, a)
    with pytest.raises(InputError, match="cutoff") as exc:
        c.view(cutoff)
    if math.isfinite(cutoff):
        assert "between 3 and 7" in str(exc.value)


@pytest.mark.parametrize("kw,what", [({"reps": 10}, "reps"), ({"capacity": -1.0}, "capacity"),
                                     ({"k": 0.0}, "k"),
                                     ({"applications_per_req": 0.0}, "applications")])
def test_bad_settings_are_refused_by_name(kw, what):
    a = _audit(_two_run({"c1": [4, 6], "c2": [3, 7]}), "A")
    with pytest.raises(InputError, match=what):
        Comparison(a, a, **kw)


def test_different_reqs_are_warned_about():
    a = _audit(_two_run({"c1": [4, 6], "c2": [3, 7]}), "A", req="R-1")
    b = _audit(_two_run({"c1": [4, 6], "c2": [3, 7]}), "B", req="R-2")
    assert any(w.startswith("different reqs (A: R-1, B: R-2)") for w in Comparison(a, b).warnings)


def test_user_text_is_escaped_in_every_format():
    evil = "<b>x</b>|`y`"
    a = _audit({"c1": {evil: [4, 6]}, "c2": {evil: [3, 7]}}, "A")
    b = _audit({"c1": {evil: [5, 5]}, "c2": {evil: [3, 6]}}, "B")
    c = Comparison(a, b)
    html = render(c, "html", cutoff=5.0)
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    md = render(c, "md", cutoff=5.0)
    row = next(line for line in md.splitlines() if "x\\</b\\>" in line or "x\\<" in line)
    assert row.count("|") - row.count("\\|") == 8     # the pipe in the name is not a column


def test_points_change_reads_as_signed_points():
    assert points_change(-0.11) == "−11" and points_change(0.03) == "+3"
    assert points_change(-0.004) == "−0.4" and points_change(0.0) == "0"


# ============================================================================ the demo
@pytest.fixture(scope="module")
def demo_pair(demo_db: Path) -> tuple[AuditResult, AuditResult]:
    s = Store(demo_db, read_only=True)
    try:
        return analyze(s, DEMO_AUDIT_ID), analyze(s, DEMO_V2_AUDIT_ID)
    finally:
        s.close()


def test_the_demos_second_audit_shows_the_split_improved_and_a_smaller_band(demo_pair):
    a, b = demo_pair
    c = Comparison(a, b)
    d = report_dict(c)
    rows = {r["criterion"]: r for r in d["criteria"]}
    assert rows["projects"]["kind"] == "split"
    assert rows["projects"]["parts"] == ["projects_scope", "projects_evidence"]
    assert rows["projects"]["change"] == "improved" and rows["projects"]["f_low"] > 1
    assert rows["projects"]["verdict_a"] == "NOISY"
    assert d["total"]["change"] == "improved"
    assert rows["technical_skills"]["change"] == "no detectable change"
    (lo_a, hi_a), (lo_b, hi_b) = d["band"]["a"], d["band"]["b"]
    assert hi_b - lo_b < 0.6 * (hi_a - lo_a)
    assert d["reviews_per_req"]["b"] < 0.6 * d["reviews_per_req"]["a"]
    assert d["cutoff"] == 78 and d["disagreement"]["paired"]
    assert d["disagreement"]["high"] < 0       # less decision noise, beyond the interval
    assert d["verdict"].startswith("B reduces the decision noise at 78")
    assert d["harness_hash"]["a"] != d["harness_hash"]["b"]
    per = pd.DataFrame(d["per_candidate"])
    assert len(per) == 40
    assert per["change"].mean() == pytest.approx(d["disagreement"]["delta"])
    assert per["disagreement_a"].mean() == pytest.approx(d["disagreement"]["a"])
    differs = {h["field"] for h in d["harness"] if h["differs"]}
    assert differs == {"prompt_version", "rubric_version", "criteria"}
    assert d["warnings"] == []
    assert d["capacity"] == 40                      # the audit's stored reviewer capacity
    assert report_dict(c, capacity=None)["capacity"] is None
    assert report_dict(c, capacity=None)["band_detail"]["a"]["over_capacity"] is None


def test_the_verdict_sentence_carries_the_numbers_it_claims(demo_pair):
    d = report_dict(Comparison(*demo_pair))
    dis, rv = d["disagreement"], d["reviews_per_req"]
    assert (f"disagreement {100 * dis['a']:.0f}% → {100 * dis['b']:.0f}% "
            f"({points_change(dis['delta'])} points, 95% interval {points_change(dis['low'])} "
            f"to {points_change(dis['high'])}); reviews per req {rv['a']:.0f} → "
            f"{rv['b']:.0f}.") in d["verdict"]


# ============================================================================ CLI, page, report
def _cli_json(db: Path, *extra: str) -> dict:
    r = run_cli("compare", "--db", str(db), "--audit", DEMO_AUDIT_ID, "--audit",
                DEMO_V2_AUDIT_ID, "--format", "json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_cli_json_carries_the_contract_and_equals_the_report(demo_db, demo_pair):
    d = _cli_json(demo_db)
    for key in ("criteria", "total", "cutoff", "disagreement", "band", "reviews_per_req",
                "unmatched_criteria", "withheld"):
        assert key in d
    assert set(d["criteria"][0]) >= {"criterion", "within_sd_a", "within_sd_b", "f_ratio",
                                     "f_low", "f_high", "change"}
    assert set(d["disagreement"]) >= {"a", "b", "delta", "low", "high", "paired"}
    assert d["withheld"] is None
    here = report_dict(Comparison(*demo_pair))
    for key in ("criteria", "total", "cutoff", "disagreement", "band", "reviews_per_req",
                "verdict", "unmatched_criteria"):
        assert d[key] == here[key], key


def test_cli_text_md_html_and_out(demo_db, tmp_path):
    r = run_cli("compare", "--db", str(demo_db), "--audit", DEMO_AUDIT_ID, "--audit",
                DEMO_V2_AUDIT_ID, "--cutoff", "80", "--reps", "500", "--seed", "3")
    assert r.returncode == 0 and "DECISION NOISE AT CUTOFF 80" in r.stdout
    assert "500 replications, seed 3" in r.stdout
    out = tmp_path / "cmp.html"
    r = run_cli("compare", "--db", str(demo_db), "--audit", DEMO_AUDIT_ID, "--audit",
                DEMO_V2_AUDIT_ID, "--format", "html", "--out", str(out))
    assert r.returncode == 0 and out.read_text().startswith("<!DOCTYPE html>")
    assert "plotly" in out.read_text()
    r = run_cli("compare", "--db", str(demo_db), "--audit", DEMO_AUDIT_ID, "--audit",
                DEMO_V2_AUDIT_ID, "--format", "md", "--capacity", "30")
    assert "## Within-candidate noise" in r.stdout and "capacity 30 per req" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["--audit", DEMO_AUDIT_ID, "--audit", "nope"], "no audit 'nope'"),
    (["--audit", DEMO_AUDIT_ID], "give exactly two audits"),
    (["--audit", DEMO_AUDIT_ID, "--audit", DEMO_V2_AUDIT_ID, "--cutoff", "500"],
     "outside every total of both audits"),
    (["--audit", DEMO_AUDIT_ID, "--audit", DEMO_V2_AUDIT_ID, "--reps", "3"], "reps must be"),
    (["--audit", DEMO_AUDIT_ID, "--audit", DEMO_V2_AUDIT_ID, "--capacity", "-5"], "capacity"),
    (["--audit", DEMO_AUDIT_ID, "--audit", DEMO_V2_AUDIT_ID, "--cutoff", "abc"],
     "argument --cutoff: not a number: 'abc'"),
    (["--audit", DEMO_AUDIT_ID, "--audit", DEMO_V2_AUDIT_ID, "--format", "pdf"],
     "argument --format: invalid choice"),
    ([], "required: --audit"),
])
def test_cli_bad_options_one_line_exit_2(demo_db, args, needle):
    r = run_cli("compare", "--db", str(demo_db), *args)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr
    assert "Traceback" not in r.stderr


def test_cli_missing_database_is_one_line(tmp_path):
    r = run_cli("compare", "--db", str(tmp_path / "none.duckdb"), "--audit", "a", "--audit",
                "b")
    assert r.returncode == 2 and "does not exist" in r.stderr
    assert not (tmp_path / "none.duckdb").exists()


def test_cli_compares_an_audit_with_itself(demo_db):
    r = run_cli("compare", "--db", str(demo_db), "--audit", DEMO_AUDIT_ID, "--audit",
                DEMO_AUDIT_ID)
    assert r.returncode == 0 and "A and B are the same audit" in r.stdout
    assert "No detectable change in decision noise at 78" in r.stdout


@pytest.fixture()
def page_app(tmp_path, monkeypatch) -> AppTest:
    monkeypatch.setenv("AUDIT_DB", str(tmp_path / "audits.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/compare.py")
    at.run()
    assert not at.exception, at.exception
    return at


def _page_line(at: AppTest) -> dict[str, str]:
    for c in at.caption:
        m = COMPARE_LINE_RE.search(c.value)
        if m:
            return m.groupdict()
    raise AssertionError("no compare line on the page")


def _verdict(at: AppTest) -> str:
    return next(plain(m.value)[5:] for m in at.markdown if m.value.startswith("#### "))


def test_page_cli_and_report_agree_and_the_slider_moves_both(page_app, demo_db):
    at = page_app
    assert at.selectbox(key="cmp_a").value == DEMO_AUDIT_ID
    assert at.selectbox(key="cmp_b").value == DEMO_V2_AUDIT_ID
    assert (at.query_params["a"], at.query_params["b"]) == (DEMO_AUDIT_ID, DEMO_V2_AUDIT_ID)
    for cutoff in (78.0, 81.0):
        if cutoff != 78.0:
            at.slider[0].set_value(cutoff).run()
            assert not at.exception
        d = _cli_json(demo_db, "--cutoff", f"{cutoff:g}")
        line = _page_line(at)
        assert line["cutoff"] == f"{cutoff:g}"
        assert int(line["flips_a"]) == d["flips"]["a"]["candidates_with_flip"]
        assert int(line["flips_b"]) == d["flips"]["b"]["candidates_with_flip"]
        assert line["dis_a"] == f"{100 * d['disagreement']['a']:.1f}"
        assert line["dis_b"] == f"{100 * d['disagreement']['b']:.1f}"
        assert line["band_b"] == f"{d['band']['b'][0]:.1f} to {d['band']['b'][1]:.1f}"
        assert _verdict(at) == d["verdict"]
        reviews = [m.value for m in at.metric if m.label == "Manual reviews per req"]
        assert reviews == [f"{d['reviews_per_req']['a']:.0f}",
                           f"{d['reviews_per_req']['b']:.0f}"]
    # reviewer capacity is one input for both: 10 puts both over it, 200 fits both
    cap = next(n for n in at.number_input if n.label.startswith("Reviewer capacity"))
    cap.set_value(10.0).run()
    assert len([w for w in at.warning if "the team can do 10" in w.value]) == 2
    cap.set_value(200.0).run()
    assert not any("the team can do" in w.value for w in at.warning)
    assert len([s for s in at.success if "capacity of 200" in s.value]) == 2
    table = plain(at.table[0].value.to_string())
    assert "improved" in table and "projects → projects_scope + projects_evidence" in table


def test_page_takes_the_audits_from_the_url(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDIT_DB", str(tmp_path / "audits.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/compare.py")
    at.query_params["a"] = DEMO_V2_AUDIT_ID
    at.query_params["b"] = DEMO_AUDIT_ID
    at.run()
    assert not at.exception
    assert at.selectbox(key="cmp_a").value == DEMO_V2_AUDIT_ID
    assert _verdict(at).startswith("B increases the decision noise at 78: disagreement 12% → "
                                   "17%")
    # the same audit on both sides: a warning, no traceback
    at.selectbox(key="cmp_b").set_value(DEMO_V2_AUDIT_ID).run()
    assert not at.exception
    assert any("same audit" in w.value for w in at.warning)


def test_page_with_a_cached_audit_names_the_guard(tmp_path, monkeypatch):
    db = tmp_path / "audits.duckdb"
    store = Store(db)
    from core.demo import ensure_demo
    ensure_demo(store)
    store.save_audit("cached", {"req_id": "ENG-2291"}, "h-cached", {"cutoff": 5})
    draws = long_frame(_two_run({"c1": [4, 6], "c2": [3, 7]})).assign(
        request_id=[f"r{i}" for i in range(4)], model=None, clipped=False)
    calls = draws[["request_id", "candidate_id", "run"]].assign(
        status="ok", raw_payload='{"x": 1}', payload_sha256="same")
    store.write_results("cached", calls, draws)
    store.close()
    monkeypatch.setenv("AUDIT_DB", str(db))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/compare.py")
    at.query_params["a"] = DEMO_AUDIT_ID
    at.query_params["b"] = "cached"
    at.run()
    assert not at.exception
    assert any("cache guard of audit B (cached)" in plain(e.value) for e in at.error)
    assert not any(COMPARE_LINE_RE.search(c.value) for c in at.caption)


# ============================================================================ the charts
def test_comparison_charts_are_valid_plotly_and_escape_ids(demo_pair):
    import plotly.graph_objects as go

    from core import charts
    from core.compare_report import figures

    c = Comparison(*demo_pair)
    v = c.view(78.0)
    scatter, curves = figures(c, v)
    for fig in (scatter, curves):
        go.Figure(fig.to_dict())          # the validating constructor raises on any bad property
    pts = scatter.data[0]
    # one marker per distinct (A, B) pair of pass rates, sized by how many candidates share it
    pairs = {(round(a, 9), round(b, 9)) for a, b in zip(v.pass_rate_a, v.pass_rate_b)}
    assert len(pts.x) == len(pairs)
    assert int(np.sum(pts.customdata[:, 1].astype(int))) == 40
    # the (100%, 100%) corner holds every candidate that passes all runs in both audits
    corner = [i for i, (x, y) in enumerate(zip(pts.x, pts.y)) if x == 1 and y == 1][0]
    assert int(pts.customdata[corner, 1]) == int(np.sum((v.pass_rate_a == 1)
                                                        & (v.pass_rate_b == 1)))
    assert [d.name for d in curves.data] == ["A (before)", "B (after)"]
    fig = charts.pass_rate_scatter(np.array(["<b>x</b>", "y"]), np.array([0.5, 1.0]),
                                   np.array([0.5, 1.0]), 5.0)
    labels = " ".join(str(x) for x in fig.data[0].customdata[:, 0])
    assert "<b>" not in labels and "&lt;b&gt;x&lt;/b&gt;" in labels


def test_the_readme_quotes_the_demos_verdict(demo_pair):
    verdict = report_dict(Comparison(*demo_pair))["verdict"].rstrip(".")
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert verdict in readme


def test_page_shows_criterion_names_literally(tmp_path, monkeypatch):
    """st.table renders Markdown in cells: a criterion named like a link or bold text must show
    as typed (escaped), never as markup."""
    evil = "**bold** [x](http://example.com)"
    db = tmp_path / "audits.duckdb"
    store = Store(db)
    for aid, spread in (("evil-a", 2), ("evil-b", 1)):
        data = {f"c{i}": {evil: [3 + i, 3 + i + spread, 4 + i], "plain": [1, 2, 1]}
                for i in range(4)}
        draws = long_frame(data)
        draws = draws.assign(request_id=[f"{aid}-{i}" for i in range(len(draws))], model=None,
                             clipped=False)
        store.save_audit(aid, {"req_id": "R-9"}, f"h-{aid}", {"cutoff": 6})
        store.write_results(aid, None, draws)
    store.close()
    monkeypatch.setenv("AUDIT_DB", str(db))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/compare.py")
    at.query_params["a"] = "evil-a"
    at.query_params["b"] = "evil-b"
    at.run()
    assert not at.exception
    from core.format import md_cell
    cells = list(at.table[0].value["criterion"])
    assert md_cell(evil) in cells and evil not in cells
