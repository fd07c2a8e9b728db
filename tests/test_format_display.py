"""Numbers a person reads: core/format.py's display rules (pages and reports share them)."""

from __future__ import annotations

import datetime as dt

import pandas as pd

from core.format import (
    MISSING,
    num,
    overdue_text,
    p_equals,
    pct,
    pvalue,
    readable,
    reviews_txt,
    score_precision,
    sd,
    share,
)


def test_floating_point_dust_never_reads_as_a_negative_number():
    assert sd(-2e-19, 2) == "0.00"
    assert num(-0.00001, 2) == "0.00"
    assert pct(-0.001) == "0%"
    table = readable(pd.DataFrame({"severity": [-2e-19, 1.23456]}))
    assert table["severity"].tolist() == ["0", "1.235"]


def test_p_values_read_as_bounds_and_a_bootstrap_is_never_p_zero():
    assert pvalue(1e-20) == "< 0.001"
    assert pvalue(0.0, reps=1000) == "< 1/1,000"
    assert p_equals(0.0, reps=999) == "p < 1/999"
    assert p_equals(0.034) == "p = 0.034" or p_equals(0.034) == "p = 0.03"
    t = readable(pd.DataFrame({"p (wild cluster bootstrap)": [0.0], "p": [2e-9]}),
                 reps={"p (wild cluster bootstrap)": 999})
    assert t.iloc[0].tolist() == ["< 1/999", "< 0.001"]


def test_a_negative_share_stays_negative():
    assert share(-0.004) == "−0.4%"
    assert share(-0.0004) == "−0.04%"
    assert share(0.31) == "31%"
    assert "-0%" not in share(-0.004)


def test_missing_is_a_dash_and_counts_have_separators():
    assert num(None) == MISSING and sd(float("nan")) == MISSING
    t = readable(pd.DataFrame({"n": [1200, 3], "x": [None, 2.5]}))
    assert t["n"].tolist() == ["1,200", "3"]
    assert t["x"].tolist() == [MISSING, "2.500"]
    assert "None" not in t.to_string()


def test_sd_precision_follows_the_rubric():
    assert score_precision([35, 20, 25]) == 2
    assert score_precision([2.5, 5]) == 3


def test_reviews_are_whole_people_and_small_expectations_keep_a_decimal():
    assert reviews_txt(151.2) == "151"
    assert reviews_txt(410.0) == "410"
    assert reviews_txt(2.44) == "2.4"
    assert reviews_txt(1200.0) == "1,200"


def test_an_overdue_date_says_since_when():
    today = dt.date(2026, 11, 30)
    assert overdue_text("2026-09-27", today) == "overdue since 2026-09-27, 9 weeks ago"
    assert overdue_text("2026-12-27", today) is None
    assert overdue_text(dt.date(2026, 11, 27), today) == "overdue since 2026-11-27, 3 days ago"


def test_dates_read_as_dates_not_midnight_timestamps():
    t = readable(pd.DataFrame({"batch": pd.to_datetime(["2026-03-29", "2026-04-06"])}))
    assert t["batch"].tolist() == ["2026-03-29", "2026-04-06"]
    assert "00:00:00" not in t.to_string()
