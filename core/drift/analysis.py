"""The whole drift analysis in one call: what the Drift page, the CLI and the store use.

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
from core.drift.local_level import LocalLevelFit, drift_variants, fit_stage2
from core.drift.panel import item_level, parse_dates
from core.drift.severity import (
    Heterogeneity,
    SeverityFit,
    fit_severity,
    grader_gap_heterogeneity,
    severity_by_category,
)
from core.drift.trend import TrendFit, category_trends, deployment_contrasts, monthly_trend

__all__ = ["DEFAULT_D_FRACTION", "DriftAnalysis", "analyse_drift"]

#: Without deployment contrasts, the change that matters is this fraction of the score SD.
DEFAULT_D_FRACTION = 0.2


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
