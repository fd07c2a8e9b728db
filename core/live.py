"""The slider engine: everything a cutoff or band-width move needs, precomputed once per audit.

Built from the draws and the pool (one database read), a :class:`LiveAudit` answers a new cutoff
or ``k`` with array operations on a (candidates × runs) matrix of totals, the sorted pooled
residuals and the sorted pool — never touching the database or a pandas groupby.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from core import band as band_mod
from core import flip as flip_mod
from core.criteria import pooled_within_sd
from core.draws import Draws

__all__ = ["LiveAudit", "LiveView"]


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


class LiveAudit:
    """Precomputed state for the sliders.

    Parameters
    ----------
    draws : Draws
    pool : array of first-pass scores, or None
    applications_per_req : float, optional
        Defaults to the pool size.
    comparison : ``">="`` (default) or ``">"``
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
        self._ci_lo, self._ci_hi = flip_mod.clopper_pearson_table(width)
        self.within_sd = pooled_within_sd(draws.cand, draws.total, draws.counts)
        self.sorted_residuals = np.sort(band_mod.scaled_residuals(draws.cand, draws.total,
                                                                  draws.counts))
        self.pool = None if pool is None or len(pool) == 0 else np.sort(
            np.asarray(pool, dtype="float64"))
        if applications_per_req is None and self.pool is not None:
            applications_per_req = float(len(self.pool))
        self.applications_per_req = applications_per_req
        self.score_range = (float(np.nanmin(mat)), float(np.nanmax(mat)))

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
        ci = (self._ci_lo[self.counts, k], self._ci_hi[self.counts, k])
        return flip_mod.flip_table(self._ids, k, self.counts, self.means, ci)

    def flip_curve(self, cutoffs: np.ndarray) -> pd.DataFrame:
        """Flip count and mean disagreement for each cutoff (one matrix pass per cutoff)."""
        rows = []
        n = self.counts
        for t in cutoffs:
            k = self.pass_counts(float(t))
            rows.append({"cutoff": float(t),
                         "candidates_with_flip": int(np.sum((k > 0) & (k < n))),
                         "mean_disagreement": float(np.nanmean(flip_mod.disagreement(k, n)))})
        return pd.DataFrame(rows)

    # -------------------------------------------------------------- band
    def band(self, cutoff: float, k: float = 2.0, override: float | None = None
             ) -> band_mod.Band:
        return band_mod.recommend_band(cutoff, self.within_sd, self.sorted_residuals, k,
                                       override=override)

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
        cap_h = cap_band = chance = None
        if capacity is not None:
            cap_h = band_mod.capacity_halfwidth(self.pool, cutoff, capacity, apps)
            cap_band = (cutoff - cap_h, cutoff + cap_h)
            p, _ = band_mod.reverse_probability(self.pool, self.within_sd, cutoff,
                                                self.comparison)
            outside = (self.pool < cap_band[0]) | (self.pool > cap_band[1])
            chance = float(apps * np.sum(p[outside]) / len(self.pool))
        return LiveView(fs, b, share, apps, reviews, False, capacity, over, cap_h, cap_band,
                        chance, exposure)
