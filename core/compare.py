"""Did the fix work? The statistics that compare two audits of the same req (SPEC §7).

Audit A is the harness before a change, audit B after it.

* :func:`variance_ratio` — the ratio of pooled within-candidate variances ``F = s²_A / s²_B``
  with its F-distribution interval, and :func:`change_label` deciding *improved / worse / no
  detectable change* by that interval alone;
* :func:`match_criteria` — criteria matched by name; a criterion of A that B splits into parts
  (``projects`` → ``projects_scope`` + ``projects_evidence``) is compared with the sum of its
  parts; renamed, merged, dropped and new criteria are listed, not compared;
* :func:`bootstrap_weights` and :func:`bootstrap_interval` — the percentile bootstrap over
  candidates of the change in mean two-draw disagreement (paired or unpaired);
* :func:`verdict_sentence` — the one sentence at the top of the comparison.

The engine that applies them to two analysed audits at a cutoff is
:class:`core.comparison.Comparison`; the reports are :mod:`core.compare_report`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from core.format import pct, points_change

__all__ = [
    "CHANGES",
    "LEVEL",
    "VarianceRatio",
    "CriteriaMatch",
    "DisagreementChange",
    "variance_ratio",
    "change_label",
    "ratio_row",
    "match_criteria",
    "bootstrap_weights",
    "bootstrap_interval",
    "verdict_sentence",
]

#: The three outcomes of a variance-ratio interval.
CHANGES = ("improved", "worse", "no detectable change")
LEVEL = 0.95
_SPLIT_SEPARATORS = "_-.:/ "


# ============================================================================ statistics
def variance_ratio(s_a: float, df_a: float, s_b: float, df_b: float, level: float = LEVEL
                   ) -> tuple[float, float, float]:
    """Ratio of two pooled within-candidate variances with its F interval.

    Parameters
    ----------
    s_a, s_b : float
        Pooled within-candidate SDs of audit A and audit B.
    df_a, df_b : float
        Their degrees of freedom, ``Σ_i (n_i − 1)`` in each audit.
    level : float
        Confidence level (0.95).

    Returns
    -------
    (F, low, high)
        ``F = s²_A / s²_B`` and ``[F / F_{1−α/2}(df_A, df_B), F / F_{α/2}(df_A, df_B)]``.

    Notes
    -----
    Under normal within-candidate noise, ``(s²_A/σ²_A) / (s²_B/σ²_B)`` follows
    ``F(df_A, df_B)``, so the interval covers ``σ²_A/σ²_B`` with probability ``level``. With
    ``df_A = df_B = 2`` the F quantiles are closed-form (``F_q = q/(1 − q)``: 39 and 1/39).
    Edge cases: ``s_B = 0 < s_A`` gives ``(inf, inf, inf)`` (B removed the noise); both zero
    gives NaNs; fewer than one degree of freedom on either side gives NaNs.

    References
    ----------
    .. [1] SPEC §7 ("Within-variance ratio"); issue 11; seed 000 (the method), "Method", step 3
       (the chi-square behaviour of a within-candidate variance that this ratio builds on).
    .. [2] Snedecor, G. W. & Cochran, W. G. (1989). *Statistical Methods*, 8th ed., §6.12 —
       the F test and interval for a ratio of two variances.
    .. [3] ``scipy.stats.f.ppf``; R: ``var.test(x, y)$conf.int`` (the same interval from the
       raw residuals).

    Examples
    --------
    With 2 and 2 degrees of freedom ``F_{0.975}(2, 2) = 39``:

    >>> f, low, high = variance_ratio(2.0, 2, 1.0, 2)
    >>> round(f, 3), round(low, 4), round(high, 1)
    (4.0, 0.1026, 156.0)
    >>> change_label(low, high)
    'no detectable change'
    """
    if not (df_a >= 1 and df_b >= 1) or not (np.isfinite(s_a) and np.isfinite(s_b)):
        return (math.nan, math.nan, math.nan)
    va, vb = float(s_a) ** 2, float(s_b) ** 2
    if vb == 0.0:
        return (math.inf, math.inf, math.inf) if va > 0 else (math.nan, math.nan, math.nan)
    f = va / vb
    a = (1 - level) / 2
    return (f, f / float(stats.f.ppf(1 - a, df_a, df_b)), f / float(stats.f.ppf(a, df_a, df_b)))


def change_label(low: float, high: float) -> str:
    """``improved`` when the whole interval for ``σ²_A/σ²_B`` is above 1, ``worse`` when it is
    below 1, else ``no detectable change`` (the point estimate never decides)."""
    if low > 1:          # NaN compares False: no decision without an interval
        return "improved"
    if high < 1:
        return "worse"
    return "no detectable change"


@dataclass(frozen=True)
class VarianceRatio:
    """One row of the per-criterion comparison (numbers unrounded)."""

    criterion: str
    within_sd_a: float
    within_sd_b: float
    df_a: int
    df_b: int
    f_ratio: float
    f_low: float
    f_high: float
    change: str
    verdict_a: str = ""
    verdict_b: str = ""
    kind: str = "matched"          # "matched" | "split" | "total"
    parts: tuple[str, ...] = ()    # for a split: B's criteria whose sum is compared

    @property
    def label(self) -> str:
        if self.kind == "split":
            return f"{self.criterion} → {' + '.join(self.parts)}"
        return self.criterion


def ratio_row(name: str, s_a: float, df_a: int, s_b: float, df_b: int, **kw: Any
               ) -> VarianceRatio:
    f, lo, hi = variance_ratio(s_a, df_a, s_b, df_b)
    return VarianceRatio(name, float(s_a), float(s_b), int(df_a), int(df_b), f, lo, hi,
                         change_label(lo, hi), **kw)


@dataclass(frozen=True)
class CriteriaMatch:
    """How the rubrics of A and B line up (by name).

    ``matched``: in both. ``split``: an A criterion → the B criteria named after it (two or
    more, ``projects`` → ``projects_scope``, ``projects_evidence``). ``renamed``: an A criterion
    → the single B criterion named after it (listed, not compared). ``merged``: a B criterion
    → the A criteria named after it. ``dropped``: only in A. ``new``: only in B.
    """

    matched: tuple[str, ...]
    split: dict[str, tuple[str, ...]]
    renamed: dict[str, str]
    merged: dict[str, tuple[str, ...]]
    dropped: tuple[str, ...]
    new: tuple[str, ...]

    def unmatched(self) -> list[dict[str, str]]:
        """Every criterion not compared one-to-one, with what happened to it."""
        out: list[dict[str, str]] = []
        for a, parts in self.split.items():
            out.append({"criterion": a, "in": "A", "status": f"split into {' + '.join(parts)} "
                        "(compared with the sum of its parts)"})
            for p in parts:
                out.append({"criterion": p, "in": "B", "status": f"part of {a} (split)"})
        for a, b in self.renamed.items():
            out.append({"criterion": a, "in": "A", "status": f"renamed to {b}? (not compared)"})
            out.append({"criterion": b, "in": "B", "status": f"renamed from {a}? (not compared)"})
        for b, parts in self.merged.items():
            out.append({"criterion": b, "in": "B", "status": f"merges {' + '.join(parts)} of A "
                        "(not compared)"})
            for p in parts:
                out.append({"criterion": p, "in": "A", "status": f"merged into {b} (not "
                            "compared)"})
        out += [{"criterion": a, "in": "A", "status": "dropped"} for a in self.dropped]
        out += [{"criterion": b, "in": "B", "status": "new"} for b in self.new]
        return out


def _named_after(parent: str, child: str) -> bool:
    return (len(child) > len(parent) + 1 and child.startswith(parent)
            and child[len(parent)] in _SPLIT_SEPARATORS)


def match_criteria(names_a: tuple[str, ...] | list[str], names_b: tuple[str, ...] | list[str]
                   ) -> CriteriaMatch:
    """Match criteria by name (see :class:`CriteriaMatch`); order follows each rubric.

    A B criterion is a part of an A criterion when its name is the A name followed by a
    separator (``_ - . : /`` or a space) and more text; a rename without such a name cannot be
    told from a drop plus a new criterion and is listed as both.
    """
    a_set, b_set = set(names_a), set(names_b)
    matched = tuple(n for n in names_a if n in b_set)
    only_a = [n for n in names_a if n not in b_set]
    only_b = [n for n in names_b if n not in a_set]
    split: dict[str, tuple[str, ...]] = {}
    renamed: dict[str, str] = {}
    used_b: set[str] = set()
    for a in only_a:
        kids = tuple(b for b in only_b if b not in used_b and _named_after(a, b))
        if len(kids) >= 2:
            split[a] = kids
        elif len(kids) == 1:
            renamed[a] = kids[0]
        used_b.update(kids)
    left_a = [a for a in only_a if a not in split and a not in renamed]
    merged: dict[str, tuple[str, ...]] = {}
    used_a: set[str] = set()
    for b in only_b:
        if b in used_b:
            continue
        parents = tuple(a for a in left_a if a not in used_a and _named_after(b, a))
        if len(parents) >= 2:
            merged[b] = parents
            used_a.update(parents)
            used_b.add(b)
    return CriteriaMatch(matched, split, renamed, merged,
                         tuple(a for a in left_a if a not in used_a),
                         tuple(b for b in only_b if b not in used_b))


def bootstrap_weights(k: int, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``(reps, k)`` resampling counts: row r says how often each of the k candidates was drawn.

    Notes
    -----
    Row r counts the k indices drawn uniformly with replacement for replicate r (a multinomial
    draw with k trials and equal probabilities), so a bootstrap mean of ``x`` is
    ``W[r] @ x / k``. The matrix is drawn once per
    comparison, so every cutoff is judged against the same resamples (the interval does not
    jitter as the slider moves) and a seed reproduces it exactly.

    References
    ----------
    .. [1] SPEC §7 ("Decision noise at a cutoff"); issue 11.
    .. [2] Efron, B. & Tibshirani, R. J. (1993). *An Introduction to the Bootstrap*. Chapman &
       Hall, ch. 6 (the nonparametric bootstrap) and ch. 13 (percentile intervals).
    .. [3] R: ``boot::boot(data, statistic, R = 2000)`` with ``boot.ci(type = "perc")``;
       scipy: ``scipy.stats.bootstrap(..., method="percentile")``.

    Examples
    --------
    >>> import numpy as np
    >>> w = bootstrap_weights(3, 1000, np.random.default_rng(0))
    >>> w.shape, bool((w.sum(axis=1) == 3).all())
    ((1000, 3), True)
    >>> x = np.array([0.1, 0.2, 0.6], dtype="float32")
    >>> low, high = bootstrap_interval(w @ x / 3)
    >>> round(low, 3) >= 0.1, round(high, 3) <= 0.6
    (True, True)
    """
    if k < 1:
        return np.zeros((reps, 0), dtype="float32")
    picks = rng.integers(0, k, size=(reps, k), dtype=np.int64)
    picks += np.arange(reps)[:, None] * k            # row r's picks land in row r's bins
    counts = np.bincount(picks.ravel(), minlength=reps * k).reshape(reps, k)
    # float32 holds every count exactly (k < 2**24) at half the memory of float64
    return counts.astype("float32")


def bootstrap_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """Percentile interval of bootstrap replicates: their ``α/2`` and ``1 − α/2`` quantiles
    (``numpy.quantile``, linear interpolation).

    References
    ----------
    .. [1] Efron, B. & Tibshirani, R. J. (1993). *An Introduction to the Bootstrap*, ch. 13;
       R ``boot::boot.ci(type = "perc")`` (which interpolates on the normal-quantile scale,
       so it can differ in the last digits).

    Examples
    --------
    >>> import numpy as np
    >>> [round(v, 6) for v in bootstrap_interval(np.arange(101.0))]
    [2.5, 97.5]
    """
    a = (1 - level) / 2
    lo, hi = np.quantile(values, [a, 1 - a])
    return float(lo), float(hi)


@dataclass(frozen=True)
class DisagreementChange:
    """Mean two-draw disagreement at one cutoff in A and B, and the change with its interval."""

    a: float
    b: float
    delta: float
    low: float | None
    high: float | None
    paired: bool
    candidates: int                # pairs (paired) or K_A + K_B (unpaired) in the bootstrap
    reps: int
    seed: int
    note: str | None = None        # why there is no interval, when there is none


# ============================================================================ the sentence
def verdict_sentence(cutoff: float, d: DisagreementChange, reviews_a: float | None,
                     reviews_b: float | None) -> str:
    """One sentence: what B did to the decision noise at the cutoff, with the interval.

    "B halves the decision noise at 78: disagreement 19% → 8% (−11 points, 95% interval −16 to
    −6); reviews per req 151 → 74". The verb follows the interval, never the point estimate
    alone: a reduction needs the whole interval below 0, an increase the whole interval above.
    """
    t = f"{cutoff:g}"
    if d.low is None or d.high is None:
        interval = f"no interval: {d.note}"
    else:
        interval = (f"95% interval {points_change(d.low)} to {points_change(d.high)}"
                    + ("" if d.paired else ", unpaired"))
    numbers = (f"disagreement {pct(d.a)} → {pct(d.b)} ({points_change(d.delta)} points, "
               f"{interval})")
    if d.a == 0 and d.b == 0:
        head = f"Neither audit has decision noise at {t}: no candidate flips in A or B"
        numbers = "disagreement 0% in both"
    elif d.low is not None and d.high is not None and d.high < 0:
        r = d.b / d.a if d.a > 0 else math.nan
        if 0.4 <= r <= 0.6:
            head = f"B halves the decision noise at {t}"
        elif r < 0.4:
            head = f"B cuts the decision noise at {t} by {pct(1 - r)}"
        else:
            head = f"B reduces the decision noise at {t}"
    elif d.low is not None and d.high is not None and d.low > 0:
        r = d.b / d.a if d.a > 0 else math.inf
        head = (f"B doubles the decision noise at {t}" if 1.8 <= r <= 2.2
                else f"B increases the decision noise at {t}")
    else:
        head = f"No detectable change in decision noise at {t}"
    if reviews_a is None or reviews_b is None:
        cost = "reviews per req need the pool"
    else:
        cost = f"reviews per req {reviews_a:.0f} → {reviews_b:.0f}"
    return f"{head}: {numbers}; {cost}."
