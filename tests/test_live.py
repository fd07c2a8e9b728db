"""The slider engine: LiveAudit answers equal a from-scratch pandas groupby recompute."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from core.draws import Draws
from core.live import LiveAudit
from tests.support import totals_frame


def _recompute(long: pd.DataFrame, pool: np.ndarray, t: float, k: float, apps: float,
               comparison: str = ">=") -> dict:
    """Everything the flip and band panels show, recomputed with a pandas groupby."""
    df = long.copy()
    df["pass"] = df["score"] >= t if comparison == ">=" else df["score"] > t
    g = df.groupby("candidate_id")
    per = pd.DataFrame({"k": g["pass"].sum(), "n": g["score"].size(), "mean": g["score"].mean()})
    per["fr"] = np.minimum(per["k"], per["n"] - per["k"]) / per["n"]
    per["flips"] = (per["k"] > 0) & (per["k"] < per["n"])
    dev = df["score"] - g["score"].transform("mean")
    within = np.sqrt((dev ** 2).sum() / (per["n"] - 1).sum())
    r = dev * np.sqrt(g["score"].transform("size") / (g["score"].transform("size") - 1))
    alpha = stats.norm.cdf(-k)
    h_l = np.quantile(r, 1 - alpha, method="higher")
    h_u = -np.quantile(r, alpha, method="lower")
    low, high = t - max(k * within, h_l), t + max(k * within, h_u)
    # total-only draws have no maxima: edges are clamped to the observed range (totals + pool)
    lo_obs = min(df["score"].min(), pool.min())
    hi_obs = max(df["score"].max(), pool.max())
    low, high = min(max(low, lo_obs), hi_obs), min(max(high, lo_obs), hi_obs)
    worst = per.assign(d=(per["k"] / per["n"] - 0.5).abs()).reset_index().sort_values(
        ["fr", "d", "candidate_id"], ascending=[False, True, True]).iloc[0]
    flippers = per[per["flips"]]
    share = float(np.mean((pool >= low) & (pool <= high)))
    return {"k": per["k"].to_dict(), "count": int(per["flips"].sum()),
            "worst": worst["candidate_id"], "worst_fr": worst["fr"],
            "interval": None if flippers.empty else (flippers["mean"].min(),
                                                     flippers["mean"].max()),
            "within": within, "low": low, "high": high, "share": share,
            "reviews": share * apps}


@pytest.fixture(scope="module")
def live_case():
    rng = np.random.default_rng(5)
    totals = {}
    for i in range(30):
        n = int(rng.integers(3, 9))  # unbalanced runs
        totals[f"c-{i:03d}"] = list(np.round(rng.normal(60 + 1.2 * i, 4, n)))
    long = totals_frame(totals)
    pool = np.round(rng.normal(75, 12, 300))
    return long, pool


@pytest.mark.parametrize("cutoff", [55.0, 68.0, 74.5, 80.0, 93.0])
@pytest.mark.parametrize("k", [1.0, 2.0, 3.0])
def test_live_equals_groupby_recompute(live_case, cutoff, k):
    long, pool = live_case
    live = LiveAudit(Draws.from_long(long), pool, applications_per_req=410)
    v = live.view(cutoff, k)
    ref = _recompute(long, pool, cutoff, k, 410)
    got_k = dict(zip(live.candidate_ids, live.pass_counts(cutoff)))
    assert got_k == ref["k"]
    assert v.flip.candidates_with_flip == ref["count"]
    assert v.flip.worst_flip_rate == pytest.approx(ref["worst_fr"])
    assert v.flip.worst_candidate == ref["worst"]
    if ref["interval"] is None:
        assert v.flip.flip_interval is None
    else:
        assert v.flip.flip_interval == pytest.approx(ref["interval"], abs=1e-12)
    assert live.within_sd == pytest.approx(ref["within"], abs=1e-12)
    assert (v.band.low, v.band.high) == pytest.approx((ref["low"], ref["high"]), abs=1e-12)
    assert v.share_of_pool == pytest.approx(ref["share"], abs=1e-12)
    assert v.manual_reviews_per_req == pytest.approx(ref["reviews"], abs=1e-9)


def test_live_comparison_strict(live_case):
    long, pool = live_case
    live = LiveAudit(Draws.from_long(long), pool, comparison=">")
    for t in (66.0, 70.0, 77.0):
        assert dict(zip(live.candidate_ids, live.pass_counts(t))) == _recompute(
            long, pool, t, 2.0, 300, ">")["k"]


def test_live_flip_table_matches_summary(live_case):
    long, pool = live_case
    live = LiveAudit(Draws.from_long(long), pool)
    ft = live.flip_table(72.0)
    s = live.flip_summary(72.0)
    assert int(ft["flips"].sum()) == s.candidates_with_flip
    assert ft["flip_rate"].max() == pytest.approx(s.worst_flip_rate)


def test_live_capacity_trade_off(live_case):
    long, pool = live_case
    live = LiveAudit(Draws.from_long(long), pool, applications_per_req=300)
    v = live.view(75.0, 2.0, capacity=10)
    assert v.over_capacity and v.manual_reviews_per_req > 10
    lo, hi = v.capacity_band
    inside = np.sum((pool >= lo) & (pool <= hi))
    assert inside <= 10
    assert v.left_to_chance_per_req > 0
    # a capacity above the band's need is not exceeded
    assert not live.view(75.0, 2.0, capacity=1e6).over_capacity


def test_live_pool_size_is_default_applications(live_case):
    long, pool = live_case
    live = LiveAudit(Draws.from_long(long), pool)
    v = live.view(75.0)
    assert v.applications_per_req == len(pool)
    assert v.manual_reviews_per_req == pytest.approx(v.share_of_pool * len(pool))


def _recount_curve(long: pd.DataFrame, cutoffs, comparison: str = ">=") -> pd.DataFrame:
    """The flip curve recounted from scratch at every cutoff (the reference for the sweep)."""
    rows = []
    g = long.groupby("candidate_id")["score"]
    for t in cutoffs:
        k = g.apply(lambda s, t=t: int((s >= t).sum() if comparison == ">=" else (s > t).sum()))
        n = g.size()
        d = np.where(n > 1, 2 * k * (n - k) / (n * (n - 1)).clip(lower=1), np.nan)
        rows.append((int(((k > 0) & (k < n)).sum()),
                     float(np.nanmean(d)) if np.any(n > 1) else np.nan))
    return pd.DataFrame(rows, columns=["candidates_with_flip", "mean_disagreement"])


@pytest.mark.parametrize("comparison", [">=", ">"])
def test_flip_curve_sweep_equals_recount(comparison):
    """Unbalanced runs, a single-draw candidate, ties within and across candidates."""
    rng = np.random.default_rng(11)
    totals = {f"c{i:02d}": list(np.round(rng.normal(50 + i, 3, int(rng.integers(2, 8)))))
              for i in range(15)}
    totals["solo"] = [52.0]
    totals["ties"] = [50.0, 50.0, 51.0, 51.0]
    long = totals_frame(totals)
    live = LiveAudit(Draws.from_long(long), comparison=comparison)
    cutoffs = np.concatenate([np.arange(35, 75, 0.5), [50.0, 51.0, 52.0]])
    got = live.flip_curve(cutoffs)
    ref = _recount_curve(long, cutoffs, comparison)
    assert got["candidates_with_flip"].tolist() == ref["candidates_with_flip"].tolist()
    np.testing.assert_allclose(got["mean_disagreement"], ref["mean_disagreement"], atol=1e-12)
    # and the same as the flip summary at each cutoff
    for t in (48.0, 50.0, 51.0, 55.5):
        row = live.flip_curve([t]).iloc[0]
        assert row["candidates_with_flip"] == live.flip_summary(t).candidates_with_flip
        assert row["mean_disagreement"] == pytest.approx(live.flip_summary(t).mean_disagreement)


def test_flip_curve_is_bounded_for_a_huge_score_range():
    """Scores up to 1e9 (a real model's raw output): ≤ 1,000 points, not one per unit."""
    rng = np.random.default_rng(3)
    totals = {f"c{i:03d}": list(rng.uniform(0, 1e9, 20)) for i in range(200)}
    live = LiveAudit(Draws.from_long(totals_frame(totals)))
    curve = live.flip_curve()
    assert 2 <= len(curve) <= 1000
    lo, hi = live.score_range
    assert curve["cutoff"].iloc[0] == lo and curve["cutoff"].iloc[-1] == hi
    assert curve["candidates_with_flip"].max() == 200   # mid-range every candidate flips
    assert live.slider_step >= (hi - lo) / 1000


def test_flip_curve_at_every_distinct_total_when_few():
    live = LiveAudit(Draws.from_long(totals_frame({"A": [1, 2, 3], "B": [2, 4, 4]})))
    assert live.curve_cutoffs().tolist() == [1.0, 2.0, 3.0, 4.0]


def test_score_range_is_zero_to_sum_of_maxima_when_known():
    long = pd.DataFrame({"candidate_id": ["A"] * 4 + ["B"] * 4, "run": [1, 1, 2, 2] * 2,
                         "criterion": ["a", "b"] * 4, "score": [3, 4, 5, 4, 8, 9, 7, 9.0]})
    crit = pd.DataFrame({"criterion": ["a", "b"], "max_points": [10.0, 20.0],
                         "weight": [1.0, 2.0]})
    live = LiveAudit(Draws.from_long(long, crit), np.array([5.0, 20.0, 40.0]))
    assert live.score_range == (0.0, 50.0)
    # band edges never leave 0..50, whatever k or the cutoff
    for t in (1.0, 25.0, 49.0):
        b = live.band(t, 4.0)
        assert 0.0 <= b.low <= b.high <= 50.0
        assert all(0.0 <= x <= 50.0 for x in (*b.two_sd, *b.empirical))
    assert live.band(1.0, 4.0).low == 0.0 and live.band(49.0, 4.0).high == 50.0


def test_score_range_without_maxima_is_the_observed_range_and_never_empty():
    live = LiveAudit(Draws.from_long(totals_frame({"A": [5, 5], "B": [5, 5]})))
    lo, hi = live.score_range
    assert lo < 5 < hi
    live = LiveAudit(Draws.from_long(totals_frame({"A": [10, 12], "B": [20, 25]})),
                     np.array([0.0, 40.0]))
    assert live.score_range == (0.0, 40.0)


def test_capacity_zero_is_explained_not_a_zero_width_band(live_case):
    long, pool = live_case
    live = LiveAudit(Draws.from_long(long), pool, applications_per_req=300)
    v = live.view(75.0, 2.0, capacity=0)
    assert v.capacity_note is not None and "covers no application" in v.capacity_note
    # everything a fresh draw would reverse is left to chance
    assert v.left_to_chance_per_req == pytest.approx(v.exposure.reversals_per_req)
    assert live.view(75.0, 2.0, capacity=50).capacity_note is None
