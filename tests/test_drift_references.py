"""core.drift's stage 2 pieces against the references its docstrings name (statsmodels' exact
diffuse Kalman filter, scipy's χ²), and its Markdown rendering."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from statsmodels.tsa.statespace.mlemodel import MLEModel

from core.drift.analysis import analyse_drift
from core.drift.local_level import (
    boundary_lr_test,
    fit_local_level,
    kalman_local_level,
    profile_interval,
    restricted_loglik,
)
from core.drift.panel import read_panel
from core.drift.result import drift_result_json, format_drift_markdown, format_drift_text
from core.format import decimals

FIX = Path(__file__).parent / "fixtures"


def _statsmodels_local_level(y, w, v, q):
    """The local level model with known, batch-specific measurement variances in statsmodels:
    time-varying obs_cov and state_cov, exact diffuse initialisation."""
    T = len(y)
    mod = MLEModel(np.asarray(y, float), k_states=1, k_posdef=1, initialization="diffuse")
    mod["design"] = np.ones((1, 1))
    mod["transition"] = np.ones((1, 1))
    mod["selection"] = np.ones((1, 1))
    mod["obs_cov"] = np.asarray(v, float).reshape(1, 1, T)
    mod["state_cov"] = np.r_[q * np.diff(w), 0.0].reshape(1, 1, T)
    return mod.smooth([])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kalman_filter_and_smoother_equal_statsmodels_exact_diffuse(seed):
    rng = np.random.default_rng(seed)
    T = 12
    w = np.r_[0.0, np.cumsum(rng.integers(1, 4, T - 1))].astype(float)
    y = np.cumsum(rng.normal(0, 0.2, T)) + rng.normal(0, 0.1, T)
    v = rng.uniform(0.005, 0.03, T)
    for q in (0.0, 0.004, 0.05, 0.8):
        ours = kalman_local_level(y, w, v, q)
        ref = _statsmodels_local_level(y, w, v, q)
        np.testing.assert_allclose(ours.smoothed, ref.smoothed_state[0], atol=1e-10)
        np.testing.assert_allclose(ours.smoothed_var, ref.smoothed_state_cov[0, 0], atol=1e-12)
        np.testing.assert_allclose(ours.filtered, ref.filtered_state[0], atol=1e-10)
        # statsmodels counts −½·log 2π for the one diffuse observation; nothing else differs
        assert ours.loglik - ref.llf == pytest.approx(0.5 * math.log(2 * math.pi), abs=1e-9)


def test_boundary_lr_test_is_half_the_chi2_tail():
    for lr in (0.5, 2.71, 3.84, 8.18, 30.0):
        got_lr, p = boundary_lr_test(-1.0, -1.0 - lr / 2)
        assert got_lr == pytest.approx(lr)
        assert p == pytest.approx(0.5 * stats.chi2.sf(lr, 1), rel=1e-12)
    # the 5% boundary critical value is χ²₁'s 90% quantile (2.71), not its 95% one (3.84)
    assert boundary_lr_test(0.0, -stats.chi2.ppf(0.90, 1) / 2)[1] == pytest.approx(0.05)
    assert boundary_lr_test(-3.0, -3.0) == (0.0, 0.5)
    assert boundary_lr_test(-3.0, -2.0) == (0.0, 0.5)  # a maximiser below ℓ(0) is no evidence


def test_profile_interval_ends_sit_where_the_likelihood_fell_by_half_chi2():
    y = [0.0, 0.1, -0.05, 0.2, 0.3, 0.15, 0.35, 0.4]
    w, V = np.arange(8.0), np.diag(np.full(8, 0.01))
    fit = fit_local_level(y, w, V)
    lo, hi = fit.q_ci95
    assert 0 < lo < fit.q < hi < math.inf
    drop = stats.chi2.ppf(0.95, 1) / 2
    for end in (lo, hi):
        assert fit.loglik - restricted_loglik(y, w, V, end) == pytest.approx(drop, abs=1e-6)
    # the same function at another level gives a narrower interval inside it
    lo80, hi80 = profile_interval(lambda q: restricted_loglik(y, w, V, max(q, 0.0)), fit.q,
                                  fit.loglik, loglik0=fit.loglik0, scale=fit.q, level=0.80)
    assert lo < lo80 < fit.q < hi80 < hi


def test_markdown_rendering_escapes_rater_names_and_matches_the_json_numbers(tmp_path):
    src = (FIX / "drift_small.csv").read_text(encoding="utf-8")
    panel_file = tmp_path / "panel.csv"
    panel_file.write_text(src.replace(",B,", ",*B*|x,"), encoding="utf-8")
    a = analyse_drift(read_panel(panel_file), D=0.6, reps=0, panel_name="panel_[v2].csv")
    res = drift_result_json(a)
    md = format_drift_markdown(res)
    assert md.startswith("# Drift and grader severity — panel\\_\\[v2\\]\\.csv\n")
    rater_rows = [ln for ln in md.splitlines() if ln.startswith("| \\*B\\*")]
    assert len(rater_rows) == 1
    row = rater_rows[0]
    assert "\\|x" in row and row.count(" | ") == 5  # the pipe in the name does not split a cell
    assert decimals(res["raters"][0]["severity"]) in row
    assert f"q = {decimals(res['q'], 5)} per week" in md
    assert f"**re-audit by {res['horizon']['date']}" in md
    batch_rows = [ln for ln in md.splitlines() if ln.startswith("| 2026-")]
    assert len(batch_rows) == len(res["batches"]) == 8
    # text and Markdown say the same numbers
    text = format_drift_text(res)
    for number in (decimals(res["q"], 5), decimals(res["innovation_sd"]), decimals(res["trend"]["slope"])):
        assert number in text and number in md


def test_a_zero_q_reads_never_and_its_contrast_is_a_table_row():
    a = analyse_drift(read_panel(FIX / "drift_small.csv"), deployments="2026-04-05", reps=0)
    res = drift_result_json(a)
    assert res["q"] == 0 and res["horizon"]["weeks"] is None
    md, text = format_drift_markdown(res), format_drift_text(res)
    assert "weeks to D: never (q = 0)" in md and "weeks to D: never (q = 0)" in text
    assert "re-audit by — (no drift detected)" in md and "re-audit by — (no drift detected)" in text
    c = res["contrasts"][0]
    assert (f"| 2026-04-05 | {decimals(c['contrast'])} | {decimals(c['se'])} | "
            f"{decimals(c['raw_contrast'])} |") in md


def test_text_and_markdown_of_a_panel_where_q_cannot_be_estimated_show_dashes_not_never():
    # a free step between every two batches: each batch is its own segment, so there is no q
    # and no horizon — the renderings say so instead of "never (q = 0)"
    steps = "2026-03-09,2026-03-23,2026-04-06,2026-04-20,2026-05-04,2026-05-18,2026-06-01"
    a = analyse_drift(read_panel(FIX / "drift_small.csv"), reps=0, free_steps=steps)
    assert not a.stage2.identified
    res = drift_result_json(a)
    assert res["q"] is None and res["horizon"]["weeks"] is None
    for out in (format_drift_text(res), format_drift_markdown(res)):
        assert "never" not in out and "q cannot be estimated" in out
        assert "q = — per week" in out


def test_fixed_formats_missing_and_unbounded_values():
    assert decimals(0.12345) == "0.123"
    assert decimals(-0.0001) == "0.000"
    assert decimals(0.0056, 5) == "0.00560"
    assert decimals(None) == "—" and decimals(float("nan")) == "—"
    assert decimals(math.inf, 1) == "∞" and decimals(-math.inf) == "−∞"
