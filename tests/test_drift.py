"""Tests of core.drift against references: statsmodels, brute-force GLS, simulation, the paper."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats

from core.drift.analysis import analyse_drift, drift_variants
from core.drift.demo import demo_outcomes, demo_panel
from core.drift.horizon import horizon_weeks, predictive_sd
from core.drift.local_level import (
    batch_weeks,
    fit_local_level,
    kalman_local_level,
    restricted_loglik,
    segments_from_resets,
    smooth_gls,
)
from core.drift.outcomes import break_even_share, outcome_trend, read_outcome_series
from core.drift.panel import panel_from_audits, parse_dates, read_panel, validate_panel
from core.drift.result import drift_result_json
from core.drift.severity import (
    cochran_q,
    default_reference,
    fit_severity,
    grader_gap_heterogeneity,
    severity_by_category,
)
from core.drift.trend import category_trends, deployment_contrasts, monthly_trend, trend_design
from core.errors import IdentificationError, InputError
from core.tables import FileFaults

FIX = Path(__file__).parent / "fixtures"


def sim_panel(seed: int, *, T: int = 20, sev: dict[str, float] | None = None, q: float = 0.01,
              n_per: int = 30, sd: float = 1.0, gap_days: int = 7,
              steps: dict[int, float] | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """Every rater scores ``n_per`` items in every batch; θ a random walk with variance q/week."""
    sev = sev or {"A": 0.0, "B": -0.8, "C": 0.3}
    rng = np.random.default_rng(seed)
    dates = pd.Timestamp("2026-01-05") + pd.to_timedelta(np.arange(T) * gap_days, "D")
    theta = np.cumsum(np.r_[0.0, rng.normal(0.0, math.sqrt(q * gap_days / 7), T - 1)])
    for b, jump in (steps or {}).items():
        theta[b:] += jump
    frames = []
    for dt, th in zip(dates, theta):
        for r, g in sev.items():
            frames.append(pd.DataFrame({"batch": dt, "rater": r,
                                        "score": th + g + rng.normal(0.0, sd, n_per)}))
    return pd.concat(frames, ignore_index=True), theta


# ---------------------------------------------------------------------------- input
def test_read_panel_fixture_parses_dates_and_scores():
    p = read_panel(FIX / "drift_small.csv")
    assert list(p.columns[:3]) == ["batch", "rater", "item"] or "batch" in p.columns
    assert pd.api.types.is_datetime64_any_dtype(p["batch"])
    assert p["score"].dtype == float
    assert p["batch"].nunique() == 8


def test_bad_date_rejected_with_row_and_column():
    with pytest.raises(InputError) as e:
        read_panel(FIX / "drift_bad_date.csv")
    # data row 5 is the spreadsheet's line 6 (the header is line 1)
    assert e.value.row == 6 and e.value.column == "batch"
    assert "line 6" in str(e.value)
    assert "drift_bad_date.csv" in str(e.value) and "2026-13-45" in str(e.value)


def test_non_finite_score_rejected_with_row_and_column():
    with pytest.raises(InputError) as e:
        read_panel(FIX / "drift_bad_score.csv")
    assert e.value.row == 8 and e.value.column == "score"
    assert "drift_bad_score.csv" in str(e.value)


def test_empty_file_rejected():
    with pytest.raises(InputError, match="empty"):
        read_panel(b"", name="empty.csv")


def test_missing_column_named():
    with pytest.raises(InputError, match="'rater'"):
        read_panel(b"batch,score\n2026-01-01,1\n", name="x.csv")


def test_empty_rater_rejected_with_row():
    with pytest.raises(InputError) as e:
        read_panel(b"batch,rater,score\n2026-01-01,A,1\n2026-01-02,,2\n", name="x.csv")
    assert e.value.row == 3 and e.value.column == "rater"


def test_a_panel_with_several_faults_lists_every_one_by_spreadsheet_line():
    """Issue 9: every fault (not the first only), each with the line a spreadsheet shows
    (blank lines counted), the column and the value."""
    data = (b"batch,rater,score\n2026-01-01,A,1\n\nnotadate,A,2\n2026-01-08,,3\n"
            b"2026-01-08,B,x\n2026-01-15,B,inf\n2026-01-15,C,1e400\n")
    with pytest.raises(FileFaults) as e:
        read_panel(data, name="panel.csv")
    got = [(f.line, f.column, f.value) for f in e.value.faults]
    assert got == [(4, "batch", "notadate"), (5, "rater", None), (6, "score", "x"),
                   (7, "score", "inf"), (8, "score", "1e400")]
    assert e.value.total == 5
    assert all("panel.csv, line" in line for line in e.value.lines())


def test_jsonl_panel_reads():
    data = b'{"batch": "2026-01-01", "rater": "A", "score": 1}\n' \
           b'{"batch": "2026-01-08", "rater": "A", "score": 2}\n'
    p = read_panel(data, name="p.jsonl")
    assert p["score"].tolist() == [1.0, 2.0]


def test_bad_deployment_date_named():
    with pytest.raises(InputError, match="deployments"):
        parse_dates("2026-04-12,not-a-date")


# ---------------------------------------------------------------------------- stage 1
def _unbalanced_panel(seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    dates = pd.date_range("2026-01-05", periods=7, freq="7D")
    for i, dt in enumerate(dates):
        for r, g in (("A", 0.0), ("B", -0.6), ("C", 0.4)):
            if r == "C" and i % 2:
                continue
            n = int(rng.integers(3, 15))
            sd = 0.5 + (r == "B")  # heteroskedastic
            for y in 0.1 * i + g + rng.normal(0, sd, n):
                rows.append((dt, r, y))
    return pd.DataFrame(rows, columns=["batch", "rater", "score"])


def test_stage1_equals_statsmodels_ols_hc1():
    p = _unbalanced_panel()
    fit = fit_severity(p, "A")
    X = pd.concat([pd.get_dummies(p["batch"], dtype=float),
                   pd.get_dummies(p["rater"], dtype=float)[["B", "C"]]], axis=1)
    res = sm.OLS(p["score"].to_numpy(), X.to_numpy()).fit(cov_type="HC1")
    np.testing.assert_allclose(fit.coef, res.params, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fit.cov, res.cov_params(), rtol=1e-9, atol=1e-14)
    ci = res.conf_int()
    rt = fit.raters.set_index("rater")
    np.testing.assert_allclose(rt.loc[["B", "C"], "ci_low"], ci[-2:, 0], rtol=1e-9)
    np.testing.assert_allclose(rt.loc[["B", "C"], "ci_high"], ci[-2:, 1], rtol=1e-9)
    np.testing.assert_allclose(fit.batches["se"], res.bse[:7], rtol=1e-9)


def test_default_reference_is_rater_in_most_batches():
    p = _unbalanced_panel()
    # A and B are in all 7 batches; C in 4 -> tie broken by more ratings, never C
    assert default_reference(p) in {"A", "B"}
    only = p[~((p["rater"] == "B") & (p["batch"] == p["batch"].min()))]
    assert default_reference(only) == "A"


def test_composition_term_is_raw_minus_adjusted_and_explained_by_roster():
    p = _unbalanced_panel()
    fit = fit_severity(p, "A")
    b = fit.batches
    np.testing.assert_allclose(b["composition"], b["raw_mean"] - b["adjusted"])
    gam = {"A": 0.0, **dict(zip(fit.raters["rater"], fit.raters["severity"]))}
    share = p.groupby("batch")["rater"].apply(lambda s: np.mean([gam[x] for x in s]))
    np.testing.assert_allclose(b["composition"], share.to_numpy(), atol=1e-10)


def test_severity_ci_coverage_about_95_percent():
    truth = {"B": -0.8, "C": 0.3}
    hits = []
    for seed in range(200):
        p, _ = sim_panel(seed, T=6, n_per=8, q=0.0)
        rt = fit_severity(p, "A").raters.set_index("rater")
        hits += [rt.loc[r, "ci_low"] <= g <= rt.loc[r, "ci_high"] for r, g in truth.items()]
    cover = float(np.mean(hits))
    assert 0.90 <= cover <= 0.99, cover


def test_simulated_panel_recovers_severities_and_q_within_intervals():
    p, theta = sim_panel(11, T=30, n_per=20, q=0.02)
    a = analyse_drift(p, reference="A", reps=99)
    rt = a.severity.raters.set_index("rater")
    for r, g in {"B": -0.8, "C": 0.3}.items():
        assert rt.loc[r, "ci_low"] <= g <= rt.loc[r, "ci_high"]
    lo, hi = a.stage2.q_ci95
    assert lo <= 0.02 <= hi and lo > 0
    assert a.stage2.lr_pvalue < 0.01
    # the smoothed path tracks the true state (on A's scale) within ~3 SE almost everywhere
    z = np.abs(a.stage2.smoothed - theta) / a.stage2.smoothed_se
    assert np.mean(z < 3) >= 0.9


def test_q_profile_interval_covers_truth_over_seeds():
    hits, qs = [], []
    for seed in range(60):
        p, _ = sim_panel(1000 + seed, T=30, n_per=20, q=0.02)
        f = fit_severity(p, "A")
        ll = fit_local_level(f.batches["adjusted"].to_numpy(), batch_weeks(f.batches["batch"]),
                               f.stage2_cov)
        qs.append(ll.q)
        hits.append(ll.q_ci95[0] <= 0.02 <= ll.q_ci95[1])
    assert 0.85 <= np.mean(hits) <= 1.0
    assert 0.012 <= np.median(qs) <= 0.03


def test_disconnected_panel_error_names_groups():
    p = read_panel(FIX / "drift_disconnected.csv")
    with pytest.raises(IdentificationError) as e:
        fit_severity(p)
    msg = str(e.value)
    assert "not connected" in msg
    assert "group 1: rater(s) A; batch(es) 2026-01-05, 2026-01-12" in msg
    assert "group 2: rater(s) B, C; batch(es) 2026-02-02, 2026-02-09" in msg


def test_unknown_reference_rater_is_clear():
    with pytest.raises(IdentificationError, match="reference rater 'Z'"):
        fit_severity(_unbalanced_panel(), "Z")


def test_one_rater_panel_works_without_severity_table():
    p, _ = sim_panel(5, T=10, sev={"A": 0.0}, q=0.01, n_per=15)
    a = analyse_drift(p, reps=49)
    assert a.severity.reference == "A" and a.severity.raters.empty
    np.testing.assert_allclose(a.severity.batches["adjusted"], a.severity.batches["raw_mean"])
    assert np.isfinite(a.stage2.q) and a.heterogeneity == []
    out = drift_result_json(a)
    assert out["raters"] == [] and out["reference_rater"] == "A"


def test_severity_by_category_recovers_category_specific_gaps():
    rng = np.random.default_rng(2)
    frames = []
    for cat, gb in (("latency", -1.4), ("structure", -0.13)):
        p, _ = sim_panel(int(rng.integers(1e6)), T=8, sev={"A": 0.0, "B": gb}, q=0.0,
                         n_per=40, sd=0.5)
        frames.append(p.assign(category=cat))
    t = severity_by_category(pd.concat(frames, ignore_index=True), "A").set_index("category")
    assert t.loc["latency", "ci_low"] <= -1.4 <= t.loc["latency", "ci_high"]
    assert t.loc["structure", "ci_low"] <= -0.13 <= t.loc["structure", "ci_high"]


# ---------------------------------------------------------------------------- heterogeneity
def test_cochran_q_equals_statsmodels_combine_effects():
    from statsmodels.stats.meta_analysis import combine_effects

    rng = np.random.default_rng(0)
    eff, var = rng.normal(-0.77, 0.1, 9), rng.uniform(0.001, 0.004, 9)
    h = cochran_q(eff, np.sqrt(var))
    ref = combine_effects(eff, var, method_re="chi2")
    assert h.q == pytest.approx(ref.q, rel=1e-10)
    assert h.pooled == pytest.approx(ref.mean_effect_fe, rel=1e-10)
    assert h.se == pytest.approx(ref.sd_eff_w_fe, rel=1e-10)
    assert h.df == 8


def test_paper_cochran_q_19_on_8_df_gives_p_0015():
    # nine overlapping batches, unit SEs, deviations scaled so that Q = 19.0 exactly
    dev = np.array([-4, -3, -2, -1, 0, 1, 2, 3, 4], dtype=float)
    dev *= math.sqrt(19.0 / np.sum(dev**2))
    h = cochran_q(-0.77 + dev, np.ones(9))
    assert h.q == pytest.approx(19.0)
    assert h.df == 8
    assert round(h.p, 3) == 0.015
    assert h.pooled == pytest.approx(-0.77)


def test_grader_gap_heterogeneity_flags_a_moving_gap_only():
    stable, _ = sim_panel(4, T=9, sev={"A": 0.0, "B": -0.8}, q=0.0, n_per=40)
    h = grader_gap_heterogeneity(stable, "B", "A")
    assert h.k == 9 and h.df == 8 and h.p > 0.001
    assert h.pooled == pytest.approx(-0.8, abs=4 * h.se)
    moving = stable.copy()
    wk = (moving["batch"] - moving["batch"].min()).dt.days / 7
    moving.loc[moving["rater"] == "B", "score"] += 0.3 * wk[moving["rater"] == "B"]
    assert grader_gap_heterogeneity(moving, "B", "A").p < 1e-6


# ---------------------------------------------------------------------------- stage 2
def _random_small(seed: int, T: int = 9):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=T)
    w = np.r_[0.0, np.cumsum(rng.uniform(0.5, 3.0, T - 1))]
    v = rng.uniform(0.01, 0.2, T)
    return y, w, v


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kalman_loglik_equals_gls_restricted_loglik_up_to_constant(seed):
    y, w, v = _random_small(seed)
    seg = segments_from_resets(pd.Timestamp("2026-01-01") + pd.to_timedelta(w * 7, "D"),
                                 [pd.Timestamp("2026-01-01") + pd.to_timedelta(w[4] * 7, "D")])
    assert seg.tolist() == [0] * 4 + [1] * 5
    qs = [0.0, 1e-3, 0.01, 0.1, 1.0, 10.0]
    diffs = [kalman_local_level(y, w, v, q, seg).loglik - restricted_loglik(y, w, v, q, seg)
             for q in qs]
    np.testing.assert_allclose(diffs, diffs[0], atol=1e-9)
    # so the q maximising the Kalman likelihood on a fine grid is the fitted q
    fit = fit_local_level(y, w, v, segments=seg)
    grid = np.linspace(0, max(3 * fit.q, 0.05), 3001)
    kal = [kalman_local_level(y, w, v, q, seg).loglik for q in grid]
    assert grid[int(np.argmax(kal))] == pytest.approx(fit.q, abs=grid[1] * 1.01)


def test_gls_likelihood_equals_direct_reml_formula():
    # y ~ N(1μ, Σ): restricted likelihood = marginal of the T-1 contrasts (Harville 1974)
    y, w, v = _random_small(7, T=6)
    q = 0.3
    Sig = q * np.minimum.outer(w, w) + np.diag(v)
    K = np.diff(np.eye(6), axis=0)  # contrasts killing the level
    ll_contrast = stats.multivariate_normal(np.zeros(5), K @ Sig @ K.T).logpdf(K @ y)
    ll0_contrast = stats.multivariate_normal(np.zeros(5), K @ np.diag(v) @ K.T).logpdf(K @ y)
    diff = restricted_loglik(y, w, v, q) - restricted_loglik(y, w, v, 0.0)
    assert diff == pytest.approx(ll_contrast - ll0_contrast, rel=1e-9)


def test_kalman_smoother_equals_gls_smoother():
    y, w, v = _random_small(3)
    seg = np.array([0, 0, 0, 1, 1, 1, 1, 2, 2])
    k = kalman_local_level(y, w, v, 0.07, seg)
    m, se = smooth_gls(y, w, v, 0.07, seg)
    np.testing.assert_allclose(k.smoothed, m, atol=1e-10)
    np.testing.assert_allclose(np.sqrt(k.smoothed_var), se, atol=1e-10)


def test_qhat_zero_gives_boundary_p_one_half():
    w = np.arange(10.0)
    y = np.full(10, 0.3)  # no movement at all
    fit = fit_local_level(y, w, np.full(10, 0.05))
    assert fit.q == 0.0 and fit.lr == 0.0 and fit.lr_pvalue == 0.5
    assert fit.q_ci95[0] == 0.0 and fit.q_ci95[1] > 0
    np.testing.assert_allclose(fit.smoothed, 0.3)


def test_lr_pvalue_is_half_chi2_tail():
    p, _ = sim_panel(8, T=20, q=0.01, n_per=20)
    f = fit_severity(p, "A")
    fit = fit_local_level(f.batches["adjusted"], batch_weeks(f.batches["batch"]), f.stage2_cov)
    assert fit.lr == pytest.approx(2 * (fit.loglik - fit.loglik0))
    assert fit.lr_pvalue == pytest.approx(0.5 * stats.chi2.sf(fit.lr, 1))
    # the profile interval ends sit where the LR is 3.84
    lo, hi = fit.q_ci95
    for end in (lo, hi):
        if 0 < end < math.inf:
            ll = restricted_loglik(fit.y, fit.weeks, fit.V, end, fit.segments)
            assert 2 * (fit.loglik - ll) == pytest.approx(stats.chi2.ppf(0.95, 1), abs=1e-4)


def test_deployment_reset_absorbs_a_step():
    p, _ = sim_panel(9, T=20, q=0.0, n_per=30, steps={10: 1.5})
    dep = p["batch"].drop_duplicates().sort_values().iloc[10] - pd.Timedelta(days=2)
    f = fit_severity(p, "A")
    w = batch_weeks(f.batches["batch"])
    y = f.batches["adjusted"].to_numpy()
    without = fit_local_level(y, w, f.stage2_cov)
    seg = segments_from_resets(f.batches["batch"], [dep])
    with_reset = fit_local_level(y, w, f.stage2_cov, segments=seg)
    assert without.lr_pvalue < 0.01
    assert with_reset.q < without.q / 10 and with_reset.lr_pvalue > 0.05
    c = deployment_contrasts(f, [dep]).iloc[0]
    assert abs(c["contrast"] - 1.5) < 4 * c["se"]


def test_segments_from_resets_batch_on_reset_day_is_after():
    dates = pd.to_datetime(["2026-01-01", "2026-01-08", "2026-01-15"])
    assert segments_from_resets(dates, ["2026-01-08"]).tolist() == [0, 1, 1]
    assert segments_from_resets(dates, ["2026-01-09"]).tolist() == [0, 0, 1]
    assert segments_from_resets(dates, ["2025-12-01", "2026-02-01"]).tolist() == [0, 0, 0]


def test_drift_variants_extra_free_step_lowers_q():
    p, _ = sim_panel(21, T=24, q=0.0, n_per=30, steps={6: 0.8, 15: 0.9})
    dates = p["batch"].drop_duplicates().sort_values()
    dep = dates.iloc[6] - pd.Timedelta(days=1)
    extra = dates.iloc[15] - pd.Timedelta(days=1)
    v = drift_variants(fit_severity(p, "A"), [dep], [extra]).set_index("variant")
    assert list(v.index) == ["all intervals", "deployments free", "deployments + extra steps free"]
    q = v["q"]
    assert q["all intervals"] > q["deployments free"] > 5 * q["deployments + extra steps free"]
    assert v.loc["deployments free", "lr"] > 100
    assert v.loc["deployments + extra steps free", "lr"] < 10
    assert v.loc["deployments + extra steps free", "segments"] == 3


def test_full_covariance_differs_from_diagonal_when_raters_overlap():
    p = _unbalanced_panel()
    f = fit_severity(p, "A")
    off = f.batch_cov - np.diag(np.diag(f.batch_cov))
    assert np.abs(off).max() > 0  # shared rater coefficients correlate the batch effects
    a_full = analyse_drift(p, reference="A", reps=0)
    a_diag = analyse_drift(p, reference="A", reps=0, covariance="diagonal")
    assert a_full.stage2.covariance == "full" and a_diag.stage2.covariance == "diagonal"


# ---------------------------------------------------------------------------- horizon
def test_paper_horizon_arithmetic():
    q = 0.086**2
    pt = 0.18**2 - 4 * q  # the last-batch variance that gives 0.18 at 4 weeks
    sds = predictive_sd(pt, q, [4, 8, 12])
    assert np.round(sds, 2).tolist() == [0.18, 0.25, 0.30]
    assert horizon_weeks(0.20, pt, q) == pytest.approx(5.0, abs=0.1)


def test_paper_horizon_interval_from_innovation_sd_interval():
    q = 0.086**2
    pt = 0.18**2 - 4 * q
    # innovation SD 95% interval 0.041 to 0.180 -> "1 to 21 weeks" (P_T held fixed here)
    assert horizon_weeks(0.20, pt, 0.180**2) == pytest.approx(1.0, abs=0.25)
    assert horizon_weeks(0.20, pt, 0.041**2) == pytest.approx(21.0, abs=1.5)


def test_horizon_edge_cases():
    assert horizon_weeks(0.1, 0.02, 0.01) == 0.0  # already beyond D
    assert horizon_weeks(0.3, 0.01, 0.0) == math.inf  # no drift: never


def test_horizon_date_and_interval_from_fit():
    p, _ = sim_panel(12, T=25, q=0.02, n_per=20)
    a = analyse_drift(p, reference="A", D=0.5, reps=0)
    h = a.horizon
    assert h.weeks == pytest.approx((0.25 - a.stage2.last_variance) / a.stage2.q)
    assert h.weeks_ci95[0] <= h.weeks <= h.weeks_ci95[1]
    last = p["batch"].max().date()
    assert h.date == last + pd.Timedelta(days=math.floor(h.weeks * 7))
    assert h.sd_at_weeks[8] == pytest.approx(math.sqrt(h.last_variance + 8 * a.stage2.q))


# ---------------------------------------------------------------------------- trend
def test_trend_cluster_se_equals_statsmodels():
    p = _unbalanced_panel()
    tr = monthly_trend(p, reps=0)
    X, y, cl = trend_design(p, True)
    res = sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": cl})
    assert tr.slope == pytest.approx(res.params[1], rel=1e-10)
    assert tr.se == pytest.approx(res.bse[1], rel=1e-9)


def test_wild_bootstrap_is_seeded_and_sensible():
    null, _ = sim_panel(30, T=14, q=0.0, n_per=10)
    a = monthly_trend(null, reps=199, seed=1)
    b = monthly_trend(null, reps=199, seed=1)
    assert a.p_wild == b.p_wild
    assert a.p_wild > 0.01
    trend = null.copy()
    trend["score"] += 0.3 * (trend["batch"] - trend["batch"].min()).dt.days / 30.44
    t = monthly_trend(trend, reps=199, seed=1)
    assert t.p_wild < 0.01 and abs(t.slope - 0.3) < 4 * t.se


def test_rater_effects_undo_roster_masking():
    # improvement arrives with a harsher grader: raw trend flat, rater-FE trend positive
    rows = []
    rng = np.random.default_rng(5)
    for i, dt in enumerate(pd.date_range("2026-03-01", periods=12, freq="14D")):
        share_b = 0.0 if i < 4 else 0.5
        for _ in range(60):
            rater = "B" if rng.random() < share_b else "A"
            rows.append((dt, rater, 0.1 * i - (1.2 if rater == "B" else 0) + rng.normal(0, .5)))
    p = pd.DataFrame(rows, columns=["batch", "rater", "score"])
    fe = monthly_trend(p, reps=0)
    raw = monthly_trend(p, rater_effects=False, reps=0)
    assert fe.slope == pytest.approx(0.1 * 30.44 / 14, rel=0.15)
    assert abs(raw.slope) < fe.slope / 2


def test_category_trends_holm_and_bh_match_multipletests():
    from statsmodels.stats.multitest import multipletests

    p = validate_panel(demo_panel(seed=3))
    ct = category_trends(p, reps=99, seed=0)
    assert set(ct["category"]) == {"structure", "latency", "audio_sync"}
    np.testing.assert_allclose(ct["p_holm"], multipletests(ct["p_wild"], method="holm")[1])
    np.testing.assert_allclose(ct["p_bh"], multipletests(ct["p_wild"], method="fdr_bh")[1])


# ---------------------------------------------------------------------------- outcomes, cost
def test_outcome_trend_recovers_ten_percent_monthly_fall():
    o = read_outcome_series(demo_outcomes(seed=1))
    res = outcome_trend(o, "interview", "technical", splits=["2026-07-01"])
    assert res.lags == 7 and res.dropped_days == 0
    assert abs(res.slope - (-0.10)) < 3 * res.se
    assert res.pct_per_month < 0
    assert res.splits.loc[0, "diff"] < 0


def test_outcome_series_bad_count_rejected_with_row():
    with pytest.raises(InputError) as e:
        read_outcome_series(b"date,a,b\n2026-01-01,1,2\n2026-01-02,-1,2\n", name="o.csv")
    assert e.value.row == 2 and e.value.column == "a"


def test_paper_break_even_share_18_percent():
    share = break_even_share(7806, 100, 428)
    assert round(share, 2) == 0.18
    assert share == pytest.approx(7806 / 42800)
    assert break_even_share(100, 100, 0) == math.inf
    with pytest.raises(InputError, match="cost per month"):
        break_even_share(float("nan"), 100, 428)


# ---------------------------------------------------------------------------- all together
def test_demo_panel_is_seeded_and_analysable():
    a1, a2 = demo_panel(seed=5), demo_panel(seed=5)
    pd.testing.assert_frame_equal(a1, a2)
    shipped = pd.read_csv(Path(__file__).parents[1] / "data" / "demo_panel.csv")
    pd.testing.assert_frame_equal(shipped, demo_panel(), check_dtype=False)
    a = analyse_drift(validate_panel(shipped), reps=99,
                        deployments=["2026-04-12", "2026-07-16", "2026-07-29"])
    assert a.severity.reference == "A"
    b = a.severity.raters.set_index("rater").loc["B"]
    assert b["ci_high"] < -0.3  # B is the harsher grader
    assert a.stage2.lr_pvalue < 0.05 and a.horizon.date is not None
    out = drift_result_json(a)
    assert set(out["horizon"]) >= {"D", "weeks", "weeks_ci95", "date", "sd_at_weeks"}
    assert set(out["horizon"]["sd_at_weeks"]) == {"4", "8", "12"}
    assert len(out["contrasts"]) == 3


def test_one_batch_panel_gives_severities_but_no_q():
    p = pd.DataFrame({"batch": "2026-01-05", "rater": ["A"] * 5 + ["B"] * 5,
                      "score": [1, 2, 3, 2, 1, 0, 1, 0, 1, 0.5]})
    a = analyse_drift(read_panel(p), reps=9)
    assert not a.stage2.identified and math.isnan(a.stage2.q)
    assert a.severity.raters.loc[0, "severity"] == pytest.approx(0.5 - 1.8)
    out = drift_result_json(a)
    assert out["q"] is None and out["horizon"]["date"] is None
    assert "q cannot be estimated" in " ".join(out["notes"])


def test_identical_scores_do_not_crash():
    p, _ = sim_panel(1, T=5, n_per=3)
    p["score"] = 2.0
    a = analyse_drift(p, reps=9)
    assert not a.stage2.identified or a.stage2.q < 1e-12  # no movement at all
    np.testing.assert_allclose(a.severity.batches["adjusted"], 2.0)


def test_random_small_panels_raise_only_audit_errors():
    import json

    from hypothesis import given, settings
    from hypothesis import strategies as hs

    from core.errors import AuditError

    row = hs.tuples(hs.integers(0, 5), hs.sampled_from("ABC"),
                    hs.one_of(hs.floats(-5, 5), hs.integers(-2, 2)))

    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(hs.lists(row, min_size=1, max_size=30), hs.booleans())
    def check(rows, deploy):
        p = pd.DataFrame([((pd.Timestamp("2026-01-05") + pd.Timedelta(weeks=b)).date().isoformat(),
                           r, s) for b, r, s in rows], columns=["batch", "rater", "score"])
        try:
            a = analyse_drift(read_panel(p), deployments=["2026-01-20"] if deploy else [],
                                reps=9)
        except AuditError:
            return
        json.dumps(drift_result_json(a), allow_nan=False)

    check()


def test_panel_from_stored_audits():
    from core.store import Store

    store = Store(":memory:")
    try:
        for k, (day, model, shift) in enumerate([("2026-02-02", "m-2026-01", 0.0),
                                                 ("2026-02-16", "m-2026-01", 1.0),
                                                 ("2026-02-16", "m-2026-02", 0.5)]):
            aid = f"audit{k}"
            store.save_audit(aid, {"model": model}, f"hash{k}")
            draws = pd.DataFrame([{"candidate_id": f"c{c}", "run": r, "criterion": crit,
                                   "score": shift + c + (2.0 if crit == "b" else 0.0),
                                   "request_id": f"{aid}-{c}-{r}", "model": model,
                                   "clipped": False}
                                  for c in range(3) for r in range(2) for crit in ("a", "b")])
            calls = draws.drop_duplicates("request_id")[["request_id", "candidate_id", "run"]]
            calls = calls.assign(started_at=pd.Timestamp(day), status="ok")
            store.write_results(aid, calls, draws)
        p = panel_from_audits(store)
    finally:
        store.close()
    assert sorted(p["batch"].dt.strftime("%Y-%m-%d").unique()) == ["2026-02-02", "2026-02-16"]
    assert set(p["rater"]) == {"m-2026-01", "m-2026-02"}
    first = p[p["batch"] == pd.Timestamp("2026-02-02")]
    assert sorted(first["score"].unique()) == [2.0, 4.0, 6.0]  # a + b per draw
    fit = fit_severity(p, "m-2026-01")
    assert fit.raters.loc[0, "severity"] == pytest.approx(-1.0)  # totals: 2 × (0.5 − 1)
