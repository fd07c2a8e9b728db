"""One audit, analysed: guards first, then the criteria, flip and band steps.

:func:`analyze` reads an audit from the store once; :func:`analyze_frames` does the same from
frames (the CLI's ``report FILE`` path). Both return an :class:`AuditResult` that the report,
the pages and the command line render; its :attr:`AuditResult.live` answers slider moves.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from core import criteria as crit_mod
from core import guards
from core.criteria import ICC1
from core.draws import Draws
from core.errors import GuardError, InputError
from core.flip import effective_cutoff
from core.invalid import invalid_answers
from core.live import LiveAudit, LiveView
from core.store import Store

__all__ = ["Settings", "AuditResult", "analyze", "analyze_frames", "sd_interval_table"]


@dataclass(frozen=True)
class Settings:
    """Analysis settings (shown next to the numbers they drive)."""

    cutoff: float | None = None
    comparison: str = ">="
    k: float = 2.0
    top_k: int | None = None
    of_n: int | None = None
    applications_per_req: float | None = None
    capacity: float | None = None
    dead_tol_frac: float = 0.05
    anchor_min: int = 6
    band_sigma: float = 1.5
    anchor_sigma: float = 3.0
    halfwidth_override: float | None = None

    @classmethod
    def merge(cls, stored: dict[str, Any] | None, **given: Any) -> Settings:
        """Stored audit settings overridden by explicitly given (non-None) values."""
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in (stored or {}).items() if k in known and v is not None}
        values.update({k: v for k, v in given.items() if k in known and v is not None})
        return cls(**values)


def sd_interval_table(draws: Draws) -> pd.DataFrame:
    """Per candidate: runs, SD of its totals and the chi-square 95% interval (df = n_i − 1)."""
    means = draws.candidate_means()
    dev = draws.total - means[draws.cand]
    ss = np.bincount(draws.cand, weights=dev * dev, minlength=draws.K)
    df = draws.counts - 1
    sd = np.sqrt(np.where(df > 0, ss / np.maximum(df, 1), np.nan))
    lo, hi = zip(*(crit_mod.sd_interval(s, d) for s, d in zip(sd, df))) if draws.K else ((), ())
    return pd.DataFrame({"candidate_id": draws.candidate_ids, "runs": draws.counts.astype(int),
                         "mean": means, "sd": sd, "sd_ci_low": lo, "sd_ci_high": hi})


@dataclass
class AuditResult:
    """Everything the report shows. Numbers are unrounded; rounding happens at display."""

    audit_id: str
    freeze: dict[str, Any]
    harness_hash: str
    settings: Settings
    configured_cutoff: float | None
    cutoff: float
    draws: Draws
    strata: pd.Series
    strata_source: str
    guards: dict[str, Any]
    criteria: pd.DataFrame | None
    remediation: pd.DataFrame
    icc: ICC1 | None
    reliability_withheld: str | None
    within_sd_ci95: tuple[float, float]
    sd_intervals: pd.DataFrame
    live: LiveAudit
    pool_size: int
    drift: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    #: Invalid answers of the run (:func:`core.invalid.invalid_answers`); None for frames.
    invalid: Any = None

    @property
    def withheld(self) -> str | None:
        """Why statistics are withheld altogether (the cache guard), or None."""
        return self.guards.get("statistics_withheld")

    @property
    def total_row(self) -> dict[str, Any]:
        t = crit_mod.decompose(self.draws).iloc[-1] if self.criteria is None else \
            self.criteria.iloc[-1]
        return t.to_dict()

    def view(self, cutoff: float | None = None, k: float | None = None) -> LiveView:
        s = self.settings
        return self.live.view(self.cutoff if cutoff is None else cutoff,
                              s.k if k is None else k, override=s.halfwidth_override,
                              capacity=s.capacity, applications_per_req=s.applications_per_req)

    def composition(self) -> dict[str, int]:
        vc = self.strata.value_counts()
        return {"candidates": int(self.draws.K), "evaluations": int(self.draws.N),
                "band": int(vc.get("band", 0)), "high_anchors": int(vc.get("high", 0)),
                "low_anchors": int(vc.get("low", 0)), "between": int(vc.get("between", 0)),
                "runs_min": int(self.draws.counts.min()),
                "runs_max": int(self.draws.counts.max())}


def _strata(draws: Draws, candidates: pd.DataFrame | None, cutoff: float, sigma: float,
            s: Settings) -> tuple[pd.Series, str]:
    ids = pd.Index(draws.candidate_ids.astype(str))
    if candidates is not None and len(candidates):
        c = candidates.assign(candidate_id=candidates["candidate_id"].astype(str)) \
            .set_index("candidate_id").reindex(ids)
        if "stratum" in c and c["stratum"].notna().all():
            return c["stratum"].astype(str), "the sample file"
        if "first_pass_score" in c and c["first_pass_score"].notna().all():
            return (crit_mod.derive_strata(c["first_pass_score"], cutoff, sigma,
                                           band_sigma=s.band_sigma,
                                           anchor_sigma=s.anchor_sigma),
                    "derived from first-pass scores")
    means = pd.Series(draws.candidate_means(), index=ids)
    return (crit_mod.derive_strata(means, cutoff, sigma, band_sigma=s.band_sigma,
                                   anchor_sigma=s.anchor_sigma),
            "derived from mean totals")


def analyze_frames(long: pd.DataFrame, *, criteria: pd.DataFrame | None = None,
                   pool: pd.DataFrame | None = None, candidates: pd.DataFrame | None = None,
                   settings: Settings | None = None, freeze: dict[str, Any] | None = None,
                   harness_hash: str = "", audit_id: str = "",
                   payload_counts: pd.DataFrame | None = None,
                   drift: dict[str, Any] | None = None) -> AuditResult:
    """Analyse draws held in frames (see module docstring).

    Guards first (cache, determinism, model population, anchors, invalid answers), then the
    criteria (:func:`core.criteria.decompose`, :func:`core.criteria.icc1`), flip
    (:func:`core.flip.summarize`) and band (:func:`core.band.recommend_band`) steps at the
    configured cutoff; :attr:`AuditResult.live` answers every other cutoff.

    Raises
    ------
    GuardError
        ``withheld: …`` when there is no draw at all (e.g. every call failed).

    References
    ----------
    .. [1] Seed 000 (the method), "Method", steps 1–6, "Output format" and "Watch-outs";
       SPEC §3 and §4.
    .. [2] Seed 004 (paper: "changes in recruiting agent scores may come from grader bias"):
       why an audit has an expiry date — the drift horizon that ``drift`` carries into the
       report (SPEC §5).
    .. [3] The references of each step's entry point: pingouin ``intraclass_corr`` (ICC1),
       statsmodels ``proportion_confint(method="beta")``, R ``lme4::lmer``.

    Examples
    --------
    >>> import pandas as pd
    >>> long = pd.DataFrame({"candidate_id": ["a"] * 3 + ["b"] * 3 + ["c"] * 3,
    ...                      "run": [1, 2, 3] * 3, "criterion": "total",
    ...                      "score": [9.0, 11, 10, 9, 6, 8, 4, 6, 3]})
    >>> result = analyze_frames(long, settings=Settings(cutoff=9))
    >>> round(result.live.within_sd, 3)
    1.374
    >>> view = result.view(9.0, 2.0)
    >>> view.flip.candidates_with_flip, view.flip.worst_candidate
    (1, 'b')
    """
    if long is None or len(long) == 0:
        raise GuardError(f"withheld: audit '{audit_id}' has no draws yet, so there is nothing "
                         "to measure")
    _check_rubric(criteria)
    # overflowing scores give inf and one candidate an undefined SD: reported as such
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _analyze_frames(long, criteria=criteria, pool=pool, candidates=candidates,
                               settings=settings, freeze=freeze, harness_hash=harness_hash,
                               audit_id=audit_id, payload_counts=payload_counts, drift=drift)


def _check_rubric(criteria: pd.DataFrame | None) -> None:
    """Weights must be finite and non-negative, maxima finite and positive (a weight of inf
    would turn every total into inf or NaN)."""
    if criteria is None or len(criteria) == 0:
        return
    for r in criteria.itertuples():
        w = getattr(r, "weight", 1.0)
        mx = getattr(r, "max_points", None)
        if w is not None and not pd.isna(w) and not (np.isfinite(w) and w >= 0):
            raise InputError(f"criterion '{r.criterion}' has weight {w}: weights must be finite "
                             "numbers of 0 or more — fix the rubric (a new audit from the "
                             "Freeze page, or --criteria)", column="weight")
        if mx is not None and not pd.isna(mx) and not (np.isfinite(mx) and mx > 0):
            raise InputError(f"criterion '{r.criterion}' has max points {mx}: maxima must be "
                             "finite numbers above 0 — fix the rubric", column="max_points")


_SETTING_RULES = {  # name: (test, what it must be, the option that sets it)
    "cutoff": (lambda v: np.isfinite(v), "a finite number", "--cutoff"),
    "k": (lambda v: np.isfinite(v) and v > 0, "a finite number above 0", "--k"),
    "capacity": (lambda v: np.isfinite(v) and v >= 0, "a finite number of 0 or more",
                 "--capacity"),
    "applications_per_req": (lambda v: np.isfinite(v) and v > 0, "a finite number above 0",
                             "--applications-per-req"),
    "halfwidth_override": (lambda v: np.isfinite(v) and v >= 0,
                           "a finite number of 0 or more", "the Band page"),
    "dead_tol_frac": (lambda v: np.isfinite(v) and v >= 0, "a finite number of 0 or more",
                      "the Criteria page"),
}


def _check_settings(s: Settings) -> None:
    """Stored or given settings that would turn every number into NaN are refused, naming the
    setting and where it is set."""
    for name, (ok, what, where) in _SETTING_RULES.items():
        v = getattr(s, name)
        if v is None:
            continue
        try:
            good = bool(ok(float(v)))
        except (TypeError, ValueError):
            good = False
        if not good:
            raise InputError(f"the audit's {name.replace('_', ' ')} is {v!r}: it must be {what} "
                             f"(set it with {where})")


def _analyze_frames(long: pd.DataFrame, *, criteria: pd.DataFrame | None,
                    pool: pd.DataFrame | None, candidates: pd.DataFrame | None,
                    settings: Settings | None, freeze: dict[str, Any] | None,
                    harness_hash: str, audit_id: str, payload_counts: pd.DataFrame | None,
                    drift: dict[str, Any] | None) -> AuditResult:
    s = settings or Settings()
    _check_settings(s)
    freeze = freeze or {}
    draws = Draws.from_long(long, criteria)
    sample_size = draws.K if candidates is None else max(draws.K, len(candidates))
    cache = guards.cache_verdict(payload_counts, sample_size)
    checks: dict[str, Any] = {"cache": cache.to_dict()}
    notes: list[str] = []
    # population split: draws reporting another model than the frozen one are left out
    pops = guards.model_populations(draws.candidate_ids[draws.cand], draws.models,
                                    freeze.get("model"))
    if pops.split:
        keep = ~pops.other
        if keep.any():
            draws = draws.subset(keep)
        notes.append(f"{pops.excluded_draws} draw(s) reported a model other than the frozen "
                     f"'{pops.frozen_model}': a second population, excluded from the "
                     "statistics")
    checks["populations"] = pops.to_dict()
    if "clipped" in long.columns:
        n_clipped = int(long["clipped"].fillna(False).astype(bool).sum())
        if n_clipped:
            notes.append(f"{n_clipped} score(s) outside 0..max were clipped to the rubric's "
                         "range at import")
    if draws.K < 2:
        notes.append(f"only {draws.K} candidate has draws: the between-candidate spread, the "
                     "verdicts and the reliability need at least 2 (run the whole sample)")
    checks["total_source"] = draws.total_source
    checks["total_mismatch"] = draws.total_mismatch
    if draws.total_mismatch:
        notes.append(f"the screener's total differs from the weighted sum of criteria on "
                     f"{draws.total_mismatch} draw(s); the screener's total is used")
    if cache.cache_test:
        checks["statistics_withheld"] = guards.CACHE_WITHHELD
    elif guards.identical_scores(draws):
        checks["statistics_withheld"] = guards.IDENTICAL_SCORES_WITHHELD
    pool_scores = (None if pool is None or len(pool) == 0
                   else pool["first_pass_score"].to_numpy(dtype="float64"))
    configured = s.cutoff
    cutoff = configured
    if s.top_k:
        if pool_scores is None:
            notes.append("top k given but no pool: the effective cutoff needs the pool")
        else:
            cutoff = effective_cutoff(pool_scores, s.top_k, s.of_n)
    if cutoff is None:
        cutoff = float(np.median(draws.total))
        notes.append(f"no cutoff given: the median total {cutoff:g} is audited")
    live = LiveAudit(draws, pool_scores, s.applications_per_req, s.comparison)
    table = crit_mod.decompose(draws, dead_tol_frac=s.dead_tol_frac) if draws.has_criteria \
        else None
    total_within = live.within_sd
    strata, source = _strata(draws, candidates, float(cutoff), total_within, s)
    withheld = guards.anchor_gate(strata, s.anchor_min)
    icc = None if withheld else crit_mod.icc1(draws.cand, draws.total, draws.counts)
    rem = crit_mod.remediation(table) if table is not None else crit_mod.remediation(
        pd.DataFrame(columns=crit_mod.CRITERIA_COLUMNS))
    return AuditResult(
        audit_id=audit_id, freeze=freeze, harness_hash=harness_hash, settings=s,
        configured_cutoff=configured, cutoff=float(cutoff), draws=draws, strata=strata,
        strata_source=source, guards=checks, criteria=table, remediation=rem, icc=icc,
        reliability_withheld=withheld,
        within_sd_ci95=crit_mod.sd_interval(total_within, float(np.sum(draws.counts - 1))),
        sd_intervals=sd_interval_table(draws), live=live,
        pool_size=0 if pool_scores is None else len(pool_scores), drift=drift, notes=notes)


def analyze(store: Store, audit_id: str, **overrides: Any) -> AuditResult:
    """Analyse a stored audit; ``overrides`` are :class:`Settings` fields (None = stored).

    Raises
    ------
    GuardError
        ``withheld: …`` when the audit has no draw, with what its calls ended as.
    """
    with store.session():   # one consistent view, one open of the file
        return _analyze_stored(store, audit_id, **overrides)


def _analyze_stored(store: Store, audit_id: str, **overrides: Any) -> AuditResult:
    audit = store.get_audit(audit_id)
    if store.n_draws(audit_id) == 0:
        calls = store.call_summary(audit_id)
        n = int(calls["calls"].sum()) if len(calls) else 0
        if n:
            kinds = calls.groupby("status")["calls"].sum().sort_values(ascending=False)
            why = ", ".join(f"{k}: {int(v)}" for k, v in kinds.items())
            raise GuardError(f"withheld: audit '{audit_id}' has no draws — none of its {n} "
                             f"call(s) gave a valid answer ({why}); see the Run page or "
                             "'python -m core run' for why")
        raise GuardError(f"withheld: audit '{audit_id}' has no draws yet: run the screener or "
                         "import exported draws")
    settings = Settings.merge(audit["settings"], **overrides)
    drift = None
    screener = audit["freeze"].get("screener")
    if screener:
        drift = store.latest_drift_result(screener)
    draws = store.load_draws(audit_id)
    result = analyze_frames(
        draws, criteria=store.get_criteria(audit_id),
        pool=store.get_pool(audit_id), candidates=store.get_candidates(audit_id),
        settings=settings, freeze=audit["freeze"], harness_hash=audit["harness_hash"],
        audit_id=audit_id, payload_counts=store.payload_counts(audit_id), drift=drift)
    result.invalid = invalid_answers(store.load_calls(audit_id), draws,
                                     audit["freeze"].get("on_invalid")
                                     or audit["settings"].get("on_invalid"))
    return result
