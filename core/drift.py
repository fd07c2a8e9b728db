"""Drift and grader severity — separate the grader from the screener, estimate drift, date expiry.

Method (SPEC §5, after ``seeds/004_584ac5ccdc3466e2.txt``): a rating is the sum of the evaluated
system's state in its batch, the grader's severity and noise, ``y_irt = θ_t + γ_r + ε_irt``.

* Stage 1 (:func:`fit_severity`): OLS of the score on batch and rater dummies with HC1 covariance;
  rater severities relative to a reference rater, batch effects on that rater's scale, raw batch
  means beside them and the composition term. :func:`check_identification` refuses a disconnected
  batch–rater graph. :func:`grader_gap_heterogeneity` tests whether a grader gap is stable across
  the batches two graders share (Cochran's Q).
* Stage 2 (:func:`fit_local_level`): a local-level model on the batch effects with their known
  sampling covariance; q (variance per week of the unlogged movement) by restricted maximum
  likelihood on q ≥ 0, boundary LR test, profile-likelihood interval, smoothed path.
* Horizon (:func:`horizon`): weeks until the predictive SD reaches a change ``D`` that matters.
* Trend (:func:`monthly_trend`), deployment contrasts (:func:`deployment_contrasts`), the outcome
  check (:func:`outcome_trend`) and the cost condition (:func:`break_even_share`).

:func:`analyse_drift` runs all of it; :func:`drift_result_json` gives the JSON the CLI prints and
the store keeps (the audit report reads ``result["horizon"]["date"]``).

Everything here is pure Python (numpy, scipy, pandas, statsmodels); it never imports streamlit.
Results are unrounded; rounding is a display matter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
from scipy import optimize, stats

from core.errors import IdentificationError, InputError
from core.tables import numeric_column, read_table, require_columns

__all__ = [
    "PANEL_COLUMNS",
    "DriftAnalysis",
    "Heterogeneity",
    "Horizon",
    "LocalLevelFit",
    "OutcomeTrend",
    "SeverityFit",
    "TrendFit",
    "analyse_drift",
    "break_even_share",
    "category_trends",
    "check_identification",
    "cochran_q",
    "default_reference",
    "demo_outcomes",
    "demo_panel",
    "deployment_contrasts",
    "drift_result_json",
    "drift_variants",
    "fit_local_level",
    "fit_severity",
    "format_drift_text",
    "grader_gap_heterogeneity",
    "horizon",
    "horizon_weeks",
    "reaudit_overdue",
    "kalman_local_level",
    "monthly_trend",
    "outcome_trend",
    "parse_dates",
    "predictive_sd",
    "read_outcome_series",
    "panel_from_audits",
    "read_panel",
    "restricted_loglik",
    "segments_from_resets",
    "severity_by_category",
    "smooth_gls",
    "validate_panel",
    "webb_weights",
]

PANEL_COLUMNS = ("batch", "rater", "score", "item", "category")
_REQUIRED = ["batch", "rater", "score"]
_DAYS_PER_WEEK = 7.0
_DAYS_PER_MONTH = 365.25 / 12.0
_CHI2_95_1DF = float(stats.chi2.ppf(0.95, 1))  # 3.8415
_DEFAULT_D_FRACTION = 0.2


# ============================================================================ data
def parse_dates(values: Iterable[Any], *, what: str = "deployments") -> list[pd.Timestamp]:
    """Parse ISO dates (``2026-04-12``) from a list or a comma-separated string.

    Raises :class:`InputError` naming ``what`` and the offending text.
    """
    if values is None:
        return []
    if isinstance(values, str):
        values = [v for v in values.split(",")]
    out = []
    for v in values:
        if v is None or (isinstance(v, str) and not v.strip()):
            continue
        if isinstance(v, (pd.Timestamp, date)):
            out.append(pd.Timestamp(v).normalize())
            continue
        ts = pd.to_datetime(str(v).strip(), format="ISO8601", errors="coerce")
        if pd.isna(ts):
            raise InputError(f"{what}: {str(v).strip()!r} is not an ISO date (YYYY-MM-DD)")
        out.append(pd.Timestamp(ts).tz_localize(None).normalize()
                   if getattr(ts, "tzinfo", None) else pd.Timestamp(ts).normalize())
    return sorted(set(out))


def validate_panel(df: pd.DataFrame, display: str = "panel") -> pd.DataFrame:
    """Check and normalise a ratings panel (SPEC §2).

    Parameters
    ----------
    df : DataFrame
        Columns ``batch`` (ISO date), ``rater``, ``score`` and optionally ``item``,
        ``category``; other columns are ignored.
    display : str
        File name used in messages.

    Returns
    -------
    DataFrame
        ``batch`` as normalised ``datetime64``, ``rater`` / ``item`` / ``category`` as stripped
        strings, ``score`` as float64; sorted by batch, original order otherwise.

    Raises
    ------
    InputError
        Missing columns; a batch that is not an ISO date, an empty rater/item/category or a score
        that is not a finite number — each with its 1-based data row and the column.
    """
    if df is None or len(df) == 0:
        raise InputError("the panel has no rows", file=display)
    require_columns(df, _REQUIRED, display, "a ratings panel (batch, rater, score)")
    out = pd.DataFrame(index=range(len(df)))
    raw = df["batch"].reset_index(drop=True)
    if pd.api.types.is_datetime64_any_dtype(raw):
        parsed = pd.to_datetime(raw, errors="coerce")
    else:
        parsed = pd.to_datetime(raw.astype("string").str.strip(), format="ISO8601",
                                errors="coerce", utc=True)
    bad = parsed.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        shown = raw.iloc[i]
        shown = "empty" if pd.isna(shown) or str(shown).strip() == "" else repr(str(shown))
        raise InputError(f"{shown} is not an ISO date (YYYY-MM-DD)", file=display, row=i + 1,
                         column="batch")
    if getattr(parsed.dt, "tz", None) is not None:
        parsed = parsed.dt.tz_convert(None)
    out["batch"] = parsed.dt.normalize().astype("datetime64[ns]")
    for col in ("rater", "item", "category"):
        if col not in df.columns:
            continue
        s = df[col].reset_index(drop=True)
        text = s.astype("string").str.strip()
        empty = (s.isna() | (text == "")).fillna(True).to_numpy()
        if empty.any():
            i = int(np.flatnonzero(empty)[0])
            raise InputError("is empty; every row needs a value here", file=display,
                             row=i + 1, column=col)
        out[col] = text.astype(str).to_numpy()
    out["score"] = numeric_column(df.reset_index(drop=True), "score", display)
    return out.sort_values("batch", kind="stable").reset_index(drop=True)


def read_panel(source: str | Path | bytes | IO[bytes] | pd.DataFrame, *,
               name: str | None = None) -> pd.DataFrame:
    """Read and validate a ratings panel from CSV / Parquet / JSON Lines (or a DataFrame).

    See :func:`validate_panel` for the columns and the errors.
    """
    if isinstance(source, pd.DataFrame):
        return validate_panel(source, name or "panel")
    df, _sha, display = read_table(source, name=name)
    return validate_panel(df, display)


def panel_from_audits(store: Any, audit_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """Build a ratings panel from stored audits (``core.store.Store``).

    batch = the audit's date (its first call's ``started_at``, else its creation time),
    rater = the model snapshot that produced the draw (``draws.model``; the frozen model id
    when missing), item = candidate, score = the draw's total (the screener's ``total`` when
    stored, else the weighted sum of its criterion scores, weights from the audit's criteria).
    Raises :class:`InputError` when no audit has draws.
    """
    audits = store.list_audits()
    ids = list(audits["audit_id"]) if audit_ids is None else list(audit_ids)
    frames = []
    for aid in ids:
        draws = store.load_draws(aid)
        if draws.empty:
            continue
        info = store.get_audit(aid)
        calls = store.load_calls(aid)
        started = pd.to_datetime(calls["started_at"]).min() if len(calls) else pd.NaT
        when = started if pd.notna(started) else pd.Timestamp(info["created_at"])
        frozen_model = str(info["freeze"].get("model") or info["freeze"].get("model_id")
                           or "unknown")
        totals = draws[draws["criterion"] == "total"]
        if totals.empty:
            crit = store.get_criteria(aid)
            weights = dict(zip(crit["criterion"], crit["weight"].fillna(1.0))) if len(crit) else {}
            w = draws["criterion"].map(weights).fillna(1.0)
            totals = (draws.assign(score=draws["score"] * w)
                      .groupby(["candidate_id", "run"], as_index=False)
                      .agg(score=("score", "sum"), model=("model", "first")))
        frames.append(pd.DataFrame({
            "batch": pd.Timestamp(when).date().isoformat(),
            "rater": totals["model"].fillna(frozen_model).astype(str).to_numpy(),
            "item": totals["candidate_id"].astype(str).to_numpy(),
            "score": totals["score"].to_numpy(dtype=float)}))
    if not frames:
        raise InputError("no stored audit has draws; run or import an audit first, or upload "
                         "a ratings panel")
    return validate_panel(pd.concat(frames, ignore_index=True), "stored audits")


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
    months = (days - days[0]).days / _DAYS_PER_MONTH
    dow = np.array([1.0, 1.1, 1.05, 1.0, 0.95, 0.6, 0.55])[days.day_of_week]
    interview = rng.poisson(46.0 * dow * np.exp(-0.10 * months))
    technical = rng.poisson(312.0 * dow)
    return pd.DataFrame({"date": days.strftime("%Y-%m-%d"), "interview": interview,
                         "technical": technical})


# ============================================================================ stage 1
def default_reference(panel: pd.DataFrame) -> str:
    """The rater present in the most batches (ties: more ratings, then name)."""
    g = panel.groupby("rater").agg(nb=("batch", "nunique"), n=("score", "size")).reset_index()
    g = g.sort_values(["nb", "n", "rater"], ascending=[False, False, True])
    return str(g["rater"].iloc[0])


def check_identification(panel: pd.DataFrame) -> None:
    """Raise :class:`IdentificationError` when the batch–rater graph is not connected.

    Notes
    -----
    Severities and batch effects are comparable only within a connected set of batches and
    raters (Abowd, Kramarz & Margolis 1999: connected mover sets). The message names every
    group's raters and batches and says how to connect them.
    """
    batches = [f"b:{b}" for b in panel["batch"].dt.strftime("%Y-%m-%d")]
    raters = [f"r:{r}" for r in panel["rater"]]
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for b, r in set(zip(batches, raters)):
        rb, rr = find(b), find(r)
        if rb != rr:
            parent[rb] = rr
    groups: dict[str, list[str]] = {}
    for node in parent:
        groups.setdefault(find(node), []).append(node)
    if len(groups) <= 1:
        return
    parts = []
    for k, nodes in enumerate(sorted(groups.values(), key=lambda v: min(v)), start=1):
        rs = sorted(n[2:] for n in nodes if n.startswith("r:"))
        bs = sorted(n[2:] for n in nodes if n.startswith("b:"))
        parts.append(f"group {k}: rater(s) {', '.join(rs)}; batch(es) {', '.join(bs)}")
    raise IdentificationError(
        "the batch–rater graph is not connected, so severities and batch effects cannot be put "
        f"on one scale ({len(groups)} separate groups — " + " | ".join(parts) + "). Add a batch "
        "in which a rater of one group scores alongside a rater of the other, or analyse the "
        "groups separately.")


@dataclass(frozen=True, eq=False)
class SeverityFit:
    """Stage 1 result.

    Attributes
    ----------
    reference : str
        The reference rater (severity 0 by construction).
    raters : DataFrame
        One row per non-reference rater: ``rater, severity, se, ci_low, ci_high, n, n_batches``
        (empty with one rater).
    batches : DataFrame
        ``batch, n, raw_mean, adjusted, se, composition``; ``adjusted`` is the batch effect as if
        scored by the reference rater, ``composition = raw_mean − adjusted``.
    batch_cov : ndarray
        HC1 covariance of the adjusted batch effects (T × T).
    stage2_cov : ndarray
        ``batch_cov`` with its diagonal bounded below and a 1e-9 ridge (see
        :func:`fit_severity`), for stage 2.
    coef, cov : ndarray
        All coefficients (batch effects then rater severities) and their HC1 covariance.
    names : tuple of str
    n, df_resid : int
    """

    reference: str
    raters: pd.DataFrame
    batches: pd.DataFrame
    batch_cov: np.ndarray
    stage2_cov: np.ndarray
    coef: np.ndarray
    cov: np.ndarray
    names: tuple[str, ...]
    n: int
    df_resid: int


def _weighted_gram(bi: np.ndarray, ri: np.ndarray, w: np.ndarray, T: int, R1: int) -> np.ndarray:
    """X' diag(w) X for X = [batch dummies | non-reference rater dummies] without forming X."""
    k = T + R1
    G = np.zeros((k, k))
    G[np.arange(T), np.arange(T)] = np.bincount(bi, weights=w, minlength=T)
    has = ri >= 0
    if R1:
        rr = np.bincount(ri[has], weights=w[has], minlength=R1)
        G[T + np.arange(R1), T + np.arange(R1)] = rr
        cross = np.zeros((T, R1))
        np.add.at(cross, (bi[has], ri[has]), w[has])
        G[:T, T:] = cross
        G[T:, :T] = cross.T
    return G


def fit_severity(panel: pd.DataFrame, reference: str | None = None, *,
                 level: float = 0.95) -> SeverityFit:
    """Stage 1: OLS of score on batch and rater dummies with HC1 covariance.

    Parameters
    ----------
    panel : DataFrame
        A validated panel (:func:`read_panel`).
    reference : str, optional
        The reference rater; default :func:`default_reference`.
    level : float
        Confidence level of the severity intervals.

    Returns
    -------
    SeverityFit

    Notes
    -----
    Model ``y_i = β_{b(i)} + γ_{r(i)} + e_i`` with ``γ_ref = 0`` (one dummy per batch, no
    intercept). ``β̂ = (X'X)⁻¹X'y``; HC1 covariance
    ``n/(n−k) · (X'X)⁻¹ X' diag(ê²) X (X'X)⁻¹``; intervals ``β̂ ± z·se`` (normal quantile,
    as statsmodels uses with a robust covariance). Residuals sum to zero within each batch,
    so the raw batch mean equals
    ``β̂_b + Σ_r share_rb γ̂_r`` and the composition term is exactly ``raw − adjusted``.
    For stage 2 each diagonal element of the batch covariance is bounded below by a quarter
    of its classical OLS variance ``σ̂²[(X'X)⁻¹]_bb`` (a batch whose scores are all equal still
    carries sampling error; the paper bounds zero-event variances the same way).
    Validated against ``statsmodels.OLS(...).fit(cov_type="HC1")`` (params, bse, conf_int).

    Raises
    ------
    IdentificationError
        Disconnected batch–rater graph, or an unknown reference rater.
    InputError
        No residual degrees of freedom.
    """
    check_identification(panel)
    ref = default_reference(panel) if reference is None else str(reference)
    raters_all = sorted(panel["rater"].unique().tolist())
    if ref not in raters_all:
        raise IdentificationError(f"reference rater {ref!r} is not in the panel; choose one of "
                                  f"{', '.join(raters_all)}")
    others = [r for r in raters_all if r != ref]
    batch_vals = np.sort(panel["batch"].unique())
    T, R1 = len(batch_vals), len(others)
    bi = np.searchsorted(batch_vals, panel["batch"].to_numpy())
    rmap = {r: j for j, r in enumerate(others)}
    ri = np.array([rmap.get(r, -1) for r in panel["rater"]], dtype=int)
    y = panel["score"].to_numpy(dtype=float)
    n, k = len(y), T + R1
    if n - k <= 0:
        raise InputError(f"the panel has {n} ratings for {k} parameters ({T} batches, "
                         f"{R1 + 1} raters): add ratings so each batch has more than one")
    XtX = _weighted_gram(bi, ri, np.ones(n), T, R1)
    Xty = np.concatenate([np.bincount(bi, weights=y, minlength=T),
                          np.bincount(ri[ri >= 0], weights=y[ri >= 0], minlength=R1)])
    try:
        XtX_inv = np.linalg.inv(XtX)
    except np.linalg.LinAlgError:  # pragma: no cover - connected graphs are full rank
        raise IdentificationError("the batch and rater dummies are collinear") from None
    coef = XtX_inv @ Xty
    gamma = np.concatenate([coef[T:], [0.0]])  # index -1 -> reference -> 0
    resid = y - coef[bi] - gamma[ri]
    meat = _weighted_gram(bi, ri, resid**2, T, R1)
    cov = n / (n - k) * XtX_inv @ meat @ XtX_inv
    cov = (cov + cov.T) / 2
    se = np.sqrt(np.clip(np.diag(cov), 0, None))
    tq = float(stats.norm.ppf(0.5 + level / 2))
    sigma2 = float(resid @ resid) / (n - k)

    counts = np.bincount(bi, minlength=T)
    raw = np.bincount(bi, weights=y, minlength=T) / counts
    batches = pd.DataFrame({
        "batch": pd.to_datetime(batch_vals), "n": counts.astype(int), "raw_mean": raw,
        "adjusted": coef[:T], "se": se[:T], "composition": raw - coef[:T]})
    rows = []
    for j, r in enumerate(others):
        m = panel["rater"].to_numpy() == r
        rows.append({"rater": r, "severity": coef[T + j], "se": se[T + j],
                     "ci_low": coef[T + j] - tq * se[T + j],
                     "ci_high": coef[T + j] + tq * se[T + j], "n": int(m.sum()),
                     "n_batches": int(panel.loc[m, "batch"].nunique())})
    raters = pd.DataFrame(rows, columns=["rater", "severity", "se", "ci_low", "ci_high", "n",
                                         "n_batches"])
    bcov = cov[:T, :T].copy()
    floor = 0.25 * sigma2 * np.diag(XtX_inv)[:T]
    s2 = bcov.copy()
    d = np.diag(s2)
    s2[np.diag_indices(T)] = np.maximum(d, floor)
    # a ridge of 1e-9 of the typical variance keeps V positive definite when HC1 is rank
    # deficient (few residual degrees of freedom) or every score is identical
    scale = max(float(np.mean(np.diag(s2))), sigma2 / max(int(counts.max()), 1), 1e-12)
    s2[np.diag_indices(T)] += 1e-9 * scale
    names = tuple([f"batch[{pd.Timestamp(b).date()}]" for b in batch_vals]
                  + [f"rater[{r}]" for r in others])
    return SeverityFit(reference=ref, raters=raters, batches=batches, batch_cov=bcov,
                       stage2_cov=s2, coef=coef, cov=cov, names=names, n=n, df_resid=n - k)


def severity_by_category(panel: pd.DataFrame, reference: str | None = None) -> pd.DataFrame:
    """Stage 1 separately for each category (severity differs by category).

    Returns a DataFrame ``category, rater, severity, se, ci_low, ci_high, n, note``; a category
    that cannot be fitted (disconnected, one rater, too few ratings) gets one row with the
    reason in ``note``. Empty when the panel has no ``category`` column.
    """
    cols = ["category", "rater", "severity", "se", "ci_low", "ci_high", "n", "note"]
    if "category" not in panel.columns:
        return pd.DataFrame(columns=cols)
    ref = default_reference(panel) if reference is None else reference
    out = []
    for cat, sub in panel.groupby("category", sort=True):
        try:
            if ref not in set(sub["rater"]):
                raise IdentificationError(f"reference rater {ref!r} has no ratings here")
            fit = fit_severity(sub.reset_index(drop=True), ref)
        except (IdentificationError, InputError) as exc:
            out.append({"category": cat, "rater": None, "severity": np.nan, "se": np.nan,
                        "ci_low": np.nan, "ci_high": np.nan, "n": len(sub), "note": str(exc)})
            continue
        if fit.raters.empty:
            out.append({"category": cat, "rater": None, "severity": np.nan, "se": np.nan,
                        "ci_low": np.nan, "ci_high": np.nan, "n": len(sub),
                        "note": "one rater only: no severity"})
        for rec in fit.raters.to_dict("records"):
            out.append({"category": cat, **{k: rec[k] for k in cols[1:7]}, "note": ""})
    return pd.DataFrame(out, columns=cols)


@dataclass(frozen=True, eq=False)
class Heterogeneity:
    """A pooled difference and Cochran's Q test of its homogeneity.

    ``per_batch`` (when built from a panel) has ``batch, diff, se, n_rater, n_reference``.
    """

    pooled: float
    se: float
    q: float
    df: int
    p: float
    k: int
    rater: str | None = None
    reference: str | None = None
    per_batch: pd.DataFrame = field(default_factory=pd.DataFrame)


def cochran_q(diffs: Sequence[float], ses: Sequence[float]) -> Heterogeneity:
    """Inverse-variance pooled difference and Cochran's Q.

    Notes
    -----
    ``w_b = 1/se_b²``, ``d̄ = Σ w_b d_b / Σ w_b``, ``se(d̄) = (Σ w_b)^{-1/2}``,
    ``Q = Σ w_b (d_b − d̄)²`` on ``df = k − 1``, ``p = P(χ²_df > Q)``.
    Checked against the paper's Table 3 arithmetic: Q = 19.0 on 8 df gives p = 0.015.
    """
    d = np.asarray(diffs, dtype=float)
    s = np.asarray(ses, dtype=float)
    ok = np.isfinite(d) & np.isfinite(s) & (s > 0)
    d, s = d[ok], s[ok]
    k = len(d)
    if k == 0:
        return Heterogeneity(np.nan, np.nan, np.nan, 0, np.nan, 0)
    w = 1.0 / s**2
    pooled = float(np.sum(w * d) / np.sum(w))
    q = float(np.sum(w * (d - pooled) ** 2))
    df = k - 1
    p = float(stats.chi2.sf(q, df)) if df > 0 else np.nan
    return Heterogeneity(pooled, float(1.0 / math.sqrt(np.sum(w))), q, df, p, k)


def grader_gap_heterogeneity(panel: pd.DataFrame, rater: str,
                             reference: str | None = None) -> Heterogeneity:
    """Is the gap between ``rater`` and the reference the same in every batch they share?

    Notes
    -----
    For each batch where both scored at least two items: ``d_b = ȳ_rater − ȳ_ref`` with
    ``se_b² = s²_rater/n_rater + s²_ref/n_ref`` (ddof 1), then :func:`cochran_q`.
    """
    ref = default_reference(panel) if reference is None else reference
    rows = []
    for b, sub in panel.groupby("batch", sort=True):
        a = sub.loc[sub["rater"] == rater, "score"].to_numpy()
        r = sub.loc[sub["rater"] == ref, "score"].to_numpy()
        if len(a) < 2 or len(r) < 2:
            continue
        se = math.sqrt(a.var(ddof=1) / len(a) + r.var(ddof=1) / len(r))
        rows.append({"batch": b, "diff": a.mean() - r.mean(), "se": se, "n_rater": len(a),
                     "n_reference": len(r)})
    per = pd.DataFrame(rows, columns=["batch", "diff", "se", "n_rater", "n_reference"])
    h = cochran_q(per["diff"], per["se"])
    return Heterogeneity(h.pooled, h.se, h.q, h.df, h.p, h.k, rater, ref, per)


# ============================================================================ stage 2
def segments_from_resets(batch_dates: Sequence[Any], resets: Iterable[Any] = ()) -> np.ndarray:
    """Segment label per batch: a reset date ``d`` with ``t_b < d ≤ t_{b+1}`` starts a new one.

    A batch dated on the reset day counts as after it.
    """
    t = pd.to_datetime(pd.Series(list(batch_dates))).to_numpy()
    seg = np.zeros(len(t), dtype=int)
    rs = [np.datetime64(pd.Timestamp(d)) for d in resets]
    for b in range(1, len(t)):
        jump = any(t[b - 1] < d <= t[b] for d in rs)
        seg[b] = seg[b - 1] + (1 if jump else 0)
    return seg


def _weeks(batch_dates: Sequence[Any]) -> np.ndarray:
    t = pd.to_datetime(pd.Series(list(batch_dates)))
    return ((t - t.iloc[0]).dt.days.to_numpy(dtype=float)) / _DAYS_PER_WEEK


def _rw_matrix(weeks: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Cov of a unit-variance-per-week random walk started at 0 at each segment's first batch."""
    start = np.array([weeks[np.flatnonzero(seg == s)[0]] for s in seg])
    el = weeks - start
    W = np.minimum.outer(el, el)
    W[seg[:, None] != seg[None, :]] = 0.0
    return W


def _z(seg: np.ndarray) -> np.ndarray:
    S = int(seg.max()) + 1
    Z = np.zeros((len(seg), S))
    Z[np.arange(len(seg)), seg] = 1.0
    return Z


def restricted_loglik(y: Sequence[float], weeks: Sequence[float], V: np.ndarray, q: float,
                      segments: Sequence[int] | None = None) -> float:
    """Restricted (diffuse) log-likelihood of the local-level model, by brute-force GLS.

    Notes
    -----
    ``y = Zμ + w + e``: ``μ`` one diffuse level per segment (``Z`` segment indicators), ``w``
    a random walk with ``Cov(w_b, w_c) = q·min(τ_b, τ_c)`` inside a segment (``τ`` weeks since
    the segment's first batch), ``e ~ N(0, V)``. With ``Σ = qW + V`` and
    ``P = Σ⁻¹ − Σ⁻¹Z(Z'Σ⁻¹Z)⁻¹Z'Σ⁻¹``:
    ``ℓ_R(q) = −½[log|Σ| + log|Z'Σ⁻¹Z| + y'Py] − ½(T − S)·log 2π``.
    This is the exact diffuse likelihood up to a constant free of q; the Kalman filter with an
    exact diffuse start (:func:`kalman_local_level`) gives the same up to that constant.
    """
    y = np.asarray(y, dtype=float)
    w = np.asarray(weeks, dtype=float)
    seg = np.zeros(len(y), dtype=int) if segments is None else np.asarray(segments, dtype=int)
    V = np.diag(V) if np.ndim(V) == 1 else np.asarray(V, dtype=float)
    Sig = q * _rw_matrix(w, seg) + V
    Z = _z(seg)
    L = np.linalg.cholesky(Sig)
    logdet = 2.0 * np.sum(np.log(np.diag(L)))
    Li_y = np.linalg.solve(L, y)
    Li_Z = np.linalg.solve(L, Z)
    A = Li_Z.T @ Li_Z
    La = np.linalg.cholesky(A)
    logdetA = 2.0 * np.sum(np.log(np.diag(La)))
    b = Li_Z.T @ Li_y
    quad = float(Li_y @ Li_y - b @ np.linalg.solve(A, b))
    T, S = len(y), Z.shape[1]
    return -0.5 * (logdet + logdetA + quad) - 0.5 * (T - S) * math.log(2 * math.pi)


def smooth_gls(y: Sequence[float], weeks: Sequence[float], V: np.ndarray, q: float,
               segments: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Smoothed state and its standard error with the full sampling covariance ``V``.

    Notes
    -----
    ``θ̂ = Zμ̂ + qWΣ⁻¹(y − Zμ̂)`` with ``μ̂`` the GLS level; ``θ̂ = Ly`` with ``LZ = Z`` so the
    error is ``L(w + e) − w`` and ``Var = LΣL' − qLW − qWL' + qW``. With diagonal ``V`` this
    equals the fixed-interval (RTS) smoother of :func:`kalman_local_level` with exact diffuse
    start (tested).
    """
    y = np.asarray(y, dtype=float)
    seg = np.zeros(len(y), dtype=int) if segments is None else np.asarray(segments, dtype=int)
    V = np.diag(V) if np.ndim(V) == 1 else np.asarray(V, dtype=float)
    G = q * _rw_matrix(np.asarray(weeks, dtype=float), seg)
    Sig = G + V
    Z = _z(seg)
    Si = np.linalg.inv(Sig)
    A = np.linalg.solve(Z.T @ Si @ Z, Z.T @ Si)
    I = np.eye(len(y))
    L = Z @ A + G @ Si @ (I - Z @ A)
    cov = L @ Sig @ L.T - L @ G - G @ L.T + G
    return L @ y, np.sqrt(np.clip(np.diag(cov), 0, None))


@dataclass(frozen=True)
class _KalmanOut:
    loglik: float
    filtered: np.ndarray
    filtered_var: np.ndarray
    smoothed: np.ndarray
    smoothed_var: np.ndarray


def kalman_local_level(y: Sequence[float], weeks: Sequence[float], v: Sequence[float], q: float,
                       segments: Sequence[int] | None = None) -> _KalmanOut:
    """Kalman filter and RTS smoother of the local-level model with diagonal sampling variance.

    Parameters
    ----------
    y, weeks, v : arrays of length T
        Batch effects, their times in weeks, their sampling variances.
    q : float
        State variance per week.
    segments : ints, optional
        Segment labels (:func:`segments_from_resets`); the state is diffuse at each start.

    Notes
    -----
    Exact diffuse start: the first batch of a segment gives ``a = y``, ``P = v`` and no
    likelihood term. Then ``P⁻ = P + qΔt``, ``F = P⁻ + v_b``, ``ν = y_b − a``,
    ``ℓ += −½(log 2π + log F + ν²/F)``, ``a += P⁻ν/F``, ``P = P⁻v_b/F``. The smoother is
    Rauch–Tung–Striebel within each segment. Equals :func:`restricted_loglik` up to a constant
    free of q (tested on random panels).
    """
    y = np.asarray(y, dtype=float)
    w = np.asarray(weeks, dtype=float)
    v = np.asarray(v, dtype=float)
    T = len(y)
    seg = np.zeros(T, dtype=int) if segments is None else np.asarray(segments, dtype=int)
    a = np.zeros(T)
    P = np.zeros(T)
    Ppred = np.zeros(T)
    ll = 0.0
    for b in range(T):
        if b == 0 or seg[b] != seg[b - 1]:
            a[b], P[b], Ppred[b] = y[b], v[b], np.inf
            continue
        pp = P[b - 1] + q * (w[b] - w[b - 1])
        F = pp + v[b]
        nu = y[b] - a[b - 1]
        ll += -0.5 * (math.log(2 * math.pi) + math.log(F) + nu * nu / F)
        a[b] = a[b - 1] + pp / F * nu
        P[b] = pp * v[b] / F
        Ppred[b] = pp
    sm, sv = a.copy(), P.copy()
    for b in range(T - 2, -1, -1):
        if seg[b + 1] != seg[b]:
            continue
        J = P[b] / Ppred[b + 1]
        sm[b] = a[b] + J * (sm[b + 1] - a[b])
        sv[b] = P[b] + J * J * (sv[b + 1] - Ppred[b + 1])
    return _KalmanOut(ll, a, P, sm, sv)


@dataclass(frozen=True, eq=False)
class LocalLevelFit:
    """Stage 2 result (variance per week ``q`` in squared score units).

    Attributes
    ----------
    q, q_ci95 : float, (float, float)
        REML estimate on q ≥ 0 and its profile-likelihood interval (upper may be ``inf``).
    innovation_sd, innovation_sd_ci95 : SD of one week's movement, ``sqrt(q)``.
    lr, lr_pvalue : LR statistic of q = 0 and its boundary p-value ``½·P(χ²₁ > LR)``.
    loglik, loglik0 : restricted log-likelihood at q̂ and at 0.
    smoothed, smoothed_se : smoothed path and its SE at each batch.
    last_variance : ``P_T``, smoothed variance of the state at the last batch.
    identified : False when no segment has two batches (q not estimable; fields are NaN).
    """

    q: float
    q_ci95: tuple[float, float]
    innovation_sd: float
    innovation_sd_ci95: tuple[float, float]
    lr: float
    lr_pvalue: float
    loglik: float
    loglik0: float
    smoothed: np.ndarray
    smoothed_se: np.ndarray
    last_variance: float
    segments: np.ndarray
    weeks: np.ndarray
    y: np.ndarray
    V: np.ndarray
    covariance: str
    identified: bool = True

    def last_variance_at(self, q: float) -> float:
        """``P_T`` at another value of q (for the horizon interval)."""
        if not np.isfinite(q):
            return float(self.V[-1, -1]) if self.V.ndim == 2 else float(self.V[-1])
        _, se = smooth_gls(self.y, self.weeks, self.V, q, self.segments)
        return float(se[-1] ** 2)


def _q_scale(y: np.ndarray, w: np.ndarray, seg: np.ndarray, V: np.ndarray) -> float:
    same = seg[1:] == seg[:-1]
    dt = np.diff(w)[same]
    dy = np.diff(y)[same]
    s = float(np.mean(dy**2 / dt)) if len(dt) else 0.0
    vbar = float(np.mean(np.diag(V)))
    return max(s, vbar / max(float(np.mean(dt)) if len(dt) else 1.0, 1e-9), 1e-12)


def fit_local_level(y: Sequence[float], weeks: Sequence[float], V: np.ndarray, *,
                    segments: Sequence[int] | None = None, level: float = 0.95) -> LocalLevelFit:
    """Stage 2: local-level model on the batch effects with known sampling covariance.

    Parameters
    ----------
    y : batch effects (stage 1 ``adjusted``), in time order.
    weeks : their times in weeks.
    V : (T, T) or (T,) sampling covariance (or variances).
    segments : segment labels; the state restarts diffuse at each (deployments, free steps).
    level : confidence level of the profile interval.

    Notes
    -----
    ``β̂_b = θ_b + e_b``, ``e ~ N(0, V)``; ``θ_{b+1} = θ_b + η``, ``η ~ N(0, q·Δt_b)``.
    q maximises :func:`restricted_loglik` on q ≥ 0: a log grid (0 plus 80 points spanning
    10⁻⁶…10³ times a data scale) then a bounded Brent refinement around the best point.
    ``LR = 2(ℓ(q̂) − ℓ(0))``, ``p = ½·P(χ²₁ > LR)`` (Self & Liang boundary mixture; q̂ = 0
    gives p = 0.5). Interval ``{q ≥ 0 : 2(ℓ(q̂) − ℓ(q)) ≤ χ²₁(level)}`` by root finding
    (upper end ``inf`` when the likelihood never falls that far). Smoothed path and SE from
    :func:`smooth_gls` at q̂. Validated by simulation (recovery and interval coverage) and by
    equality with the Kalman diffuse likelihood.
    """
    y = np.asarray(y, dtype=float)
    w = np.asarray(weeks, dtype=float)
    seg = np.zeros(len(y), dtype=int) if segments is None else np.asarray(segments, dtype=int)
    Vm = np.diag(np.asarray(V, dtype=float)) if np.ndim(V) == 1 else np.asarray(V, dtype=float)
    cov_kind = "diagonal" if np.allclose(Vm, np.diag(np.diag(Vm))) else "full"
    T, S = len(y), int(seg.max()) + 1 if len(seg) else 0
    nan2 = (np.nan, np.nan)
    if T - S < 1:
        sm, se = (y.copy(), np.sqrt(np.diag(Vm))) if T else (y, y)
        return LocalLevelFit(np.nan, nan2, np.nan, nan2, np.nan, np.nan, np.nan, np.nan, sm,
                             se, float(Vm[-1, -1]) if T else np.nan, seg, w, y, Vm, cov_kind,
                             identified=False)

    def ll(q: float) -> float:
        return restricted_loglik(y, w, Vm, max(q, 0.0), seg)

    scale = _q_scale(y, w, seg, Vm)
    grid = np.concatenate([[0.0], scale * np.logspace(-6, 3, 81)])
    vals = np.array([ll(q) for q in grid])
    i = int(np.argmax(vals))
    if i <= 1:
        lo, hi = 0.0, grid[2]
        res = optimize.minimize_scalar(lambda q: -ll(q), bounds=(lo, hi), method="bounded",
                                       options={"xatol": hi * 1e-8})
        cands = [(vals[0], 0.0), (vals[i], grid[i]), (-res.fun, float(res.x))]
    else:
        lo, hi = math.log(grid[i - 1]), math.log(grid[min(i + 1, len(grid) - 1)])
        res = optimize.minimize_scalar(lambda lq: -ll(math.exp(lq)), bounds=(lo, hi),
                                       method="bounded", options={"xatol": 1e-8})
        cands = [(vals[i], grid[i]), (-res.fun, math.exp(float(res.x)))]
    lmax, qhat = max(cands)
    l0 = vals[0]
    lr = max(0.0, 2.0 * (lmax - l0))
    if lr < 1e-9:
        lr, qhat, lmax = 0.0, (0.0 if l0 >= lmax - 1e-9 else qhat), max(lmax, l0)
    p = 0.5 * float(stats.chi2.sf(lr, 1)) if lr > 0 else 0.5
    crit = float(stats.chi2.ppf(level, 1))
    target = lmax - crit / 2.0

    def f(q: float) -> float:
        return ll(q) - target

    if l0 >= target:
        q_lo = 0.0
    else:
        q_lo = float(optimize.brentq(f, 0.0, qhat, xtol=qhat * 1e-10 + 1e-300, maxiter=200))
    q_hi = math.inf
    start = max(qhat, scale * 1e-6)
    cur = start
    prev = qhat
    for _ in range(60):
        cur = cur * 4.0
        if f(cur) < 0:
            q_hi = float(optimize.brentq(f, prev, cur, xtol=cur * 1e-10, maxiter=200))
            break
        prev = cur
        if cur > scale * 1e9:
            break
    sm, se = smooth_gls(y, w, Vm, qhat, seg)
    return LocalLevelFit(
        q=float(qhat), q_ci95=(q_lo, q_hi), innovation_sd=math.sqrt(qhat),
        innovation_sd_ci95=(math.sqrt(q_lo), math.sqrt(q_hi)), lr=float(lr), lr_pvalue=p,
        loglik=float(lmax), loglik0=float(l0), smoothed=sm, smoothed_se=se,
        last_variance=float(se[-1] ** 2), segments=seg, weeks=w, y=y, V=Vm, covariance=cov_kind)


def drift_variants(sev: SeverityFit, deployments: Iterable[Any] = (),
                   extra_steps: Iterable[Any] = (), *, covariance: str = "full") -> pd.DataFrame:
    """q under three assumptions (the paper's Table 6): every interval counts; the state jumps
    freely at deployments; and also at user-chosen extra step dates.

    Returns ``variant, q, q_low, q_high, innovation_sd, sd_low, sd_high, lr, lr_pvalue,
    segments``.
    """
    deps = parse_dates(deployments)
    extra = parse_dates(extra_steps, what="extra step dates")
    specs = [("all intervals", [])]
    if deps:
        specs.append(("deployments free", deps))
    if extra:
        specs.append(("deployments + extra steps free", deps + extra))
    rows = []
    for name, resets in specs:
        fit = _stage2(sev, resets, covariance)
        rows.append({"variant": name, "q": fit.q, "q_low": fit.q_ci95[0],
                     "q_high": fit.q_ci95[1], "innovation_sd": fit.innovation_sd,
                     "sd_low": fit.innovation_sd_ci95[0], "sd_high": fit.innovation_sd_ci95[1],
                     "lr": fit.lr, "lr_pvalue": fit.lr_pvalue,
                     "segments": int(fit.segments.max()) + 1})
    return pd.DataFrame(rows)


def _stage2(sev: SeverityFit, resets: Iterable[Any], covariance: str) -> LocalLevelFit:
    if covariance not in ("full", "diagonal"):
        raise InputError(f"covariance must be 'full' or 'diagonal', not {covariance!r}")
    dates = sev.batches["batch"]
    V = sev.stage2_cov if covariance == "full" else np.diag(np.diag(sev.stage2_cov))
    y, w = sev.batches["adjusted"].to_numpy(), _weeks(dates)
    seg = segments_from_resets(dates, resets)
    try:
        return fit_local_level(y, w, V, segments=seg)
    except (np.linalg.LinAlgError, ValueError):
        # numerically degenerate (e.g. no sampling noise at all): report q as not estimable
        nan2 = (np.nan, np.nan)
        return LocalLevelFit(np.nan, nan2, np.nan, nan2, np.nan, np.nan, np.nan, np.nan, y.copy(),
                             np.sqrt(np.diag(V)), float(V[-1, -1]), seg, w, y, V, covariance,
                             identified=False)


# ============================================================================ horizon
def predictive_sd(last_variance: float, q: float, weeks: float | np.ndarray) -> float | np.ndarray:
    """Predictive SD of the state ``h`` weeks after the last batch: ``sqrt(P_T + q·h)``.

    Notes
    -----
    Paper §5.3 arithmetic: innovation SD 0.086/week and P_T giving 0.18 at 4 weeks ⇒ 0.25 at
    8 and 0.30 at 12 weeks (tested).
    """
    return np.sqrt(last_variance + q * np.asarray(weeks, dtype=float))


def horizon_weeks(D: float, last_variance: float, q: float) -> float:
    """Weeks until the predictive SD reaches ``D``: ``s = (D² − P_T)/q``.

    Notes
    -----
    ``0`` when ``D² ≤ P_T`` (already beyond); ``inf`` when ``q = 0``. Paper §5.3: innovation SD
    0.086, SD 0.18 at 4 weeks, D = 0.20 ⇒ about 5 weeks (tested).
    """
    gap = D * D - last_variance
    if gap <= 0:
        return 0.0
    if not q > 0:
        return math.inf
    if not math.isfinite(q):
        return 0.0
    return gap / q


@dataclass(frozen=True)
class Horizon:
    """Re-audit horizon: ``weeks`` (with ``weeks_ci95`` from q's interval) until the predictive
    SD reaches ``D``, the ``date`` (last batch + weeks; ``None`` when never) and the predictive
    SD at 4, 8 and 12 weeks."""

    D: float
    weeks: float
    weeks_ci95: tuple[float, float]
    date: date | None
    sd_at_weeks: dict[int, float]
    last_variance: float
    q: float
    last_batch: date


def _add_weeks(d: date, weeks: float) -> date | None:
    if not math.isfinite(weeks) or weeks > 52 * 200:
        return None
    return d + timedelta(days=math.floor(weeks * 7.0))


def horizon(fit: LocalLevelFit, D: float, last_batch: Any) -> Horizon:
    """The re-audit horizon from a stage 2 fit (SPEC §5).

    Notes
    -----
    ``s = (D² − P_T)/q`` (:func:`horizon_weeks`); the interval evaluates the same formula at
    the ends of q's profile interval, with ``P_T`` recomputed at each end (a larger q gives a
    shorter horizon). The date is ``last_batch + s`` weeks, rounded down to a day.
    """
    if not (D is not None and math.isfinite(D) and D > 0):
        raise InputError(f"D must be a positive number, not {D!r}")
    last = pd.Timestamp(last_batch).date()
    if not fit.identified:
        return Horizon(D, math.nan, (math.nan, math.nan), None,
                       {h: math.nan for h in (4, 8, 12)}, fit.last_variance, math.nan, last)
    q, pt = fit.q, fit.last_variance
    s = horizon_weeks(D, pt, q)
    q_lo, q_hi = fit.q_ci95
    s_short = horizon_weeks(D, fit.last_variance_at(q_hi), q_hi) if math.isfinite(q_hi) else 0.0
    s_long = horizon_weeks(D, fit.last_variance_at(q_lo), q_lo)
    sds = {h: float(predictive_sd(pt, q, h)) for h in (4, 8, 12)}
    return Horizon(D, s, (min(s_short, s), max(s_long, s)), _add_weeks(last, s), sds, pt, q,
                   last)


# ============================================================================ trend
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


def _trend_design(panel: pd.DataFrame, rater_effects: bool) -> tuple[np.ndarray, np.ndarray,
                                                                       np.ndarray]:
    t0 = panel["batch"].min()
    months = (panel["batch"] - t0).dt.days.to_numpy(dtype=float) / _DAYS_PER_MONTH
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
    """
    X, y, cl = _trend_design(panel, rater_effects)
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


# ============================================================================ outcomes
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
    months = (d["date"] - d["date"].iloc[0]).dt.days.to_numpy(float) / _DAYS_PER_MONTH
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
    """
    for nm, v in (("cost per month", cost_per_month), ("value per escalation",
                                                       value_per_escalation),
                  ("avoided escalations per month", avoided_per_month)):
        if v is None or not math.isfinite(float(v)) or float(v) < 0:
            raise InputError(f"{nm} must be a finite number ≥ 0, not {v!r}")
    denom = float(value_per_escalation) * float(avoided_per_month)
    return math.inf if denom == 0 else float(cost_per_month) / denom


# ============================================================================ all together
@dataclass(frozen=True, eq=False)
class DriftAnalysis:
    """Everything the page and the CLI show; see :func:`analyse_drift`."""

    severity: SeverityFit
    stage2: LocalLevelFit
    horizon: Horizon
    trend: TrendFit
    raw_trend: TrendFit
    categories: pd.DataFrame
    category_trends: pd.DataFrame
    contrasts: pd.DataFrame
    heterogeneity: list[Heterogeneity]
    variants: pd.DataFrame
    deployments: list[pd.Timestamp]
    free_steps: list[pd.Timestamp]
    D_default: float
    notes: list[str]
    panel_name: str = "panel"

    @property
    def batches(self) -> pd.DataFrame:
        """Stage 1 batch table plus ``smoothed, smoothed_se``."""
        b = self.severity.batches.copy()
        b["smoothed"] = self.stage2.smoothed
        b["smoothed_se"] = self.stage2.smoothed_se
        return b


def _item_level(panel: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    if "category" in panel.columns and "item" in panel.columns:
        agg = (panel.groupby(["batch", "rater", "item"], sort=False, as_index=False)["score"]
               .mean())
        return agg, ("the panel has categories and items: the overall score is each item's "
                     "mean over its categories")
    return panel, None


def analyse_drift(panel: pd.DataFrame, *, deployments: Iterable[Any] = (),
                  reference: str | None = None, D: float | None = None,
                  free_steps: Iterable[Any] = (), covariance: str = "full", reps: int = 999,
                  seed: int = 0, panel_name: str = "panel") -> DriftAnalysis:
    """Run stage 1, stage 2 (deployments reset the state), horizon, trend and contrasts.

    Parameters
    ----------
    panel : validated panel (:func:`read_panel`)
    deployments : dates at which the state may jump freely (reset)
    reference : reference rater (default: present in most batches)
    D : change that matters; default the largest absolute deployment contrast, else
        ``0.2 ×`` the SD of the scores
    free_steps : extra dates that also reset the state (the "variant" of SPEC §5)
    covariance : ``"full"`` (stage 1's HC1 covariance, off-diagonals included) or ``"diagonal"``
    reps, seed : wild cluster bootstrap replications and seed
    """
    notes: list[str] = []
    overall, note = _item_level(panel)
    if note:
        notes.append(note)
    deps = parse_dates(deployments)
    extra = parse_dates(free_steps, what="free step dates")
    sev = fit_severity(overall, reference)
    if sev.raters.empty:
        notes.append("one rater only: no severity table; batch effects are that rater's means")
    st2 = _stage2(sev, deps + extra, covariance)
    if not st2.identified:
        notes.append("no two batches share a segment between resets: q cannot be estimated")
    contrasts = deployment_contrasts(sev, deps)
    if D is None:
        c = contrasts["contrast"].abs().dropna()
        if len(c) and c.max() > 0:
            D_def = float(c.max())
        else:
            D_def = _DEFAULT_D_FRACTION * float(np.std(overall["score"], ddof=1) or 1.0)
    else:
        D_def = float(D)
    hz = horizon(st2, D_def, sev.batches["batch"].iloc[-1])
    trend = monthly_trend(overall, rater_effects=True, reps=reps, seed=seed)
    raw = monthly_trend(overall, rater_effects=False, reps=reps, seed=seed)
    het = [grader_gap_heterogeneity(overall, r, sev.reference) for r in sev.raters["rater"]]
    variants = drift_variants(sev, deps, extra, covariance=covariance)
    return DriftAnalysis(
        severity=sev, stage2=st2, horizon=hz, trend=trend, raw_trend=raw,
        categories=severity_by_category(panel, sev.reference),
        category_trends=category_trends(panel, reps=reps, seed=seed),
        contrasts=contrasts, heterogeneity=het, variants=variants, deployments=deps,
        free_steps=extra, D_default=D_def, notes=notes, panel_name=panel_name)


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _jsonable(x: Any) -> Any:
    """A JSON-safe scalar: numpy numbers to Python, NaN/inf to ``None``."""
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return _num(x)
    return x


def _iso(x: Any) -> str | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return pd.Timestamp(x).date().isoformat()


def drift_result_json(a: DriftAnalysis, D: float | None = None) -> dict[str, Any]:
    """The JSON result (CLI ``--format json`` and ``Store.save_drift_result``).

    Keys: ``reference_rater``, ``raters[{rater, severity, se, ci95}]``,
    ``batches[{batch, n, raw_mean, adjusted, composition, se, smoothed, smoothed_se}]``, ``q``,
    ``q_ci95``, ``innovation_sd``, ``innovation_sd_ci95``, ``lr``, ``lr_pvalue``,
    ``horizon{D, weeks, weeks_ci95, date, sd_at_weeks{4, 8, 12}, last_variance}``,
    ``trend{…}``, ``deployments``, ``contrasts``, ``heterogeneity``, ``variants``,
    ``categories``, ``category_trends``, ``notes``. Non-finite numbers become ``null``
    (an infinite horizon has ``weeks: null`` and ``date: null``).
    """
    hz = a.horizon if D is None else horizon(a.stage2, D, a.severity.batches["batch"].iloc[-1])
    st = a.stage2
    tr, rw = a.trend, a.raw_trend
    return {
        "panel": a.panel_name,
        "reference_rater": a.severity.reference,
        "raters": [{"rater": r["rater"], "severity": _num(r["severity"]), "se": _num(r["se"]),
                    "ci95": [_num(r["ci_low"]), _num(r["ci_high"])], "n": int(r["n"]),
                    "n_batches": int(r["n_batches"])}
                   for r in a.severity.raters.to_dict("records")],
        "batches": [{"batch": _iso(r["batch"]), "n": int(r["n"]),
                     "raw_mean": _num(r["raw_mean"]), "adjusted": _num(r["adjusted"]),
                     "composition": _num(r["composition"]), "se": _num(r["se"]),
                     "smoothed": _num(r["smoothed"]), "smoothed_se": _num(r["smoothed_se"])}
                    for r in a.batches.to_dict("records")],
        "q": _num(st.q), "q_ci95": [_num(st.q_ci95[0]), _num(st.q_ci95[1])],
        "innovation_sd": _num(st.innovation_sd),
        "innovation_sd_ci95": [_num(st.innovation_sd_ci95[0]), _num(st.innovation_sd_ci95[1])],
        "lr": _num(st.lr), "lr_pvalue": _num(st.lr_pvalue), "covariance": st.covariance,
        "horizon": {"D": _num(hz.D), "weeks": _num(hz.weeks),
                    "weeks_ci95": [_num(hz.weeks_ci95[0]), _num(hz.weeks_ci95[1])],
                    "date": hz.date.isoformat() if hz.date else None,
                    "last_batch": hz.last_batch.isoformat(),
                    "last_variance": _num(hz.last_variance),
                    "sd_at_weeks": {str(k): _num(v) for k, v in hz.sd_at_weeks.items()}},
        "trend": {"unit": "score per month", "slope": _num(tr.slope), "se": _num(tr.se),
                  "t": _num(tr.t), "p_cluster": _num(tr.p_cluster), "p_wild": _num(tr.p_wild),
                  "n": tr.n, "n_clusters": tr.n_clusters, "reps": tr.reps, "seed": tr.seed,
                  "raw_slope": _num(rw.slope), "raw_se": _num(rw.se),
                  "raw_p_wild": _num(rw.p_wild)},
        "deployments": [_iso(d) for d in a.deployments],
        "free_steps": [_iso(d) for d in a.free_steps],
        "contrasts": [{"deployment": _iso(r["deployment"]), "before": r["before"],
                       "after": r["after"], "contrast": _num(r["contrast"]), "se": _num(r["se"]),
                       "raw_contrast": _num(r["raw_contrast"]), "note": r["note"]}
                      for r in a.contrasts.to_dict("records")],
        "heterogeneity": [{"rater": h.rater, "reference": h.reference, "pooled": _num(h.pooled),
                           "se": _num(h.se), "q": _num(h.q), "df": h.df, "p": _num(h.p),
                           "batches": h.k} for h in a.heterogeneity],
        "variants": [{k: (_num(v) if k != "variant" else v) for k, v in r.items()}
                     for r in a.variants.to_dict("records")],
        "categories": [{k: _jsonable(v) for k, v in r.items()}
                       for r in a.categories.to_dict("records")],
        "category_trends": [{k: (v if k == "category" else _num(v)) for k, v in r.items()}
                            for r in a.category_trends.to_dict("records")],
        "notes": list(a.notes),
    }


def _f(x: Any, nd: int = 3) -> str:
    v = _num(x)
    if v is None:
        return "inf" if isinstance(x, float) and math.isinf(x) else "n/a"
    return f"{v:.{nd}f}"


def reaudit_overdue(due: Any, today: date | None = None) -> str | None:
    """``OVERDUE since 2026-09-27, 9 weeks ago`` when the re-audit date has passed (today in
    UTC unless given); ``None`` otherwise."""
    from datetime import datetime, timezone

    from core.format import overdue_text
    text = overdue_text(due, today or datetime.now(timezone.utc).date())
    return None if text is None else "OVERDUE " + text[len("overdue "):]


def format_drift_text(result: dict[str, Any]) -> str:
    """A plain-text rendering of :func:`drift_result_json` for the CLI."""
    r = result
    lines = [f"DRIFT AND GRADER SEVERITY — {r.get('panel', 'panel')}",
             f"reference rater: {r['reference_rater']}", ""]
    if r["raters"]:
        lines.append("GRADER SEVERITY (vs reference; score units)")
        for x in r["raters"]:
            lines.append(f"  {x['rater']:<12} {_f(x['severity']):>8}  se {_f(x['se'])}  "
                         f"95% [{_f(x['ci95'][0])}, {_f(x['ci95'][1])}]  n={x['n']}")
    else:
        lines.append("GRADER SEVERITY: one rater only — no severity table")
    lines += ["", "BATCHES  (raw mean | adjusted ± se | smoothed ± se)"]
    for b in r["batches"]:
        lines.append(f"  {b['batch']}  n={b['n']:<5} {_f(b['raw_mean']):>7} | "
                     f"{_f(b['adjusted']):>7} ± {_f(b['se'])} | {_f(b['smoothed']):>7} ± "
                     f"{_f(b['smoothed_se'])}")
    q = r["q_ci95"]
    lines += ["", (f"DRIFT  q = {_f(r['q'], 5)} per week  95% [{_f(q[0], 5)}, "
                  f"{_f(q[1], 5) if q[1] is not None else 'inf'}]  innovation SD "
                  f"{_f(r['innovation_sd'])}/week"),
              (f"  LR test of q = 0: LR = {_f(r['lr'], 2)}, p = {_f(r['lr_pvalue'], 3)} "
              "(boundary: ½·P(χ²₁ > LR))")]
    h = r["horizon"]
    sd = h["sd_at_weeks"]
    wk = h["weeks_ci95"]
    lines += [(f"HORIZON  D = {_f(h['D'])}: predictive SD {_f(sd['4'])} / {_f(sd['8'])} / "
              f"{_f(sd['12'])} at 4 / 8 / 12 weeks"),
              (f"  weeks to D: {_f(h['weeks'], 1) if h['weeks'] is not None else 'never (q = 0)'}"
              f"  95% [{_f(wk[0], 1)}, {_f(wk[1], 1) if wk[1] is not None else 'inf'}]"),
              f"  re-audit by {h['date'] or 'n/a (no drift detected)'}"
              + (f" — {reaudit_overdue(h['date'])}" if reaudit_overdue(h["date"]) else "")]
    t = r["trend"]
    p_wild = ("n/a" if t["p_wild"] is None else
              f"< {1 / t['reps']:.3f}" if t["p_wild"] == 0 and t["reps"] else _f(t["p_wild"]))
    lines += ["", (f"TREND  {_f(t['slope'])} per month with rater FE (se {_f(t['se'])}, "
                  f"wild-cluster p {p_wild}, {t['n_clusters']} batches); raw "
                  f"{_f(t['raw_slope'])}")]
    if r["contrasts"]:
        lines.append("DEPLOYMENT CONTRASTS (two after − two before; read by magnitude)")
        for c in r["contrasts"]:
            lines.append(f"  {c['deployment']}  {_f(c['contrast'])} (se {_f(c['se'])}; raw "
                         f"{_f(c['raw_contrast'])}) {c['note']}")
    for note in r.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)
