"""Step 5 — the flip rate at the cutoff, on single draws (never on means).

Production takes one draw and decides, so every number here counts single draws. The standard
error of the mean of N runs appears nowhere in this product.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special

from core.errors import InputError

__all__ = [
    "passes",
    "flip_rate",
    "disagreement",
    "clopper_pearson",
    "clopper_pearson_table",
    "flip_table",
    "FlipSummary",
    "summarize",
    "effective_cutoff",
    "FLIP_COLUMNS",
]

FLIP_COLUMNS = ["candidate_id", "passes", "runs", "flip_rate", "disagreement", "mean",
                "ci_low", "ci_high", "flips"]


def passes(total: np.ndarray, cutoff: float, comparison: str = ">=") -> np.ndarray:
    """Boolean pass per draw: ``T ≥ t`` (default) or ``T > t``."""
    if comparison == ">=":
        return total >= cutoff
    if comparison == ">":
        return total > cutoff
    raise InputError(f"comparison must be '>=' or '>', got {comparison!r}")


def flip_rate(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``min(k, n − k) / n``: the share of runs on the minority side (≤ 0.5)."""
    k = np.asarray(k, dtype="float64")
    n = np.asarray(n, dtype="float64")
    return np.minimum(k, n - k) / n


def disagreement(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``2k(n − k) / (n(n − 1))``: the probability two different draws land on opposite sides.

    Notes
    -----
    Unbiased for ``2p(1 − p)``: of the ``n(n−1)/2`` unordered pairs of runs, ``k(n−k)`` straddle
    the cutoff. It is one minus Fleiss's per-subject agreement ``P_i`` with two categories
    (pass, fail). NaN for a candidate with a single run.

    References
    ----------
    .. [1] Seed 000 (the method), "Method", step 5 "Compute the flip rate on single draws —
       never on the mean"; SPEC §3.5.
    .. [2] Fleiss, J. L. (1971). Measuring nominal scale agreement among many raters.
       *Psychological Bulletin* 76(5), 378–382 — ``P_i``; statsmodels:
       ``statsmodels.stats.inter_rater.fleiss_kappa`` computes the same ``P_i`` internally.

    Examples
    --------
    Four runs that pass 0, 1 and 2 times:

    >>> import numpy as np
    >>> disagreement(np.array([0, 1, 2]), np.array([4, 4, 4])).round(3)
    array([0.   , 0.5  , 0.667])
    >>> flip_rate(np.array([0, 1, 2]), np.array([4, 4, 4]))
    array([0.  , 0.25, 0.5 ])
    """
    k = np.asarray(k, dtype="float64")
    n = np.asarray(n, dtype="float64")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 1, 2 * k * (n - k) / (n * (n - 1)), np.nan)


def clopper_pearson(k: np.ndarray, n: np.ndarray, level: float = 0.95
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Exact (Clopper–Pearson) interval on ``k/n``.

    Notes
    -----
    Lower ``Beta_{α/2}(k, n−k+1)`` (0 when k = 0), upper ``Beta_{1−α/2}(k+1, n−k)`` (1 when
    k = n). Equals ``statsmodels.stats.proportion.proportion_confint(method="beta")``. Computed
    once per distinct ``(k, n)`` pair, so a slider move over thousands of candidates costs a
    handful of quantile calls.

    References
    ----------
    .. [1] Clopper, C. J. & Pearson, E. S. (1934). The use of confidence or fiducial limits
       illustrated in the case of the binomial. *Biometrika* 26(4), 404–413.
    .. [2] statsmodels: ``proportion_confint(k, n, method="beta")``; scipy:
       ``binomtest(k, n).proportion_ci(method="exact")``; R: ``binom.test(k, n)$conf.int``.

    Examples
    --------
    >>> import numpy as np
    >>> lo, hi = clopper_pearson(np.array([1]), np.array([4]))
    >>> round(float(lo[0]), 4), round(float(hi[0]), 4)
    (0.0063, 0.8059)
    """
    k = np.asarray(k, dtype="int64")
    n = np.asarray(n, dtype="int64")
    a = (1 - level) / 2
    base = int(n.max()) + 1 if n.size else 1
    codes, inv = np.unique(n * base + k, return_inverse=True)
    pk, pn = (codes % base).astype(float), (codes // base).astype(float)
    with np.errstate(invalid="ignore"):
        lo = np.where(pk > 0, special.betaincinv(pk, np.maximum(pn - pk + 1, 1e-300), a), 0.0)
        hi = np.where(pk < pn, special.betaincinv(pk + 1, np.maximum(pn - pk, 1e-300), 1 - a),
                      1.0)
    inv = inv.reshape(-1)
    return lo[inv], hi[inv]


def clopper_pearson_table(max_runs: int, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Clopper–Pearson bounds for every ``(n, k)`` with ``k ≤ n ≤ max_runs``: ``lo[n, k]``.

    The slider engine looks intervals up here instead of computing quantiles on every move.
    """
    n = np.repeat(np.arange(max_runs + 1), max_runs + 1)
    k = np.tile(np.arange(max_runs + 1), max_runs + 1)
    ok = (k <= n) & (n > 0)
    lo = np.full(n.shape, np.nan)
    hi = np.full(n.shape, np.nan)
    lo[ok], hi[ok] = clopper_pearson(k[ok], n[ok], level)
    shape = (max_runs + 1, max_runs + 1)
    return lo.reshape(shape), hi.reshape(shape)


def flip_table(candidate_ids: np.ndarray | pd.Series, k: np.ndarray, n: np.ndarray,
               means: np.ndarray, ci: tuple[np.ndarray, np.ndarray] | None = None
               ) -> pd.DataFrame:
    """Per-candidate flip table (:data:`FLIP_COLUMNS`), in candidate order.

    ``ci`` — precomputed Clopper–Pearson bounds per candidate (else computed here).
    """
    lo, hi = clopper_pearson(k, n) if ci is None else ci
    return pd.DataFrame({
        "candidate_id": candidate_ids, "passes": k.astype("int64"), "runs": n.astype("int64"),
        "flip_rate": flip_rate(k, n), "disagreement": disagreement(k, n), "mean": means,
        "ci_low": lo, "ci_high": hi, "flips": (k > 0) & (k < n)}, columns=FLIP_COLUMNS)


@dataclass(frozen=True)
class FlipSummary:
    """The headline of the flip step at one cutoff."""

    cutoff: float
    comparison: str
    candidates: int
    candidates_with_flip: int
    worst_candidate: str | None
    worst_passes: int
    worst_runs: int
    worst_flip_rate: float
    flip_interval: tuple[float, float] | None
    mean_disagreement: float


def summarize(cutoff: float, candidate_ids: np.ndarray, k: np.ndarray, n: np.ndarray,
              means: np.ndarray, comparison: str = ">=", id_rank: np.ndarray | None = None
              ) -> FlipSummary:
    """Worst candidate, flip count and flip interval.

    Notes
    -----
    Worst = largest flip rate; ties broken by ``|k/n − 0.5|`` (closest to a coin first), then by
    candidate id. Flip interval = [min, max] of the mean total of candidates with
    ``0 < k < n``; ``None`` when no candidate flips. Mean disagreement = mean over candidates
    of :func:`disagreement` (candidates with one run left out).

    References
    ----------
    .. [1] Seed 000 (the method), "Method", step 5 "Compute the flip rate on single draws —
       never on the mean", and "Output format" (FLIP RATE AT CUTOFF); SPEC §3.5.
    .. [2] Fleiss, J. L. (1971). Measuring nominal scale agreement among many raters.
       *Psychological Bulletin* 76(5), 378–382 (per-subject agreement, see
       :func:`disagreement`).

    Examples
    --------
    Three candidates with 4 runs each; at the cutoff ``b`` passes 2 of 4 runs (a coin flip),
    ``c`` 3 of 4:

    >>> import numpy as np
    >>> s = summarize(78.0, np.array(["a", "b", "c"]), k=np.array([4, 2, 3]),
    ...               n=np.array([4, 4, 4]), means=np.array([85.0, 77.5, 79.0]))
    >>> s.candidates_with_flip, s.worst_candidate, s.worst_flip_rate, s.flip_interval
    (2, 'b', 0.5, (77.5, 79.0))
    >>> round(s.mean_disagreement, 3)
    0.389
    """
    fr = flip_rate(k, n)
    flips = (k > 0) & (k < n)
    rank = np.asarray(candidate_ids).astype(str) if id_rank is None else id_rank
    order = np.lexsort((rank, np.abs(k / n - 0.5), -fr))
    w = int(order[0]) if len(order) else None
    interval = (float(means[flips].min()), float(means[flips].max())) if flips.any() else None
    return FlipSummary(
        cutoff=float(cutoff), comparison=comparison, candidates=int(len(k)),
        candidates_with_flip=int(flips.sum()),
        worst_candidate=None if w is None else str(candidate_ids[w]),
        worst_passes=0 if w is None else int(k[w]), worst_runs=0 if w is None else int(n[w]),
        worst_flip_rate=float("nan") if w is None else float(fr[w]),
        flip_interval=interval, mean_disagreement=_nanmean(disagreement(k, n)))


def _nanmean(x: np.ndarray) -> float:
    ok = ~np.isnan(x)
    return float(np.mean(x[ok])) if ok.any() else float("nan")


def effective_cutoff(pool_scores: np.ndarray, top_k: int, of_n: int | None = None) -> float:
    """The k-th highest first-pass score of the pool: the cutoff a recruiter working the top k
    of a ranked list actually applies.

    ``of_n`` is the list length the recruiter quotes; it is only checked against the pool
    (the pool is what is ranked).

    Raises
    ------
    InputError
        When the pool is empty or ``top_k`` is not between 1 and the pool size.
    """
    s = np.sort(np.asarray(pool_scores, dtype="float64"))[::-1]
    if len(s) == 0:
        raise InputError("the pool is empty: the effective cutoff (top k) needs the pool's "
                         "first-pass scores")
    if not 1 <= int(top_k) <= len(s):
        raise InputError(f"top k must be between 1 and the pool size {len(s)}; got {top_k} "
                         "(the effective cutoff is the k-th highest first-pass score of the "
                         "pool)")
    return float(s[int(top_k) - 1])
