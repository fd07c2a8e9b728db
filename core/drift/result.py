"""Rendering a drift analysis: JSON (CLI, store, audit reports), plain text and Markdown.

:func:`drift_result_json` is the one result dict: the CLI prints it, ``Store.save_drift_result``
keeps it and the audit report reads its ``horizon.date`` ("re-audit by …"). The text and
Markdown renderings read that dict; every number goes through :mod:`core.format` (``—`` for a
missing figure, ``∞`` for an unbounded interval end) and user text (rater names, the panel's
file name, notes) is escaped for its target there — :func:`core.format.md_cell` /
:func:`core.format.md_escape` for Markdown, :func:`core.format.term_lines` by the CLI for a
terminal.
"""

from __future__ import annotations

import math
from datetime import date, datetime, timezone
from typing import Any

import numpy as np
import pandas as pd

from core.drift.analysis import DriftAnalysis
from core.drift.horizon import horizon
from core.format import count, decimals, md_cell, md_escape, overdue_text, p_equals

__all__ = ["drift_result_json", "format_drift_markdown", "format_drift_text", "reaudit_overdue"]


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _jsonable(x: Any) -> Any:
    """A JSON-safe scalar: numpy numbers to Python, NaN/inf to ``None``."""
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return _num(x)
    return x


def _iso(x: Any) -> str | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return pd.Timestamp(x).date().isoformat()


def drift_result_json(a: DriftAnalysis, D: float | None = None) -> dict[str, Any]:
    """The JSON result (CLI ``--format json`` and ``Store.save_drift_result``).

    Keys: ``reference_rater``, ``raters[{rater, severity, se, ci95}]``,
    ``batches[{batch, n, raw_mean, adjusted, composition, se, smoothed, smoothed_se}]``, ``q``,
    ``q_ci95``, ``innovation_sd``, ``innovation_sd_ci95``, ``lr``, ``lr_pvalue``,
    ``horizon{D, weeks, weeks_ci95, date, sd_at_weeks{4, 8, 12}, last_variance}``,
    ``trend{…}``, ``deployments``, ``contrasts``, ``heterogeneity``, ``variants``,
    ``categories``, ``category_trends``, ``notes``. Non-finite numbers become ``null``
    (an infinite horizon has ``weeks: null`` and ``date: null``).
    """
    hz = a.horizon if D is None else horizon(a.stage2, D, a.severity.batches["batch"].iloc[-1])
    st = a.stage2
    tr, rw = a.trend, a.raw_trend
    return {
        "panel": a.panel_name,
        "reference_rater": a.severity.reference,
        "raters": [{"rater": r["rater"], "severity": _num(r["severity"]), "se": _num(r["se"]),
                    "ci95": [_num(r["ci_low"]), _num(r["ci_high"])], "n": int(r["n"]),
                    "n_batches": int(r["n_batches"])}
                   for r in a.severity.raters.to_dict("records")],
        "batches": [{"batch": _iso(r["batch"]), "n": int(r["n"]),
                     "raw_mean": _num(r["raw_mean"]), "adjusted": _num(r["adjusted"]),
                     "composition": _num(r["composition"]), "se": _num(r["se"]),
                     "smoothed": _num(r["smoothed"]), "smoothed_se": _num(r["smoothed_se"])}
                    for r in a.batches.to_dict("records")],
        "q": _num(st.q), "q_ci95": [_num(st.q_ci95[0]), _num(st.q_ci95[1])],
        "innovation_sd": _num(st.innovation_sd),
        "innovation_sd_ci95": [_num(st.innovation_sd_ci95[0]), _num(st.innovation_sd_ci95[1])],
        "lr": _num(st.lr), "lr_pvalue": _num(st.lr_pvalue), "covariance": st.covariance,
        "horizon": {"D": _num(hz.D), "weeks": _num(hz.weeks),
                    "weeks_ci95": [_num(hz.weeks_ci95[0]), _num(hz.weeks_ci95[1])],
                    "date": hz.date.isoformat() if hz.date else None,
                    "last_batch": hz.last_batch.isoformat(),
                    "last_variance": _num(hz.last_variance),
                    "sd_at_weeks": {str(k): _num(v) for k, v in hz.sd_at_weeks.items()}},
        "trend": {"unit": "score per month", "slope": _num(tr.slope), "se": _num(tr.se),
                  "t": _num(tr.t), "p_cluster": _num(tr.p_cluster), "p_wild": _num(tr.p_wild),
                  "n": tr.n, "n_clusters": tr.n_clusters, "reps": tr.reps, "seed": tr.seed,
                  "raw_slope": _num(rw.slope), "raw_se": _num(rw.se),
                  "raw_p_wild": _num(rw.p_wild)},
        "deployments": [_iso(d) for d in a.deployments],
        "free_steps": [_iso(d) for d in a.free_steps],
        "contrasts": [{"deployment": _iso(r["deployment"]), "before": r["before"],
                       "after": r["after"], "contrast": _num(r["contrast"]), "se": _num(r["se"]),
                       "raw_contrast": _num(r["raw_contrast"]), "note": r["note"]}
                      for r in a.contrasts.to_dict("records")],
        "heterogeneity": [{"rater": h.rater, "reference": h.reference, "pooled": _num(h.pooled),
                           "se": _num(h.se), "q": _num(h.q), "df": h.df, "p": _num(h.p),
                           "batches": h.k} for h in a.heterogeneity],
        "variants": [{k: (_num(v) if k != "variant" else v) for k, v in r.items()}
                     for r in a.variants.to_dict("records")],
        "categories": [{k: _jsonable(v) for k, v in r.items()}
                       for r in a.categories.to_dict("records")],
        "category_trends": [{k: (v if k == "category" else _num(v)) for k, v in r.items()}
                            for r in a.category_trends.to_dict("records")],
        "notes": list(a.notes),
    }


def reaudit_overdue(due: Any, today: date | None = None) -> str | None:
    """``OVERDUE since 2026-09-27, 9 weeks ago`` when the re-audit date has passed (today in
    UTC unless given); ``None`` otherwise."""
    text = overdue_text(due, today or datetime.now(timezone.utc).date())
    return None if text is None else "OVERDUE " + text[len("overdue "):]


def _upper(value: Any, estimated: bool, nd: int) -> str:
    """An interval's upper end: JSON ``null`` is ``∞`` when the estimate exists (the likelihood
    never fell far enough), ``—`` when nothing was estimated."""
    return decimals(math.inf if value is None and estimated else value, nd)


def _weeks_to_d(h: dict[str, Any], estimated: bool) -> str:
    if h["weeks"] is not None:
        return decimals(h["weeks"], 1)
    return "never (q = 0)" if estimated else decimals(None)


def _reaudit(h: dict[str, Any], estimated: bool) -> str:
    if h["date"]:
        overdue = reaudit_overdue(h["date"])
        return h["date"] + (f" — {overdue}" if overdue else "")
    return f"{decimals(None)} ({'no drift detected' if estimated else 'q cannot be estimated'})"


def _p_wild(t: dict[str, Any]) -> str:
    return p_equals(t["p_wild"], reps=t["reps"] or None)


def format_drift_text(result: dict[str, Any]) -> str:
    """A plain-text rendering of :func:`drift_result_json` for the CLI (the CLI passes it
    through :func:`core.format.term_lines`, which shows control characters in user text)."""
    r = result
    est = r["q"] is not None
    lines = [f"DRIFT AND GRADER SEVERITY — {r.get('panel', 'panel')}",
             f"reference rater: {r['reference_rater']}", ""]
    if r["raters"]:
        lines.append("GRADER SEVERITY (vs reference; score units)")
        for x in r["raters"]:
            lines.append(f"  {x['rater']:<12} {decimals(x['severity']):>8}  "
                         f"se {decimals(x['se'])}  "
                         f"95% [{decimals(x['ci95'][0])}, {decimals(x['ci95'][1])}]  "
                         f"n={count(x['n'])}")
    else:
        lines.append("GRADER SEVERITY: one rater only — no severity table")
    lines += ["", "BATCHES  (raw mean | adjusted ± se | smoothed ± se)"]
    for b in r["batches"]:
        lines.append(f"  {b['batch']}  n={count(b['n']):<5} {decimals(b['raw_mean']):>7} | "
                     f"{decimals(b['adjusted']):>7} ± {decimals(b['se'])} | "
                     f"{decimals(b['smoothed']):>7} ± {decimals(b['smoothed_se'])}")
    q = r["q_ci95"]
    lines += ["", (f"DRIFT  q = {decimals(r['q'], 5)} per week  95% [{decimals(q[0], 5)}, "
                   f"{_upper(q[1], est, 5)}]  innovation SD {decimals(r['innovation_sd'])}/week"),
              (f"  LR test of q = 0: LR = {decimals(r['lr'], 2)}, {p_equals(r['lr_pvalue'])} "
               "(boundary: ½·P(χ²₁ > LR))")]
    h = r["horizon"]
    sd = h["sd_at_weeks"]
    wk = h["weeks_ci95"]
    lines += [(f"HORIZON  D = {decimals(h['D'])}: predictive SD {decimals(sd['4'])} / "
               f"{decimals(sd['8'])} / {decimals(sd['12'])} at 4 / 8 / 12 weeks"),
              (f"  weeks to D: {_weeks_to_d(h, est)}  95% [{decimals(wk[0], 1)}, "
               f"{_upper(wk[1], est, 1)}]"),
              f"  re-audit by {_reaudit(h, est)}"]
    t = r["trend"]
    lines += ["", (f"TREND  {decimals(t['slope'])} per month with rater FE "
                   f"(se {decimals(t['se'])}, "
                   f"wild-cluster {_p_wild(t)}, {count(t['n_clusters'])} batches); raw "
                   f"{decimals(t['raw_slope'])}")]
    if r["contrasts"]:
        lines.append("DEPLOYMENT CONTRASTS (two after − two before; read by magnitude)")
        for c in r["contrasts"]:
            lines.append(f"  {c['deployment']}  {decimals(c['contrast'])} (se {decimals(c['se'])}; "
                         f"raw {decimals(c['raw_contrast'])}) {c['note']}")
    for note in r.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _md_table(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    """A Markdown table; ``align`` has one ``l`` / ``r`` per column. Cells are already
    formatted numbers or :func:`core.format.md_cell` text."""
    rule = ["---:" if a == "r" else "---" for a in align]
    return (["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
            + ["| " + " | ".join(row) + " |" for row in rows])


def format_drift_markdown(result: dict[str, Any]) -> str:
    """A Markdown rendering of :func:`drift_result_json` (CLI ``--format md``): the same
    sections as :func:`format_drift_text`, tables for raters, batches and contrasts. User text
    is escaped, so a rater named ``*B*`` or ``a|b`` reads literally and cannot break a table.
    """
    r = result
    est = r["q"] is not None
    out = [f"# Drift and grader severity — {md_escape(r.get('panel', 'panel'))}", "",
           f"Reference rater: **{md_escape(r['reference_rater'])}**", "",
           "## Grader severity (vs reference; score units)", ""]
    if r["raters"]:
        out += _md_table(["rater", "severity", "se", "95% interval", "ratings", "batches"],
                         [[md_cell(x["rater"]), decimals(x["severity"]), decimals(x["se"]),
                           f"{decimals(x['ci95'][0])} to {decimals(x['ci95'][1])}", count(x["n"]),
                           count(x["n_batches"])] for x in r["raters"]], "lrrlrr")
    else:
        out.append("One rater only: no severity table; batch effects are that rater's means.")
    out += ["", "## Batches", ""]
    out += _md_table(["batch", "ratings", "raw mean", "adjusted", "se", "composition",
                      "smoothed", "smoothed se"],
                     [[b["batch"], count(b["n"]), decimals(b["raw_mean"]), decimals(b["adjusted"]),
                       decimals(b["se"]), decimals(b["composition"]), decimals(b["smoothed"]),
                       decimals(b["smoothed_se"])] for b in r["batches"]], "lrrrrrrr")
    q, h, t = r["q_ci95"], r["horizon"], r["trend"]
    sd, wk = h["sd_at_weeks"], h["weeks_ci95"]
    out += ["", "## Drift", "",
            f"- q = {decimals(r['q'], 5)} per week, 95% interval {decimals(q[0], 5)} to "
            f"{_upper(q[1], est, 5)}; innovation SD {decimals(r['innovation_sd'])} per week",
            f"- LR test of q = 0: LR = {decimals(r['lr'], 2)}, {p_equals(r['lr_pvalue'])} "
            "(boundary: ½·P(χ²₁ > LR))", "", "## Horizon", "",
            f"- D = {decimals(h['D'])}: predictive SD {decimals(sd['4'])} / {decimals(sd['8'])} / "
            f"{decimals(sd['12'])} at 4 / 8 / 12 weeks",
            f"- weeks to D: {_weeks_to_d(h, est)} (95% {decimals(wk[0], 1)} to "
            f"{_upper(wk[1], est, 1)})",
            f"- **re-audit by {_reaudit(h, est)}**", "", "## Trend", "",
            f"- {decimals(t['slope'])} per month with rater fixed effects (se {decimals(t['se'])}, "
            f"wild-cluster {_p_wild(t)}, {count(t['n_clusters'])} batches); raw "
            f"{decimals(t['raw_slope'])}"]
    if r["contrasts"]:
        out += ["", "## Deployment contrasts (two after − two before; read by magnitude)", ""]
        out += _md_table(["deployment", "contrast", "se", "raw contrast", "note"],
                         [[c["deployment"], decimals(c["contrast"]), decimals(c["se"]),
                           decimals(c["raw_contrast"]), md_cell(c["note"])]
                          for c in r["contrasts"]], "lrrrl")
    notes = r.get("notes", [])
    if notes:
        out += ["", "## Notes", ""] + [f"- {md_escape(n)}" for n in notes]
    return "\n".join(out) + "\n"
