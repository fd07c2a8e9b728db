"""Property tests (hypothesis): bounds, shares, band monotonicity, order/label invariance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from core.band import recommend_band, scaled_residuals
from core.criteria import decompose, icc1
from core.draws import Draws
from core.flip import disagreement, flip_rate, summarize
from core.live import LiveAudit

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def audits(draw):
    """A long frame of K candidates × n_i runs × C integer criteria, and the weights."""
    k = draw(st.integers(2, 6))
    c = draw(st.integers(1, 3))
    weights = draw(st.lists(st.integers(1, 3), min_size=c, max_size=c))
    rows = []
    for i in range(k):
        n = draw(st.integers(2, 6))
        for j in range(1, n + 1):
            for ci in range(c):
                rows.append((f"c{i}", j, f"k{ci}", float(draw(st.integers(0, 10)))))
    long = pd.DataFrame(rows, columns=["candidate_id", "run", "criterion", "score"])
    meta = pd.DataFrame({"criterion": [f"k{ci}" for ci in range(c)], "max_points": 10.0,
                         "weight": [float(w) for w in weights], "position": range(c)})
    return long, meta


@SETTINGS
@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_flip_rate_at_most_half_and_disagreement_in_unit_interval(kn):
    k, n = kn
    assert 0 <= flip_rate(k, n) <= 0.5
    if n > 1:
        assert 0 <= disagreement(k, n) <= 1
        # two draws disagree at least as often as… never more than the max at k = n/2
        assert disagreement(k, n) <= disagreement(n // 2, n) + 1e-12


@SETTINGS
@given(audits())
def test_shares_sum_to_one_when_total_is_weighted_sum(case):
    long, meta = case
    d = Draws.from_long(long, meta)
    table = decompose(d)
    t = table.set_index("criterion").loc["total"]
    assume(t["within_sd"] > 0)
    shares = table[table["criterion"] != "total"]["share_of_within_variance"]
    assert shares.sum() == pytest.approx(1.0, abs=1e-9)


@SETTINGS
@given(audits(), st.floats(0, 10), st.floats(0.5, 2.5), st.floats(0.01, 1.5))
def test_band_contains_cutoff_and_widens_with_k(case, cutoff, k1, dk):
    long, meta = case
    d = Draws.from_long(long, meta)
    live = LiveAudit(d)
    b1, b2 = live.band(cutoff, k1), live.band(cutoff, k1 + dk)
    assert b1.low <= cutoff <= b1.high
    assert b2.low <= b1.low + 1e-12 and b2.high >= b1.high - 1e-12


def _fingerprint(long: pd.DataFrame, meta: pd.DataFrame, cutoff: float) -> dict:
    d = Draws.from_long(long, meta)
    table = decompose(d).reset_index(drop=True)
    live = LiveAudit(d)
    fs = live.flip_summary(cutoff)
    b = live.band(cutoff, 2.0)
    icc = icc1(d.cand, d.total, d.counts)
    return {"table": table, "flip": (fs.candidates, fs.candidates_with_flip,
                                     fs.worst_flip_rate, fs.flip_interval,
                                     fs.mean_disagreement),
            "band": (b.low, b.high, b.bound_low, b.bound_high),
            "icc": (icc.icc1, icc.ci95),
            "residuals": np.sort(scaled_residuals(d.cand, d.total, d.counts))}


def _same(a: dict, b: dict) -> None:
    pd.testing.assert_frame_equal(a["table"], b["table"], check_exact=False, rtol=1e-9,
                                  atol=1e-9)
    fa, fb = a["flip"], b["flip"]
    assert fa[:2] == fb[:2]
    assert fa[2] == pytest.approx(fb[2], nan_ok=True)
    assert (fa[3] is None) == (fb[3] is None)
    if fa[3] is not None:
        assert fa[3] == pytest.approx(fb[3], abs=1e-9)
    assert fa[4] == pytest.approx(fb[4], abs=1e-9, nan_ok=True)
    assert a["band"][:2] == pytest.approx(b["band"][:2], abs=1e-9)
    assert a["band"][2:] == b["band"][2:]
    assert a["icc"][0] == pytest.approx(b["icc"][0], abs=1e-9, nan_ok=True)
    assert a["residuals"] == pytest.approx(b["residuals"], abs=1e-9)


@SETTINGS
@given(audits(), st.floats(0, 30), st.randoms(use_true_random=False))
def test_results_do_not_depend_on_row_order(case, cutoff, rnd):
    long, meta = case
    idx = list(range(len(long)))
    rnd.shuffle(idx)
    _same(_fingerprint(long, meta, cutoff),
          _fingerprint(long.iloc[idx].reset_index(drop=True), meta, cutoff))


@SETTINGS
@given(audits(), st.floats(0, 30), st.randoms(use_true_random=False))
def test_results_do_not_depend_on_candidate_labels(case, cutoff, rnd):
    long, meta = case
    ids = sorted(long["candidate_id"].unique())
    new = [f"id-{rnd.randrange(10 ** 6):06d}-{i}" for i in range(len(ids))]
    rnd.shuffle(new)
    relabelled = long.assign(candidate_id=long["candidate_id"].map(dict(zip(ids, new))))
    _same(_fingerprint(long, meta, cutoff), _fingerprint(relabelled, meta, cutoff))


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 40)), min_size=1, max_size=8)
       .map(lambda xs: [(min(k, n), n) for k, n in xs]))
def test_worst_candidate_has_the_largest_flip_rate(kn):
    k = np.array([a for a, _ in kn])
    n = np.array([b for _, b in kn])
    ids = np.array([f"c{i}" for i in range(len(kn))], dtype=object)
    s = summarize(50, ids, k, n, np.zeros(len(kn)))
    assert s.worst_flip_rate == pytest.approx(flip_rate(k, n).max())
    assert s.candidates_with_flip == int(((k > 0) & (k < n)).sum())


@SETTINGS
@given(st.lists(st.floats(-20, 20, allow_nan=False), min_size=3, max_size=40),
       st.floats(0, 5), st.floats(0, 100))
def test_band_never_narrower_than_either_rule(r, sigma, cutoff):
    r = np.sort(np.asarray(r))
    b = recommend_band(cutoff, sigma, r, 2.0)
    assert b.low <= min(b.two_sd[0], b.empirical[0]) + 1e-9
    assert b.high >= max(b.two_sd[1], b.empirical[1]) - 1e-9
