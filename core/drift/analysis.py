"""The whole drift analysis in one call: what the Drift page, the CLI and the store use.

:func:`fit_stage2` puts stage 1's batch effects and covariance into the local-level model and
:func:`drift_variants` fits it under each set of resets (the paper's Table 6);
:func:`analyse_drift` runs stage 1 (:mod:`core.drift.severity`), stage 2 with the deployments as
resets (:mod:`core.drift.local_level`), the horizon (:mod:`core.drift.horizon`), the trends and
the deployment contrasts (:mod:`core.drift.trend`) on a validated panel
(:mod:`core.drift.panel`) and returns a :class:`DriftAnalysis`; :mod:`core.drift.result`
renders it. Results are unrounded; rounding is a display matter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from core.drift.horizon import Horizon, horizon
from core.drift.local_level import (
    LocalLevelFit,
    batch_weeks,
    fit_local_level,
    segments_from_resets,
)
from core.drift.panel import item_level, parse_dates
from core.drift.severity import (
    Heterogeneity,
    SeverityFit,
    fit_severity,
    grader_gap_heterogeneity,
    severity_by_category,
)
from core.drift.trend import TrendFit, category_trends, deployment_contrasts, monthly_trend
from core.errors import InputError

__all__ = ["DEFAULT_D_FRACTION", "DriftAnalysis", "analyse_drift", "drift_variants",
           "fit_stage2"]

#: Without deployment contrasts, the change that matters is this fraction of the score SD.
DEFAULT_D_FRACTION = 0.2


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
        fit = fit_stage2(sev, resets, covariance)
        rows.append({"variant": name, "q": fit.q, "q_low": fit.q_ci95[0],
                     "q_high": fit.q_ci95[1], "innovation_sd": fit.innovation_sd,
                     "sd_low": fit.innovation_sd_ci95[0], "sd_high": fit.innovation_sd_ci95[1],
                     "lr": fit.lr, "lr_pvalue": fit.lr_pvalue,
                     "segments": int(fit.segments.max()) + 1})
    return pd.DataFrame(rows)


def fit_stage2(sev: SeverityFit, resets: Iterable[Any] = (),
               covariance: str = "full") -> LocalLevelFit:
    """:func:`fit_local_level` on stage 1's adjusted batch effects, the state reset at
    ``resets``; ``covariance`` ``"full"`` carries stage 1's HC1 covariance (bounded, see
    :func:`core.drift.severity.fit_severity`), ``"diagonal"`` only its diagonal. A numerically
    degenerate panel (no sampling noise at all) gives a fit with ``identified=False``."""
    if covariance not in ("full", "diagonal"):
        raise InputError(f"covariance must be 'full' or 'diagonal', not {covariance!r}")
    dates = sev.batches["batch"]
    V = sev.stage2_cov if covariance == "full" else np.diag(np.diag(sev.stage2_cov))
    y, w = sev.batches["adjusted"].to_numpy(), batch_weeks(dates)
    seg = segments_from_resets(dates, resets)
    try:
        return fit_local_level(y, w, V, segments=seg)
    except (np.linalg.LinAlgError, ValueError):
        # numerically degenerate (e.g. no sampling noise at all): report q as not estimable
        nan2 = (np.nan, np.nan)
        return LocalLevelFit(np.nan, nan2, np.nan, nan2, np.nan, np.nan, np.nan, np.nan, y.copy(),
                             np.sqrt(np.diag(V)), float(V[-1, -1]), seg, w, y, V, covariance,
                             identified=False)


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


def analyse_drift(panel: pd.DataFrame, *, deployments: Iterable[Any] = (),
                  reference: str | None = None, D: float | None = None,
                  free_steps: Iterable[Any] = (), covariance: str = "full", reps: int = 999,
                  seed: int = 0, panel_name: str = "panel") -> DriftAnalysis:
    """Run stage 1, stage 2 (deployments reset the state), horizon, trend and contrasts.

    Parameters
    ----------
    panel : validated panel (:func:`core.drift.panel.read_panel`)
    deployments : dates at which the state may jump freely (reset)
    reference : reference rater (default: present in most batches)
    D : change that matters; default the largest absolute deployment contrast, else
        ``0.2 ×`` the SD of the scores
    free_steps : extra dates that also reset the state (the "variant" of SPEC §5)
    covariance : ``"full"`` (stage 1's HC1 covariance, off-diagonals included) or ``"diagonal"``
    reps, seed : wild cluster bootstrap replications and seed
    """
    notes: list[str] = []
    overall, note = item_level(panel)
    if note:
        notes.append(note)
    deps = parse_dates(deployments)
    extra = parse_dates(free_steps, what="free step dates")
    sev = fit_severity(overall, reference)
    if sev.raters.empty:
        notes.append("one rater only: no severity table; batch effects are that rater's means")
    st2 = fit_stage2(sev, deps + extra, covariance)
    if not st2.identified:
        notes.append("no two batches share a segment between resets: q cannot be estimated")
    contrasts = deployment_contrasts(sev, deps)
    if D is None:
        c = contrasts["contrast"].abs().dropna()
        if len(c) and c.max() > 0:
            D_def = float(c.max())
        else:
            D_def = DEFAULT_D_FRACTION * float(np.std(overall["score"], ddof=1) or 1.0)
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
