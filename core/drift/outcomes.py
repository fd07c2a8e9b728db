"""The outcome check and the cost condition: does the evaluation move with what matters?

:func:`read_outcome_series` reads daily counts of two or more series; :func:`outcome_trend`
regresses the log ratio of two of them on month time with Newey–West standard errors, and
compares before and after split dates — direction and size beside the evaluation's trend, never
a causal effect. :func:`break_even_share` is the cost condition: the share of an improvement
that must be credited to the evaluation for it to pay for itself. SPEC §5, after
``seeds/004_584ac5ccdc3466e2.txt`` (Tables 7, 8, 9).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from core.drift.panel import DAYS_PER_MONTH, parse_dates
from core.errors import InputError
from core.tables import numeric_column, read_table, require_columns

__all__ = ["OutcomeTrend", "break_even_share", "outcome_trend", "read_outcome_series"]


def read_outcome_series(source: str | Path | bytes | IO[bytes] | pd.DataFrame, *,
                        name: str | None = None) -> pd.DataFrame:
    """Read daily counts of outcome series: a ``date`` column and two or more count columns.

    Returns a DataFrame with ``date`` (datetime64) and float count columns, sorted by date.
    Raises :class:`InputError` with row and column for a bad date or a count that is not a
    finite number ≥ 0, or a duplicated date.
    """
    if isinstance(source, pd.DataFrame):
        df, display = source, name or "outcomes"
    else:
        df, _sha, display = read_table(source, name=name)
    require_columns(df, ["date"], display, "daily outcome counts (date, series…)")
    counts = [c for c in df.columns if c != "date"]
    if len(counts) < 2:
        raise InputError("needs two count columns besides 'date' (numerator and comparison "
                         "series)", file=display)
    df = df.reset_index(drop=True)
    out = pd.DataFrame()
    parsed = pd.to_datetime(df["date"].astype("string").str.strip(), format="ISO8601",
                            errors="coerce")
    if parsed.isna().any():
        i = int(np.flatnonzero(parsed.isna().to_numpy())[0])
        raise InputError(f"{str(df['date'].iloc[i])!r} is not an ISO date", file=display,
                         row=i + 1, column="date")
    out["date"] = parsed.dt.normalize()
    dup = out["date"].duplicated().to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise InputError("this date appears twice; one row per day", file=display, row=i + 1,
                         column="date")
    for c in counts:
        vals = numeric_column(df, c, display)
        neg = vals < 0
        if neg.any():
            i = int(np.flatnonzero(neg)[0])
            raise InputError("a count cannot be negative", file=display, row=i + 1, column=c)
        out[c] = vals
    return out.sort_values("date").reset_index(drop=True)




@dataclass(frozen=True, eq=False)
class OutcomeTrend:
    """Monthly trend of ``log(numerator/denominator)`` (Newey–West SE) and split comparisons.

    ``pct_per_month = exp(slope) − 1``. ``splits`` has ``split, diff, se, t, pct, n_pre,
    n_post``. ``dropped_days`` counts days with a zero in either series.
    """

    numerator: str
    denominator: str
    slope: float
    se: float
    t: float
    pct_per_month: float
    lags: int
    n_days: int
    dropped_days: int
    splits: pd.DataFrame


def outcome_trend(daily: pd.DataFrame, numerator: str, denominator: str, *, lags: int = 7,
                  splits: Iterable[Any] = ()) -> OutcomeTrend:
    """Does the evaluation move with a consequential outcome? (direction and size, not cause)

    Notes
    -----
    ``log(a_d/b_d) = α + β·month_d + Σ day-of-week + u_d`` by OLS with Newey–West (Bartlett)
    standard errors, ``lags`` lags (statsmodels ``cov_type="HAC"``, the reference). Days are
    taken as consecutive rows. For each split date: the same regression with a post indicator
    in place of the trend, ``diff`` = post − pre of the log ratio.

    References
    ----------
    .. [1] ``seeds/004_584ac5ccdc3466e2.txt``, "Drift variants, tickets, and cost conditions"
       (log ratio of interview-related to technical-issue tickets on month time with
       day-of-week dummies, Newey–West SE with 7 lags; the paper's Tables 7 and 8).
    .. [2] Newey, W. K. & West, K. D. (1987). A simple, positive semi-definite,
       heteroskedasticity and autocorrelation consistent covariance matrix. *Econometrica*
       55(3), 703–708.
    .. [3] statsmodels: ``OLS(log_ratio, X).fit(cov_type="HAC", cov_kwds={"maxlags": 7})``
       (Bartlett kernel, no small-sample correction) — used here.
    .. [4] R: ``lmtest::coeftest(fit, vcov = sandwich::NeweyWest(fit, lag = 7,
       prewhite = FALSE, adjust = FALSE))``.

    Examples
    --------
    >>> from core.drift.demo import demo_outcomes
    >>> out = outcome_trend(read_outcome_series(demo_outcomes()), "interview", "technical",
    ...                     splits=["2026-07-15"])
    >>> print(f"{100 * out.pct_per_month:+.1f}% per month, t = {out.t:.1f}")
    -8.7% per month, t = -6.5
    >>> bool(out.splits.loc[0, "diff"] < 0)  # later days have relatively fewer interview tickets
    True
    """
    import statsmodels.api as sm

    for c in (numerator, denominator):
        if c not in daily.columns:
            raise InputError(f"no column {c!r} in the outcome series; found "
                             f"{', '.join(map(str, daily.columns))}")
    d = daily[["date", numerator, denominator]].copy()
    d["date"] = pd.to_datetime(d["date"])
    keep = (d[numerator] > 0) & (d[denominator] > 0)
    dropped = int((~keep).sum())
    d = d[keep].sort_values("date").reset_index(drop=True)
    if len(d) < 14:
        raise InputError(f"the outcome series has {len(d)} usable days (both counts > 0); "
                         "the trend needs at least 14")
    ly = np.log(d[numerator].to_numpy(float) / d[denominator].to_numpy(float))
    months = (d["date"] - d["date"].iloc[0]).dt.days.to_numpy(float) / DAYS_PER_MONTH
    dow = pd.get_dummies(d["date"].dt.day_of_week, prefix="dow", drop_first=True,
                         dtype=float).to_numpy()
    X = np.column_stack([np.ones(len(d)), months, dow])
    res = sm.OLS(ly, X).fit(cov_type="HAC", cov_kwds={"maxlags": lags})
    slope, se = float(res.params[1]), float(res.bse[1])
    rows = []
    for s in parse_dates(splits, what="split dates"):
        post = (d["date"] >= s).to_numpy(float)
        if post.sum() < 2 or (1 - post).sum() < 2:
            rows.append({"split": s, "diff": np.nan, "se": np.nan, "t": np.nan, "pct": np.nan,
                         "n_pre": int((1 - post).sum()), "n_post": int(post.sum())})
            continue
        Xs = np.column_stack([np.ones(len(d)), post, dow])
        r2 = sm.OLS(ly, Xs).fit(cov_type="HAC", cov_kwds={"maxlags": lags})
        rows.append({"split": s, "diff": float(r2.params[1]), "se": float(r2.bse[1]),
                     "t": float(r2.tvalues[1]), "pct": float(np.expm1(r2.params[1])),
                     "n_pre": int((1 - post).sum()), "n_post": int(post.sum())})
    sp = pd.DataFrame(rows, columns=["split", "diff", "se", "t", "pct", "n_pre", "n_post"])
    return OutcomeTrend(numerator, denominator, slope, se, slope / se, float(np.expm1(slope)),
                        lags, len(d), dropped, sp)


def break_even_share(cost_per_month: float, value_per_escalation: float,
                     avoided_per_month: float) -> float:
    """Share of an improvement that must be credited to the evaluation to pay for it.

    Notes
    -----
    ``share = cost / (value × avoided)``; a condition, not an estimate. Paper Table 9:
    $7,806/month, $100 per escalation, 428 fewer a month ⇒ 18% (tested). ``inf`` when nothing
    is avoided.

    References
    ----------
    .. [1] ``seeds/004_584ac5ccdc3466e2.txt``, Table 9 (cost condition, not an identified
       effect).

    Examples
    --------
    >>> print(f"{break_even_share(7806, 100, 428):.1%}")
    18.2%
    """
    for nm, v in (("cost per month", cost_per_month), ("value per escalation",
                                                       value_per_escalation),
                  ("avoided escalations per month", avoided_per_month)):
        if v is None or not math.isfinite(float(v)) or float(v) < 0:
            raise InputError(f"{nm} must be a finite number ≥ 0, not {v!r}")
    denom = float(value_per_escalation) * float(avoided_per_month)
    return math.inf if denom == 0 else float(cost_per_month) / denom


