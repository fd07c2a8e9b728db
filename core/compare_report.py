"""The comparison of two audits as a report: plain data (JSON), text, Markdown and a
self-contained HTML page with the charts (SPEC §7, issue 11).

:func:`report_dict` turns a :class:`core.comparison.Comparison` at one cutoff into plain data;
the text, Markdown and HTML layouts are Jinja2 templates (``core/templates/compare_*.j2``) fed
by that dict, every piece of user text escaped for its target by :mod:`core.format`.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Any

import numpy as np

from core import charts
from core.audit import AuditResult
from core.compare import LEVEL, VarianceRatio
from core.comparison import DEFAULT, Comparison, ComparisonView
from core.errors import InputError
from core.live import LiveView
from core.report import FORMATS, chart_markup
from core.templating import render_template

__all__ = ["FORMATS", "NOT_ESTABLISHED", "report_dict", "figures", "render_text",
           "render_markdown", "render_json", "render_html", "render"]

NOT_ESTABLISHED = [
    "whether either harness measures job performance (validity — not tested)",
    "whether selection rates differ across protected categories (a different statistic; an "
    "independent auditor is required)",
]


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
def render_text(d: dict[str, Any]) -> str:
    """The comparison for a terminal (``core/templates/compare_text.j2``)."""
    return render_template("compare_text.j2", "text", d=d)


def render_markdown(d: dict[str, Any]) -> str:
    """Markdown: headings, the harness and per-criterion tables, escaped cells."""
    return render_template("compare_md.j2", "md", d=d)


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
    figs = [] if d["withheld"] else figures(c, c.view(d["cutoff"], d["k"], d["capacity"]))
    return render_template("compare_html.j2", "html", d=d, text=render_text(d),
                           title=f"Audit comparison — {d['a']['audit_id']} → "
                                 f"{d['b']['audit_id']}",
                           charts=chart_markup(figs))


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
