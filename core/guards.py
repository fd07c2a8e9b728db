"""Every guard, once (SPEC §3.1, §3.3): the rules that decide whether a number may be shown.

The runner, the audit analysis, the Run page, the command line and the reports all ask these
functions, so the same audit gets the same verdict everywhere.

* **Cache** (:func:`cache_verdict`): distinct raw payloads per candidate. Judged once every
  candidate with a successful call has at least two of them; when every judged candidate has
  exactly one distinct payload the run is "a cache test, not a variance test" and statistics
  are withheld.
* **Determinism** (:func:`determinism_verdict`, :func:`identical_scores`): the pre-flight's
  runs of one candidate all byte-identical stop the run; draws whose every score equals the
  candidate's mean on every run withhold the statistics.
* **Second model population** (:func:`model_populations`): draws reporting a model id other
  than the frozen one are a second population, excluded from the statistics; the pre-flight
  stops a server that reports only another model (:func:`preflight_model_verdict`).
* **Anchors** (:func:`anchor_gate`): fewer than ``anchor_min`` anchors on a side withhold the
  reliability ratio.
* **Invalid answers** (:func:`recall_conditioned`, :func:`conditioning_warning`): above
  :data:`RECALL_WARN_SHARE` of the calls being re-calls of invalid answers, the draws are
  conditioned on validity and the flip rate is a lower bound. The counting itself stays in
  :mod:`core.invalid` (it is a measurement of the calls, not a rule).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # the store and the draws are read, never imported at run time here
    from core.draws import Draws
    from core.store import Store

__all__ = [
    "CACHE_WITHHELD", "CacheVerdict", "DETERMINISM_MESSAGE", "IDENTICAL_SCORES_WITHHELD",
    "MODEL_MESSAGE", "ModelPopulations", "NOT_REPORTED", "RECALL_WARN_SHARE", "anchor_gate",
    "cache_verdict", "cache_verdict_of", "conditioning_warning", "determinism_verdict",
    "identical_scores", "model_populations", "model_populations_of", "preflight_model_verdict",
    "recall_conditioned",
]

# ============================================================================ cache
CACHE_WITHHELD = ("every candidate's payloads are byte-identical across runs: this run is a "
                  "cache test, not a variance test")


@dataclass(frozen=True)
class CacheVerdict:
    """The cache guard (SPEC §3.3): distinct raw payloads per candidate.

    Attributes
    ----------
    checked : bool
        The guard has spoken: every candidate with a successful call has two of them.
    cache_test : bool
        Every judged candidate has exactly one distinct payload: statistics are withheld.
    candidates : int
        Candidates judged (two or more successful calls with a payload).
    single_payload : tuple of str
        Judged candidates with one distinct payload.
    distinct_min : int or None
        Fewest distinct payloads of a judged candidate.
    label : str
        ``"variance test"``, ``"cache test, not a variance test"`` or ``"not checked: …"``.
    message : str
        One sentence for the page and the terminal.
    """

    checked: bool
    cache_test: bool
    candidates: int
    single_payload: tuple[str, ...]
    distinct_min: int | None
    label: str
    message: str
    table: pd.DataFrame = field(repr=False, compare=False, default_factory=pd.DataFrame)

    def to_dict(self) -> dict[str, Any]:
        """The report's ``guards.cache`` entry."""
        return {"checked": self.checked, "verdict": self.label, "withhold": self.cache_test,
                "single_payload_candidates": list(self.single_payload),
                "distinct_payloads_min": self.distinct_min, "message": self.message}


def cache_verdict(payload_counts: pd.DataFrame | None,
                  sample_size: int | None = None) -> CacheVerdict:
    """Judge distinct raw payloads per candidate.

    Parameters
    ----------
    payload_counts : DataFrame ``candidate_id, calls_with_payload, distinct_payloads``
        Successful calls with a raw payload and their distinct SHA-256s, per candidate
        (:meth:`core.store.Store.payload_counts`).
    sample_size : int, optional
        Candidates of the audit; the verdict waits until each has two such calls (SPEC §3.3:
        two payloads are the least that can differ). Default: the candidates counted.
    """
    counts = (pd.DataFrame(columns=["candidate_id", "calls_with_payload", "distinct_payloads"])
              if payload_counts is None else payload_counts)
    if len(counts) == 0:
        return CacheVerdict(False, False, 0, (), None, "not checked: no raw payloads stored",
                            "not checked: no raw payloads stored", counts)
    judged = counts[counts["calls_with_payload"] >= 2]
    n = len(judged)
    sample = max(len(counts), int(sample_size or 0))
    if n == 0 or n < sample:
        return CacheVerdict(False, False, n, (), None,
                            f"not checked: {n} of {sample} candidate(s) have two calls yet",
                            f"not judged yet: {n} of {sample} candidate(s) have the two "
                            "successful calls the cache guard needs", counts)
    single = tuple(str(c) for c in judged.loc[judged["distinct_payloads"] <= 1, "candidate_id"])
    low = int(judged["distinct_payloads"].min())
    if len(single) == n:
        return CacheVerdict(True, True, n, single, low, "cache test, not a variance test",
                            f"a cache test, not a variance test: every one of the {n} "
                            "candidates got byte-identical payloads on every run. Statistics "
                            "are withheld; turn off the result cache and run a new audit.",
                            counts)
    if single:
        more = " …" if len(single) > 10 else ""
        return CacheVerdict(True, False, n, single, low, "variance test",
                            f"{len(single)} of {n} candidates got one distinct payload on every "
                            f"run: {', '.join(single[:10])}{more}", counts)
    return CacheVerdict(True, False, n, (), low, "variance test",
                        f"every one of the {n} candidates got varying payloads", counts)


def cache_verdict_of(store: Store, audit_id: str) -> CacheVerdict:
    """:func:`cache_verdict` of a stored audit (its payload counts and its sample size)."""
    return cache_verdict(store.payload_counts(audit_id),
                         len(store.get_candidates(audit_id)))


# ============================================================================ determinism
DETERMINISM_MESSAGE = (
    "Pre-flight: {n} runs of candidate {cid} returned byte-identical payloads: the screener is "
    "deterministic or cached. A variance audit would measure zero for the wrong reason; stop, "
    "turn off the result cache (distinct request ids, no result-level cache) or, for a "
    "deterministic screener, the audit is not needed.")
IDENTICAL_SCORES_WITHHELD = ("every candidate got exactly the same scores on every run: the "
                             "screener is deterministic or cached, so there is no variance to "
                             "measure (a 3-run check is enough)")


def determinism_verdict(payload_counts: pd.DataFrame, candidate_id: str,
                        runs: int) -> tuple[bool, str | None]:
    """The pre-flight's verdict on one candidate.

    Returns ``(judged, message)``: judged once the candidate has ``runs`` successful calls
    with a payload; ``message`` (stop the run) when they are all byte-identical, else None.
    """
    row = payload_counts[payload_counts["candidate_id"] == candidate_id]
    if not len(row) or int(row["calls_with_payload"].iloc[0]) < runs:
        return False, None
    n = int(row["calls_with_payload"].iloc[0])
    if int(row["distinct_payloads"].iloc[0]) == 1:
        return True, DETERMINISM_MESSAGE.format(n=n, cid=candidate_id)
    return True, None


def _group_means(draws: Draws) -> np.ndarray:
    """(K, C) candidate means of every criterion."""
    sums = np.zeros((draws.K, draws.scores.shape[1]))
    np.add.at(sums, draws.cand, np.nan_to_num(draws.scores))
    return sums / draws.counts[:, None]


def identical_scores(draws: Draws) -> bool:
    """True when some candidate has two runs and every run of every candidate has exactly the
    candidate's mean total and mean criterion scores (no variance at all)."""
    if draws.N <= draws.K:
        return False
    if float(np.ptp(draws.total - draws.candidate_means()[draws.cand])) != 0.0:
        return False
    return draws.scores.size == 0 or float(np.nanmax(
        np.abs(draws.scores - _group_means(draws)[draws.cand]))) == 0.0


# ============================================================================ model populations
NOT_REPORTED = "(not reported)"
MODEL_MESSAGE = (
    "Pre-flight: the server reports the model '{reported}', not the frozen '{frozen}': every "
    "draw would be a second population and be left out of the statistics. Freeze the id the "
    "server reports ([harness] model; for llama.cpp's server, the name given with --alias) in "
    "a new audit.")


def preflight_model_verdict(reported: Iterable[str], frozen_model: str) -> str | None:
    """Stop the run when the pre-flight's answers report only models other than the frozen
    one (the whole run would be a second population)."""
    seen = sorted(set(reported))
    if seen and frozen_model and frozen_model not in seen:
        return MODEL_MESSAGE.format(reported="', '".join(seen), frozen=frozen_model)
    return None


@dataclass(frozen=True)
class ModelPopulations:
    """Draws by reported model id (SPEC §3.1 alias / snapshot drift).

    ``split`` is True when a draw reports a model id other than the frozen one: those draws
    (``other``, a mask over the draws given) are a second population, excluded from the
    statistics. ``table``: ``model, draws, candidates, frozen``.
    """

    frozen_model: str
    split: bool
    table: pd.DataFrame
    message: str
    other: np.ndarray = field(repr=False, compare=False,
                              default_factory=lambda: np.zeros(0, bool))

    @property
    def excluded_draws(self) -> int:
        return int(self.other.sum())

    def to_dict(self) -> dict[str, Any]:
        """The report's ``guards.populations`` entry (draws by model, most first)."""
        by = self.table.sort_values(["draws", "model"], ascending=[False, True])
        return {"frozen_model": self.frozen_model or None,
                "models": {str(m): int(d) for m, d in zip(by["model"], by["draws"])},
                "excluded_draws": self.excluded_draws, "flagged": self.split,
                "message": self.message}


def model_populations(candidate_ids: Iterable[Any], models: Iterable[Any] | None,
                      frozen_model: str | None) -> ModelPopulations:
    """Per reported model: draws, candidates, whether it is the frozen one.

    Parameters
    ----------
    candidate_ids, models : one entry per draw (``(candidate, run)`` pair)
        ``models`` None (or None entries) when the screener does not report its model.
    frozen_model : str
        The frozen model id; empty means nothing to compare against (never split).
    """
    frozen = (frozen_model or "").strip()
    ids = pd.Series(list(candidate_ids), dtype="object")
    if models is None:           # the draws carry no model column at all
        table = pd.DataFrame({"model": pd.Series(dtype=str), "draws": pd.Series(dtype=int),
                              "candidates": pd.Series(dtype=int),
                              "frozen": pd.Series(dtype=bool)})
        return ModelPopulations(frozen, False, table, "no draw reports a model id",
                                np.zeros(len(ids), bool))
    raw = pd.Series(list(models), dtype="object")
    named = raw.where(raw.notna(), NOT_REPORTED).astype(str)
    table = (pd.DataFrame({"model": named, "candidate_id": ids})
             .groupby("model", sort=True)
             .agg(draws=("candidate_id", "size"), candidates=("candidate_id", "nunique"))
             .reset_index())
    table["frozen"] = table["model"] == frozen
    other = ((named != frozen) & (named != NOT_REPORTED)).to_numpy() if frozen \
        else np.zeros(len(named), bool)
    if other.any():
        others = table[(~table["frozen"]) & (table["model"] != NOT_REPORTED)]
        names = ", ".join(f"{m} ({d} draws)" for m, d in zip(others["model"], others["draws"]))
        msg = (f"the screener reported a model id other than the frozen '{frozen}': {names}. "
               "Those draws are a second population (alias or snapshot drift), excluded from "
               "the statistics; analyse them apart or re-run under one pinned snapshot.")
        return ModelPopulations(frozen, True, table, msg, other)
    msg = ("no draws" if not len(table) else "no draw reports a model id" if
           set(table["model"]) == {NOT_REPORTED} else "every draw reports the frozen model"
           if frozen else "no model frozen to compare the reported ids against")
    return ModelPopulations(frozen, False, table, msg, other)


def model_populations_of(store: Store, audit_id: str,
                         frozen_model: str | None = None) -> ModelPopulations:
    """:func:`model_populations` of a stored audit's draws (the frozen model by default)."""
    if frozen_model is None:
        frozen_model = str(store.get_audit(audit_id)["freeze"].get("model") or "")
    pairs = store.load_draws(audit_id).drop_duplicates(["candidate_id", "run"])
    return model_populations(pairs["candidate_id"], pairs["model"], frozen_model)


# ============================================================================ anchors
def anchor_gate(strata: pd.Series, minimum: int = 6) -> str | None:
    """Why the reliability ratio is withheld (fewer than ``minimum`` anchors a side), or None."""
    high = int((strata == "high").sum())
    low = int((strata == "low").sum())
    short = []
    if high < minimum:
        short.append(f"{high} high")
    if low < minimum:
        short.append(f"{low} low")
    if short:
        return (f"reliability ratio withheld: the sample has only {' and '.join(short)} "
                f"anchor(s), fewer than {minimum} on a side — sampling only near the cutoff "
                "truncates the between-candidate variance and collapses the ratio toward zero")
    return None


# ============================================================================ invalid answers
#: Above this share of calls being re-calls of invalid answers the draws are conditioned on
#: validity: the report warns and calls the flip rate a lower bound.
RECALL_WARN_SHARE = 0.05


def recall_conditioned(recall_share: float | None) -> bool:
    """True when re-calls exceed :data:`RECALL_WARN_SHARE` of the calls."""
    return recall_share is not None and recall_share > RECALL_WARN_SHARE


def conditioning_warning(recalls: int, calls: int) -> str | None:
    """The conditioning warning (re-calls ÷ calls above :data:`RECALL_WARN_SHARE`), or None."""
    share = recalls / calls if calls else None
    if not recall_conditioned(share):
        return None
    return (f"{recalls:,} of {calls:,} calls ({100 * (share or 0):.0f}%) re-called an invalid "
            "answer: the stored draws are conditioned on being valid, so the variance and the "
            "flip rate are lower bounds")
