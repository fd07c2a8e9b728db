"""Did the fix work? Two audits of the same req compared side by side, with intervals (SPEC §7).

Audit A is the harness before a change, audit B after it. :class:`Comparison` is built once from
the two analysed audits (:class:`core.audit.AuditResult`) and answers a cutoff (and band width)
with array operations only, so the Compare page's shared slider never reads the database:

* per criterion matched by name, and for the total, the ratio of pooled within-candidate
  variances ``F = s²_A / s²_B`` with its F-distribution interval; a criterion of A that B splits
  into parts (``projects`` → ``projects_scope`` + ``projects_evidence``) is compared with the sum
  of its parts; renamed, dropped and new criteria are listed, not compared;
* at one cutoff for both, the two-draw disagreement per candidate and the change in its mean
  with a percentile bootstrap over candidates — paired when both audits scored the same
  candidates, unpaired otherwise;
* each audit's manual-review band (:mod:`core.band` through :mod:`core.live`) and the manual
  reviews per req it implies against one pool and one number of applications per req.

Nothing is compared while either audit's guards withhold its statistics (cache or determinism)
or flag a second population; :attr:`Comparison.withheld` names the guard.

Reports (:func:`render`) in text, Markdown, JSON and a self-contained HTML page; every piece of
user text goes through :mod:`core.format`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
from scipy import stats

from core import charts
from core import flip as flip_mod
from core.audit import AuditResult
from core.criteria import pooled_within_sd
from core.errors import InputError
from core.format import html_escape, md_cell, md_escape, num, pct, points_change, term_escape
from core.live import LiveAudit, LiveView
from core.report import html_page

__all__ = [
    "CHANGES",
    "DEFAULT_REPS",
    "MAX_REPS",
    "FORMATS",
    "HARNESS_FIELDS",
    "VarianceRatio",
    "CriteriaMatch",
    "DisagreementChange",
    "ComparisonView",
    "Comparison",
    "variance_ratio",
    "change_label",
    "match_criteria",
    "bootstrap_weights",
    "bootstrap_interval",
    "report_dict",
    "figures",
    "render",
    "DEFAULT",
    "verdict_sentence",
]

#: The three outcomes of a variance-ratio interval.
CHANGES = ("improved", "worse", "no detectable change")
DEFAULT_REPS = 2000
MAX_REPS = 100_000
#: Bootstrap resampling counts held per comparison (replications × candidates, float32): 200 MB.
MAX_BOOTSTRAP_CELLS = 50_000_000
FORMATS = ("text", "md", "json", "html")
LEVEL = 0.95
#: "Not given": take the comparison's default (``None`` means "no capacity").
DEFAULT: Any = "default"
_SPLIT_SEPARATORS = "_-.:/ "

#: The freeze-sheet fields shown side by side, in reading order.
HARNESS_FIELDS = ("req_id", "req_title", "gates", "screener", "screener_version", "model",
                  "prompt_version", "rubric_version", "criteria", "parser_version", "sampling",
                  "temperature", "top_p", "top_k", "endpoint", "result_cache_off",
                  "distinct_request_ids", "prefix_caching", "side_effect_free")

NOT_ESTABLISHED = [
    "whether either harness measures job performance (validity — not tested)",
    "whether selection rates differ across protected categories (a different statistic; an "
    "independent auditor is required)",
]


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


def _ratio_row(name: str, s_a: float, df_a: int, s_b: float, df_b: int, **kw: Any
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
    (``numpy.quantile``, linear interpolation)."""
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


# ============================================================================ the engine
@dataclass(frozen=True)
class ComparisonView:
    """Everything the page and the reports show for one cutoff, band width and capacity."""

    cutoff: float
    k: float
    view_a: LiveView
    view_b: LiveView
    disagreement: DisagreementChange
    pass_rate_a: np.ndarray
    pass_rate_b: np.ndarray
    verdict: str
    disagreement_a: np.ndarray | None = None   # per candidate, d_i in A (NaN with one run)
    disagreement_b: np.ndarray | None = None


def _guard_reason(side: str, r: AuditResult) -> str | None:
    """The guard that withholds this audit's statistics, named, or None."""
    g = r.guards
    if r.withheld:
        name = "cache guard" if g.get("cache", {}).get("withhold") else "determinism guard"
        return f"{name} of audit {side} ({r.audit_id}): {r.withheld}"
    pop = g.get("populations") or {}
    if pop.get("flagged"):
        return (f"second-population guard of audit {side} ({r.audit_id}): "
                f"{pop.get('excluded_draws', 0)} draw(s) reported a model other than the frozen "
                f"'{pop.get('frozen_model')}', so a change between the audits could be the model's"
                ", not the harness's")
    return None


def _sheet_value(freeze: dict[str, Any], name: str) -> str:
    v = freeze.get(name)
    if name == "criteria":
        items = []
        for c in v or []:
            mx = c.get("max", c.get("max_points"))
            w = c.get("weight", 1.0)
            items.append(f"{c.get('name')}:{num(mx) if mx is not None else '?'}"
                         + ("" if w in (None, 1, 1.0) else f":w{num(w, 2)}"))
        return ", ".join(items)
    if v is None or v == "":
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


class Comparison:
    """Audit A against audit B: built once, answers a cutoff with array operations.

    Parameters
    ----------
    a, b : AuditResult
        The analysed audits (``core.audit.analyze``); A is "before", B "after".
    reps : int
        Bootstrap replications (default 2,000).
    seed : int
        Seed of the bootstrap (the same seed gives the same interval).
    k, capacity, applications_per_req : optional
        Band width, reviewer capacity and applications per req for both sides; default to
        audit A's settings (then B's).

    Raises
    ------
    InputError
        ``reps`` below 100, or a negative capacity / non-positive applications per req.
    """

    def __init__(self, a: AuditResult, b: AuditResult, *, reps: int = DEFAULT_REPS,
                 seed: int = 0, k: float | None = None, capacity: float | None = None,
                 applications_per_req: float | None = None) -> None:
        if not isinstance(reps, (int, np.integer)) or not 100 <= reps <= MAX_REPS:
            raise InputError(f"reps must be a whole number from 100 to {MAX_REPS:,}; got {reps}")
        cells = int(reps) * (a.draws.K + (0 if a.draws.K == b.draws.K else b.draws.K))
        if cells > MAX_BOOTSTRAP_CELLS:
            raise InputError(f"reps {reps:,} × {max(a.draws.K, b.draws.K):,} candidates is too "
                             f"large a bootstrap; lower reps to at most "
                             f"{MAX_BOOTSTRAP_CELLS // max(a.draws.K, b.draws.K, 1):,}")
        if capacity is not None and not (np.isfinite(capacity) and capacity >= 0):
            raise InputError(f"capacity must be a number of reviews ≥ 0; got {capacity}")
        if applications_per_req is not None and not (np.isfinite(applications_per_req)
                                                     and applications_per_req > 0):
            raise InputError("applications per req must be a positive number; got "
                             f"{applications_per_req}")
        if k is not None and not (np.isfinite(k) and k > 0):
            raise InputError(f"k (band width in within-SDs) must be positive; got {k}")
        self.a, self.b = a, b
        self.reps, self.seed = int(reps), int(seed)
        sa, sb = a.settings, b.settings
        self.k = float(k if k is not None else sa.k)
        self.capacity = capacity if capacity is not None else (
            sa.capacity if sa.capacity is not None else sb.capacity)
        self.comparison_op = sa.comparison
        self.default_cutoff = float(a.cutoff)
        self.warnings: list[str] = []
        self.withheld = _guard_reason("A", a) or _guard_reason("B", b)
        self.harness = [{"field": f, "a": _sheet_value(a.freeze, f), "b": _sheet_value(b.freeze, f),
                         "differs": _sheet_value(a.freeze, f) != _sheet_value(b.freeze, f)}
                        for f in HARNESS_FIELDS]
        self._warn_about_scope()
        self.match = match_criteria(a.draws.criteria, b.draws.criteria)
        ids_a = np.asarray(a.draws.candidate_ids).astype(str)
        ids_b = np.asarray(b.draws.candidate_ids).astype(str)
        self.paired = len(ids_a) == len(ids_b) and bool(np.array_equal(ids_a, ids_b))
        if not self.paired:
            common = len(set(ids_a) & set(ids_b))
            self.warnings.append(
                f"different candidate samples ({len(ids_a)} candidates in A, {len(ids_b)} in B, "
                f"{common} in both): the change in decision noise is unpaired and compares two "
                "populations, not the same applications")
        self.criteria: list[VarianceRatio] = []
        self.total: VarianceRatio | None = None
        self._curves: tuple[Any, Any] | None = None
        if self.withheld:
            return
        self._pool_and_engines()
        self._ratios()
        self._bootstrap_setup()
        lo = min(self.engine_a.score_range[0], self.engine_b.score_range[0])
        hi = max(self.engine_a.score_range[1], self.engine_b.score_range[1])
        self.score_range = (float(lo), float(hi))

    # ------------------------------------------------------------------ setup
    def _warn_about_scope(self) -> None:
        a, b = self.a, self.b
        if a.audit_id == b.audit_id:
            self.warnings.append("A and B are the same audit: every change is zero by "
                                 "construction")
        elif a.harness_hash and a.harness_hash == b.harness_hash:
            self.warnings.append("A and B have the same harness hash: they are two runs of one "
                                 "harness, so any change is noise between replications")
        req_a, req_b = a.freeze.get("req_id"), b.freeze.get("req_id")
        if req_a != req_b:
            self.warnings.append(f"different reqs (A: {req_a or '—'}, B: {req_b or '—'}): the "
                                 "comparison is of populations, not of one req's harness change")
        if a.settings.comparison != b.settings.comparison:
            self.warnings.append(f"A passes at total {a.settings.comparison} cutoff and B at "
                                 f"{b.settings.comparison}; both are compared with "
                                 f"{a.settings.comparison}")

    def _pool_and_engines(self) -> None:
        a, b = self.a, self.b
        if a.live.pool is not None:
            pool, self.pool_source = a.live.pool, "A"
        elif b.live.pool is not None:
            pool, self.pool_source = b.live.pool, "B"
        else:
            pool, self.pool_source = None, None
        if (a.live.pool is not None and b.live.pool is not None
                and not np.array_equal(a.live.pool, b.live.pool)):
            self.warnings.append(f"the audits hold different pools ({len(a.live.pool)} and "
                                 f"{len(b.live.pool)} applicants): reviews per req use audit A's "
                                 "for both")
        self.pool = pool
        apps = (a.settings.applications_per_req if self.pool_source == "A" else
                b.settings.applications_per_req if self.pool_source == "B" else None)
        self.applications_per_req = apps if apps is not None else (
            float(len(pool)) if pool is not None else None)
        op = self.comparison_op
        self.engine_a = a.live if (self.pool_source == "A" and a.settings.comparison == op) \
            else LiveAudit(a.draws, pool, self.applications_per_req, op)
        self.engine_b = LiveAudit(b.draws, pool, self.applications_per_req, op)

    def _criterion_sd(self, r: AuditResult, names: tuple[str, ...]) -> tuple[float, int]:
        """Pooled within-SD (and df) of one criterion, or of the weighted sum of several."""
        d = r.draws
        cols = [d.criteria.index(n) for n in names]
        x = d.scores[:, cols]
        w = d.weights[cols] if len(names) > 1 else np.ones(1)
        ok = ~np.isnan(x).any(axis=1)
        if not ok.any():
            return math.nan, 0
        sub = d.subset(ok) if not ok.all() else d
        values = (x[ok] * w).sum(axis=1)
        return pooled_within_sd(sub.cand, values, sub.counts), int(np.sum(sub.counts - 1))

    def _ratios(self) -> None:
        a, b = self.a, self.b
        va = {} if a.criteria is None else dict(zip(a.criteria["criterion"], a.criteria["verdict"]))
        vb = {} if b.criteria is None else dict(zip(b.criteria["criterion"], b.criteria["verdict"]))
        rows = []
        for name in a.draws.criteria:
            if name in self.match.matched:
                s_a, df_a = self._criterion_sd(a, (name,))
                s_b, df_b = self._criterion_sd(b, (name,))
                rows.append(_ratio_row(name, s_a, df_a, s_b, df_b, verdict_a=va.get(name, ""),
                                       verdict_b=vb.get(name, "")))
            elif name in self.match.split:
                parts = self.match.split[name]
                wa = float(a.draws.weights[a.draws.criteria.index(name)])
                s_a, df_a = self._criterion_sd(a, (name,))
                s_b, df_b = self._criterion_sd(b, parts)
                rows.append(_ratio_row(name, wa * s_a, df_a, s_b, df_b,
                                       verdict_a=va.get(name, ""),
                                       verdict_b=", ".join(vb.get(p, "") for p in parts),
                                       kind="split", parts=parts))
        self.criteria = rows
        self.total = _ratio_row("total", self.engine_a.within_sd,
                                int(np.sum(a.draws.counts - 1)), self.engine_b.within_sd,
                                int(np.sum(b.draws.counts - 1)), kind="total")

    def _bootstrap_setup(self) -> None:
        rng = np.random.default_rng(self.seed)
        ca, cb = self.engine_a.counts, self.engine_b.counts
        if self.paired:
            self._keep = (ca > 1) & (cb > 1)
            self._w = bootstrap_weights(int(self._keep.sum()), self.reps, rng)
        else:
            self._keep_a, self._keep_b = ca > 1, cb > 1
            self._wa = bootstrap_weights(int(self._keep_a.sum()), self.reps, rng)
            self._wb = bootstrap_weights(int(self._keep_b.sum()), self.reps, rng)

    # ------------------------------------------------------------------ answers
    def check_cutoff(self, cutoff: float) -> float:
        """``cutoff`` as a float, or :class:`InputError` when it cannot be compared."""
        try:
            t = float(cutoff)
        except (TypeError, ValueError):
            raise InputError(f"the cutoff must be a number; got {cutoff!r}") from None
        if not np.isfinite(t):
            raise InputError(f"the cutoff must be a finite number; got {cutoff}")
        if self.withheld:
            return t
        lo, hi = self.score_range
        if not lo <= t <= hi:
            raise InputError(f"cutoff {t:g} is outside every total of both audits ({lo:g} to "
                             f"{hi:g}): no draw lands on both sides of it, so there is no "
                             f"decision noise to compare; give a cutoff between {lo:g} and "
                             f"{hi:g}")
        return t

    def disagreement(self, cutoff: float) -> DisagreementChange:
        """Mean two-draw disagreement in A and B at ``cutoff`` and the change B − A.

        Notes
        -----
        Per candidate ``d_i = 2k(n−k)/(n(n−1))`` (:func:`core.flip.disagreement`). Paired (the
        same candidates): ``Δ = mean_i(d_B,i − d_A,i)`` and each bootstrap replicate is the mean
        of the differences over resampled candidates. Unpaired: ``Δ = mean(d_B) − mean(d_A)``,
        each audit's candidates resampled separately. Percentile interval at 95%; candidates with
        a single run (no d) are left out. No interval with fewer than 2 candidates (pairs).
        """
        if self.withheld:
            raise InputError(f"nothing is compared: {self.withheld}")
        ea, eb = self.engine_a, self.engine_b
        da = flip_mod.disagreement(ea.pass_counts(cutoff), ea.counts)
        db = flip_mod.disagreement(eb.pass_counts(cutoff), eb.counts)
        if self.paired:
            diff = (db - da)[self._keep]
            k = len(diff)
            mean_a = float(np.mean(da[self._keep])) if k else math.nan
            mean_b = float(np.mean(db[self._keep])) if k else math.nan
            delta = float(np.mean(diff)) if k else math.nan
            if k < 2:
                return DisagreementChange(mean_a, mean_b, delta, None, None, True, k, self.reps,
                                          self.seed, "an interval over candidates needs at "
                                          "least 2 candidates with 2 or more runs")
            lo, hi = bootstrap_interval(self._w @ diff.astype("float32") / k)
            return DisagreementChange(mean_a, mean_b, delta, lo, hi, True, k, self.reps,
                                      self.seed)
        xa, xb = da[self._keep_a], db[self._keep_b]
        mean_a = float(np.mean(xa)) if len(xa) else math.nan
        mean_b = float(np.mean(xb)) if len(xb) else math.nan
        delta = mean_b - mean_a
        if len(xa) < 2 or len(xb) < 2:
            return DisagreementChange(mean_a, mean_b, delta, None, None, False,
                                      len(xa) + len(xb), self.reps, self.seed,
                                      "an interval over candidates needs at least 2 candidates "
                                      "with 2 or more runs in each audit")
        reps = (self._wb @ xb.astype("float32") / len(xb)
                - self._wa @ xa.astype("float32") / len(xa))
        lo, hi = bootstrap_interval(reps)
        return DisagreementChange(mean_a, mean_b, delta, lo, hi, False, len(xa) + len(xb),
                                  self.reps, self.seed)

    def view(self, cutoff: float | None = None, k: float | None = None,
             capacity: float | None = DEFAULT) -> ComparisonView:
        """Both sides at one cutoff (default: audit A's audited cutoff).

        ``capacity`` — reviewer capacity for both; :data:`DEFAULT` takes the comparison's,
        ``None`` means none.
        """
        if self.withheld:
            raise InputError(f"nothing is compared: {self.withheld}")
        t = self.check_cutoff(self.default_cutoff if cutoff is None else cutoff)
        kk = self.k if k is None else float(k)
        cap = self.capacity if capacity is DEFAULT else capacity
        if cap is not None and not (np.isfinite(cap) and cap >= 0):
            raise InputError(f"capacity must be a number of reviews ≥ 0; got {cap}")
        va = self.engine_a.view(t, kk, capacity=cap)
        vb = self.engine_b.view(t, kk, capacity=cap)
        dis = self.disagreement(t)
        ea, eb = self.engine_a, self.engine_b
        ka, kb = ea.pass_counts(t), eb.pass_counts(t)
        return ComparisonView(t, kk, va, vb, dis, ka / ea.counts, kb / eb.counts,
                              verdict_sentence(t, dis, va.manual_reviews_per_req,
                                               vb.manual_reviews_per_req),
                              flip_mod.disagreement(ka, ea.counts),
                              flip_mod.disagreement(kb, eb.counts))

    def curves(self) -> tuple[Any, Any]:
        """Flip count and mean disagreement over the score range in A and B (computed once:
        they do not depend on the cutoff, so a slider move only redraws the marker)."""
        if self._curves is None:
            lo, hi = self.score_range
            step = 1.0 if hi - lo > 20 else 0.5
            grid = np.arange(np.floor(lo), np.ceil(hi) + step, step)
            self._curves = (self.engine_a.flip_curve(grid), self.engine_b.flip_curve(grid))
        return self._curves


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


# ============================================================================ report data
def _num(x: Any) -> Any:
    """JSON-safe number: NaN/inf → None, numpy → Python."""
    if x is None:
        return None
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else None
    return x


def _ratio_dict(r: VarianceRatio) -> dict[str, Any]:
    return {"criterion": r.criterion, "within_sd_a": _num(r.within_sd_a),
            "within_sd_b": _num(r.within_sd_b), "f_ratio": _num(r.f_ratio),
            "f_low": _num(r.f_low), "f_high": _num(r.f_high), "change": r.change,
            "df_a": r.df_a, "df_b": r.df_b, "verdict_a": r.verdict_a, "verdict_b": r.verdict_b,
            "kind": r.kind, "parts": list(r.parts)}


def _side(r: AuditResult) -> dict[str, Any]:
    comp = r.composition()
    return {"audit_id": r.audit_id, "req_id": r.freeze.get("req_id"),
            "req_title": r.freeze.get("req_title"), "harness_hash": r.harness_hash,
            "candidates": comp["candidates"], "evaluations": comp["evaluations"],
            "runs_min": comp["runs_min"], "runs_max": comp["runs_max"]}


def _flip_dict(v: LiveView) -> dict[str, Any]:
    f = v.flip
    return {"candidates": f.candidates, "candidates_with_flip": f.candidates_with_flip,
            "mean_disagreement": _num(f.mean_disagreement),
            "worst": None if not f.candidates_with_flip else {
                "candidate_id": f.worst_candidate, "passes": f.worst_passes,
                "runs": f.worst_runs, "flip_rate": _num(f.worst_flip_rate)}}


def _band_detail(v: LiveView) -> dict[str, Any]:
    b = v.band
    return {"low": b.low, "high": b.high, "width": b.high - b.low, "rule": b.rule,
            "bound_by": b.bound_by, "within_sd": _num(b.within_sd),
            "share_of_pool": _num(v.share_of_pool),
            "over_capacity": bool(v.over_capacity) if v.capacity is not None
            and not v.needs_pool else None}


def report_dict(c: Comparison, *, cutoff: float | None = None, k: float | None = None,
                capacity: float | None = DEFAULT) -> dict[str, Any]:
    """The comparison as plain data (the JSON report); numbers unrounded.

    Carries at least ``criteria``, ``total``, ``cutoff``, ``disagreement``, ``band``,
    ``reviews_per_req``, ``unmatched_criteria`` and ``withheld`` (issue 11's contract).
    """
    out: dict[str, Any] = {
        "report": "screening score variance audit — comparison of two audits",
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "a": _side(c.a), "b": _side(c.b),
        "harness": c.harness,
        "harness_hash": {"a": c.a.harness_hash, "b": c.b.harness_hash},
        "warnings": list(c.warnings),
        "withheld": c.withheld,
        "unmatched_criteria": c.match.unmatched(),
        "not_established": list(NOT_ESTABLISHED),
    }
    if c.withheld:
        out.update({"verdict": f"Nothing is compared: {c.withheld}.", "criteria": None,
                    "total": None, "cutoff": None, "comparison": c.comparison_op,
                    "disagreement": None, "flips": None, "band": None, "band_detail": None,
                    "reviews_per_req": None, "per_candidate": None})
        return out
    v = c.view(cutoff, k, capacity)
    d = v.disagreement
    out.update({
        "verdict": v.verdict,
        "criteria": [_ratio_dict(r) for r in c.criteria],
        "total": _ratio_dict(c.total) if c.total else None,
        "cutoff": v.cutoff,
        "comparison": c.comparison_op,
        "k": v.k,
        "disagreement": {"a": _num(d.a), "b": _num(d.b), "delta": _num(d.delta),
                         "low": _num(d.low), "high": _num(d.high), "paired": d.paired,
                         "level": LEVEL, "reps": d.reps, "seed": d.seed,
                         "candidates": d.candidates, "note": d.note,
                         "method": ("paired percentile bootstrap over candidates" if d.paired
                                    else "unpaired percentile bootstrap, each audit's "
                                         "candidates resampled separately")},
        "flips": {"a": _flip_dict(v.view_a), "b": _flip_dict(v.view_b)},
        "band": {"a": [v.view_a.band.low, v.view_a.band.high],
                 "b": [v.view_b.band.low, v.view_b.band.high]},
        "band_detail": {"a": _band_detail(v.view_a), "b": _band_detail(v.view_b)},
        "reviews_per_req": (None if v.view_a.needs_pool else
                            {"a": _num(v.view_a.manual_reviews_per_req),
                             "b": _num(v.view_b.manual_reviews_per_req)}),
        "pool": {"source": c.pool_source,
                 "applicants": None if c.pool is None else int(len(c.pool)),
                 "applications_per_req": _num(c.applications_per_req)},
        "capacity": v.view_a.capacity,
        "per_candidate": None if not c.paired else [
            {"candidate_id": str(cid), "pass_rate_a": _num(pa), "pass_rate_b": _num(pb),
             "disagreement_a": _num(da), "disagreement_b": _num(db),
             "change": _num(db - da)}
            for cid, pa, pb, da, db in zip(c.engine_a.candidate_ids, v.pass_rate_a,
                                           v.pass_rate_b, v.disagreement_a, v.disagreement_b)],
    })
    return out


# ============================================================================ rendering
def _f(x: Any, nd: int = 2) -> str:
    return "—" if x is None else num(x, nd) if abs(float(x)) < 1e6 else f"{float(x):.3g}"


def _sd(x: Any) -> str:
    return "—" if x is None else f"{float(x):.2f}"


def _interval(r: dict[str, Any]) -> str:
    """The F interval for display; a B without noise (F infinite) says so."""
    if r["f_ratio"] is None and r["within_sd_b"] == 0 and (r["within_sd_a"] or 0) > 0:
        return "B has no noise"
    if r["f_low"] is None:
        return "—"
    return f"{_f(r['f_low'])} – {_f(r['f_high'])}"


def _lines(d: dict[str, Any], esc: Any) -> list[str]:
    """The plain-text report; ``esc`` escapes user text for the target."""
    a, b = d["a"], d["b"]
    L = ["AUDIT COMPARISON — did the fix work?"]
    for tag, s in (("A", a), ("B", b)):
        title = f' "{esc(s["req_title"])}"' if s.get("req_title") else ""
        plural = "" if s["candidates"] == 1 else "s"
        L.append(f"{tag}: {esc(s['audit_id'])} — req {esc(s['req_id'] or '—')}{title}; "
                 f"{s['candidates']} candidate{plural}, {s['evaluations']} evaluations; "
                 f"harness hash {esc(s['harness_hash'] or '—')}")
    L += ["", "VERDICT", f"  {esc(d['verdict'])}", ""]
    if d["warnings"]:
        L.append("WARNINGS")
        L += [f"  - {esc(w)}" for w in d["warnings"]]
        L.append("")
    L.append("HARNESS (* = differs)")
    width = max(len(r["field"]) for r in d["harness"]) + 2
    wa = min(max([len("A")] + [len(esc(r["a"])) for r in d["harness"]]) + 2, 48)
    L.append(f"    {'field':<{width}}{'A':<{wa}}B")
    for r in d["harness"]:
        mark = "*" if r["differs"] else " "
        va = esc(r["a"]) or "—"
        gap = "  " if len(va) >= wa else ""
        L.append(f"  {mark} {r['field']:<{width}}{va:<{wa}}{gap}{esc(r['b']) or '—'}")
    L.append("")
    if d["withheld"]:
        L += ["NOTHING COMPARED", f"  {esc(d['withheld'])}", ""]
    else:
        L.append("WITHIN-CANDIDATE NOISE (F = s²_A / s²_B; improved when the whole 95% interval "
                 "is above 1)")
        rows = list(d["criteria"]) + ([d["total"]] if d["total"] else [])
        names = [esc(r["criterion"] if r["kind"] != "split" else
                     f"{r['criterion']} → {' + '.join(r['parts'])}") for r in rows]
        nw = max([len("criterion")] + [len(n) for n in names]) + 2
        L.append(f"  {'criterion':<{nw}}{'SD A':>7}{'SD B':>7}{'F':>8}   {'95% interval':<18}"
                 f"{'change':<22}verdict A → B")
        for n, r in zip(names, rows):
            verdict = ("" if r["kind"] == "total" else
                       f"{r['verdict_a'] or '—'} → {r['verdict_b'] or '—'}")
            L.append(f"  {n:<{nw}}{_sd(r['within_sd_a']):>7}{_sd(r['within_sd_b']):>7}"
                     f"{_f(r['f_ratio']):>8}   {_interval(r):<18}{r['change']:<22}"
                     f"{esc(verdict)}")
        if d["total"]:
            t = d["total"]
            L.append(f"  degrees of freedom: {t['df_a']} (A), {t['df_b']} (B) for the total; "
                     "each row is its own 95% interval, so with several criteria one may cross "
                     "1 by chance")
        for u in d["unmatched_criteria"]:
            L.append(f"  not compared one-to-one: {esc(u['criterion'])} ({u['in']} only) — "
                     f"{esc(u['status'])}")
        L.append("")
        dis, fl = d["disagreement"], d["flips"]
        L.append(f"DECISION NOISE AT CUTOFF {d['cutoff']:g} (single draws, one cutoff for both)")
        L.append(f"  candidates with any flip: {fl['a']['candidates_with_flip']} of "
                 f"{fl['a']['candidates']} (A) → {fl['b']['candidates_with_flip']} of "
                 f"{fl['b']['candidates']} (B)")
        L.append(f"  mean two-draw disagreement: {pct(dis['a'])} (A) → {pct(dis['b'])} (B)")
        if dis["low"] is None:
            L.append(f"  change {points_change(dis['delta'])} points; no interval: {dis['note']}")
        else:
            L.append(f"  change {points_change(dis['delta'])} points, 95% interval "
                     f"{points_change(dis['low'])} to {points_change(dis['high'])} ("
                     f"{dis['method']}, {dis['candidates']} candidates, {dis['reps']:,} "
                     f"replications, seed {dis['seed']})")
        if not dis["paired"]:
            L.append("  UNPAIRED: the audits scored different candidates")
        for tag in ("a", "b"):
            w = fl[tag]["worst"]
            L.append(f"  worst candidate in {tag.upper()}: " + (
                "no flip" if w is None else f"{esc(w['candidate_id'])}, {w['passes']}/"
                f"{w['runs']} runs pass (flip rate {pct(w['flip_rate'])})"))
        L.append("")
        bd, pool = d["band_detail"], d["pool"]
        if pool["source"]:
            L.append(f"BAND AND COST (k = {d['k']:g}; pool of audit {pool['source']}: "
                     f"{pool['applicants']} applicants; {_f(pool['applications_per_req'], 0)} "
                     "applications per req for both)")
        else:
            L.append(f"BAND AND COST (k = {d['k']:g}; no pool: reviews per req need the req's "
                     "first-pass scores)")
        for tag in ("a", "b"):
            x = bd[tag]
            line = (f"  {tag.upper()}: {x['low']:.1f} – {x['high']:.1f} (width {x['width']:.1f}, "
                    f"{x['rule']})")
            if d["reviews_per_req"]:
                line += f" → ~{d['reviews_per_req'][tag]:.0f} manual reviews per req"
            L.append(line)
        if d["capacity"] is not None and d["reviews_per_req"]:
            def fits(tag: str) -> str:
                return "exceeds it" if bd[tag]["over_capacity"] else "fits"
            L.append(f"  reviewer capacity {d['capacity']:g} per req: A {fits('a')}, "
                     f"B {fits('b')}")
        L.append("")
    L.append("NOT ESTABLISHED BY THIS COMPARISON")
    L += [f"  - {x}" for x in d["not_established"]]
    return L


def render_text(d: dict[str, Any]) -> str:
    return "\n".join(_lines(d, term_escape)) + "\n"


def render_markdown(d: dict[str, Any]) -> str:
    """Markdown: headings, the harness and per-criterion tables, escaped cells."""
    a, b = d["a"], d["b"]
    out = [f"# Audit comparison — {md_escape(a['audit_id'])} → {md_escape(b['audit_id'])}", "",
           f"**{md_escape(d['verdict'])}**", ""]
    for tag, s in (("A", a), ("B", b)):
        out.append(f"- {tag}: {md_escape(s['audit_id'])}, req {md_escape(s['req_id'] or '—')}, "
                   f"{s['candidates']} candidates, {s['evaluations']} evaluations, harness hash "
                   f"`{md_escape(s['harness_hash'] or '—')}`")
    if d["warnings"]:
        out += ["", "## Warnings", ""] + [f"- {md_escape(w)}" for w in d["warnings"]]
    out += ["", "## Harness", "", "| field | A | B | differs |", "|---|---|---|---|"]
    for r in d["harness"]:
        mark = "**yes**" if r["differs"] else ""
        out.append(f"| {r['field']} | {md_cell(r['a'])} | {md_cell(r['b'])} | {mark} |")
    if d["withheld"]:
        out += ["", "## Nothing compared", "", md_escape(d["withheld"])]
    else:
        out += ["", "## Within-candidate noise", "",
                "F = s²_A / s²_B; *improved* when the whole 95% interval is above 1, *worse* "
                "when it is below 1. Each row is its own 95% interval, so with several "
                "criteria one may cross 1 by chance.", "",
                "| criterion | within-SD A | within-SD B | F | 95% interval | change | "
                "verdict A → B |", "|---|---:|---:|---:|---|---|---|"]
        for r in list(d["criteria"]) + ([d["total"]] if d["total"] else []):
            name = (r["criterion"] if r["kind"] != "split"
                    else f"{r['criterion']} → {' + '.join(r['parts'])}")
            verdict = "" if r["kind"] == "total" else f"{r['verdict_a']} → {r['verdict_b']}"
            out.append(f"| {md_cell(name)} | {_sd(r['within_sd_a'])} | {_sd(r['within_sd_b'])} "
                       f"| {_f(r['f_ratio'])} | {_interval(r)} | {r['change']} | "
                       f"{md_cell(verdict)} |")
        if d["unmatched_criteria"]:
            out += [""] + [f"- not compared one-to-one: {md_escape(u['criterion'])} ({u['in']} "
                           f"only) — {md_escape(u['status'])}" for u in d["unmatched_criteria"]]
        text = _lines(d, lambda s: s)
        start = next(i for i, x in enumerate(text) if x.startswith("DECISION NOISE"))
        section: list[str] = []
        for line in text[start:]:
            if line.startswith("NOT ESTABLISHED"):
                break
            if line and not line.startswith(" "):
                head, _, rest = line.partition(" (")
                heading = head.capitalize() + (f" ({rest}" if rest else "")
                section += ["", f"## {md_escape(heading)}", ""]
            elif line.strip():
                section.append(f"- {md_escape(line.strip())}")
        out += section
    out += ["", "## Not established by this comparison", ""]
    out += [f"- {md_escape(x)}" for x in d["not_established"]]
    return "\n".join(out) + "\n"


def render_json(d: dict[str, Any]) -> str:
    return json.dumps(d, indent=2, ensure_ascii=False, default=_num)


def figures(c: Comparison, v: ComparisonView) -> list[Any]:
    """The comparison's charts: pass rates A against B (paired) and disagreement vs cutoff."""
    figs = []
    if c.paired:
        figs.append(charts.pass_rate_scatter(c.engine_a.candidate_ids, v.pass_rate_a,
                                             v.pass_rate_b, v.cutoff))
    curve_a, curve_b = c.curves()
    figs.append(charts.disagreement_curves(curve_a, curve_b, v.cutoff))
    return figs


def render_html(c: Comparison, d: dict[str, Any]) -> str:
    """A self-contained page: the verdict, the harness table with differing fields marked, the
    text report (escaped) and the charts with plotly.js inlined."""
    esc = html_escape
    figs = [] if d["withheld"] else figures(c, c.view(d["cutoff"], d["k"], d["capacity"]))
    diff = ' class="diff"'
    rows = "".join(
        f"<tr{diff if r['differs'] else ''}><th>{esc(r['field'])}</th>"
        f"<td>{esc(r['a'])}</td><td>{esc(r['b'])}</td></tr>" for r in d["harness"])
    title = f"Audit comparison — {d['a']['audit_id']} → {d['b']['audit_id']}"
    body = (f"<h1>{esc(title)}</h1>\n"
            f"<p class=\"verdict\">{esc(d['verdict'])}</p>\n"
            "<h2>Harness (differing fields highlighted)</h2>\n"
            f"<table><tr><th>field</th><th>A · {esc(d['a']['audit_id'])}</th>\n"
            f"<th>B · {esc(d['b']['audit_id'])}</th></tr>{rows}</table>\n"
            f"<pre>{esc(render_text(d))}</pre>\n")
    return html_page(title, body, figs, css=(
        " .verdict { font-size: 1.15rem; font-weight: 600; }\n"
        " table { border-collapse: collapse; font-size: 13px; }\n"
        " th, td { text-align: left; padding: .25rem .6rem; border-bottom: 1px solid #e5e5e5; }\n"
        " tr.diff { background: #fff3cd; }"))


def render(c: Comparison, fmt: str = "text", *, cutoff: float | None = None,
           k: float | None = None, capacity: float | None = DEFAULT) -> str:
    """The comparison report in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt not in FORMATS:
        raise InputError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    d = report_dict(c, cutoff=cutoff, k=k, capacity=capacity)
    if fmt == "text":
        return render_text(d)
    if fmt == "md":
        return render_markdown(d)
    if fmt == "json":
        return render_json(d)
    return render_html(c, d)
