"""Step 6 — the manual-review band, what it costs, and what it leaves to chance.

The 2-SD rule assumes normal single-draw noise; screener scores clump on rubric integers, so an
empirical rule on the pooled residuals is computed too and the wider of the two binds each side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from core.draws import group_mean
from core.flip import passes

__all__ = [
    "scaled_residuals",
    "empirical_halfwidths",
    "Band",
    "recommend_band",
    "share_in_band",
    "Exposure",
    "rerun_exposure",
    "reverse_probability",
    "capacity_halfwidth",
    "NORMAL_APPROXIMATION_NOTE",
]

NORMAL_APPROXIMATION_NOTE = (
    "normal approximation: a fresh draw given a first-pass score s is taken as normal with mean "
    "μ + ρ(s − μ) and variance (1 + ρ)·σ_w², ρ the pool's reliability")


def scaled_residuals(cand: np.ndarray, total: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``r_ij = (T_ij − T̄_i)·sqrt(n_i/(n_i − 1))``, pooled (candidates with one run dropped).

    The factor undoes the shrinkage of a residual around its own candidate's mean, so that the
    residuals have the single-draw variance.
    """
    means = group_mean(cand, total, counts)
    n = counts[cand]
    keep = n > 1
    return (total[keep] - means[cand][keep]) * np.sqrt(n[keep] / (n[keep] - 1))


def _quantile_sorted(sorted_r: np.ndarray, q: float, method: str) -> float:
    """``np.quantile(r, q, method=method)`` for ``higher``/``lower`` on a sorted array."""
    pos = q * (len(sorted_r) - 1)
    i = int(np.ceil(pos - 1e-12)) if method == "higher" else int(np.floor(pos + 1e-12))
    return float(sorted_r[min(max(i, 0), len(sorted_r) - 1)])


def empirical_halfwidths(sorted_residuals: np.ndarray, k: float) -> tuple[float, float]:
    """``(h_L, h_U)`` for the empirical rule at ``α = Φ(−k)``.

    Notes
    -----
    ``h_L = quantile(r, 1 − α, method="higher")``: a candidate whose true score sits ``h_L``
    below the cutoff passes on one draw with probability at most α. ``h_U = −quantile(r, α,
    method="lower")`` likewise above. ``sorted_residuals`` must be sorted ascending.
    """
    if len(sorted_residuals) == 0:
        return float("nan"), float("nan")
    alpha = float(special.ndtr(-k))
    return (_quantile_sorted(sorted_residuals, 1 - alpha, "higher"),
            -_quantile_sorted(sorted_residuals, alpha, "lower"))


@dataclass(frozen=True)
class Band:
    """A manual-review band around the cutoff and which rule bound each side."""

    cutoff: float
    k: float
    within_sd: float
    two_sd: tuple[float, float]
    empirical: tuple[float, float]
    low: float
    high: float
    bound_low: str
    bound_high: str
    override: float | None = None

    @property
    def bound_by(self) -> dict[str, str]:
        return {"low": self.bound_low, "high": self.bound_high}

    @property
    def rule(self) -> str:
        """One phrase for the report: ``empirical rule``, ``2-SD rule``, ``same`` or a mix."""
        if self.override is not None:
            return "manual half-width"
        sides = {self.bound_low, self.bound_high}
        if sides == {"same"}:
            return "both rules agree"
        if len(sides - {"same"}) == 1:
            return f"{(sides - {'same'}).pop()} rule"
        return f"{self.bound_low} rule below, {self.bound_high} rule above"


def _which(two_sd: float, emp: float) -> str:
    if np.isclose(two_sd, emp, rtol=0, atol=1e-9):
        return "same"
    return "2-SD" if two_sd > emp else "empirical"


def _clamp(x: float, bounds: tuple[float, float] | None) -> float:
    if bounds is None or not np.isfinite(x):
        return float(x)
    return float(min(max(x, bounds[0]), bounds[1]))


def recommend_band(cutoff: float, within_sd: float, sorted_residuals: np.ndarray, k: float = 2.0,
                   *, override: float | None = None,
                   bounds: tuple[float, float] | None = None) -> Band:
    """``[t − max(kσ_w, h_L), t + max(kσ_w, h_U)]``, or ``t ± override`` when given.

    ``bounds`` — the score range (0..Σ max points, or the observed range): every edge (of the
    band and of each rule) is clamped to it, so no band reads "-0.8 – 74.6" on a 0..100
    rubric. A negative ``override`` counts as 0. Which rule binds is decided before clamping.

    Notes
    -----
    ``σ_w`` is the pooled within-candidate SD of the total; ``h_L``, ``h_U`` are the empirical
    half-widths (:func:`empirical_halfwidths`): the quantiles of the pooled, scaled residuals
    ``(x_ij − x̄_i)·sqrt(n_i/(n_i − 1))`` that leave the same tail mass outside as ``±kσ`` does
    under a normal law. Each side takes the wider of the two rules (``bound_by`` says which).

    References
    ----------
    .. [1] Seed 000 (the method), "Method", step 6 "Emit a cutoff and a manual-review band",
       and "Output format" (RECOMMENDED); SPEC §3.6.
    .. [2] Quantiles: ``numpy.quantile``; R ``quantile(type = 7)``.

    Examples
    --------
    >>> import numpy as np
    >>> residuals = np.array([-2.04, -1.63, -1.22, -0.41, 0.0, 0.41, 1.22, 1.63, 2.04])
    >>> b = recommend_band(9.0, 1.5, residuals, k=2.0)
    >>> b.low, b.high, b.bound_by
    (6.0, 12.0, {'low': '2-SD', 'high': '2-SD'})
    """
    half = k * within_sd
    h_l, h_u = empirical_halfwidths(sorted_residuals, k)

    def edges(lo: float, hi: float) -> tuple[float, float]:
        return _clamp(lo, bounds), _clamp(hi, bounds)

    emp = edges(cutoff - h_l, cutoff + h_u)
    two = edges(cutoff - half, cutoff + half)
    if override is not None:
        override = max(0.0, float(override))
        low, high = edges(cutoff - override, cutoff + override)
        return Band(cutoff, k, within_sd, two, emp, low, high, "manual", "manual", override)
    low_w = max(half, h_l) if np.isfinite(h_l) else half
    high_w = max(half, h_u) if np.isfinite(h_u) else half
    low, high = edges(cutoff - low_w, cutoff + high_w)
    return Band(cutoff, k, within_sd, two, emp, low, high, _which(half, h_l), _which(half, h_u))


def share_in_band(sorted_pool: np.ndarray, low: float, high: float) -> float:
    """Share of the pool's first-pass scores inside ``[low, high]`` (inclusive)."""
    if len(sorted_pool) == 0:
        return float("nan")
    inside = (np.searchsorted(sorted_pool, high, side="right")
              - np.searchsorted(sorted_pool, low, side="left"))
    return float(inside / len(sorted_pool))


def reverse_probability(pool: np.ndarray, within_sd: float, cutoff: float,
                        comparison: str = ">=") -> tuple[np.ndarray, float]:
    """``P(reverse | s)`` for every first-pass score ``s`` of the pool, and ρ.

    Notes
    -----
    With pool mean ``μ_p``, variance ``v_p`` and ``σ_w``: ``σ_θ² = max(0, v_p − σ_w²)``,
    ``ρ = σ_θ²/v_p``; a fresh draw given ``s`` is ``N(μ_p + ρ(s − μ_p), (1 + ρ)σ_w²)``;
    ``P(reverse | s)`` is its probability of landing on the other side of ``t`` from ``s``.
    A normal approximation; ``μ_p + ρ(s − μ_p)`` is Kelley's regressed true score.

    References
    ----------
    .. [1] Seed 000 (the method), "Method", step 6 and "Watch-outs"; SPEC §3.6 (re-run
       exposure, capacity).
    .. [2] Kelley, T. L. (1947). *Fundamentals of Statistics*. Harvard University Press — the
       regressed true-score estimate ``μ + ρ(s − μ)``.
    .. [3] ``scipy.stats.norm.cdf`` (here ``scipy.special.ndtr``); R ``pnorm``.

    Examples
    --------
    >>> import numpy as np
    >>> p, rho = reverse_probability(np.array([0.0, 5, 10, 15, 20]), 2.0, 10.0)
    >>> p.round(3), round(rho, 3)
    (array([0.   , 0.046, 0.5  , 0.046, 0.   ]), 0.936)
    """
    s = np.asarray(pool, dtype="float64")
    mu, v = float(np.mean(s)), float(np.var(s, ddof=1)) if len(s) > 1 else 0.0
    rho = max(0.0, v - within_sd ** 2) / v if v > 0 else 0.0
    m = mu + rho * (s - mu)
    sd = np.sqrt(1 + rho) * within_sd
    if sd <= 0:
        return np.zeros_like(s), rho
    p_below = special.ndtr((cutoff - m) / sd)
    passed = passes(s, cutoff, comparison)
    return np.where(passed, p_below, 1 - p_below), rho


@dataclass(frozen=True)
class Exposure:
    """Expected decisions per req that a fresh draw would reverse (normal approximation)."""

    rho: float
    reversals_per_req: float
    reversals_outside_band_per_req: float
    applications_per_req: float
    note: str = NORMAL_APPROXIMATION_NOTE


def rerun_exposure(pool: np.ndarray, within_sd: float, cutoff: float, low: float, high: float,
                   applications_per_req: float, comparison: str = ">=") -> Exposure:
    """Re-run exposure for all decisions and for those outside the band ``[low, high]``."""
    p, rho = reverse_probability(pool, within_sd, cutoff, comparison)
    s = np.asarray(pool, dtype="float64")
    outside = (s < low) | (s > high)
    return Exposure(rho, float(applications_per_req * np.mean(p)),
                    float(applications_per_req * np.sum(p[outside]) / len(s)),
                    float(applications_per_req))


def capacity_halfwidth(sorted_pool: np.ndarray, cutoff: float, reviews_capacity: float,
                       applications_per_req: float) -> float:
    """The widest symmetric half-width whose band needs at most ``reviews_capacity`` reviews.

    Returns 0 when even a zero-width band exceeds the capacity.

    Notes
    -----
    A band of half-width ``h`` costs ``A · #{s : |s − t| ≤ h} / P`` reviews per req (``A``
    applications per req, ``P`` pool scores); the capacity ``C`` allows ``⌊C·P/A⌋`` pool
    scores inside, so ``h`` is the largest distance below the next one.

    References
    ----------
    .. [1] SPEC §3.6 (reviewer capacity); seed 000, "Method", step 6 (the routing rule).

    Examples
    --------
    A pool of 20 scores 0..19, 20 applications per req and capacity for 5 reviews around 9:

    >>> import numpy as np
    >>> capacity_halfwidth(np.arange(0.0, 20.0), 9.0, 5, 20)
    2.0
    """
    if len(sorted_pool) == 0:
        return float("nan")
    dist = np.sort(np.abs(sorted_pool - cutoff))
    allowed = int(np.floor(reviews_capacity / applications_per_req * len(sorted_pool) + 1e-9))
    if allowed <= 0:
        return 0.0
    if allowed >= len(dist):
        return float(dist[-1])
    # widest h with count(|s − t| ≤ h) ≤ allowed: just below the (allowed+1)-th distance
    nxt = dist[allowed]
    below = dist[dist < nxt]
    return float(below[-1]) if len(below) else 0.0
