"""Step 4 — decompose the movement per criterion; reliability of a single draw.

For each criterion and the total: the pooled within-candidate SD, the between-candidate SD of
the candidate means, each criterion's share of the total's within-candidate variance, and a
verdict (DEAD, NOISY, WORKING). Also the SD's chi-square interval, ICC(1) with its F interval,
and the strata an upload without them gets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from core.draws import Draws, group_mean

__all__ = [
    "sd_interval",
    "pooled_within_sd",
    "between_sd",
    "decompose",
    "remediation",
    "ICC1",
    "icc1",
    "derive_strata",
    "STRATA",
    "CRITERIA_COLUMNS",
]

STRATA = ("band", "high", "low", "between")

CRITERIA_COLUMNS = ["criterion", "max_points", "weight", "within_sd", "between_sd",
                    "share_of_within_variance", "verdict", "dead_tol", "modal_score",
                    "modal_candidates", "candidates"]


def sd_interval(s: float, df: float, level: float = 0.95) -> tuple[float, float]:
    """Chi-square confidence interval for a standard deviation estimated with ``df`` degrees.

    Notes
    -----
    ``(s·sqrt(df/χ²_{1-α/2,df}), s·sqrt(df/χ²_{α/2,df}))``. At df 14 (n = 15) the factors are
    0.73 and 1.58; at df 29 (n = 30) 0.80 and 1.34 (the seed's figures). Returns NaNs for
    ``df < 1``.

    References
    ----------
    .. [1] Seed 000 (the method), "Method", step 3 "Run N replications per candidate, and pick
       N for the interval you need".
    .. [2] ``scipy.stats.chi2.ppf``; R: ``sqrt(df * s^2 / qchisq(c(0.975, 0.025), df))``.

    Examples
    --------
    >>> lo, hi = sd_interval(1.0, 14)
    >>> round(lo, 2), round(hi, 2)
    (0.73, 1.58)
    """
    if not df >= 1 or not np.isfinite(s):
        return (float("nan"), float("nan"))
    a = (1 - level) / 2
    return (float(s * np.sqrt(df / stats.chi2.ppf(1 - a, df))),
            float(s * np.sqrt(df / stats.chi2.ppf(a, df))))


def _within_ss(cand: np.ndarray, values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray,
                                                                                   np.ndarray]:
    means = group_mean(cand, values, counts)
    dev = values - means[cand]
    return dev, means


def pooled_within_sd(cand: np.ndarray, values: np.ndarray, counts: np.ndarray) -> float:
    """``sqrt(Σ_i Σ_j (x_ij − x̄_i)² / Σ_i (n_i − 1))``; NaN when every candidate has one run."""
    dev, _ = _within_ss(cand, values, counts)
    df = float(np.sum(counts - 1))
    return float(np.sqrt(np.sum(dev * dev) / df)) if df > 0 else float("nan")


def between_sd(cand: np.ndarray, values: np.ndarray, counts: np.ndarray) -> float:
    """SD (ddof 1) of the candidate means; NaN with fewer than 2 candidates."""
    means = group_mean(cand, values, counts)
    return float(np.std(means, ddof=1)) if len(means) > 1 else float("nan")


def decompose(draws: Draws, *, dead_tol_frac: float = 0.05) -> pd.DataFrame:
    """The per-criterion table (and a final ``total`` row).

    Parameters
    ----------
    draws : Draws
    dead_tol_frac : float
        DEAD tolerance as a share of the criterion's max points (or of its largest observed
        absolute score when the max is unknown). Default 5%.

    Returns
    -------
    DataFrame with :data:`CRITERIA_COLUMNS`; one row per criterion in rubric order, then
    ``total``. ``verdict`` is ``DEAD``, ``NOISY`` or ``WORKING`` (empty for the total).

    Notes
    -----
    * ``within_sd`` = pooled within-candidate SD; ``between_sd`` = SD (ddof 1) of candidate
      means.
    * ``share_of_within_variance`` = ``w_c Σ_ij (x_ijc − x̄_ic)(T_ij − T̄_i) / Σ_ij (T_ij − T̄_i)²``.
      The shares sum to 1 when the total is the weighted sum; otherwise the remainder is "not in
      any criterion" (bonus, deductions, parsing). NaN when the total never moves.
    * verdict, in order: DEAD when both SDs ≤ tol; NOISY when within ≥ between; else WORKING;
      empty when an SD cannot be estimated (a single candidate).
    * ``modal_score`` / ``modal_candidates``: the most common score and for how many candidates
      it is their most common score ("25/25 for 39/40").
    * ``within_sd²`` is the within-candidate mean square of a one-way random-effects ANOVA with
      the candidate as the group (MSW), and ``between_sd²`` the variance of the candidate
      means; the share of within variance is the covariance of a criterion's within-candidate
      deviations with the total's, over the total's within variance.

    References
    ----------
    .. [1] Seed 000 (the method), "Method", step 4 "Decompose per criterion before touching
       the total"; SPEC §3.4.
    .. [2] R: ``anova(lm(score ~ factor(candidate_id)))`` — its residual mean square is
       ``within_sd²``; ``lme4::lmer(score ~ 1 + (1 | candidate_id))`` gives the same
       residual variance on balanced data (REML).
    .. [3] statsmodels: ``anova_lm(ols("score ~ C(candidate_id)", df).fit())`` (residual
       ``mean_sq``), ``mixedlm("score ~ 1", df, groups="candidate_id")`` (``scale``).
    .. [4] Shrout, P. E. & Fleiss, J. L. (1979). Intraclass correlations: uses in assessing
       rater reliability. *Psychological Bulletin* 86(2), 420–428 (the one-way layout).

    Examples
    --------
    Three candidates, three runs each: ``skill`` separates them and never moves (WORKING),
    ``style`` moves more within a candidate than between candidates (NOISY), ``gate`` always
    gives 1 (DEAD).

    >>> import pandas as pd
    >>> from core.draws import Draws
    >>> long = pd.DataFrame({
    ...     "candidate_id": ["a"] * 9 + ["b"] * 9 + ["c"] * 9,
    ...     "run": [1, 1, 1, 2, 2, 2, 3, 3, 3] * 3,
    ...     "criterion": ["skill", "style", "gate"] * 9,
    ...     "score": [8, 1, 1, 8, 3, 1, 8, 2, 1,  5, 4, 1, 5, 1, 1, 5, 3, 1,
    ...               2, 2, 1, 2, 4, 1, 2, 1, 1]})
    >>> table = decompose(Draws.from_long(long))
    >>> print(table[["criterion", "within_sd", "between_sd", "verdict"]].round(2).to_string())
      criterion  within_sd  between_sd  verdict
    0     skill       0.00        3.00  WORKING
    1     style       1.37        0.33    NOISY
    2      gate       0.00        0.00     DEAD
    3     total       1.37        2.85
    """
    cand, counts, K = draws.cand, draws.counts, draws.K
    t_dev, _ = _within_ss(cand, draws.total, counts)
    t_ss = float(np.sum(t_dev * t_dev))
    rows = []
    for j, name in enumerate(draws.criteria):
        x = draws.scores[:, j]
        if np.isnan(x).any():
            ok = ~np.isnan(x)
            sub = draws.subset(ok)
            xs, cs, cnt = x[ok], sub.cand, sub.counts
            td, _ = _within_ss(cs, sub.total, cnt)
        else:
            xs, cs, cnt, td = x, cand, counts, t_dev
        dev, _ = _within_ss(cs, xs, cnt)
        w_sd = pooled_within_sd(cs, xs, cnt)
        b_sd = between_sd(cs, xs, cnt)
        share = (float(draws.weights[j] * np.sum(dev * td) / t_ss) if t_ss > 0 else float("nan"))
        mx = draws.max_points[j]
        scale = mx if np.isfinite(mx) else float(np.nanmax(np.abs(xs))) if len(xs) else 0.0
        tol = dead_tol_frac * scale
        if not (np.isfinite(b_sd) and np.isfinite(w_sd)):
            verdict = ""  # one candidate (or one run each): nothing to compare
        elif b_sd <= tol and w_sd <= tol:
            verdict = "DEAD"
        elif w_sd >= b_sd:
            verdict = "NOISY"
        else:
            verdict = "WORKING"
        modal, modal_n = _modal(cs, xs, len(cnt))
        rows.append({"criterion": name, "max_points": mx, "weight": draws.weights[j],
                     "within_sd": w_sd, "between_sd": b_sd, "share_of_within_variance": share,
                     "verdict": verdict, "dead_tol": tol, "modal_score": modal,
                     "modal_candidates": modal_n, "candidates": int(len(cnt))})
    rows.append({"criterion": "total", "max_points": float(np.nansum(draws.max_points *
                                                                     draws.weights))
                 if draws.has_criteria and np.isfinite(draws.max_points).all() else np.nan,
                 "weight": np.nan,
                 "within_sd": pooled_within_sd(cand, draws.total, counts),
                 "between_sd": between_sd(cand, draws.total, counts),
                 "share_of_within_variance": 1.0 if t_ss > 0 else np.nan, "verdict": "",
                 "dead_tol": np.nan, "modal_score": np.nan, "modal_candidates": 0,
                 "candidates": K})
    return pd.DataFrame(rows, columns=CRITERIA_COLUMNS)


def _modal(cand: np.ndarray, x: np.ndarray, k: int) -> tuple[float, int]:
    """Most common score overall, and the number of candidates whose own mode it is."""
    if len(x) == 0:
        return float("nan"), 0
    vals, inv = np.unique(x, return_inverse=True)
    overall = int(np.argmax(np.bincount(inv)))
    table = np.zeros((k, len(vals)), dtype="int64")
    np.add.at(table, (cand, inv), 1)
    own_mode = np.argmax(table, axis=1)
    return float(vals[overall]), int(np.sum(own_mode == overall))


def remediation(table: pd.DataFrame) -> pd.DataFrame:
    """What to fix first: NOISY criteria by share (descending), then DEAD criteria.

    Returns ``criterion, verdict, within_sd, share_of_within_variance, action``.
    """
    crit = table[table["criterion"] != "total"]
    noisy = crit[crit["verdict"] == "NOISY"].sort_values(
        "share_of_within_variance", ascending=False, na_position="last")
    dead = crit[crit["verdict"] == "DEAD"]
    out = []
    for _, r in noisy.iterrows():
        out.append({**r[["criterion", "verdict", "within_sd", "share_of_within_variance"]],
                    "action": "split into checkable sub-questions or drop from the weighted "
                              "total"})
    for _, r in dead.iterrows():
        out.append({**r[["criterion", "verdict", "within_sd", "share_of_within_variance"]],
                    "action": "contributes no ranking signal; removing it changes no ordering "
                              "and stops it inflating the reliability of the total"})
    return pd.DataFrame(out, columns=["criterion", "verdict", "within_sd",
                                      "share_of_within_variance", "action"])


@dataclass(frozen=True)
class ICC1:
    """One-way random-effects ICC(1) of a single draw, with its F-based interval."""

    icc1: float
    ci95: tuple[float, float]
    msb: float
    msw: float
    n0: float
    f: float
    df1: int
    df2: int


def icc1(cand: np.ndarray, values: np.ndarray, counts: np.ndarray, level: float = 0.95) -> ICC1:
    """ICC(1) = ``(MSB − MSW) / (MSB + (n₀ − 1)·MSW)`` with Shrout & Fleiss case-1 interval.

    Notes
    -----
    ``n₀ = (N − Σ n_i² / N) / (K − 1)`` (equals n on balanced data). With ``F = MSB/MSW``,
    ``F_L = F / F_{1-α/2}(K−1, N−K)``, ``F_U = F · F_{1-α/2}(N−K, K−1)``, the interval is
    ``((F_L − 1)/(F_L + n₀ − 1), (F_U − 1)/(F_U + n₀ − 1))``. Validated against
    ``pingouin.intraclass_corr`` (ICC1) on balanced data.

    References
    ----------
    .. [1] Seed 000 (the method), "Method", step 2 (reliability is between-candidate variance
       over total variance; withheld without anchors); SPEC §3.4.
    .. [2] Shrout, P. E. & Fleiss, J. L. (1979). Intraclass correlations: uses in assessing
       rater reliability. *Psychological Bulletin* 86(2), 420–428 — ICC(1,1) and its interval.
    .. [3] pingouin: ``intraclass_corr(data, targets="candidate_id", raters="run",
       ratings="score")``, row ``ICC1`` (value and ``CI95%``); R: ``psych::ICC`` (``ICC1``) or
       ``irr::icc(model="oneway", type="consistency", unit="single")``.

    Examples
    --------
    >>> import numpy as np
    >>> cand = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    >>> total = np.array([9.0, 11, 10, 9, 6, 8, 4, 6, 3])
    >>> r = icc1(cand, total, np.array([3, 3, 3]))
    >>> round(r.icc1, 3), (round(r.ci95[0], 3), round(r.ci95[1], 3))
    (0.798, (0.205, 0.994))
    """
    K = len(counts)
    N = float(np.sum(counts))
    dev, means = _within_ss(cand, values, counts)
    grand = float(np.sum(values) / N)
    ssb = float(np.sum(counts * (means - grand) ** 2))
    ssw = float(np.sum(dev * dev))
    df1, df2 = K - 1, int(N - K)
    msb, msw = ssb / df1, ssw / df2
    n0 = (N - float(np.sum(counts ** 2)) / N) / (K - 1)
    denom = msb + (n0 - 1) * msw
    if not denom > 0:  # every total identical: the ratio is undefined
        nan = float("nan")
        return ICC1(nan, (nan, nan), msb, msw, float(n0), nan, df1, df2)
    icc = (msb - msw) / denom
    a = (1 - level) / 2
    if msw > 0:
        f = msb / msw
        f_l = f / stats.f.ppf(1 - a, df1, df2)
        f_u = f * stats.f.ppf(1 - a, df2, df1)
        ci = ((f_l - 1) / (f_l + n0 - 1), (f_u - 1) / (f_u + n0 - 1))
    else:
        f, ci = float("inf"), (1.0, 1.0)
    return ICC1(float(icc), (float(ci[0]), float(ci[1])), msb, msw, float(n0), float(f), df1,
                df2)


def derive_strata(scores: pd.Series, cutoff: float, sigma: float, *, band_sigma: float = 1.5,
                  anchor_sigma: float = 3.0) -> pd.Series:
    """Stratum per candidate from a score per candidate (first-pass score or mean total).

    ``band`` within ``t ± band_sigma·σ``; ``high`` at or above ``t + anchor_sigma·σ``; ``low``
    at or below ``t − anchor_sigma·σ``; else ``between``.
    """
    s = scores.astype(float)
    out = pd.Series("between", index=scores.index, dtype=object)
    out[(s >= cutoff - band_sigma * sigma) & (s <= cutoff + band_sigma * sigma)] = "band"
    out[s >= cutoff + anchor_sigma * sigma] = "high"
    out[s <= cutoff - anchor_sigma * sigma] = "low"
    return out
