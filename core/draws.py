"""The draw matrix every statistic reads: one row per draw (candidate, run), one column per
criterion, plus the total.

Built once per audit from the long table ``candidate_id, run, criterion, score``; group
statistics then run on integer candidate indices with ``np.bincount`` (no pandas groupby).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from core.errors import InputError
from core.freeze import TOTAL

__all__ = ["Draws", "TOTAL", "group_mean", "group_sum"]



def group_sum(idx: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    return np.bincount(idx, weights=values, minlength=k)


def group_mean(idx: np.ndarray, values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    return group_sum(idx, values, len(counts)) / counts


@dataclass(frozen=True)
class Draws:
    """Draws of one audit in matrix form.

    Attributes
    ----------
    candidate_ids : (K,) str array, sorted
    cand : (D,) int array — candidate index of each draw
    run : (D,) int array
    criteria : tuple of criterion names (without ``total``), in rubric order
    scores : (D, C) float array — criterion scores (NaN when the screener gave only a total)
    total : (D,) float array — the screener's total when present, else Σ w_c x_c
    total_source : ``"screener"`` or ``"weighted sum"``
    weights, max_points : (C,) float arrays (max NaN when unknown)
    total_mismatch : number of draws where the screener's total differs from Σ w_c x_c
    counts : (K,) runs per candidate
    models : (D,) object array of reported model ids (None when unknown)
    """

    candidate_ids: np.ndarray
    cand: np.ndarray
    run: np.ndarray
    criteria: tuple[str, ...]
    scores: np.ndarray
    total: np.ndarray
    total_source: str
    weights: np.ndarray
    max_points: np.ndarray
    total_mismatch: int
    counts: np.ndarray
    models: np.ndarray | None = field(default=None, repr=False)

    @property
    def K(self) -> int:  # noqa: N802 - the paper's notation
        return len(self.candidate_ids)

    @property
    def N(self) -> int:  # noqa: N802
        return len(self.total)

    @property
    def has_criteria(self) -> bool:
        return len(self.criteria) > 0

    @classmethod
    def from_long(cls, long: pd.DataFrame, criteria_meta: pd.DataFrame | None = None) -> Draws:
        """Build from ``candidate_id, run, criterion, score`` (+ optional ``model``).

        ``criteria_meta`` (``criterion, max_points, weight`` [, ``position``]) gives weights and
        maxima; criteria absent from it get weight 1 and unknown max.

        Raises
        ------
        InputError
            No draws, or a draw lacking a criterion when the total must be computed.
        """
        if long is None or len(long) == 0:
            raise InputError("the audit has no draws yet; run replications or import draws")
        df = long[["candidate_id", "run", "criterion", "score"]].copy()
        df["candidate_id"] = df["candidate_id"].astype(str)
        df["run"] = df["run"].astype("int64")
        names_in_data = [c for c in pd.unique(df["criterion"].astype(str)) if c != TOTAL]
        order: list[str] = []
        if criteria_meta is not None and len(criteria_meta):
            meta = criteria_meta.copy()
            if "position" in meta:
                meta = meta.sort_values("position", kind="stable")
            order = [c for c in meta["criterion"].astype(str) if c in names_in_data and c != TOTAL]
        order += [c for c in names_in_data if c not in order]
        wide = df.pivot_table(index=["candidate_id", "run"], columns="criterion", values="score",
                              aggfunc="first", sort=True)
        cand_codes, cand_ids = pd.factorize(wide.index.get_level_values(0), sort=True)
        runs = wide.index.get_level_values(1).to_numpy(dtype="int64")
        crit = tuple(order)
        scores = (wide.reindex(columns=list(crit)).to_numpy(dtype="float64") if crit
                  else np.empty((len(wide), 0)))
        weights = np.ones(len(crit))
        maxp = np.full(len(crit), np.nan)
        if criteria_meta is not None and len(criteria_meta):
            m = criteria_meta.set_index(criteria_meta["criterion"].astype(str))
            for j, c in enumerate(crit):
                if c in m.index:
                    w = m.loc[c, "weight"] if "weight" in m else 1.0
                    mp = m.loc[c, "max_points"] if "max_points" in m else np.nan
                    weights[j] = 1.0 if pd.isna(w) else float(w)
                    maxp[j] = np.nan if pd.isna(mp) else float(mp)
        weighted = scores @ weights if crit else None
        mismatch = 0
        if TOTAL in wide.columns:
            total = wide[TOTAL].to_numpy(dtype="float64")
            missing = np.isnan(total)
            if missing.any():
                if weighted is None or np.isnan(weighted[missing]).any():
                    i = int(np.flatnonzero(missing)[0])
                    raise InputError(f"candidate '{wide.index[i][0]}' run {wide.index[i][1]} has "
                                     "no total and not every criterion score",
                                     column="criterion")
                total = np.where(missing, weighted, total)
            source = "screener"
            if weighted is not None:
                ok = ~np.isnan(weighted)
                mismatch = int(np.sum(np.abs(total[ok] - weighted[ok]) > 1e-9))
        else:
            if weighted is None:
                raise InputError("the draws have neither criteria nor a total", column="criterion")
            bad = np.isnan(weighted)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                j = int(np.flatnonzero(np.isnan(scores[i]))[0])
                raise InputError(f"candidate '{wide.index[i][0]}' run {wide.index[i][1]} has no "
                                 f"score for criterion '{crit[j]}' and there is no total",
                                 column="criterion")
            total = weighted
            source = "weighted sum"
        counts = np.bincount(cand_codes, minlength=len(cand_ids)).astype("float64")
        models = None
        if "model" in long.columns and long["model"].notna().any():
            mm = (long.assign(candidate_id=long["candidate_id"].astype(str))
                  .drop_duplicates(["candidate_id", "run"])
                  .set_index(["candidate_id", "run"])["model"])
            models = mm.reindex(wide.index).to_numpy(dtype=object)
        return cls(np.asarray(cand_ids, dtype=object), cand_codes.astype("int64"), runs, crit,
                   scores, total, source, weights, maxp, mismatch, counts, models)

    def subset(self, keep: np.ndarray) -> Draws:
        """The draws where ``keep`` is true (candidates left without draws are dropped)."""
        cand_old = self.cand[keep]
        used = np.unique(cand_old)
        remap = np.full(self.K, -1, dtype="int64")
        remap[used] = np.arange(len(used))
        cand = remap[cand_old]
        counts = np.bincount(cand, minlength=len(used)).astype("float64")
        return Draws(self.candidate_ids[used], cand, self.run[keep], self.criteria,
                     self.scores[keep], self.total[keep], self.total_source, self.weights,
                     self.max_points, self.total_mismatch, counts,
                     None if self.models is None else self.models[keep])

    def candidate_means(self, values: np.ndarray | None = None) -> np.ndarray:
        return group_mean(self.cand, self.total if values is None else values, self.counts)
