"""The trend and the deployment contrasts: where is the state going, and what moved it?

* :func:`monthly_trend` — the monthly slope of the score with rater fixed effects, SE clustered
  by batch and a restricted wild cluster bootstrap p-value (Webb weights);
* :func:`category_trends` — the same per category with Holm and Benjamini–Hochberg adjustments;
* :func:`deployment_contrasts` — the two batches after a deployment minus the two before, on
  stage 1's adjusted batch effects.

SPEC §5, after ``seeds/004_584ac5ccdc3466e2.txt`` ("Two-stage estimation", Tables 4, 5, 10).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from core.drift.panel import DAYS_PER_MONTH, parse_dates
from core.drift.severity import SeverityFit, default_reference

__all__ = ["TrendFit", "category_trends", "deployment_contrasts", "monthly_trend",
           "trend_design", "webb_weights"]


def webb_weights(n: int, rng: np.random.Generator | int | None = None) -> np.ndarray:
    """Webb's six-point weights: ±√(1/2), ±1, ±√(3/2), each with probability 1/6."""
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    pts = np.array([-math.sqrt(1.5), -1.0, -math.sqrt(0.5), math.sqrt(0.5), 1.0,
                    math.sqrt(1.5)])
    return pts[gen.integers(0, 6, size=n)]


@dataclass(frozen=True)
class TrendFit:
    """Monthly slope of the score, cluster-robust by batch, with a wild cluster bootstrap p."""

    slope: float
    se: float
    t: float
    p_cluster: float
    p_wild: float
    n: int
    n_clusters: int
    reps: int
    seed: int
    rater_effects: bool


def trend_design(panel: pd.DataFrame, rater_effects: bool) -> tuple[np.ndarray, np.ndarray,
                                                                      np.ndarray]:
    """Design of :func:`monthly_trend`: ``X = [1, month, rater dummies (reference omitted)]``,
    the scores and the batch (cluster) index of each rating."""
    t0 = panel["batch"].min()
    months = (panel["batch"] - t0).dt.days.to_numpy(dtype=float) / DAYS_PER_MONTH
    cols = [np.ones(len(panel)), months]
    if rater_effects:
        ref = default_reference(panel)
        for r in sorted(panel["rater"].unique()):
            if r != ref:
                cols.append((panel["rater"].to_numpy() == r).astype(float))
    X = np.column_stack(cols)
    cl = pd.factorize(panel["batch"])[0]
    return X, panel["score"].to_numpy(dtype=float), cl


def monthly_trend(panel: pd.DataFrame, *, rater_effects: bool = True, reps: int = 999,
                  seed: int = 0) -> TrendFit:
    """Monthly slope with rater fixed effects, SE clustered by batch, wild cluster bootstrap p.

    Notes
    -----
    ``y = a + b·month + Σ γ_r D_r + e`` (month = days since the first batch / 30.44).
    Cluster-robust (CR1) ``se(b)² = c·Σ_g (h_g'ê_g)²`` with ``h`` the slope row of
    ``(X'X)⁻¹X'`` and ``c = G/(G−1)·(n−1)/(n−k)`` — equals statsmodels
    ``cov_type="cluster"`` (tested). Restricted wild cluster bootstrap (WCR; Cameron, Gelbach
    & Miller 2008; Webb 2014 weights): fit under b = 0, ``y* = Xβ̃ + v_g·ũ``, refit, ``t*``
    with the same CR1 SE; ``p = mean(|t*| ≥ |t|)`` over ``reps`` draws seeded by ``seed``.

    References
    ----------
    .. [1] ``seeds/004_584ac5ccdc3466e2.txt``, "Two-stage estimation" (trend: case outcomes on
       month time with reviewer fixed effects, SE clustered by batch day, restricted wild
       cluster bootstrap with Webb weights, 999 replications; the paper's Table 4).
    .. [2] Cameron, A. C., Gelbach, J. B. & Miller, D. L. (2008). Bootstrap-based improvements
       for inference with clustered errors. *Rev. Econ. Stat.* 90(3), 414–427; Webb, M. D.
       (2023). Reworking wild bootstrap-based inference for clustered errors. *Can. J. Econ.*
       56(3), 839–858 (six-point weights, :func:`webb_weights`).
    .. [3] statsmodels: ``OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": batch})`` for
       the slope's CR1 SE and ``p_cluster`` (t with G − 1 df).
    .. [4] R: ``fwildclusterboot::boottest(lm(score ~ month + rater), param = "month",
       clustid = "batch", B = 999, type = "webb", impose_null = TRUE)``; Stata ``boottest``
       (Roodman, MacKinnon, Nielsen & Webb 2019).

    Examples
    --------
    >>> from core.drift.demo import demo_panel
    >>> from core.drift.panel import item_level, validate_panel
    >>> panel, _ = item_level(validate_panel(demo_panel()))
    >>> tr = monthly_trend(panel, reps=199, seed=1)
    >>> print(f"{tr.slope:+.3f} per month (se {tr.se:.3f}), wild-cluster p = {tr.p_wild:.3f}")
    +0.160 per month (se 0.015), wild-cluster p = 0.000
    >>> raw = monthly_trend(panel, rater_effects=False, reps=0)
    >>> raw.slope < tr.slope  # the harsher grader B joins in May and flattens the raw trend
    True
    """
    X, y, cl = trend_design(panel, rater_effects)
    n, k = X.shape
    G = int(cl.max()) + 1
    if G < 2 or np.ptp(X[:, 1]) == 0 or n <= k:
        return TrendFit(np.nan, np.nan, np.nan, np.nan, np.nan, n, G, reps, seed, rater_effects)
    XtXi = np.linalg.pinv(X.T @ X)
    H = X @ XtXi  # n x k; column 1 gives the slope's influence
    h = H[:, 1]
    c = G / (G - 1) * (n - 1) / (n - k)

    def slope_se(Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        B = XtXi @ (X.T @ Y)
        E = Y - X @ B
        S = np.zeros((G,) + E.shape[1:])
        np.add.at(S, cl, h.reshape((-1,) + (1,) * (E.ndim - 1)) * E)
        return B[1], np.sqrt(c * np.sum(S**2, axis=0))

    b, se = slope_se(y)
    b, se = float(b), float(se)
    t = b / se if se > 0 else np.nan
    p_cl = float(2 * stats.t.sf(abs(t), G - 1)) if np.isfinite(t) else np.nan
    Xr = np.delete(X, 1, axis=1)
    br = np.linalg.lstsq(Xr, y, rcond=None)[0]
    fitted_r = Xr @ br
    ur = y - fitted_r
    rng = np.random.default_rng(seed)
    p_wild = np.nan
    if reps > 0 and np.isfinite(t):
        exceed = 0
        chunk = 250
        done = 0
        while done < reps:
            m = min(chunk, reps - done)
            Wt = webb_weights(G * m, rng).reshape(m, G).T  # G x m
            Y = fitted_r[:, None] + ur[:, None] * Wt[cl]
            bs, ses = slope_se(Y)
            ts = np.where(ses > 0, bs / np.where(ses > 0, ses, 1.0), 0.0)
            exceed += int(np.sum(np.abs(ts) >= abs(t)))
            done += m
        p_wild = exceed / reps
    return TrendFit(b, se, t, p_cl, p_wild, n, G, reps, seed, rater_effects)


def category_trends(panel: pd.DataFrame, *, reps: int = 999, seed: int = 0) -> pd.DataFrame:
    """Per-category monthly slopes (rater FE) with Holm and Benjamini–Hochberg adjusted p.

    Returns ``category, slope, se, p_cluster, p_wild, p_holm, p_bh, n``; the adjustments are
    over the wild-bootstrap p-values of all categories
    (``statsmodels.stats.multitest.multipletests``, methods ``holm`` and ``fdr_bh``).

    References
    ----------
    .. [1] ``seeds/004_584ac5ccdc3466e2.txt``, "Two-stage estimation" (item trends with Holm
       and Benjamini–Hochberg corrections across the nine categories; the paper's Table 10).
    .. [2] Holm, S. (1979). A simple sequentially rejective multiple test procedure. *Scand. J.
       Stat.* 6(2), 65–70; Benjamini, Y. & Hochberg, Y. (1995). Controlling the false
       discovery rate. *JRSS B* 57(1), 289–300.
    .. [3] statsmodels: ``multipletests(p, method="holm")`` / ``method="fdr_bh"``; R:
       ``p.adjust(p, method = "holm")`` / ``method = "BH"``.

    Examples
    --------
    >>> from core.drift.demo import demo_panel
    >>> from core.drift.panel import validate_panel
    >>> ct = category_trends(validate_panel(demo_panel()), reps=99, seed=1)
    >>> list(ct["category"])
    ['audio_sync', 'latency', 'structure']
    >>> bool((ct["p_holm"] >= ct["p_bh"]).all())  # Holm never rejects more than BH
    True
    """
    from statsmodels.stats.multitest import multipletests

    cols = ["category", "slope", "se", "p_cluster", "p_wild", "p_holm", "p_bh", "n"]
    if "category" not in panel.columns:
        return pd.DataFrame(columns=cols)
    rows = []
    for i, (cat, sub) in enumerate(panel.groupby("category", sort=True)):
        tr = monthly_trend(sub.reset_index(drop=True), rater_effects=True, reps=reps,
                           seed=seed + i)
        rows.append({"category": cat, "slope": tr.slope, "se": tr.se,
                     "p_cluster": tr.p_cluster, "p_wild": tr.p_wild, "n": tr.n})
    df = pd.DataFrame(rows)
    df["p_holm"] = np.nan
    df["p_bh"] = np.nan
    ok = df["p_wild"].notna().to_numpy()
    if ok.any():
        pv = df.loc[ok, "p_wild"].to_numpy()
        df.loc[ok, "p_holm"] = multipletests(pv, method="holm")[1]
        df.loc[ok, "p_bh"] = multipletests(pv, method="fdr_bh")[1]
    return df[cols]


def deployment_contrasts(sev: SeverityFit, deployments: Iterable[Any],
                         width: int = 2) -> pd.DataFrame:
    """Mean of the ``width`` batches after each deployment minus the ``width`` before.

    Notes
    -----
    On stage 1's adjusted batch effects (rater fixed effects from the whole panel):
    ``c = mean(β̂_after) − mean(β̂_before)``, ``se = sqrt(w'Vw)`` with V the HC1 covariance;
    ``raw_contrast`` the same on raw means. A batch on the deployment day counts as after.
    With four batches a contrast is read by magnitude, not by a significance test.
    Returns ``deployment, before, after, contrast, se, raw_contrast, note``.

    References
    ----------
    .. [1] ``seeds/004_584ac5ccdc3466e2.txt``, "Two-stage estimation" (the two production
       batches after the date minus the two before, reviewer fixed effects, read by magnitude;
       the paper's Table 5).
    .. [2] statsmodels: ``res.t_test(w)`` on the stage 1 fit (``cov_type="HC1"``) gives the
       same contrast and SE; R: ``multcomp::glht(fit, linfct = rbind(w), vcov =
       sandwich::vcovHC(fit, type = "HC1"))``.

    Examples
    --------
    >>> from core.drift.demo import demo_panel
    >>> from core.drift.panel import item_level, validate_panel
    >>> from core.drift.severity import fit_severity
    >>> panel, _ = item_level(validate_panel(demo_panel()))
    >>> c = deployment_contrasts(fit_severity(panel), ["2026-04-12"])
    >>> print(c.loc[0, "before"], "|", c.loc[0, "after"])
    2026-03-29, 2026-04-06 | 2026-04-13, 2026-04-27
    >>> print(f"{c.loc[0, 'contrast']:+.2f} (se {c.loc[0, 'se']:.2f})")
    +0.20 (se 0.05)
    """
    b = sev.batches
    dates = b["batch"].to_numpy()
    rows = []
    for d in parse_dates(deployments):
        dd = np.datetime64(d)
        before = np.flatnonzero(dates < dd)[-width:]
        after = np.flatnonzero(dates >= dd)[:width]
        rec = {"deployment": d, "before": ", ".join(str(pd.Timestamp(dates[i]).date())
                                                     for i in before),
               "after": ", ".join(str(pd.Timestamp(dates[i]).date()) for i in after),
               "contrast": np.nan, "se": np.nan, "raw_contrast": np.nan, "note": ""}
        if len(before) < width or len(after) < width:
            rec["note"] = f"needs {width} batches on each side"
        else:
            w = np.zeros(len(dates))
            w[after] = 1.0 / width
            w[before] = -1.0 / width
            rec["contrast"] = float(w @ b["adjusted"].to_numpy())
            rec["se"] = float(math.sqrt(max(w @ sev.batch_cov @ w, 0.0)))
            rec["raw_contrast"] = float(w @ b["raw_mean"].to_numpy())
        rows.append(rec)
    return pd.DataFrame(rows, columns=["deployment", "before", "after", "contrast", "se",
                                       "raw_contrast", "note"])


