"""Seeded demo data for the Drift page and the tests: a ratings panel shaped like the paper's
and two daily outcome series. The shipped ``data/demo_panel.csv`` is :func:`demo_panel` with
its default seed (a test keeps them equal)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from core.drift.panel import DAYS_PER_MONTH

__all__ = ["demo_outcomes", "demo_panel"]


def demo_panel(seed: int = 20260326) -> pd.DataFrame:
    """A seeded demo ratings panel shaped like the paper's (14 batches, graders A/B/C).

    Grader A scores every batch; B joins on 2026-05-21 and scores about half of each batch from
    then on (harsher: −0.79 on the index, −1.40 on latency, 0 on audio sync); C appears in one
    batch. The state has steps at the deployments 2026-04-12 (+0.20) and 2026-07-29 (+0.12),
    an unattributed step on 2026-06-01 (+0.30) and a weekly random walk (SD 0.05).
    Columns: batch, rater, item, category, score (three categories per item).
    """
    rng = np.random.default_rng(seed)
    dates = pd.to_datetime(["2026-03-29", "2026-04-06", "2026-04-13", "2026-04-27",
                            "2026-05-09", "2026-05-21", "2026-06-01", "2026-06-15",
                            "2026-06-29", "2026-07-13", "2026-07-20", "2026-07-27",
                            "2026-08-10", "2026-08-24"])
    steps = {pd.Timestamp("2026-04-12"): 0.20, pd.Timestamp("2026-06-01"): 0.30,
             pd.Timestamp("2026-07-29"): 0.12}
    cats = {"structure": -0.55, "latency": -1.40, "audio_sync": -0.05}
    cat_level = {"structure": 0.1, "latency": -0.1, "audio_sync": 0.0}
    theta, level, prev = [], 0.05, dates[0]
    for d in dates:
        weeks = (d - prev).days / 7.0
        level += rng.normal(0.0, 0.05 * math.sqrt(weeks)) if weeks > 0 else 0.0
        level += sum(v for k, v in steps.items() if prev < k <= d)
        theta.append(level)
        prev = d
    b_start = pd.Timestamp("2026-05-21")
    rows, item_no = [], 0
    for d, th in zip(dates, theta):
        n = int(rng.integers(68, 200)) if d != dates[-1] else 35
        for _ in range(n):
            item_no += 1
            if d < b_start:
                rater = "A"
            elif d == b_start and rng.random() < 0.3:
                rater = "C"
            else:
                rater = "B" if rng.random() < 0.5 else "A"
            item_eff = rng.normal(0.0, 0.45)
            for c, sev_b in cats.items():
                sev = {"A": 0.0, "B": sev_b, "C": 0.6 * sev_b}[rater]
                score = th + cat_level[c] + sev + item_eff + rng.normal(0.0, 0.75)
                rows.append((d.date().isoformat(), rater, f"r{item_no:05d}", c,
                             round(float(score), 4)))
    return pd.DataFrame(rows, columns=["batch", "rater", "item", "category", "score"])


def demo_outcomes(seed: int = 20260505) -> pd.DataFrame:
    """Seeded daily counts of two outcome series (``interview`` vs ``technical`` tickets).

    The interview series falls about 10% a month relative to the technical one, with a weekly
    cycle common to both; 2026-05-05 to 2026-09-17.
    """
    rng = np.random.default_rng(seed)
    days = pd.date_range("2026-05-05", "2026-09-17", freq="D")
    months = (days - days[0]).days / DAYS_PER_MONTH
    dow = np.array([1.0, 1.1, 1.05, 1.0, 0.95, 0.6, 0.55])[days.day_of_week]
    interview = rng.poisson(46.0 * dow * np.exp(-0.10 * months))
    technical = rng.poisson(312.0 * dow)
    return pd.DataFrame({"date": days.strftime("%Y-%m-%d"), "interview": interview,
                         "technical": technical})
