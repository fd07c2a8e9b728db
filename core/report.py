"""The audit report: plain text (the seed's "Output format" layout), Markdown, JSON and a
self-contained HTML page with the charts inlined.

There is no field for the standard error of the mean anywhere: production takes one draw.
Every report carries the scope line and NOT ESTABLISHED BY THIS REPORT.
"""

from __future__ import annotations

import html
import json
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import numpy as np
import plotly.io as pio

from core import charts
from core.audit import AuditResult
from core.format import md_cell, md_escape, term_escape
from core.freeze import TEMPERATURE_ZERO_NOTE, FreezeSheet
from core.invalid import describe as invalid_lines

__all__ = ["report_dict", "render_text", "render_markdown", "render_json", "render_html",
           "render", "NOT_ESTABLISHED", "FORMATS"]

FORMATS = ("text", "md", "json", "html")

NOT_ESTABLISHED = [
    "whether the screener measures job performance (validity — not tested)",
    "whether selection rates differ across protected categories (LL 144 bias audit — "
    "different statistic, independent auditor required)",
]


# ---------------------------------------------------------------------------- helpers
def _num(x: Any) -> Any:
    """JSON-safe number: NaN/inf → None, numpy → Python."""
    if x is None:
        return None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x)   # non-finite values become None (with a reason) in report_dict
    return x


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and math.isfinite(float(x))


#: Above this magnitude numbers are shown in scientific notation (never 300 digits).
_HUGE = 1e12


def _fmt(x: Any, nd: int = 1) -> str:
    if not _finite(x):
        return "—"
    x = float(x)
    return f"{x:.4g}" if abs(x) >= _HUGE else f"{x:.{nd}f}"


def _pts(x: Any) -> str:
    """A score for prose: integers without decimals, else one decimal; ``—`` when missing."""
    if not _finite(x):
        return "—"
    x = float(x)
    if abs(x) >= _HUGE:
        return f"{x:.4g}"
    return f"{x:.0f}" if abs(x - round(x)) < 1e-9 else f"{x:.1f}"


def _pct(x: float | None) -> str:
    return "—" if not _finite(x) else f"{100 * float(x):.0f}%"


_NULL_REASONS = {
    "nan": "not defined for these draws (too few runs, candidates or pool scores)",
    "inf": "overflow: the scores are too large to compute this",
}


def _json_safe(obj: Any, path: str, reasons: dict[str, str]) -> Any:
    """``obj`` with every non-finite number replaced by None, its reason kept in ``reasons``
    (JSON has no NaN or Infinity; a reader must not meet them)."""
    if isinstance(obj, dict):
        return {k: _json_safe(v, f"{path}.{k}" if path else str(k), reasons)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v, f"{path}[{i}]", reasons) for i, v in enumerate(obj)]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        if math.isfinite(x):
            return x
        reasons[path] = _NULL_REASONS["nan" if math.isnan(x) else "inf"]
        return None
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


@contextmanager
def _quiet() -> Iterator[None]:
    """No numpy warnings on stderr: a number that overflows or is undefined (the SD of one
    candidate) is reported as missing with its reason instead."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _escaped(obj: Any, escape: Any) -> Any:
    """Every string of a report dict through ``escape`` (user text: ids, criterion names)."""
    if isinstance(obj, dict):
        return {k: _escaped(v, escape) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_escaped(v, escape) for v in obj]
    if isinstance(obj, str):
        return escape(obj)
    return obj


def _sheet(result: AuditResult) -> FreezeSheet | None:
    try:
        return FreezeSheet.from_dict(result.freeze) if result.freeze else None
    except Exception:  # noqa: BLE001 - an old or partial sheet still gets a report
        return None


def _verdict_note(row: dict[str, Any]) -> str:
    v = row["verdict"]
    if v == "DEAD":
        mx = row.get("max_points")
        score = _pts(row["modal_score"]) if row.get("modal_score") is not None else "?"
        of = f"{score}/{_pts(mx)}" if mx is not None and math.isfinite(mx) else score
        return f"DEAD — {of} for {row['modal_candidates']}/{row['candidates']} candidates"
    if v == "NOISY":
        return "NOISY — within exceeds between"
    return v.lower()


# ---------------------------------------------------------------------------- the data
def report_dict(result: AuditResult, *, cutoff: float | None = None,
                k: float | None = None) -> dict[str, Any]:
    """The report as plain data (the JSON format); numbers unrounded.

    No NaN or infinity: a number that is not finite is None, and ``null_reasons`` says why
    (keyed by its path, e.g. ``total.within_sd``).
    """
    with _quiet():
        out = _report_dict(result, cutoff=cutoff, k=k)
    reasons: dict[str, str] = {}
    clean = _json_safe(out, "", reasons)
    clean["null_reasons"] = reasons
    return clean


def _report_dict(result: AuditResult, *, cutoff: float | None = None,
                 k: float | None = None) -> dict[str, Any]:
    sheet = _sheet(result)
    comp = result.composition()
    view = result.view(cutoff, k)
    withheld = result.withheld
    s = result.settings
    out: dict[str, Any] = {
        "report": "screening score variance audit",
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "audit_id": result.audit_id,
        "req": {"id": result.freeze.get("req_id", result.audit_id),
                "title": result.freeze.get("req_title", ""),
                "gates": result.freeze.get("gates", "")},
        "harness": {"label": sheet.harness_label() if sheet else "",
                    "hash": result.harness_hash,
                    "screener": result.freeze.get("screener"),
                    "model": result.freeze.get("model"),
                    "rubric_version": result.freeze.get("rubric_version"),
                    "prompt_version": result.freeze.get("prompt_version"),
                    "sampling": result.freeze.get("sampling"),
                    "temperature": result.freeze.get("temperature"),
                    "warnings": sheet.warnings() if sheet else []},
        "sample": {"candidates": comp["candidates"], "evaluations": comp["evaluations"],
                   "band": comp["band"], "high_anchors": comp["high_anchors"],
                   "low_anchors": comp["low_anchors"], "between": comp["between"],
                   "runs_min": comp["runs_min"], "runs_max": comp["runs_max"],
                   "strata_source": result.strata_source},
        "cutoff": {"audited": view.flip.cutoff, "configured": _num(result.configured_cutoff),
                   "effective": cutoff is None and bool(s.top_k) and result.pool_size > 0,
                   "top_k": s.top_k, "of_n": s.of_n, "comparison": s.comparison},
        "guards": {**result.guards, "statistics_withheld": withheld},
        "notes": list(result.notes),
        "temperature_zero_note": TEMPERATURE_ZERO_NOTE,
        "settings": {"dead_tol_frac": s.dead_tol_frac, "anchor_min": s.anchor_min,
                     "k": s.k if k is None else k, "comparison": s.comparison},
        "scope": scope_line(result),
        "invalid_answers": (None if getattr(result, "invalid", None) is None
                            else {**result.invalid.to_dict(),
                                  "requested": {k: result.freeze.get(k) for k in (
                                      "response_format", "schema_style", "max_tokens")
                                      if result.freeze.get(k) is not None}}),
        "invalidated_by": invalidated_by(result),
        "not_established": list(NOT_ESTABLISHED),
    }
    if withheld:
        out.update({"criteria": None, "total": None, "flip": None, "band": None,
                    "remediation": [], "exposure": None, "capacity": None})
        return out
    table = result.criteria
    out["criteria"] = ([] if table is None else [
        {"criterion": r["criterion"],
         "max_points": _num(r["max_points"]) if _finite(r["max_points"]) else None,  # unknown
         "weight": _num(r["weight"]), "within_sd": _num(r["within_sd"]),
         "between_sd": _num(r["between_sd"]),
         "share_of_within_variance": _num(r["share_of_within_variance"]),
         "verdict": r["verdict"], "dead_tol": _num(r["dead_tol"]),
         "note": _verdict_note(r)}
        for r in table.to_dict("records") if r["criterion"] != "total"])
    out["criteria_skipped"] = (None if table is not None else
                               "the screener returns only a total: the per-criterion step is "
                               "skipped")
    if table is not None:
        shares = table[table["criterion"] != "total"]["share_of_within_variance"]
        rest = 1.0 - float(np.nansum(shares))
        out["share_not_in_any_criterion"] = _num(rest) if abs(rest) > 1e-9 else 0.0
    n_typ = int(np.median(result.draws.counts))
    f_lo, f_hi = (result.sd_intervals[["sd_ci_low", "sd_ci_high"]].iloc[0] /
                  result.sd_intervals["sd"].iloc[0]) if len(result.sd_intervals) and \
        result.sd_intervals["sd"].iloc[0] > 0 else (float("nan"), float("nan"))
    from core.criteria import sd_interval
    fac = sd_interval(1.0, n_typ - 1)
    out["total"] = {
        "within_sd": _num(result.live.within_sd),
        "between_sd": _num(float(np.std(result.live.means, ddof=1))),
        "within_sd_ci95": [_num(result.within_sd_ci95[0]), _num(result.within_sd_ci95[1])],
        "within_sd_ci95_df": int(np.sum(result.draws.counts - 1)),
        "per_candidate_sd_ci95_factors": {"runs": n_typ, "low": _num(fac[0]),
                                          "high": _num(fac[1])},
        "icc1": _num(result.icc.icc1) if result.icc else None,
        "icc1_ci95": [_num(result.icc.ci95[0]), _num(result.icc.ci95[1])] if result.icc
        else None,
        "reliability_withheld": result.reliability_withheld,
        "source": result.draws.total_source,
    }
    del f_lo, f_hi
    ft = result.live.flip_table(view.flip.cutoff)
    sdi = result.sd_intervals
    fs = view.flip
    out["flip"] = {
        "cutoff": fs.cutoff, "comparison": fs.comparison, "candidates": fs.candidates,
        "candidates_with_flip": fs.candidates_with_flip,
        "worst": {"candidate_id": fs.worst_candidate, "passes": fs.worst_passes,
                  "runs": fs.worst_runs, "flip_rate": _num(fs.worst_flip_rate)},
        "flip_interval": list(fs.flip_interval) if fs.flip_interval else None,
        "mean_disagreement": _num(fs.mean_disagreement),
        "per_candidate": [
            {"candidate_id": r["candidate_id"], "passes": int(r["passes"]),
             "runs": int(r["runs"]), "flip_rate": _num(r["flip_rate"]),
             "disagreement": _num(r["disagreement"]), "mean": _num(r["mean"]),
             "ci95": [_num(r["ci_low"]), _num(r["ci_high"])],
             "sd": _num(sdi["sd"].iloc[i]),
             "sd_ci95": [_num(sdi["sd_ci_low"].iloc[i]), _num(sdi["sd_ci_high"].iloc[i])],
             "stratum": str(result.strata.iloc[i]) if i < len(result.strata) else None}
            for i, r in enumerate(ft.to_dict("records"))],
    }
    b = view.band
    out["band"] = {
        "k": b.k, "two_sd": list(b.two_sd), "empirical": [_num(b.empirical[0]),
                                                          _num(b.empirical[1])],
        "low": b.low, "high": b.high, "bound_by": b.bound_by, "rule": b.rule,
        "halfwidth_override": b.override,
        "share_of_pool": _num(view.share_of_pool),
        "applications_per_req": _num(view.applications_per_req),
        "manual_reviews_per_req": _num(view.manual_reviews_per_req),
        "needs_pool": view.needs_pool,
    }
    out["capacity"] = None if view.capacity is None or view.needs_pool else {
        "reviews_per_req": view.capacity, "exceeded": view.over_capacity,
        "capacity_band": (list(view.capacity_band) if view.capacity_band
                          and view.capacity_note is None else None),
        "left_to_chance_per_req": _num(view.left_to_chance_per_req),
        "note": view.capacity_note}
    out["exposure"] = None if view.exposure is None else {
        "rho": _num(view.exposure.rho),
        "reversals_per_req": _num(view.exposure.reversals_per_req),
        "reversals_outside_band_per_req": _num(view.exposure.reversals_outside_band_per_req),
        "approximation": view.exposure.note}
    tot_within = result.live.within_sd
    out["remediation"] = [
        {"criterion": r["criterion"], "verdict": r["verdict"], "within_sd": _num(r["within_sd"]),
         "share_of_within_variance": _num(r["share_of_within_variance"]),
         "action": r["action"]} for r in result.remediation.to_dict("records")]
    out["total"]["within_sd"] = _num(tot_within)
    return out


def scope_line(result: AuditResult) -> str:
    f = result.freeze
    return (f"These numbers bind to req {f.get('req_id') or result.audit_id}, rubric "
            f"{f.get('rubric_version') or '(unversioned)'} and model snapshot "
            f"{f.get('model') or '(unknown)'} only; another req, rubric or snapshot needs its own "
            "audit.")


def invalidated_by(result: AuditResult) -> list[str]:
    items = [f"any change to the harness (hash {result.harness_hash[:12] or '—'}): prompt, "
             "rubric, parser, model snapshot, sampling settings or endpoint"]
    d = result.drift
    if d and isinstance(d.get("horizon"), dict) and d["horizon"].get("date"):
        h = d["horizon"]
        weeks = h.get("weeks")
        from core.drift.result import reaudit_overdue
        overdue = reaudit_overdue(h["date"])
        items.append((f"drift: {overdue} (re-audit was due by {h['date']}; " if overdue else
                      f"drift: re-audit by {h['date']} (")
                     + f"predictive SD reaches the change that "
                     f"matters, D = {h.get('D')}, after ~{_fmt(weeks, 0)} weeks; from the drift "
                     f"analysis of {result.freeze.get('screener')})")
    else:
        items.append("drift: no drift analysis for this screener yet (Drift page); until one "
                     "exists the audit has no stated expiry date")
    return items


# ---------------------------------------------------------------------------- text
def render_text(result: AuditResult, *, cutoff: float | None = None,
                k: float | None = None) -> str:
    d = report_dict(result, cutoff=cutoff, k=k)
    return _text_from_dict(d)


def _cutoff_line(d: dict[str, Any]) -> str:
    c = d["cutoff"]
    line = f"Cutoff audited: {_pts(c['audited'])}"
    if c["effective"]:
        conf = ("" if c["configured"] is None
                else f"config field reads {_pts(c['configured'])}, ")
        line += (f" (effective; {conf}recruiter works top {c['top_k']} of "
                 f"~{c['of_n'] or '?'})")
    elif c["configured"] is not None and abs(c["configured"] - c["audited"]) > 1e-9:
        line += f" (config field reads {_pts(c['configured'])})"
    if c["comparison"] == ">":
        line += "; pass means total > cutoff"
    return line


def _text_from_dict(d: dict[str, Any]) -> str:
    d = _escaped(d, term_escape)   # ids and names can never forge a line or a colour
    L: list[str] = []
    req = d["req"]
    title = f' "{req["title"]}"' if req.get("title") else ""
    L.append(f"SCREENING SCORE VARIANCE AUDIT — req {req['id']}{title}")
    L.append(f"Harness: {d['harness']['label']}")
    L.append(f"Harness hash: {d['harness']['hash']}")
    s = d["sample"]
    runs = (f"{s['runs_min']} runs" if s["runs_min"] == s["runs_max"]
            else f"{s['runs_min']}-{s['runs_max']} runs")
    between = f", {s['between']} between" if s["between"] else ""
    L.append(f"Sample: {s['candidates']} candidates ({s['band']} band, {s['high_anchors']} high "
             f"anchor, {s['low_anchors']} low anchor{between}) x {runs} = {s['evaluations']} "
             f"evaluations (strata: {s['strata_source']})")
    L.append(_cutoff_line(d))
    L.append("")
    L.append("GUARDS")
    g = d["guards"]
    cache = g["cache"]
    if cache["checked"]:
        single = cache["single_payload_candidates"]
        L.append(f"  cache: {cache['verdict']}" + (
            f"; one distinct payload for: {', '.join(single[:10])}"
            + (" …" if len(single) > 10 else "") if single else
            f"; every candidate returned at least {cache['distinct_payloads_min']} distinct "
            "payloads" if cache["distinct_payloads_min"] is not None else
            "; no candidate has two calls yet"))
    else:
        L.append(f"  cache: {cache['verdict']}")
    pop = g["populations"]
    if pop.get("flagged"):
        L.append(f"  model: SECOND POPULATION — {pop['excluded_draws']} draw(s) reported another "
                 f"model than the frozen {pop['frozen_model']}; excluded "
                 f"({', '.join(f'{m}: {n}' for m, n in pop['models'].items())})")
    elif pop.get("models"):
        L.append(f"  model: every draw reports {', '.join(pop['models'])}")
    else:
        L.append("  model: not reported by the draws")
    for w in d["harness"]["warnings"]:
        L.append(f"  harness: {w}")
    for n in d["notes"]:
        L.append(f"  note: {n}")
    L.append("")
    _text_invalid(d, L)
    if g.get("statistics_withheld"):
        L.append(f"STATISTICS WITHHELD: {g['statistics_withheld']}.")
        L.append("  Turn the result cache off, send a distinct request id per call, and run "
                 "again.")
        L.append("")
    else:
        _text_stats(d, L)
    L.append("SCOPE")
    L.append(f"  {d['scope']}")
    L.append("")
    L.append("WHAT INVALIDATES THIS AUDIT")
    for item in d["invalidated_by"]:
        L.append(f"  - {item}")
    L.append("")
    L.append("NOT ESTABLISHED BY THIS REPORT")
    for item in d["not_established"]:
        L.append(f"  - {item}")
    return "\n".join(L) + "\n"


def _text_invalid(d: dict[str, Any], L: list[str]) -> None:
    """INVALID ANSWERS: rate overall, by kind, per candidate, and the conditioning warning
    (SPEC §3.3). A self-contained section (core.invalid builds its lines)."""
    inv = d.get("invalid_answers")
    if inv is None:
        return
    L.append("INVALID ANSWERS")
    for line in invalid_lines(inv):
        L.append(f"  {line}")
    L.append("")


def _text_stats(d: dict[str, Any], L: list[str]) -> None:
    t = d["total"]
    if d["criteria"] is not None and d.get("criteria_skipped") is None:
        L.append("PER-CRITERION")
        width = max([len("criterion")] + [len(r["criterion"]) for r in d["criteria"]]) + 2
        L.append(f"  {'criterion':<{width}}{'within-SD':>10}{'between-SD':>12}{'share':>8}   "
                 "verdict")
        for r in d["criteria"]:
            L.append(f"  {r['criterion']:<{width}}{_fmt(r['within_sd']):>10}"
                     f"{_fmt(r['between_sd']):>12}{_pct(r['share_of_within_variance']):>8}   "
                     f"{r['note']}")
        L.append(f"  {'TOTAL':<{width}}{_fmt(t['within_sd']):>10}{_fmt(t['between_sd']):>12}")
        if d.get("share_not_in_any_criterion"):
            L.append(f"  not in any criterion (bonus, deductions, parsing): "
                     f"{_pct(d['share_not_in_any_criterion'])} of the total's within variance")
        tol = 100 * d["settings"]["dead_tol_frac"]
        L.append(f"  share = share of the total's within-candidate variance; DEAD when both SDs "
                 f"<= {tol:g}% of max points (or of the largest score when max is unknown); "
                 "NOISY when within >= between")
    else:
        L.append("PER-CRITERION")
        L.append(f"  skipped: {d.get('criteria_skipped') or 'no criteria'}")
        L.append(f"  TOTAL within-SD {_fmt(t['within_sd'])}, between-SD {_fmt(t['between_sd'])}")
    ci = t["within_sd_ci95"]
    fac = t["per_candidate_sd_ci95_factors"]
    L.append(f"  total within-SD 95% interval (pooled, df {t['within_sd_ci95_df']}): "
             f"{_fmt(ci[0], 2)} - {_fmt(ci[1], 2)}; one candidate's SD from {fac['runs']} runs: "
             f"{_fmt(fac['low'], 2)}x - {_fmt(fac['high'], 2)}x")
    if t["icc1"] is not None:
        L.append(f"  reliability of a single draw, ICC(1): {_fmt(t['icc1'], 2)} (95% CI "
                 f"{_fmt(t['icc1_ci95'][0], 2)} - {_fmt(t['icc1_ci95'][1], 2)})")
    else:
        L.append(f"  {t['reliability_withheld']}")
    L.append("")
    f = d["flip"]
    L.append(f"FLIP RATE AT CUTOFF {_pts(f['cutoff'])} (single draw, not mean)")
    runs = d["sample"]["runs_min"] if d["sample"]["runs_min"] == d["sample"]["runs_max"] else \
        f"{d['sample']['runs_min']}-{d['sample']['runs_max']}"
    L.append(f"  candidates with any flip across {runs} runs: {f['candidates_with_flip']} of "
             f"{f['candidates']}")
    w = f["worst"]
    if f["candidates_with_flip"]:
        L.append(f"  worst candidate: {w['candidate_id']}, {w['passes']}/{w['runs']} runs pass "
                 f"(flip rate {_pct(w['flip_rate'])})")
        lo, hi = f["flip_interval"]
        L.append(f"  flip interval: scores {_pts(lo)} - {_pts(hi)} (mean totals of the "
                 "candidates that flip)")
    else:
        L.append("  no candidate flips at this cutoff")
    L.append(f"  mean disagreement (two draws of one application on opposite sides): "
             f"{_pct(f['mean_disagreement'])}")
    L.append("")
    b = d["band"]
    L.append("RECOMMENDED")
    L.append(f"  cutoff: {_pts(f['cutoff'])} (as audited)")
    emp = b["empirical"]
    other = (f"2-SD rule gave {_pts(b['two_sd'][0])}-{_pts(b['two_sd'][1])}, empirical rule "
             f"gave {_fmt(emp[0], 1)}-{_fmt(emp[1], 1)}")
    if b["low"] is None or b["high"] is None:
        L.append("  manual-review band: withheld: no candidate has 2 or more runs, so there is no "
                 "within-candidate spread to size it")
    elif b["halfwidth_override"] is not None:
        L.append(f"  manual-review band: {_fmt(b['low'])} - {_fmt(b['high'])} (manual half-width "
                 f"{b['halfwidth_override']:g}; {other})")
    else:
        L.append(f"  manual-review band: {_fmt(b['low'])} - {_fmt(b['high'])} (bound by the "
                 f"{b['rule']}, k = {b['k']:g}; {other})")
    if b["needs_pool"]:
        L.append("  throughput cost: needs the pool (upload the req's first-pass scores)")
    else:
        L.append(f"  throughput cost: ~{_pct(b['share_of_pool'])} of applications -> "
                 f"~{_fmt(b['manual_reviews_per_req'], 0)} manual reviews per req at "
                 f"n={_fmt(b['applications_per_req'], 0)}")
    cap = d.get("capacity")
    if cap:
        if cap.get("note"):
            L.append(f"  reviewer capacity: {cap['note']} (~{_fmt(cap['left_to_chance_per_req'])} "
                     "coin-flip decisions per req, normal approximation); if nobody reviews, "
                     "widen the automated reject threshold instead")
        elif cap["exceeded"]:
            lo, hi = cap["capacity_band"]
            L.append(f"  reviewer capacity {cap['reviews_per_req']:g} per req is exceeded: a "
                     f"capacity-sized band {_fmt(lo)} - {_fmt(hi)} leaves "
                     f"~{_fmt(cap['left_to_chance_per_req'])} coin-flip decisions per req outside "
                     "it (normal approximation); if nobody reviews, widen the automated reject "
                     "threshold instead")
        else:
            L.append(f"  reviewer capacity {cap['reviews_per_req']:g} per req covers the band")
    e = d.get("exposure")
    if e:
        L.append(f"  re-run exposure: a fresh draw would reverse "
                 f"~{_fmt(e['reversals_per_req'])} of the req's decisions, "
                 f"~{_fmt(e['reversals_outside_band_per_req'])} of them outside the band "
                 f"({e['approximation']})")
    L.append("")
    L.append("REMEDIATE FIRST")
    if not d["remediation"]:
        L.append("  nothing: no criterion is NOISY or DEAD")
    for i, r in enumerate(d["remediation"], start=1):
        if r["verdict"] == "NOISY":
            L.append(f"  {i}. {r['criterion']} — within-SD {_fmt(r['within_sd'])} carries "
                     f"{_pct(r['share_of_within_variance'])} of the total's within variance. "
                     "Split into checkable sub-questions or drop from the weighted total.")
        else:
            L.append(f"  {i}. {r['criterion']} — contributes no ranking signal. Removing it "
                     "changes no ordering and stops it inflating the reliability of the total.")
    L.append("")


# ---------------------------------------------------------------------------- markdown
def render_markdown(result: AuditResult, *, cutoff: float | None = None,
                    k: float | None = None) -> str:
    d = report_dict(result, cutoff=cutoff, k=k)
    req = d["req"]
    out = [f"# Screening score variance audit — req {md_cell(req['id'])}"
           + (f" “{md_cell(req['title'])}”" if req.get("title") else ""), ""]
    text = _text_from_dict(d).splitlines()[1:]
    section = None
    header_done = False
    for line in text:
        if not line.strip():
            header_done = True
            continue
        if header_done and not line.startswith(" "):
            section = line
            out += ["", f"## {section.capitalize()}", ""]   # our own headings only
            continue
        if section is None:
            if line.strip():
                out.append(f"- {md_escape(line.strip())}")
            continue
        if section == "PER-CRITERION" and d.get("criteria"):
            continue
        if line.strip():
            out.append(f"- {md_escape(line.strip().lstrip('- '))}")
    if d.get("criteria"):
        t = d["total"]
        idx = out.index("## Per-criterion") + 2
        rows = ["| criterion | within-SD | between-SD | share of within variance | verdict |",
                "|---|---:|---:|---:|---|"]
        for r in d["criteria"]:
            rows.append(f"| {md_cell(r['criterion'])} | {_fmt(r['within_sd'])} | "
                        f"{_fmt(r['between_sd'])} | {_pct(r['share_of_within_variance'])} | "
                        f"{md_cell(r['note'])} |")
        rows.append(f"| **TOTAL** | {_fmt(t['within_sd'])} | {_fmt(t['between_sd'])} | | |")
        extra = []
        if t["icc1"] is not None:
            extra.append(f"- Reliability of a single draw, ICC(1): {_fmt(t['icc1'], 2)} "
                         f"(95% CI {_fmt(t['icc1_ci95'][0], 2)} – {_fmt(t['icc1_ci95'][1], 2)})")
        else:
            extra.append(f"- {md_escape(t['reliability_withheld'])}")
        out[idx:idx] = rows + [""] + extra
    return "\n".join(out).replace("\n\n\n", "\n\n") + "\n"


# ---------------------------------------------------------------------------- json / html
def render_json(result: AuditResult, *, cutoff: float | None = None,
                k: float | None = None) -> str:
    return json.dumps(report_dict(result, cutoff=cutoff, k=k), indent=2, ensure_ascii=False,
                      default=_num, allow_nan=False)


def render_html(result: AuditResult, *, cutoff: float | None = None,
                k: float | None = None) -> str:
    """A self-contained page: the text report (escaped) and the charts, plotly.js inlined."""
    d = report_dict(result, cutoff=cutoff, k=k)
    esc = html.escape
    figs = []
    with _quiet():
        if not d["guards"].get("statistics_withheld"):
            figs = _html_figures(result, cutoff, k)
    req = d["req"]
    title = f"Screening score variance audit — req {req['id']}"
    heading = esc(title) + ((" — " + esc(req["title"])) if req.get("title") else "")
    body = (f"<h1>{heading}</h1>\n"
            f"<p class=\"meta\">Harness hash {esc(d['harness']['hash'])} · generated "
            f"{esc(d['generated_at'])}\n· a measurement of score consistency; it makes no "
            "validity or fairness claim.</p>\n"
            f"<pre>{esc(_text_from_dict(d))}</pre>\n")
    return html_page(title, body, figs, css=" .meta { color: #555; font-size: .9rem; }")


def html_page(title: str, body: str, figures: list[Any], *, css: str = "") -> str:
    """A self-contained HTML report: ``body`` (already escaped markup) then the Plotly
    ``figures`` (plotly.js inlined once, so the page needs no network). Used by the audit
    report and the comparison report."""
    charts_html = "".join(
        '<div class="chart">'
        + pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0),
                      config={"displaylogo": False, "responsive": True})
        + "</div>" for i, fig in enumerate(figures))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>
 body {{ font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2rem auto;
        max-width: 1100px; color: #1d3557; padding: 0 1rem; }}
 pre {{ background: #f6f8fa; padding: 1rem; border-radius: 6px; white-space: pre-wrap;
       font-size: 13px; line-height: 1.4; }}
 h1 {{ font-size: 1.5rem; }} .chart {{ margin: 1.5rem 0; }}
{css}
</style></head><body>
{body}{charts_html}
</body></html>
"""


def _html_figures(result: AuditResult, cutoff: float | None, k: float | None) -> list[Any]:
    figs: list[Any] = []
    view = result.view(cutoff, k)
    if result.criteria is not None:
        figs.append(charts.criteria_chart(result.criteria))
    ft = result.live.flip_table(view.flip.cutoff)
    figs.append(charts.draws_strip(result.draws.candidate_ids, result.draws.cand,
                                   result.draws.total, result.live.means,
                                   ft["flips"].to_numpy(), view.flip.cutoff, view.band))
    if result.live.pool is not None:
        figs.append(charts.pool_histogram(result.live.pool, view.flip.cutoff, view.band))
    return figs


def render(result: AuditResult, fmt: str = "text", **kw: Any) -> str:
    """Render in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "text":
        return render_text(result, **kw)
    if fmt == "md":
        return render_markdown(result, **kw)
    if fmt == "json":
        return render_json(result, **kw)
    if fmt == "html":
        return render_html(result, **kw)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")
