"""Invalid answers, measured (SPEC §3.3): how often the screener answered something that is not
a draw, by kind and per candidate, and whether re-calling them conditioned the draws.

An *invalid answer* is a call that returned an answer which cannot be a draw: a parse error, a
score outside ``0..max`` (``out_of_range``), an answer cut off by the output limit
(``truncated``) or a refusal (``refused``). Under ``on_invalid = "clip"`` an out-of-range
answer is clipped into a draw and still counted here (``clipped``). Calls that got no answer at
all (HTTP errors, timeouts) and cancelled calls are not answers and are left out.

:func:`invalid_answers` works on the stored calls (and the draws, for the clipped ones); the
audit analysis (:func:`core.audit.analyze`), the report, the Run and Criteria pages and the
command line all show its result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from core.guards import conditioning_warning, recall_conditioned
from core.screeners.parsing import INVALID_KINDS

__all__ = ["InvalidAnswers", "KIND_NAMES", "invalid_answers"]

KIND_NAMES = {"parse_error": "parse error", "out_of_range": "out of range",
              "truncated": "truncated", "refused": "refused"}


@dataclass(frozen=True)
class InvalidAnswers:
    """The invalid-answer rates of an audit.

    Attributes
    ----------
    measured : bool
        False when no call of the audit went through the runner (imported draws: the vendor's
        file does not say how many answers it discarded); ``reason`` says so.
    answered : int
        Calls that returned an answer (valid or invalid).
    invalid : int
        Invalid answers (the four kinds, plus clipped answers under ``clip``).
    by_kind : dict
        ``parse_error``, ``out_of_range``, ``truncated``, ``refused`` → count (``out_of_range``
        includes the clipped answers).
    clipped : int
        Answers clipped into a draw (``on_invalid = "clip"``).
    recalls : int
        Invalid answers followed by another call of the same pair.
    calls : int
        Every finished call (answers and calls without one; cancelled ones excluded).
    per_candidate : DataFrame
        ``candidate_id, answered, invalid, rate`` and one column per kind, worst first.
    policy : str
        ``on_invalid`` of the audit (``"recall"`` when not recorded).
    """

    measured: bool
    answered: int = 0
    invalid: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    clipped: int = 0
    recalls: int = 0
    calls: int = 0
    policy: str = "recall"
    per_candidate: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    reason: str | None = None

    @property
    def rate(self) -> float | None:
        """Invalid answers / answers (None without answers)."""
        return self.invalid / self.answered if self.answered else None

    @property
    def recall_share(self) -> float | None:
        """Re-calls / calls."""
        return self.recalls / self.calls if self.calls else None

    @property
    def conditioned(self) -> bool:
        """True when re-calls exceed the guard's share of the calls
        (:data:`core.guards.RECALL_WARN_SHARE`)."""
        return recall_conditioned(self.recall_share)

    def warning(self) -> str | None:
        """The conditioning warning (:func:`core.guards.conditioning_warning`), or None."""
        return conditioning_warning(self.recalls, self.calls)

    def to_dict(self, limit: int = 20) -> dict[str, Any]:
        """Plain values for the report (``per_candidate``: the ``limit`` worst)."""
        rows = [] if self.per_candidate.empty else [
            {k: (v if not isinstance(v, float) else float(v)) for k, v in r.items()}
            for r in self.per_candidate.head(limit).to_dict("records")]
        return {"measured": self.measured, "reason": self.reason, "policy": self.policy,
                "calls": self.calls, "answered": self.answered, "invalid": self.invalid,
                "rate": self.rate, "by_kind": dict(self.by_kind), "clipped": self.clipped,
                "recalls": self.recalls, "recall_share": self.recall_share,
                "conditioned": self.conditioned, "warning": self.warning(),
                "per_candidate": rows,
                "candidates_with_invalid": int((self.per_candidate["invalid"] > 0).sum())
                if not self.per_candidate.empty else 0}


def invalid_answers(calls: pd.DataFrame | None, draws: pd.DataFrame | None = None,
                    policy: str | None = None) -> InvalidAnswers:
    """Invalid-answer counts and rates from the stored calls.

    Parameters
    ----------
    calls : DataFrame
        ``request_id, candidate_id, run, status, started_at, source`` (``Store.load_calls``).
    draws : DataFrame, optional
        ``request_id, clipped`` (``Store.load_draws``): clipped answers are counted as
        out-of-range.
    policy : str, optional
        The audit's ``on_invalid``.

    Notes
    -----
    ``rate = invalid / answered`` overall and per candidate; a *re-call* is an invalid answer
    of a pair that has a later call; the warning fires when ``recalls / calls > 5%``.
    """
    pol = policy or "recall"
    if calls is None or len(calls) == 0:
        return InvalidAnswers(False, policy=pol, reason="no calls are stored")
    c = calls[calls["status"] != "cancelled"]
    if "source" in c.columns and not (c["source"] == "runner").any():
        reason = ("the demo's draws are generated, not called" if (c["source"] == "demo").all()
                  else "the draws were imported: the file does not say how many answers the "
                       "screener's operator discarded")
        return InvalidAnswers(False, policy=pol, calls=len(c), reason=reason)
    c = c.assign(candidate_id=c["candidate_id"].astype(str))
    clipped_ids: set[str] = set()
    if draws is not None and len(draws) and "clipped" in draws.columns:
        clipped_ids = set(draws.loc[draws["clipped"].fillna(False).astype(bool),
                                    "request_id"].astype(str))
    status = c["status"].astype(str)
    is_clipped = (status == "ok") & c["request_id"].astype(str).isin(clipped_ids)
    kinds = status.where(status.isin(INVALID_KINDS), None)
    kinds = kinds.where(~is_clipped, "out_of_range")
    answered_mask = (status == "ok") | status.isin(INVALID_KINDS)
    invalid_mask = kinds.notna()
    # a re-call: an invalid answer (not clipped into a draw) whose pair has a later call
    order = c.sort_values("started_at", kind="stable") if "started_at" in c.columns else c
    last = order.groupby(["candidate_id", "run"])["request_id"].transform("last")
    later = order["request_id"] != last
    recalls = int((status.isin(INVALID_KINDS).reindex(order.index) & later).sum())
    by_kind = {k: int((kinds == k).sum()) for k in INVALID_KINDS}
    frame = pd.DataFrame({"candidate_id": c["candidate_id"], "answered": answered_mask,
                          "invalid": invalid_mask})
    for k in INVALID_KINDS:
        frame[k] = kinds == k
    per = frame.groupby("candidate_id", sort=True).sum(numeric_only=True).astype(int)
    per["rate"] = (per["invalid"] / per["answered"].where(per["answered"] > 0)).astype(float)
    per = (per.reset_index()
           .sort_values(["rate", "invalid", "candidate_id"], ascending=[False, False, True],
                        na_position="last")
           .reset_index(drop=True))
    per = per[["candidate_id", "answered", "invalid", "rate", *INVALID_KINDS]]
    return InvalidAnswers(True, answered=int(answered_mask.sum()),
                          invalid=int(invalid_mask.sum()), by_kind=by_kind,
                          clipped=int(is_clipped.sum()), recalls=recalls, calls=len(c),
                          policy=pol, per_candidate=per)


def describe(d: dict[str, Any] | None, limit: int = 5) -> list[str]:
    """The invalid-answer section as plain lines (the report, the pages and the command line
    escape them for their medium): overall rate, by kind, the worst candidates, the warning."""
    from core.format import num, pct

    if not d:
        return ["invalid answers: not measured (no analysis of calls)"]
    if not d["measured"]:
        return [f"invalid answers: not measured — {d['reason']}"]
    rate = pct(d["rate"], 1) if d["rate"] is not None else "—"
    kinds = ", ".join(f"{KIND_NAMES[k]} {num(v)}" for k, v in d["by_kind"].items())
    lines = [f"invalid answers: {num(d['invalid'])} of {num(d['answered'])} answers ({rate}); "
             f"{kinds}; policy on_invalid = {d['policy']}"
             + (f" ({num(d['clipped'])} clipped into draws)" if d["clipped"] else "")]
    bad = [r for r in d["per_candidate"] if r["invalid"]][:limit]
    if bad:
        worst = ", ".join(f"{r['candidate_id']} {pct(r['rate'], 0)} "
                          f"({r['invalid']}/{r['answered']})" for r in bad)
        more = d["candidates_with_invalid"] - len(bad)
        lines.append(f"per candidate: {d['candidates_with_invalid']} candidate(s) with invalid "
                     f"answers; worst: {worst}" + (f" and {more} more" if more > 0 else ""))
    elif d["answered"]:
        lines.append("per candidate: no candidate had an invalid answer")
    lines.append(f"re-calls of invalid answers: {num(d['recalls'])} of {num(d['calls'])} calls "
                 f"({pct(d['recall_share'], 1) if d['recall_share'] is not None else '—'})")
    req = d.get("requested") or {}
    if req:
        fmt = req.get("response_format")
        style = f" ({req['schema_style']} shape)" if req.get("schema_style") else ""
        lines.append("answers requested as " + (
            "the rubric's strict JSON schema" + style if fmt == "json_schema" else
            "any JSON object" if fmt == "json_object" else
            "free text" if fmt == "none" else "—")
            + (f", at most {num(req['max_tokens'])} output tokens" if req.get("max_tokens")
               else ""))
    if d["warning"]:
        lines.append("WARNING: " + d["warning"])
    return lines
