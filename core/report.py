"""The audit report: plain text (the seed's "Output format" layout), Markdown, JSON and a
self-contained HTML page with the charts inlined.

There is no field for the standard error of the mean anywhere: production takes one draw.
Every report carries the scope line and NOT ESTABLISHED BY THIS REPORT.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import numpy as np
import plotly.io as pio
from markupsafe import Markup

from core import charts
from core.audit import AuditResult
from core.format import fixed, score
from core.freeze import TEMPERATURE_ZERO_NOTE, FreezeSheet
from core.invalid import describe as invalid_lines
from core.templating import render_template

__all__ = ["report_dict", "render_text", "render_markdown", "render_json", "render_html",
           "render", "chart_markup", "scope_line", "invalidated_by", "NOT_ESTABLISHED",
           "FORMATS"]

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


def _sheet(result: AuditResult) -> FreezeSheet | None:
    try:
        return FreezeSheet.from_dict(result.freeze) if result.freeze else None
    except Exception:  # noqa: BLE001 - an old or partial sheet still gets a report
        return None


def _verdict_note(row: dict[str, Any]) -> str:
    v = row["verdict"]
    if v == "DEAD":
        mx = row.get("max_points")
        modal = score(row["modal_score"]) if row.get("modal_score") is not None else "?"
        of = f"{modal}/{score(mx)}" if mx is not None and math.isfinite(mx) else modal
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
    out["remediation"] = [
        {"criterion": r["criterion"], "verdict": r["verdict"], "within_sd": _num(r["within_sd"]),
         "share_of_within_variance": _num(r["share_of_within_variance"]),
         "action": r["action"]} for r in result.remediation.to_dict("records")]
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
                     f"matters, D = {h.get('D')}, after ~{fixed(weeks, 0)} weeks; from the drift "
                     f"analysis of {result.freeze.get('screener')})")
    else:
        items.append("drift: no drift analysis for this screener yet (Drift page); until one "
                     "exists the audit has no stated expiry date")
    return items


# ---------------------------------------------------------------------------- rendering
def _invalid_lines(d: dict[str, Any]) -> list[str] | None:
    inv = d.get("invalid_answers")
    return None if inv is None else invalid_lines(inv)


def _text_from_dict(d: dict[str, Any]) -> str:
    """The plain-text report of a report dict (``core/templates/audit_text.j2``)."""
    return render_template("audit_text.j2", "text", d=d, invalid=_invalid_lines(d))


def render_text(result: AuditResult, *, cutoff: float | None = None,
                k: float | None = None) -> str:
    """The seed's "Output format" layout; user text shown with its control characters escaped
    (:func:`core.format.term_escape`), so an id can never forge a line or a colour."""
    return _text_from_dict(report_dict(result, cutoff=cutoff, k=k))


def render_markdown(result: AuditResult, *, cutoff: float | None = None,
                    k: float | None = None) -> str:
    """Markdown: the text report's sections as headings and bullets, the per-criterion table as
    a table (``core/templates/audit_md.j2``); user text escaped by :func:`core.format.md_escape`
    and :func:`core.format.md_cell`."""
    d = report_dict(result, cutoff=cutoff, k=k)
    return render_template("audit_md.j2", "md", d=d, invalid=_invalid_lines(d))


def render_json(result: AuditResult, *, cutoff: float | None = None,
                k: float | None = None) -> str:
    """The report dict as JSON (no NaN or infinity: see :func:`report_dict`)."""
    return json.dumps(report_dict(result, cutoff=cutoff, k=k), indent=2, ensure_ascii=False,
                      default=_num, allow_nan=False)


def render_html(result: AuditResult, *, cutoff: float | None = None,
                k: float | None = None) -> str:
    """A self-contained page: the text report (escaped) and the charts, plotly.js inlined."""
    d = report_dict(result, cutoff=cutoff, k=k)
    figs = []
    with _quiet():
        if not d["guards"].get("statistics_withheld"):
            figs = _html_figures(result, cutoff, k)
    return render_template("audit_html.j2", "html", d=d, text=_text_from_dict(d),
                           title=f"Screening score variance audit — req {d['req']['id']}",
                           charts=chart_markup(figs))


def chart_markup(figures: list[Any]) -> list[Markup]:
    """Plotly ``figures`` as HTML fragments for ``core/templates/page.html.j2``: plotly.js
    inlined once (in the first), so the page needs no network. Used by the audit report and
    the comparison report."""
    return [Markup(pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0),
                               config={"displaylogo": False, "responsive": True}))
            for i, fig in enumerate(figures)]


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
