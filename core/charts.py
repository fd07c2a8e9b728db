"""Plotly figures shared by the pages and the HTML report (no streamlit here).

Large audits: single draws are drawn with ``Scattergl``; a histogram is binned in numpy.
Candidate ids and criterion names go into figures escaped (Plotly renders tags in labels).

Speed: the flip and band panels rebuild their figures on every slider move. Building them with
``go.Figure`` property validation (``add_hline``, ``template="plotly_white"`` …) costs 15–30 ms a
figure, so figures here are written as plain dicts with a pre-resolved template and wrapped
without re-validation; ``tests/test_charts.py`` checks every figure against the full validator.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from core.band import Band

__all__ = ["criteria_chart", "draws_strip", "pool_histogram", "flip_curve_chart",
           "VERDICT_COLOURS"]

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
    return np.array([html.escape(str(v)) for v in np.asarray(values, dtype=object)],
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
    data = []
    for mask, name, colour in ((~flip_draw, "no flip", "rgba(38,70,83,0.45)"),
                               (flip_draw, "flips at this cutoff", "#e76f51")):
        data.append(dict(type="scattergl", x=x[mask] + jitter[mask], y=y[mask], mode="markers",
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
        notes.append(_note(html.escape(name), yref="paper", y=1, x=lo, xanchor="left",
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


def flip_curve_chart(curve: pd.DataFrame, cutoff: float, comparison: str = ">=") -> go.Figure:
    """Flip count and mean disagreement against the cutoff, current cutoff marked.

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
        shapes=[_vline(cutoff)],
        title=dict(text="How the cutoff's position drives the coin flips"),
        xaxis=dict(title=dict(text="cutoff")),
        yaxis=dict(title=dict(text="candidates with a flip")),
        yaxis2=dict(title=dict(text="mean disagreement"), overlaying="y", side="right",
                    rangemode="tozero"),
        legend=dict(orientation="h", y=-0.2))
