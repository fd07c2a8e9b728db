"""Step 5 — flip rate on single draws, disagreement, Clopper–Pearson, worst candidate, flip
count and interval, the comparison setting, the effective cutoff.

References: a brute-force pair count, statsmodels proportion_confint(method="beta"), hand
examples."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint

from core.audit import Settings, analyze_frames
from core.flip import (
    clopper_pearson,
    disagreement,
    effective_cutoff,
    flip_rate,
    flip_table,
    passes,
    summarize,
)
from tests.support import totals_frame


def test_pass_comparison_ge_vs_gt_hand_example():
    # totals 69 70 71 72 at t = 70: '>=' passes 70, 71, 72 (k = 3); '>' passes 71, 72 (k = 2)
    t = np.array([69.0, 70, 71, 72])
    assert passes(t, 70).sum() == 3
    assert passes(t, 70, ">").sum() == 2
    # flip rate: min(3, 1)/4 = 0.25 vs min(2, 2)/4 = 0.5
    assert flip_rate(3, 4) == 0.25 and flip_rate(2, 4) == 0.5
    # disagreement: 2·3·1/(4·3) = 0.5 vs 2·2·2/(4·3) = 2/3
    assert disagreement(3, 4) == pytest.approx(0.5)
    assert disagreement(2, 4) == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        passes(t, 70, "=>")


def test_comparison_setting_reaches_the_audit():
    long = totals_frame({"A": [69, 70, 71, 72], "B": [60, 61, 62, 63]})
    ge = analyze_frames(long, settings=Settings(cutoff=70)).view()
    gt = analyze_frames(long, settings=Settings(cutoff=70, comparison=">")).view()
    assert (ge.flip.worst_passes, ge.flip.worst_flip_rate) == (3, 0.25)
    assert (gt.flip.worst_passes, gt.flip.worst_flip_rate) == (2, 0.5)


def _brute_disagreement(sides: list[bool]) -> float:
    pairs = list(itertools.combinations(sides, 2))
    return sum(a != b for a, b in pairs) / len(pairs)


@pytest.mark.parametrize("n", [2, 3, 5, 15, 30])
def test_disagreement_equals_brute_force_pair_count(n):
    for k in range(n + 1):
        sides = [True] * k + [False] * (n - k)
        assert disagreement(k, n) == pytest.approx(_brute_disagreement(sides), abs=1e-12)


def test_disagreement_single_run_is_nan():
    assert np.isnan(disagreement(1, 1))


def test_flip_rate_hand_values():
    k = np.array([0, 1, 7, 8, 15])
    assert list(flip_rate(k, np.full(5, 15))) == pytest.approx([0, 1 / 15, 7 / 15, 7 / 15, 0])


def test_clopper_pearson_equals_statsmodels_beta():
    ks, ns = [], []
    for n in (1, 2, 6, 15, 30):
        for k in range(n + 1):
            ks.append(k)
            ns.append(n)
    lo, hi = clopper_pearson(np.array(ks), np.array(ns))
    for k, n, a, b in zip(ks, ns, lo, hi):
        ra, rb = proportion_confint(k, n, alpha=0.05, method="beta")
        assert a == pytest.approx(ra, abs=1e-10), (k, n)
        assert b == pytest.approx(rb, abs=1e-10), (k, n)
    # edges exact
    assert lo[0] == 0.0 and hi[ns.index(1) + 1] == 1.0


def test_flip_table_hand_example():
    ids = np.array(["A", "B", "C"], dtype=object)
    k, n = np.array([0, 7, 15]), np.array([15, 15, 15])
    ft = flip_table(ids, k, n, np.array([60.0, 77.5, 90.0]))
    assert list(ft["flips"]) == [False, True, False]
    assert ft.loc[1, "flip_rate"] == pytest.approx(7 / 15)
    assert ft.loc[1, "disagreement"] == pytest.approx(2 * 7 * 8 / (15 * 14))
    lo, hi = proportion_confint(7, 15, method="beta")
    assert (ft.loc[1, "ci_low"], ft.loc[1, "ci_high"]) == pytest.approx((lo, hi))


def test_worst_candidate_largest_flip_rate():
    ids = np.array(["a", "b", "c"], dtype=object)
    s = summarize(70, ids, np.array([1, 7, 14]), np.array([15, 15, 15]),
                  np.array([65.0, 70.0, 75.0]))
    assert (s.worst_candidate, s.worst_passes, s.worst_runs) == ("b", 7, 15)
    assert s.worst_flip_rate == pytest.approx(7 / 15)


def test_worst_candidate_tie_broken_by_id():
    # 'b' 2/5 and 'a' 3/5: same flip rate 0.4, same distance from 0.5 → smallest id wins
    ids = np.array(["b", "a", "c"], dtype=object)
    s = summarize(70, ids, np.array([2, 3, 1]), np.array([5, 5, 5]), np.zeros(3))
    assert s.worst_candidate == "a"
    # with unequal runs: 'z' 7/15 (0.467) beats 'a' 2/5 (0.4) although 'a' sorts first
    ids = np.array(["a", "z"], dtype=object)
    s = summarize(70, ids, np.array([2, 7]), np.array([5, 15]), np.zeros(2))
    assert s.worst_candidate == "z"


def test_flip_count_and_interval_are_min_max_mean_of_flippers():
    # A: 60 61 62 (never passes 70), B: 68 71 73 (flips, mean 70.67), C: 69 70 80 (flips,
    # mean 73), D: 85 86 87 (always passes). Count 2 of 4; interval [70.67, 73].
    long = totals_frame({"A": [60, 61, 62], "B": [68, 71, 73], "C": [69, 70, 80],
                         "D": [85, 86, 87]})
    v = analyze_frames(long, settings=Settings(cutoff=70)).view()
    assert (v.flip.candidates_with_flip, v.flip.candidates) == (2, 4)
    assert v.flip.flip_interval == pytest.approx((212 / 3, 73.0))


def test_no_flip_gives_no_interval():
    long = totals_frame({"A": [60, 61], "B": [80, 81]})
    v = analyze_frames(long, settings=Settings(cutoff=70)).view()
    assert v.flip.candidates_with_flip == 0 and v.flip.flip_interval is None


def test_effective_cutoff_is_kth_highest():
    pool = np.array([50, 91, 78, 78, 80, 60, 99, 85.0])
    # sorted desc: 99 91 85 80 78 78 60 50
    assert effective_cutoff(pool, 1) == 99
    assert effective_cutoff(pool, 4) == 80
    assert effective_cutoff(pool, 5) == 78 and effective_cutoff(pool, 6) == 78
    assert effective_cutoff(pool, 8) == 50
    for bad in (0, 9):
        with pytest.raises(ValueError):
            effective_cutoff(pool, bad)
    with pytest.raises(ValueError):
        effective_cutoff(np.array([]), 1)


def test_effective_cutoff_reported_beside_configured():
    long = totals_frame({"A": [77, 79, 78], "B": [60, 62, 61]})
    pool = __import__("pandas").DataFrame({"candidate_id": [f"p{i}" for i in range(10)],
                                           "first_pass_score": [60, 65, 70, 72, 74, 76, 78,
                                                                80, 85, 90]})
    res = analyze_frames(long, pool=pool, settings=Settings(cutoff=70, top_k=4, of_n=10))
    assert res.cutoff == 78 and res.configured_cutoff == 70
    from core.report import render_text

    assert "Cutoff audited: 78 (effective; config field reads 70, recruiter works top 4 of ~10)" \
        in render_text(res)
