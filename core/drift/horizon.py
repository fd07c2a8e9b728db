"""The re-audit horizon: weeks until the state may have moved by a change that matters.

After the last batch the state's predictive variance grows as ``P_T + q·h`` (``h`` weeks,
``P_T`` the smoothed variance at the last batch); the audit goes stale when its SD reaches a
change ``D`` that matters: ``s = (D² − P_T)/q`` weeks (SPEC §5 "Horizon", after
``seeds/004_584ac5ccdc3466e2.txt``). :func:`horizon` dates it ("re-audit by …"), with the
interval from q's profile interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import numpy as np
import pandas as pd

from core.drift.local_level import LocalLevelFit
from core.errors import InputError

__all__ = ["Horizon", "horizon", "horizon_weeks", "predictive_sd"]


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

    References
    ----------
    .. [1] ``seeds/004_584ac5ccdc3466e2.txt``, "Decision model and propositions"
       (``s = (D² − P₀)/q``), "Drift variants" (predictive variance ``h`` weeks later = the
       last batch's smoothed variance + ``q·h``) and §5.3 (SD 0.18 / 0.25 / 0.30 at 4 / 8 / 12
       weeks; about 5 weeks to the April 12 contrast of 0.20; 1 to 21 weeks from q's
       interval); SPEC §5 "Horizon".
    .. [2] Durbin, J. & Koopman, S. J. (2012). *Time Series Analysis by State Space Methods*,
       §2.7 (forecasting the local level: ``P_{T+h} = P_T + h·σ²_η``).
    .. [3] statsmodels: ``res.get_forecast(h).var_pred_mean`` of a local level model, less the
       measurement variance; R: ``predict(KFAS model, n.ahead = h, interval = "confidence",
       se.fit = TRUE)``.

    Examples
    --------
    >>> from core.drift.local_level import fit_local_level
    >>> y = [0.0, 0.1, -0.05, 0.2, 0.3, 0.15, 0.35, 0.4]
    >>> fit = fit_local_level(y, weeks=range(8), V=[0.01] * 8)
    >>> hz = horizon(fit, D=0.3, last_batch="2026-05-18")
    >>> print(f"{hz.weeks:.1f} weeks: re-audit by {hz.date}")
    10.6 weeks: re-audit by 2026-07-31
    >>> print(f"predictive SD at 4 weeks {hz.sd_at_weeks[4]:.3f}")
    predictive SD at 4 weeks 0.194
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


