"""Step 4 — per-criterion decomposition, verdicts, remediation, SD intervals and ICC(1).

References: pingouin.intraclass_corr (ICC1), a closed-form Shrout–Fleiss interval written out
here with scipy.stats.f, scipy.stats.chi2 for the SD interval, and hand-computed examples.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pingouin as pg
import pytest
from scipy import stats

from core.audit import Settings, analyze_frames, sd_interval_table
from core.criteria import (
    CRITERIA_COLUMNS,
    anchor_gate,
    between_sd,
    decompose,
    derive_strata,
    icc1,
    pooled_within_sd,
    remediation,
    sd_interval,
)
from core.draws import Draws
from tests.support import anchored_totals, long_frame, totals_frame


def _meta(**max_points: float) -> pd.DataFrame:
    return pd.DataFrame({"criterion": list(max_points), "max_points": list(max_points.values()),
                         "weight": [1.0] * len(max_points),
                         "position": range(len(max_points))})


def _row(table: pd.DataFrame, name: str) -> pd.Series:
    return table.set_index("criterion").loc[name]


# ------------------------------------------------------------------ hand-computed decomposition
# X: a = 1 2 3 (mean 2, dev -1 0 1), b = 4 6 5 (mean 5, dev -1 1 0), T = 5 8 8 (mean 7, dev -2 1 1)
# Y: a = 5 5 8 (mean 6, dev -1 -1 2), b = 2 2 2 (dev 0), T = 7 7 10 (mean 8, dev -1 -1 2)
# ΣT_dev² = 4+1+1+1+1+4 = 12; Σ a_dev·T_dev = (2+0+1)+(1+1+4) = 9; Σ b_dev·T_dev = (2+1+0)+0 = 3
# shares: a 9/12 = 0.75, b 3/12 = 0.25.  df = Σ(n_i − 1) = 4.
# within a = sqrt((2+6)/4) = sqrt 2; between a = SD(2, 6) = 4/sqrt 2 = 2 sqrt 2
# within b = sqrt(2/4) = sqrt .5; between b = SD(5, 2) = 3/sqrt 2
# total: within sqrt(12/4) = sqrt 3; between SD(7, 8) = 1/sqrt 2
HAND = {"X": {"a": [1, 2, 3], "b": [4, 6, 5]}, "Y": {"a": [5, 5, 8], "b": [2, 2, 2]}}


def test_hand_example_within_between_and_shares():
    table = decompose(Draws.from_long(long_frame(HAND), _meta(a=10, b=10)))
    a, b, t = _row(table, "a"), _row(table, "b"), _row(table, "total")
    assert a["within_sd"] == pytest.approx(np.sqrt(2), abs=1e-12)
    assert a["between_sd"] == pytest.approx(2 * np.sqrt(2), abs=1e-12)
    assert b["within_sd"] == pytest.approx(np.sqrt(0.5), abs=1e-12)
    assert b["between_sd"] == pytest.approx(3 / np.sqrt(2), abs=1e-12)
    assert t["within_sd"] == pytest.approx(np.sqrt(3), abs=1e-12)
    assert t["between_sd"] == pytest.approx(1 / np.sqrt(2), abs=1e-12)
    assert a["share_of_within_variance"] == pytest.approx(0.75, abs=1e-12)
    assert b["share_of_within_variance"] == pytest.approx(0.25, abs=1e-12)
    assert list(table.columns) == CRITERIA_COLUMNS
    assert list(table["criterion"]) == ["a", "b", "total"]


def test_shares_sum_to_one_when_total_is_weighted_sum_with_weights():
    # weights 2 and 1: T = 2a + b. X: T = 6 10 11 (mean 9, dev -3 1 2); Y: T = 12 12 18
    # (mean 14, dev -2 -2 4). ΣT_dev² = 9+1+4+4+4+16 = 38.
    # share a = 2·Σ a_dev·T_dev / 38 = 2·((3+0+2)+(2+2+8))/38 = 2·17/38 = 34/38
    # share b = 1·((3+1+0)+0)/38 = 4/38
    meta = pd.DataFrame({"criterion": ["a", "b"], "max_points": [10.0, 10.0],
                         "weight": [2.0, 1.0], "position": [0, 1]})
    draws = Draws.from_long(long_frame(HAND), meta)
    assert draws.total_source == "weighted sum"
    table = decompose(draws)
    assert _row(table, "a")["share_of_within_variance"] == pytest.approx(34 / 38, abs=1e-12)
    assert _row(table, "b")["share_of_within_variance"] == pytest.approx(4 / 38, abs=1e-12)


def test_remainder_not_in_any_criterion_when_screener_total_differs():
    # The screener's total is 2·(a + b): T_dev doubles, so each share halves
    # (0.75 → 0.375, 0.25 → 0.125) and 0.5 of the within variance is in no criterion.
    data = {c: {**v, "total": [2 * (x + y) for x, y in zip(v["a"], v["b"])]}
            for c, v in HAND.items()}
    res = analyze_frames(long_frame(data), criteria=_meta(a=10, b=10),
                         settings=Settings(cutoff=15))
    table = res.criteria
    assert _row(table, "a")["share_of_within_variance"] == pytest.approx(0.375, abs=1e-12)
    assert _row(table, "b")["share_of_within_variance"] == pytest.approx(0.125, abs=1e-12)
    from core.report import render_text, report_dict

    d = report_dict(res)
    assert d["share_not_in_any_criterion"] == pytest.approx(0.5, abs=1e-12)
    assert res.draws.total_source == "screener"
    assert res.draws.total_mismatch == 6
    text = render_text(res)
    assert "not in any criterion" in text
    assert "50% of the total's within variance" in text
    assert any("differs from the weighted sum" in n for n in res.notes)


# ------------------------------------------------------------------ verdicts
def test_verdict_noisy_when_within_equals_between():
    # X: 0 2 (mean 1), Y: 2 4 (mean 3): within sqrt((2+2)/2) = sqrt 2; between SD(1,3) = sqrt 2
    table = decompose(Draws.from_long(long_frame({"X": {"a": [0, 2]}, "Y": {"a": [2, 4]}}),
                                      _meta(a=10)))
    a = _row(table, "a")
    assert a["within_sd"] == pytest.approx(a["between_sd"], abs=0)
    assert a["verdict"] == "NOISY"


def test_verdict_working_when_between_exceeds_within():
    table = decompose(Draws.from_long(long_frame(HAND), _meta(a=10, b=10)))
    assert list(table["verdict"][:2]) == ["WORKING", "WORKING"]
    assert table["verdict"].iloc[-1] == ""


def test_verdict_dead_checked_before_noisy():
    # X: 0 0.4 (within sqrt(0.08/2) = 0.2), Y: 0.2 0.2; means 0.2, 0.2 → between 0.
    # max 10 → dead_tol 0.5: both ≤ 0.5 → DEAD, although within ≥ between (NOISY otherwise).
    data = {"X": {"a": [0, 0.4]}, "Y": {"a": [0.2, 0.2]}}
    table = decompose(Draws.from_long(long_frame(data), _meta(a=10)))
    a = _row(table, "a")
    assert a["within_sd"] == pytest.approx(0.2, abs=1e-12)
    assert a["between_sd"] == pytest.approx(0.0, abs=1e-12)
    assert a["dead_tol"] == pytest.approx(0.5)
    assert a["verdict"] == "DEAD"


def test_dead_tol_from_largest_absolute_score_when_max_unknown():
    # Same data, max unknown: tol = 5% of max |score| = 0.05·0.4 = 0.02 → not DEAD → NOISY.
    data = {"X": {"a": [0, 0.4]}, "Y": {"a": [0.2, 0.2]}}
    table = decompose(Draws.from_long(long_frame(data)))
    a = _row(table, "a")
    assert a["dead_tol"] == pytest.approx(0.02, abs=1e-12)
    assert a["verdict"] == "NOISY"
    # negative scores count by absolute value: max |−8| = 8 → tol 0.4
    data = {"X": {"a": [-8, -8]}, "Y": {"a": [-8, -7.8]}}
    a = _row(decompose(Draws.from_long(long_frame(data))), "a")
    assert a["dead_tol"] == pytest.approx(0.4, abs=1e-12)
    assert a["verdict"] == "DEAD"


def test_dead_tol_fraction_is_a_setting():
    # within 0.2, between 0 and max 10: DEAD at 5% (tol .5), NOISY at 1% (tol .1)
    data = {"X": {"a": [0, 0.4]}, "Y": {"a": [0.2, 0.2]}}
    draws = Draws.from_long(long_frame(data), _meta(a=10))
    assert _row(decompose(draws, dead_tol_frac=0.01), "a")["verdict"] == "NOISY"


def test_dead_note_counts_modal_full_marks():
    # 40 candidates x 2 runs; experience (max 20) is 20 for 38 of them, 19 for two.
    data = {}
    for i in range(40):
        exp = [19, 19] if i in (3, 17) else [20, 20]
        data[f"c{i:02d}"] = {"skill": [i % 7, (i % 7) + 1], "experience": exp}
    res = analyze_frames(long_frame(data), criteria=_meta(skill=10, experience=20),
                         settings=Settings(cutoff=20))
    exp = _row(res.criteria, "experience")
    assert exp["verdict"] == "DEAD"
    assert (exp["modal_score"], exp["modal_candidates"], exp["candidates"]) == (20, 38, 40)
    from core.report import render_text, report_dict

    notes = {r["criterion"]: r["note"] for r in report_dict(res)["criteria"]}
    assert notes["experience"] == "DEAD — 20/20 for 38/40 candidates"
    assert "20/20 for 38/40" in render_text(res)


# ------------------------------------------------------------------ remediation
def _table(rows):
    return pd.DataFrame([{**dict.fromkeys(CRITERIA_COLUMNS), **r} for r in rows],
                        columns=CRITERIA_COLUMNS)


def test_remediation_noisy_by_share_descending_then_dead():
    table = _table([
        {"criterion": "dead1", "verdict": "DEAD", "share_of_within_variance": 0.0},
        {"criterion": "noisy_small", "verdict": "NOISY", "share_of_within_variance": 0.2},
        {"criterion": "working", "verdict": "WORKING", "share_of_within_variance": 0.3},
        {"criterion": "noisy_big", "verdict": "NOISY", "share_of_within_variance": 0.5},
        {"criterion": "total", "verdict": "", "share_of_within_variance": 1.0},
    ])
    rem = remediation(table)
    assert list(rem["criterion"]) == ["noisy_big", "noisy_small", "dead1"]
    assert "removing it changes no ordering" in rem["action"].iloc[-1]


# ------------------------------------------------------------------ SD intervals
@pytest.mark.parametrize("n, lo, hi", [(15, 0.73, 1.58), (30, 0.80, 1.34)])
def test_sd_interval_factors_seed_figures(n, lo, hi):
    a, b = sd_interval(1.0, n - 1)
    assert (round(a, 2), round(b, 2)) == (lo, hi)
    # and scales with s
    a5, b5 = sd_interval(5.0, n - 1)
    assert (a5, b5) == pytest.approx((5 * a, 5 * b), rel=1e-12)


@pytest.mark.parametrize("n, lo, hi", [(15, 0.73, 1.58), (30, 0.80, 1.34)])
def test_sd_interval_per_candidate_and_pooled(n, lo, hi):
    rng = np.random.default_rng(n)
    totals = {f"c{i}": list(rng.normal(50 + 5 * i, 3, n)) for i in range(4)}
    res = analyze_frames(totals_frame(totals), settings=Settings(cutoff=55))
    per = res.sd_intervals
    assert (per["runs"] == n).all()
    for _, r in per.iterrows():
        assert r["sd"] == pytest.approx(np.std(totals[r["candidate_id"]], ddof=1), rel=1e-12)
        assert round(r["sd_ci_low"] / r["sd"], 2) == lo
        assert round(r["sd_ci_high"] / r["sd"], 2) == hi
    # pooled: df = Σ(n_i − 1) = 4(n − 1), written out with scipy.stats.chi2
    df = 4 * (n - 1)
    s = res.live.within_sd
    expect = (s * np.sqrt(df / stats.chi2.ppf(0.975, df)), s * np.sqrt(df / stats.chi2.ppf(0.025, df)))
    assert res.within_sd_ci95 == pytest.approx(expect, rel=1e-12)


def test_sd_interval_unbalanced_per_candidate_df():
    totals = {"A": [1, 2, 4], "B": [3, 3, 5, 9, 1]}
    res = analyze_frames(totals_frame(totals), settings=Settings(cutoff=3))
    per = sd_interval_table(res.draws).set_index("candidate_id")
    for cid, v in totals.items():
        s = np.std(v, ddof=1)
        assert (per.loc[cid, "sd_ci_low"], per.loc[cid, "sd_ci_high"]) == pytest.approx(
            sd_interval(s, len(v) - 1))
    assert res.within_sd_ci95 == pytest.approx(sd_interval(res.live.within_sd, 2 + 4))


# ------------------------------------------------------------------ ICC(1)
def _closed_form_icc1_ci(values_by_cand: list[np.ndarray]) -> tuple[float, float, float]:
    """Shrout & Fleiss (1979) case 1, written out independently of core."""
    k = len(values_by_cand)
    ns = np.array([len(v) for v in values_by_cand], dtype=float)
    n_total = ns.sum()
    allv = np.concatenate(values_by_cand)
    grand = allv.mean()
    ssb = sum(len(v) * (np.mean(v) - grand) ** 2 for v in values_by_cand)
    ssw = sum(np.sum((v - np.mean(v)) ** 2) for v in values_by_cand)
    msb, msw = ssb / (k - 1), ssw / (n_total - k)
    n0 = (n_total - np.sum(ns ** 2) / n_total) / (k - 1)
    f = msb / msw
    fl = f / stats.f.ppf(0.975, k - 1, n_total - k)
    fu = f * stats.f.ppf(0.975, n_total - k, k - 1)
    return ((msb - msw) / (msb + (n0 - 1) * msw), (fl - 1) / (fl + n0 - 1),
            (fu - 1) / (fu + n0 - 1))


@pytest.mark.parametrize("seed, k, n, person_sd", [(1, 12, 5, 3.0), (2, 40, 15, 6.0),
                                                   (3, 8, 3, 0.5)])
def test_icc1_equals_pingouin_on_balanced_data(seed, k, n, person_sd):
    rng = np.random.default_rng(seed)
    theta = rng.normal(50, person_sd, k)
    df = pd.DataFrame([(f"c{i}", j, theta[i] + rng.normal(0, 2.0)) for i in range(k)
                       for j in range(n)], columns=["candidate_id", "run", "score"])
    ref = pg.intraclass_corr(df, targets="candidate_id", raters="run", ratings="score")
    # pingouin names the row "ICC1" (< 0.6) or "ICC(1,1)", the interval "CI95%" or "CI95"
    ref = ref.set_index("Type")
    ref = ref.loc["ICC1" if "ICC1" in ref.index else "ICC(1,1)"]
    ci_ref = ref["CI95%"] if "CI95%" in ref.index else ref["CI95"]
    draws = Draws.from_long(df.assign(criterion="total"))
    got = icc1(draws.cand, draws.total, draws.counts)
    assert got.icc1 == pytest.approx(float(ref["ICC"]), abs=1e-9)
    # pingouin rounds its CI to 2 decimals
    assert got.ci95[0] == pytest.approx(float(ci_ref[0]), abs=0.005 + 1e-12)
    assert got.ci95[1] == pytest.approx(float(ci_ref[1]), abs=0.005 + 1e-12)
    # the closed form, unrounded
    groups = [df.loc[df.candidate_id == f"c{i}", "score"].to_numpy() for i in range(k)]
    icc_cf, lo_cf, hi_cf = _closed_form_icc1_ci(groups)
    assert got.icc1 == pytest.approx(icc_cf, abs=1e-9)
    assert got.ci95[0] == pytest.approx(lo_cf, abs=1e-9)
    assert got.ci95[1] == pytest.approx(hi_cf, abs=1e-9)
    assert got.n0 == pytest.approx(n, abs=1e-12)


def test_icc1_unbalanced_hand_example():
    # A: 1 3 (mean 2), B: 4 5 6 (mean 5), C: 7 7 9 9 (mean 8); N = 9, grand mean 51/9.
    # SSW = 2 + 2 + 4 = 8, df2 = 6 → MSW = 4/3.
    # SSB = 2(11/3)² + 3(2/3)² + 4(7/3)² = 242/9 + 12/9 + 196/9 = 50, df1 = 2 → MSB = 25.
    # n0 = (9 − (4 + 9 + 16)/9)/2 = 26/9.
    # ICC = (25 − 4/3)/(25 + (17/9)(4/3)) = (71/3)/(743/27) = 639/743.
    long = totals_frame({"A": [1, 3], "B": [4, 5, 6], "C": [7, 7, 9, 9]})
    draws = Draws.from_long(long)
    got = icc1(draws.cand, draws.total, draws.counts)
    assert got.msw == pytest.approx(4 / 3, abs=1e-12)
    assert got.msb == pytest.approx(25.0, abs=1e-12)
    assert got.n0 == pytest.approx(26 / 9, abs=1e-12)
    assert (got.df1, got.df2) == (2, 6)
    assert got.icc1 == pytest.approx(639 / 743, abs=1e-12)
    _, lo, hi = _closed_form_icc1_ci([np.array([1., 3]), np.array([4., 5, 6]),
                                      np.array([7., 7, 9, 9])])
    assert got.ci95 == pytest.approx((lo, hi), abs=1e-12)
    assert pooled_within_sd(draws.cand, draws.total, draws.counts) == pytest.approx(
        np.sqrt(8 / 6), abs=1e-12)
    assert between_sd(draws.cand, draws.total, draws.counts) == pytest.approx(3.0, abs=1e-12)


# ------------------------------------------------------------------ strata and the anchor gate
def test_derive_strata_edges_inclusive():
    # t = 50, σ = 2: band 47..53, high ≥ 56, low ≤ 44, else between
    s = pd.Series([47, 53, 53.5, 56, 55.9, 44, 44.1, 50], index=list("abcdefgh"), dtype=float)
    got = derive_strata(s, 50, 2)
    assert list(got) == ["band", "band", "between", "high", "between", "low", "between", "band"]


def test_anchor_gate_names_the_short_side():
    strata = pd.Series(["band"] * 24 + ["high"] * 8 + ["low"] * 5)
    msg = anchor_gate(strata)
    assert msg is not None and "only 5 low anchor" in msg and "8 high" not in msg
    assert anchor_gate(pd.Series(["band"] * 4 + ["high"] * 6 + ["low"] * 6)) is None


def test_fewer_than_six_anchors_withholds_reliability_keeps_flip():
    rng = np.random.default_rng(7)
    totals = anchored_totals(rng, band=8, high=6, low=5)
    res = analyze_frames(totals_frame(totals), settings=Settings(cutoff=50))
    assert res.icc is None
    assert "withheld" in res.reliability_withheld and "5 low" in res.reliability_withheld
    assert res.strata_source == "derived from mean totals"
    from core.report import render_text, report_dict

    d = report_dict(res)
    assert d["total"]["icc1"] is None and d["total"]["reliability_withheld"]
    assert d["flip"]["candidates"] == 19 and d["flip"]["per_candidate"]
    assert "reliability ratio withheld" in render_text(res)
    # six a side: computed
    totals = anchored_totals(np.random.default_rng(7), band=8, high=6, low=6)
    res = analyze_frames(totals_frame(totals), settings=Settings(cutoff=50))
    assert res.icc is not None and res.reliability_withheld is None


def test_strata_from_file_then_first_pass_then_means():
    totals = anchored_totals(np.random.default_rng(3), band=4, high=6, low=6)
    long = totals_frame(totals)
    ids = sorted(totals)
    cand = pd.DataFrame({"candidate_id": ids, "stratum": ["band"] * len(ids),
                         "first_pass_score": [np.nan] * len(ids)})
    res = analyze_frames(long, candidates=cand, settings=Settings(cutoff=50))
    assert res.strata_source == "the sample file" and res.icc is None
    cand = cand.assign(stratum=None, first_pass_score=[np.mean(totals[c]) for c in ids])
    res = analyze_frames(long, candidates=cand, settings=Settings(cutoff=50))
    assert res.strata_source == "derived from first-pass scores"
    res = analyze_frames(long, settings=Settings(cutoff=50))
    assert res.strata_source == "derived from mean totals"


def test_total_only_screener_skips_criteria_step():
    res = analyze_frames(totals_frame({"A": [1, 2, 3], "B": [5, 6, 8]}),
                         settings=Settings(cutoff=4))
    assert res.criteria is None
    from core.report import render_text, report_dict

    d = report_dict(res)
    assert d["criteria"] == [] and "skipped" in d["criteria_skipped"]
    text = render_text(res)
    assert "skipped: the screener returns only a total" in text
    assert d["total"]["within_sd"] == pytest.approx(np.sqrt((2 + 14 / 3) / 4), abs=1e-12)


def test_icc1_constant_totals_do_not_crash():
    # A screener that returns the same total for everyone on every run (no payloads to trip
    # the cache guard): MSB = MSW = 0 and ICC(1) is undefined. It must not crash the audit
    # ("no crash on any upload"); the reliability is reported as undefined (NaN / None).
    draws = Draws.from_long(totals_frame({f"c{i}": [7, 7, 7] for i in range(12)}))
    got = icc1(draws.cand, draws.total, draws.counts)
    assert np.isnan(got.icc1)
    ids = sorted(f"c{i}" for i in range(12))
    cand = pd.DataFrame({"candidate_id": ids, "stratum": ["high"] * 6 + ["low"] * 6})
    res = analyze_frames(totals_frame({c: [7, 7, 7] for c in ids}), candidates=cand,
                         settings=Settings(cutoff=7))
    from core.report import render_text

    assert "NOT ESTABLISHED BY THIS REPORT" in render_text(res)
