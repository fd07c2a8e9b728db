"""The slider engine: everything a cutoff or band-width move needs, precomputed once per audit.

Built from the draws and the pool (one database read), a :class:`LiveAudit` answers a new cutoff
or ``k`` with array operations on a (candidates × runs) matrix of totals, the sorted pooled
residuals and the sorted pool — never touching the database or a pandas groupby.

Bounded: nothing here is sized by the score range or the number of distinct scores. The flip
curve is a sweep over the sorted draws evaluated at ≤ :data:`CURVE_POINTS` cutoffs; bands and
the cutoff slider stay inside :attr:`LiveAudit.score_range` (0..Σ max points, or the observed
range when maxima are unknown).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from core import band as band_mod
from core import flip as flip_mod
from core.criteria import pooled_within_sd
from core.draws import Draws

__all__ = ["LiveAudit", "LiveView", "CURVE_POINTS", "score_range", "slider_step"]

#: The most cutoffs a flip curve is evaluated at.
CURVE_POINTS = 1000
#: Above this many runs per candidate, Clopper–Pearson bounds are computed per distinct
#: (n, k) instead of from a (runs × runs) table.
_CP_TABLE_MAX_RUNS = 200


def score_range(totals: np.ndarray, max_total: float | None = None,
                pool: np.ndarray | None = None) -> tuple[float, float]:
    """The range every cutoff, band edge and slider is clamped to.

    ``0..max_total`` (Σ w_c · max_c) when the rubric's maxima are known, widened to any
    observed total outside it; otherwise the observed range of the totals and the pool's
    first-pass scores. Never empty: a single observed value ``x`` gives ``x ± 1``.
    """
    vals = [np.asarray(totals, dtype="float64")]
    if pool is not None and len(pool):
        vals.append(np.asarray(pool, dtype="float64"))
    allv = np.concatenate(vals)
    allv = allv[np.isfinite(allv)]
    if max_total is not None and np.isfinite(max_total) and max_total > 0:
        lo, hi = 0.0, float(max_total)
        if len(allv):
            lo, hi = min(lo, float(allv.min())), max(hi, float(allv.max()))
    elif len(allv):
        lo, hi = float(allv.min()), float(allv.max())
    else:
        lo, hi = 0.0, 1.0
    if not hi > lo:
        pad = max(1.0, abs(lo) * 1e-6)
        lo, hi = lo - pad, hi + pad
    return lo, hi


def slider_step(lo: float, hi: float, integer: bool, positions: int = CURVE_POINTS) -> float:
    """A slider step with at most ``positions`` stops over ``[lo, hi]``: 1 (or 0.5) on a
    small integer range, else a round power-of-ten multiple (…, 0.1, 1, 10, 100, …)."""
    span = float(hi - lo)
    base = 1.0 if integer else 0.5
    if not np.isfinite(span) or span <= base * positions:
        return base
    return float(10.0 ** np.ceil(np.log10(span / positions)))


@dataclass(frozen=True)
class LiveView:
    """Every number the flip and band panels show for one (cutoff, k, override, capacity)."""

    flip: flip_mod.FlipSummary
    band: band_mod.Band
    share_of_pool: float | None
    applications_per_req: float | None
    manual_reviews_per_req: float | None
    needs_pool: bool
    capacity: float | None
    over_capacity: bool
    capacity_halfwidth: float | None
    capacity_band: tuple[float, float] | None
    left_to_chance_per_req: float | None
    exposure: band_mod.Exposure | None
    capacity_note: str | None = None


class LiveAudit:
    """Precomputed state for the sliders.

    Parameters
    ----------
    draws : Draws
    pool : array of first-pass scores, or None
    applications_per_req : float, optional
        Defaults to the pool size.
    comparison : ``">="`` (default) or ``">"``

    Notes
    -----
    One slider move is :meth:`view`: pass counts per candidate from the (candidates × runs)
    matrix (flip rate, disagreement, Clopper–Pearson interval from a table precomputed per
    ``(k, n)``), the band from the pooled within-SD and the sorted residuals, and the pool's
    share inside the band by two binary searches. The formulas are those of :mod:`core.flip`
    and :mod:`core.band`; this class only precomputes what they need.

    References
    ----------
    .. [1] Seed 000 (the method), "Method", steps 5 and 6; SPEC §3.5, §3.6 and §6 (a slider
       move never reads the database).

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> from core.draws import Draws
    >>> long = pd.DataFrame({"candidate_id": ["a"] * 3 + ["b"] * 3 + ["c"] * 3,
    ...                      "run": [1, 2, 3] * 3, "criterion": "total",
    ...                      "score": [9.0, 11, 10, 9, 6, 8, 4, 6, 3]})
    >>> live = LiveAudit(Draws.from_long(long), pool=np.arange(0.0, 20.0))
    >>> v = live.view(9.0, k=2.0)
    >>> v.flip.candidates_with_flip, v.flip.worst_candidate
    (1, 'b')
    >>> round(v.band.low, 2), round(v.band.high, 2), v.manual_reviews_per_req
    (6.25, 11.75, 5.0)
    """

    def __init__(self, draws: Draws, pool: np.ndarray | None = None,
                 applications_per_req: float | None = None, comparison: str = ">=") -> None:
        self.draws = draws
        self.comparison = comparison
        K = draws.K
        counts = draws.counts.astype("int64")
        width = int(counts.max())
        # Candidate-sorted totals, padded with NaN (never passes, never fails).
        order = np.lexsort((draws.total, draws.cand))
        cand_sorted = draws.cand[order]
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        pos = np.arange(len(order)) - starts[cand_sorted]
        mat = np.full((K, width), np.nan)
        mat[cand_sorted, pos] = draws.total[order]
        self.totals = mat
        self.counts = counts
        self.means = draws.candidate_means()
        self.candidate_ids = draws.candidate_ids
        # ids are sorted (Draws factorizes with sort=True): the index is the id order
        self._id_rank = np.arange(K)
        self._ids = pd.Series(draws.candidate_ids).astype("string")
        self._order, self._pos = order, pos
        self._sweep: tuple[np.ndarray, np.ndarray, np.ndarray, int] | None = None
        self._ci_lo = self._ci_hi = None
        if width <= _CP_TABLE_MAX_RUNS:
            self._ci_lo, self._ci_hi = flip_mod.clopper_pearson_table(width)
        self.within_sd = pooled_within_sd(draws.cand, draws.total, draws.counts)
        self.sorted_residuals = np.sort(band_mod.scaled_residuals(draws.cand, draws.total,
                                                                  draws.counts))
        self.pool = None if pool is None or len(pool) == 0 else np.sort(
            np.asarray(pool, dtype="float64"))
        if applications_per_req is None and self.pool is not None:
            applications_per_req = float(len(self.pool))
        self.applications_per_req = applications_per_req
        self.observed_range = ((float(np.nanmin(mat)), float(np.nanmax(mat))) if draws.N
                               else (float("nan"), float("nan")))
        self.max_total = _max_total(draws)
        self.score_range = score_range(draws.total, self.max_total, self.pool)
        finite = draws.total[np.isfinite(draws.total)]
        self.integer_scores = bool(np.all(finite == np.round(finite)))
        self.slider_step = slider_step(*self.score_range, self.integer_scores)

    def clamp(self, x: float) -> float:
        """``x`` inside :attr:`score_range`."""
        lo, hi = self.score_range
        return float(min(max(float(x), lo), hi))

    # -------------------------------------------------------------- flip
    def pass_counts(self, cutoff: float) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            hit = self.totals >= cutoff if self.comparison == ">=" else self.totals > cutoff
        return hit.sum(axis=1)

    def flip_summary(self, cutoff: float) -> flip_mod.FlipSummary:
        k = self.pass_counts(cutoff)
        return flip_mod.summarize(cutoff, self.candidate_ids, k, self.counts, self.means,
                                  self.comparison, id_rank=self._id_rank)

    def flip_table(self, cutoff: float) -> pd.DataFrame:
        k = self.pass_counts(cutoff)
        ci = None if self._ci_lo is None else (self._ci_lo[self.counts, k],
                                               self._ci_hi[self.counts, k])
        return flip_mod.flip_table(self._ids, k, self.counts, self.means, ci)

    def curve_cutoffs(self, max_points: int = CURVE_POINTS) -> np.ndarray:
        """Where the flip curve is evaluated: every distinct total (the only places the curve
        changes) and the range's ends when there are at most ``max_points``, else
        ``max_points`` evenly spaced cutoffs over :attr:`score_range`."""
        lo, hi = self.score_range
        vals = self._curve_sweep()[0]
        distinct = np.unique(vals) if len(vals) <= 4 * max_points else None
        if distinct is not None and len(distinct) + 2 <= max_points:
            return np.unique(np.concatenate([[lo], distinct, [hi]]))
        return np.linspace(lo, hi, max(2, int(max_points)))

    def _curve_sweep(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """Sorted draw totals and the cumulative change of the flip count and of the summed
        disagreement as the cutoff passes each draw (computed once, O(N log N))."""
        if self._sweep is None:
            d = self.draws
            cand = d.cand[self._order]
            vals = d.total[self._order]
            n = self.counts[cand].astype("float64")
            r = self._pos.astype("float64")          # draws of this candidate already below
            k_before, k_after = n - r, n - r - 1
            multi = n > 1
            with np.errstate(invalid="ignore", divide="ignore"):
                pairs = np.where(multi, n * (n - 1), 1.0)
                d_dis = np.where(multi, 2 * (k_after * (n - k_after)
                                             - k_before * (n - k_before)) / pairs, 0.0)
            d_flip = ((multi & (k_after > 0)).astype("int64")
                      - (multi & (k_before < n)).astype("int64"))
            g = np.lexsort((r, cand, vals))
            self._sweep = (vals[g], np.concatenate([[0], np.cumsum(d_flip[g])]),
                           np.concatenate([[0.0], np.cumsum(d_dis[g])]),
                           int(np.sum(self.counts > 1)))
        return self._sweep

    def flip_curve(self, cutoffs: np.ndarray | None = None,
                   max_points: int = CURVE_POINTS) -> pd.DataFrame:
        """Flip count and mean disagreement against the cutoff.

        Notes
        -----
        A draw fails at cutoff ``t`` when ``T < t`` (``T ≤ t`` for ``>``): sweeping ``t`` up
        through the sorted draws, candidate ``i``'s pass count ``k_i`` drops by one at each of
        its draws, so the flip count ``#{i: 0 < k_i < n_i}`` and ``Σ_i 2k_i(n_i − k_i) /
        (n_i(n_i − 1))`` change by known steps. Their cumulative sums, evaluated by binary
        search, give the curve at any cutoff in O(log N) — equal to recounting at each cutoff
        (tests/test_live.py), with no grid sized by the score range. ``cutoffs`` default to
        :meth:`curve_cutoffs` (≤ ``max_points``).
        """
        t = (self.curve_cutoffs(max_points) if cutoffs is None
             else np.asarray(cutoffs, dtype="float64"))
        vals, cum_flip, cum_dis, n_multi = self._curve_sweep()
        removed = np.searchsorted(vals, t, side="left" if self.comparison == ">=" else "right")
        mean_dis = (cum_dis[removed] / n_multi if n_multi else np.full(len(t), np.nan))
        return pd.DataFrame({"cutoff": t, "candidates_with_flip": cum_flip[removed],
                             "mean_disagreement": mean_dis})

    # -------------------------------------------------------------- band
    def band(self, cutoff: float, k: float = 2.0, override: float | None = None
             ) -> band_mod.Band:
        """The band at ``cutoff``, its edges clamped to :attr:`score_range`."""
        return band_mod.recommend_band(cutoff, self.within_sd, self.sorted_residuals, k,
                                       override=override, bounds=self.score_range)

    def view(self, cutoff: float, k: float = 2.0, *, override: float | None = None,
             capacity: float | None = None, applications_per_req: float | None = None
             ) -> LiveView:
        """All slider-driven numbers for one setting."""
        apps = applications_per_req or self.applications_per_req
        b = self.band(cutoff, k, override)
        fs = self.flip_summary(cutoff)
        if self.pool is None:
            return LiveView(fs, b, None, apps, None, True, capacity, False, None, None, None,
                            None)
        share = band_mod.share_in_band(self.pool, b.low, b.high)
        reviews = share * apps
        exposure = band_mod.rerun_exposure(self.pool, self.within_sd, cutoff, b.low, b.high,
                                           apps, self.comparison)
        over = capacity is not None and reviews > capacity
        cap_h = cap_band = chance = note = None
        if capacity is not None:
            cap_h = band_mod.capacity_halfwidth(self.pool, cutoff, capacity, apps)
            cap_band = (self.clamp(cutoff - cap_h), self.clamp(cutoff + cap_h))
            p, _ = band_mod.reverse_probability(self.pool, self.within_sd, cutoff,
                                                self.comparison)
            inside = (self.pool >= cap_band[0]) & (self.pool <= cap_band[1])
            allowed = capacity / apps * len(self.pool) if apps else 0.0
            reviewable = allowed >= 1 - 1e-9 and bool(inside.any())
            if not reviewable:   # no applicant can be reviewed: say so, not "78.0 – 78.0"
                inside[:] = False
                note = (f"a capacity of {capacity:g} reviews per req covers no application: "
                        "every decision is automated, and the band's coin flips are left to "
                        "chance")
            chance = float(apps * np.sum(p[~inside]) / len(self.pool))
        return LiveView(fs, b, share, apps, reviews, False, capacity, over, cap_h, cap_band,
                        chance, exposure, note)


def _max_total(draws: Draws) -> float | None:
    """Σ w_c · max_c when every criterion has a max and a finite non-negative weight."""
    if not draws.has_criteria or draws.total_source != "weighted sum":
        return None
    mx, w = np.asarray(draws.max_points, "float64"), np.asarray(draws.weights, "float64")
    if len(mx) == 0 or not (np.all(np.isfinite(mx)) and np.all(np.isfinite(w))
                            and np.all(w >= 0)):
        return None
    with np.errstate(over="ignore"):
        total = float(np.sum(w * mx))
    return total if np.isfinite(total) else None
