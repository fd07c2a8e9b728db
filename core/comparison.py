"""Two analysed audits compared at a cutoff: the engine behind the Compare page's shared slider.

:class:`Comparison` is built once from the two analysed audits (:class:`core.audit.AuditResult`)
and answers a cutoff (and band width) with array operations only, so the slider never reads
the database: the per-criterion variance ratios (:mod:`core.compare`), the change in two-draw
disagreement with its bootstrap interval, each audit's manual-review band (:mod:`core.band`
through :mod:`core.live`) and the manual reviews per req it implies against one pool.

Nothing is compared while either audit's guards withhold its statistics (cache or determinism)
or flag a second population; :attr:`Comparison.withheld` names the guard.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from core import flip as flip_mod
from core.audit import AuditResult
from core.compare import (
    DisagreementChange,
    VarianceRatio,
    bootstrap_interval,
    bootstrap_weights,
    match_criteria,
    ratio_row,
    verdict_sentence,
)
from core.criteria import pooled_within_sd
from core.errors import InputError
from core.format import num
from core.live import LiveAudit, LiveView

__all__ = ["DEFAULT", "DEFAULT_REPS", "MAX_REPS", "HARNESS_FIELDS", "ComparisonView",
           "Comparison"]

DEFAULT_REPS = 2000
MAX_REPS = 100_000
#: Bootstrap resampling counts held per comparison (replications × candidates, float32): 200 MB.
MAX_BOOTSTRAP_CELLS = 50_000_000
#: "Not given": take the comparison's default (``None`` means "no capacity").
DEFAULT: Any = "default"

#: The freeze-sheet fields shown side by side, in reading order.
HARNESS_FIELDS = ("req_id", "req_title", "gates", "screener", "screener_version", "model",
                  "prompt_version", "rubric_version", "criteria", "parser_version", "sampling",
                  "temperature", "top_p", "top_k", "endpoint", "result_cache_off",
                  "distinct_request_ids", "prefix_caching", "side_effect_free")


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

    References
    ----------
    .. [1] SPEC §7; issue 11 ("Did the fix work?").
    .. [2] The statistics: :func:`core.compare.variance_ratio` (F interval),
       :func:`core.compare.bootstrap_weights` (percentile bootstrap over candidates).

    Examples
    --------
    The same three candidates before (A) and after (B) a change, four runs each:

    >>> import pandas as pd
    >>> from core.audit import Settings, analyze_frames
    >>> def draws(totals):
    ...     return pd.DataFrame([(c, j + 1, "total", float(v)) for c, vs in totals.items()
    ...                          for j, v in enumerate(vs)],
    ...                         columns=["candidate_id", "run", "criterion", "score"])
    >>> a = analyze_frames(draws({"a": [9, 11, 10, 7], "b": [9, 6, 8, 11], "c": [4, 6, 3, 9]}),
    ...                    settings=Settings(cutoff=9), audit_id="A")
    >>> b = analyze_frames(draws({"a": [10, 10, 11, 10], "b": [8, 8, 7, 8], "c": [4, 5, 4, 4]}),
    ...                    settings=Settings(cutoff=9), audit_id="B")
    >>> c = Comparison(a, b, seed=1)
    >>> t = c.total
    >>> round(t.f_ratio, 2), round(t.f_low, 2), round(t.f_high, 2), t.change
    (19.0, 4.72, 76.49, 'improved')
    >>> d = c.disagreement(9.0)
    >>> round(d.a, 3), d.b, d.paired
    (0.556, 0.0, True)
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
                rows.append(ratio_row(name, s_a, df_a, s_b, df_b, verdict_a=va.get(name, ""),
                                       verdict_b=vb.get(name, "")))
            elif name in self.match.split:
                parts = self.match.split[name]
                wa = float(a.draws.weights[a.draws.criteria.index(name)])
                s_a, df_a = self._criterion_sd(a, (name,))
                s_b, df_b = self._criterion_sd(b, parts)
                rows.append(ratio_row(name, wa * s_a, df_a, s_b, df_b,
                                       verdict_a=va.get(name, ""),
                                       verdict_b=", ".join(vb.get(p, "") for p in parts),
                                       kind="split", parts=parts))
        self.criteria = rows
        self.total = ratio_row("total", self.engine_a.within_sd,
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

        References
        ----------
        .. [1] SPEC §7 ("Decision noise at a cutoff"); seed 000, "Method", step 5.
        .. [2] Efron, B. & Tibshirani, R. J. (1993). *An Introduction to the Bootstrap*,
           ch. 13; R ``boot::boot.ci(type = "perc")``; ``scipy.stats.bootstrap(...,
           method="percentile")`` (paired: resample the differences; unpaired: two samples).
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
