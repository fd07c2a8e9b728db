"""Plotly figures shared by the pages and the HTML report (no streamlit here).

Large audits: single draws are drawn with ``Scattergl``; a histogram is binned in numpy.
Candidate ids and criterion names go into figures escaped (Plotly renders tags in labels).

Speed: the flip and band panels rebuild their figures on every slider move. Building them with
``go.Figure`` property validation (``add_hline``, ``template="plotly_white"`` …) costs 15–30 ms a
figure, so figures here are written as plain dicts with a pre-resolved template and wrapped
without re-validation; ``tests/test_charts.py`` checks every figure against the full validator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from core.band import Band
from core.format import html_escape

__all__ = ["criteria_chart", "draws_strip", "pool_histogram", "flip_curve_chart",
           "pass_rate_scatter", "disagreement_curves", "VERDICT_COLOURS"]

VERDICT_COLOURS = {"WORKING": "#2a9d8f", "NOISY": "#e76f51", "DEAD": "#8d99ae", "": "#264653"}
_TEMPLATE: dict[str, Any] = pio.templates["plotly_white"].to_plotly_json()
_LAYOUT = dict(margin=dict(l=40, r=20, t=50, b=40), height=360, font=dict(size=13))
_CUTOFF = dict(color="#e63946", width=2)


def _figure(data: list[dict[str, Any]], **layout: Any) -> go.Figure:
    """A figure from plain dicts, not re-validated (see the module docstring)."""
    return go.Figure(data=data, layout={"template": _TEMPLATE, **_LAYOUT, **layout},
                     _validate=False)


def _safe(values: object) -> np.ndarray:
    """User text for Plotly: it renders tags such as <b> or <a href> in labels, so escape."""
    return np.array([html_escape(v) for v in np.asarray(values, dtype=object)],
                    dtype=object)


def _hline(y: float, colour: dict[str, Any] | None = None) -> dict[str, Any]:
    return dict(type="line", xref="paper", x0=0, x1=1, y0=y, y1=y, line=colour or _CUTOFF)


def _vline(x: float) -> dict[str, Any]:
    return dict(type="line", yref="paper", y0=0, y1=1, x0=x, x1=x, line=_CUTOFF)


def _note(text: str, **where: Any) -> dict[str, Any]:
    return dict(text=text, showarrow=False, font=dict(size=12, color="#555"), **where)


def criteria_chart(table: pd.DataFrame) -> go.Figure:
    """Within- vs between-candidate SD per criterion, coloured by verdict."""
    t = table[table["criterion"] != "total"]
    names = _safe(t["criterion"])
    return _figure(
        [dict(type="bar", name="within-candidate SD (noise)", x=names, y=t["within_sd"],
              marker=dict(color=[VERDICT_COLOURS.get(v, "#264653") for v in t["verdict"]]),
              text=list(t["verdict"]), textposition="outside"),
         dict(type="bar", name="between-candidate SD (signal)", x=names, y=t["between_sd"],
              marker=dict(color="rgba(38,70,83,0.35)"))],
        barmode="group", title=dict(text="Noise vs signal per criterion"),
        yaxis=dict(title=dict(text="points")), legend=dict(orientation="h", y=-0.2))


#: Above this many single draws the strip plot switches from SVG to WebGL.
SVG_MAX_POINTS = 4000


def draws_strip(candidate_ids: np.ndarray, cand: np.ndarray, total: np.ndarray,
                means: np.ndarray, flips: np.ndarray, cutoff: float,
                band: Band | None = None, max_candidates: int = 400) -> go.Figure:
    """Every single draw per candidate (sorted by mean), the cutoff line and the band."""
    order = np.argsort(means, kind="stable")
    if len(order) > max_candidates:  # keep the picture readable: the band first
        near = np.argsort(np.abs(means - cutoff), kind="stable")[:max_candidates]
        order = near[np.argsort(means[near], kind="stable")]
    rank = np.full(len(means), -1)
    rank[order] = np.arange(len(order))
    shown = rank[cand] >= 0
    x = rank[cand][shown]
    y = total[shown]
    flip_draw = flips[cand][shown]
    labels = _safe(candidate_ids)[cand][shown]
    jitter = np.random.default_rng(0).uniform(-0.25, 0.25, size=len(x))
    # SVG up to a few thousand points: a WebGL context costs more than it saves there (and in a
    # browser without a GPU it is software-rendered); WebGL beyond
    trace = "scatter" if len(x) <= SVG_MAX_POINTS else "scattergl"
    data = []
    for mask, name, colour in ((~flip_draw, "no flip", "rgba(38,70,83,0.45)"),
                               (flip_draw, "flips at this cutoff", "#e76f51")):
        data.append(dict(type=trace, x=x[mask] + jitter[mask], y=y[mask], mode="markers",
                         name=name, marker=dict(size=5, color=colour), customdata=labels[mask],
                         hovertemplate="%{customdata}: %{y}<extra></extra>"))
    shapes, notes = [], []
    if band is not None:
        shapes.append(dict(type="rect", xref="paper", x0=0, x1=1, y0=band.low, y1=band.high,
                           fillcolor="rgba(233,196,106,0.25)", line=dict(width=0),
                           layer="below"))
        notes.append(_note("manual-review band", xref="paper", x=0, y=band.high,
                           xanchor="left", yanchor="bottom"))
    shapes.append(_hline(cutoff))
    notes.append(_note(f"cutoff {cutoff:g}", xref="paper", x=1, y=cutoff, xanchor="right",
                       yanchor="top"))
    return _figure(data, shapes=shapes, annotations=notes,
                   title=dict(text="Every single draw, candidates sorted by mean total"),
                   xaxis=dict(title=dict(text="candidate (sorted by mean total)"),
                              showticklabels=False),
                   yaxis=dict(title=dict(text="total")), legend=dict(orientation="h", y=-0.2))


def pool_histogram(pool: np.ndarray, cutoff: float, band: Band | None = None,
                   zones: dict[str, tuple[float, float]] | None = None,
                   bins: int = 40) -> go.Figure:
    """The pool's first-pass scores, with the cutoff, the band and (optionally) sample zones."""
    counts, edges = np.histogram(pool, bins=bins)
    centers = (edges[:-1] + edges[1:]) / 2
    shapes, notes = [], []
    for name, (lo, hi) in (zones or {}).items():
        shapes.append(dict(type="rect", yref="paper", y0=0, y1=1, x0=lo, x1=hi,
                           fillcolor="rgba(42,157,143,0.15)", line=dict(width=0),
                           layer="below"))
        notes.append(_note(html_escape(name), yref="paper", y=1, x=lo, xanchor="left",
                           yanchor="top"))
    if band is not None:
        shapes.append(dict(type="rect", yref="paper", y0=0, y1=1, x0=band.low, x1=band.high,
                           fillcolor="rgba(233,196,106,0.35)", line=dict(width=0),
                           layer="below"))
        notes.append(_note("manual review", yref="paper", y=1, x=band.high, xanchor="right",
                           yanchor="top"))
    shapes.append(_vline(cutoff))
    return _figure(
        [dict(type="bar", x=centers, y=counts, width=np.diff(edges), name="applicants",
              marker=dict(color="rgba(38,70,83,0.55)"))],
        shapes=shapes, annotations=notes, showlegend=False, bargap=0.02,
        title=dict(text="The req's pool (first-pass scores)"),
        xaxis=dict(title=dict(text="first-pass score")),
        yaxis=dict(title=dict(text="applicants")))


def flip_curve_chart(curve: pd.DataFrame, cutoff: float | None, comparison: str = ">=",
                     label: str = "") -> go.Figure:
    """Flip count and mean disagreement against the cutoff, ``cutoff`` marked (``label`` next to
    the mark; no mark when None).

    Both are step functions of the cutoff, drawn as steps (``curve`` holds at most
    :data:`core.live.CURVE_POINTS` points): with ``>=`` the value on ``(t_j, t_{j+1}]`` is the
    one at ``t_{j+1}``.
    """
    shape = "vh" if comparison == ">=" else "hv"
    return _figure(
        [dict(type="scatter", x=curve["cutoff"], y=curve["candidates_with_flip"],
              mode="lines", name="candidates with any flip",
              line=dict(color="#e76f51", shape=shape)),
         dict(type="scatter", x=curve["cutoff"], y=curve["mean_disagreement"], mode="lines",
              name="mean disagreement (two draws)", yaxis="y2",
              line=dict(color="#264653", dash="dot", shape=shape))],
        shapes=[] if cutoff is None else [_vline(cutoff)],
        annotations=[_note(html_escape(label), yref="paper", y=1, x=cutoff, xanchor="left",
                           yanchor="top")] if cutoff is not None and label else [],
        title=dict(text="How the cutoff's position drives the coin flips"),
        xaxis=dict(title=dict(text="cutoff")),
        # both axes start at 0 with the same headroom, so their zeros line up and the dotted
        # line never dips below the axis; the right axis reads in whole percent
        yaxis=dict(title=dict(text="candidates with a flip"),
                   range=[0, 1.08 * max(1.0, float(curve["candidates_with_flip"].max()))]),
        yaxis2=dict(title=dict(text="mean disagreement"), overlaying="y", side="right",
                    range=[0, 1.08 * max(0.01, float(curve["mean_disagreement"].max()))],
                    tickformat=".0%", showgrid=False),
        legend=dict(orientation="h", y=-0.2))


def pass_rate_scatter(candidate_ids: np.ndarray, rate_a: np.ndarray, rate_b: np.ndarray,
                      cutoff: float, max_ids: int = 6) -> go.Figure:
    """Each candidate's share of passing draws in audit A (x) against audit B (y).

    Candidates with the same pair of pass rates are drawn as one marker sized by their count
    (pass rates are fractions of the runs, so many coincide at 0 and 1); the hover names up to
    ``max_ids`` of them, escaped. Points off the corners flip in that audit; points moving
    towards a corner flip less in B. ``Scattergl`` beyond 1,000 distinct points.
    """
    ids = _safe(candidate_ids)
    a = np.round(np.asarray(rate_a, dtype="float64"), 9)
    b = np.round(np.asarray(rate_b, dtype="float64"), 9)
    keys, inv, counts = np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True,
                                  return_counts=True)
    inv = np.asarray(inv).reshape(-1)
    labels = []
    for g in range(len(keys)):
        members = ids[inv == g]
        more = f" … and {len(members) - max_ids} more" if len(members) > max_ids else ""
        labels.append(", ".join(members[:max_ids]) + more)
    flips = ((keys[:, 0] > 0) & (keys[:, 0] < 1)) | ((keys[:, 1] > 0) & (keys[:, 1] < 1))
    kind = "scattergl" if len(keys) > 1000 else "scatter"
    data = [dict(type=kind, x=keys[:, 0], y=keys[:, 1], mode="markers",
                 name="candidates (size = how many)",
                 marker=dict(size=8 + 4 * np.sqrt(counts), sizemode="diameter",
                             color=np.where(flips, "#e76f51", "rgba(38,70,83,0.55)"),
                             line=dict(width=1, color="white")),
                 customdata=np.stack([np.array(labels, dtype=object), counts], axis=1),
                 hovertemplate="A %{x:.0%} · B %{y:.0%} pass<br>%{customdata[1]} "
                               "candidate(s): %{customdata[0]}<extra></extra>"),
            dict(type="scatter", x=[0, 1], y=[0, 1], mode="lines", name="no change",
                 line=dict(color="#8d99ae", dash="dot"), hoverinfo="skip")]
    return _figure(data, title=dict(text=f"Pass rate at {cutoff:g}, A vs B"),
                   xaxis=dict(title=dict(text="pass rate in A (before)"), tickformat=".0%",
                              range=[-0.05, 1.05]),
                   yaxis=dict(title=dict(text="pass rate in B (after)"), tickformat=".0%",
                              range=[-0.05, 1.05]),
                   legend=dict(orientation="h", y=-0.25))


def disagreement_curves(curve_a: pd.DataFrame, curve_b: pd.DataFrame, cutoff: float
                        ) -> go.Figure:
    """Mean two-draw disagreement against the cutoff in A and in B, the cutoff marked."""
    return _figure(
        [dict(type="scatter", x=curve_a["cutoff"], y=curve_a["mean_disagreement"],
              mode="lines", name="A (before)", line=dict(color="#e76f51")),
         dict(type="scatter", x=curve_b["cutoff"], y=curve_b["mean_disagreement"],
              mode="lines", name="B (after)", line=dict(color="#2a9d8f"))],
        shapes=[_vline(cutoff)],
        title=dict(text="Disagreement vs cutoff"),
        xaxis=dict(title=dict(text="cutoff")),
        yaxis=dict(title=dict(text="mean two-draw disagreement"), tickformat=".0%",
                   rangemode="tozero"),
        legend=dict(orientation="h", y=-0.25))
