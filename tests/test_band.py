"""Step 6 — the band (2-SD and empirical rules), throughput, reviewer capacity, re-run exposure.

References: np.quantile(method="higher"/"lower") on the scaled residuals, hand examples, a
direct scipy evaluation and a Monte-Carlo simulation of the SPEC's exposure formula."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from core.audit import Settings, analyze_frames
from core.band import (
    capacity_halfwidth,
    empirical_halfwidths,
    recommend_band,
    rerun_exposure,
    reverse_probability,
    scaled_residuals,
    share_in_band,
)
from core.draws import Draws
from tests.support import totals_frame


def test_scaled_residuals_hand_example():
    # A: 1 2 6 (mean 3, dev −2 −1 3, factor sqrt(3/2)); B: 4 6 (mean 5, dev −1 1, factor sqrt 2)
    d = Draws.from_long(totals_frame({"A": [1, 2, 6], "B": [4, 6]}))
    r = np.sort(scaled_residuals(d.cand, d.total, d.counts))
    expect = np.sort([-2 * np.sqrt(1.5), -np.sqrt(1.5), 3 * np.sqrt(1.5), -np.sqrt(2),
                      np.sqrt(2)])
    assert r == pytest.approx(expect, abs=1e-12)


def test_empirical_rule_equals_numpy_quantiles():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 44, 45, 200, 601):
        r = np.sort(np.round(rng.standard_t(3, n) * 3))
        for k in (1.0, 1.5, 2.0, 2.5, 3.0):
            alpha = stats.norm.cdf(-k)
            h_l, h_u = empirical_halfwidths(r, k)
            assert h_l == np.quantile(r, 1 - alpha, method="higher")
            assert h_u == -np.quantile(r, alpha, method="lower")


def test_alpha_at_k2_is_2_275_percent():
    assert stats.norm.cdf(-2) == pytest.approx(0.02275, abs=5e-6)


def test_band_which_rule_binds_hand_example():
    # r sorted, n = 11, α = 0.02275 at k = 2.
    # h_L = quantile(r, 0.97725, higher): position 9.7725 → index 10 → 9
    # h_U = −quantile(r, 0.02275, lower): position 0.2275 → index 0 → −(−6) = 6
    # 2-SD half-width = 2·3 = 6 → low side: max(6, 9) = 9, empirical binds;
    # high side: max(6, 6) = 6, both rules the same.
    r = np.array([-6, -1, -1, 0, 0, 0, 0, 0, 1, 1, 9], dtype=float)
    b = recommend_band(70, 3.0, r, 2.0)
    assert b.two_sd == (64, 76) and b.empirical == (61, 76)
    assert (b.low, b.high) == (61, 76)
    assert b.bound_by == {"low": "empirical", "high": "same"}
    assert b.rule == "empirical rule"
    # within SD 5 → 2-SD half-width 10 binds both sides
    b = recommend_band(70, 5.0, r, 2.0)
    assert (b.low, b.high) == (60, 80) and b.bound_by == {"low": "2-SD", "high": "2-SD"}
    assert b.rule == "2-SD rule"


def test_band_override_is_manual():
    b = recommend_band(70, 3.0, np.array([-1.0, 0, 1]), 2.0, override=4)
    assert (b.low, b.high, b.rule) == (66, 74, "manual half-width")


def test_band_rule_named_in_text_report():
    long = totals_frame({"A": [69, 70, 71, 75], "B": [60, 62, 61, 61], "C": [80, 81, 80, 82]})
    from core.report import render_text, report_dict

    res = analyze_frames(long, settings=Settings(cutoff=70))
    d = report_dict(res)
    assert d["band"]["bound_by"]["low"] in ("2-SD", "empirical", "same")
    assert f"bound by the {d['band']['rule']}" in render_text(res)


def test_share_in_band_inclusive_edges():
    pool = np.sort(np.array([69, 70, 75, 80, 81.0]))
    assert share_in_band(pool, 70, 80) == pytest.approx(3 / 5)
    assert share_in_band(pool, 70.0001, 79.999) == pytest.approx(1 / 5)
    assert np.isnan(share_in_band(np.array([]), 0, 1))


def test_throughput_in_applications():
    # within SD: A 69 71 (dev ±1), B 59 61, C 79 81 → SS 6, df 3 → σ_w = sqrt 2;
    # band 70 ± 2 sqrt 2 (2-SD; residuals ±sqrt 2 are smaller) = [67.17, 72.83]
    long = totals_frame({"A": [69, 71], "B": [59, 61], "C": [79, 81]})
    pool = pd.DataFrame({"candidate_id": [f"p{i}" for i in range(10)],
                         "first_pass_score": [60, 66, 67.5, 69, 70, 71, 72.5, 73, 80, 90]})
    res = analyze_frames(long, pool=pool, settings=Settings(cutoff=70,
                                                             applications_per_req=400))
    v = res.view()
    assert (v.band.low, v.band.high) == pytest.approx((70 - 2 * np.sqrt(2), 70 + 2 * np.sqrt(2)))
    assert v.share_of_pool == pytest.approx(5 / 10)
    assert v.manual_reviews_per_req == pytest.approx(200)
    from core.report import render_text

    assert "~50% of applications -> ~200 manual reviews per req at n=400" in render_text(res)


def test_throughput_without_pool_needs_the_pool():
    res = analyze_frames(totals_frame({"A": [69, 71], "B": [59, 61]}),
                         settings=Settings(cutoff=70))
    v = res.view()
    assert v.needs_pool and v.manual_reviews_per_req is None
    from core.report import render_text

    assert "needs the pool" in render_text(res)


def test_capacity_halfwidth_hand_example():
    # pool 70 72 75 78 80 81 85 90, t = 78, 8 applications per req (one review per applicant)
    # |s − t| sorted: 0 2 3 3 6 7 8 12. Capacity 3: h = 2 keeps 2 inside, h = 3 would take 4.
    pool = np.sort(np.array([70, 72, 75, 78, 80, 81, 85, 90.0]))
    assert capacity_halfwidth(pool, 78, 3, 8) == 2
    assert capacity_halfwidth(pool, 78, 4, 8) == 3
    assert capacity_halfwidth(pool, 78, 0, 8) == 0
    assert capacity_halfwidth(pool, 78, 100, 8) == 12
    # the capacity band never needs more reviews than the capacity
    for cap in range(0, 9):
        h = capacity_halfwidth(pool, 78, cap, 8)
        assert share_in_band(pool, 78 - h, 78 + h) * 8 <= cap or h == 0


def _exposure_reference(pool, sigma_w, t):
    """SPEC §3.6 written out with scipy (pool variance with ddof 1, pass = s ≥ t)."""
    s = np.asarray(pool, dtype=float)
    mu, v = s.mean(), s.var(ddof=1)
    rho = max(0.0, v - sigma_w ** 2) / v
    mean = mu + rho * (s - mu)
    sd = np.sqrt((1 + rho) * sigma_w ** 2)
    p_fail = stats.norm.cdf(t, loc=mean, scale=sd)
    return np.where(s >= t, p_fail, 1 - p_fail), rho


def test_rerun_exposure_equals_spec_formula_and_monte_carlo():
    rng = np.random.default_rng(11)
    pool = np.round(rng.normal(65, 9, 410))
    sigma_w, t = 3.9, 78.0
    p, rho = reverse_probability(pool, sigma_w, t)
    p_ref, rho_ref = _exposure_reference(pool, sigma_w, t)
    assert rho == pytest.approx(rho_ref, abs=1e-12)
    assert p == pytest.approx(p_ref, abs=1e-12)
    e = rerun_exposure(pool, sigma_w, t, 70.1, 85.9, 410)
    assert e.reversals_per_req == pytest.approx(410 * p_ref.mean(), abs=1e-9)
    outside = (pool < 70.1) | (pool > 85.9)
    assert e.reversals_outside_band_per_req == pytest.approx(410 * p_ref[outside].sum() / 410,
                                                             abs=1e-9)
    assert "normal approximation" in e.note
    # Monte Carlo of the same model: fresh draw ~ N(μ + ρ(s − μ), (1 + ρ)σ_w²)
    mu = pool.mean()
    fresh = rng.normal(mu + rho_ref * (pool - mu), np.sqrt(1 + rho_ref) * sigma_w,
                       size=(4000, len(pool)))
    reversed_ = (fresh >= t) != (pool >= t)
    mc = 410 * reversed_.mean()
    assert e.reversals_per_req == pytest.approx(mc, rel=0.03)


def test_rerun_exposure_rho_zero_when_pool_no_wider_than_noise():
    pool = np.array([70.0, 71, 72])  # variance 1 < σ_w² = 4 → σ_θ² = 0 → ρ = 0
    p, rho = reverse_probability(pool, 2.0, 71)
    assert rho == 0.0
    # fresh draw ~ N(71, 4): P(< 71) = 0.5 for every applicant
    assert p == pytest.approx([0.5, 0.5, 0.5])


def test_band_edges_clamped_to_the_score_range():
    """'-0.8 – 74.6' on a 0..100 rubric was a reported defect: edges stay inside the range."""
    r = np.sort(np.array([-6.0, -2.0, 0.0, 1.0, 3.0, 9.0]))
    b = recommend_band(2.0, 3.0, r, 2.0, bounds=(0.0, 100.0))
    assert b.low == 0.0 and b.high == pytest.approx(8.0)   # h_L = 9 binds below, 2σ above
    assert b.two_sd[0] == 0.0 and b.empirical[0] == 0.0
    b = recommend_band(97.0, 3.0, r, 2.0, bounds=(0.0, 100.0))
    assert b.high == 100.0
    b = recommend_band(50.0, 3.0, r, 2.0, override=-5.0, bounds=(0.0, 100.0))
    assert (b.low, b.high, b.override) == (50.0, 50.0, 0.0)
