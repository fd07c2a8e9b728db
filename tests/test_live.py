"""The slider engine: LiveAudit answers equal a from-scratch pandas groupby recompute."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import totals_frame
from scipy import stats

from core.draws import Draws
from core.live import LiveAudit


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
