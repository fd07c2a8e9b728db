"""Plotly figures shared by the pages and the HTML report (no streamlit here).

Large audits: single draws are drawn with ``Scattergl``; a histogram is binned in numpy.
Candidate ids and criterion names go into figures as data (Plotly escapes them), never as HTML.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.band import Band

__all__ = ["criteria_chart", "draws_strip", "pool_histogram", "flip_curve_chart",
           "VERDICT_COLOURS"]

VERDICT_COLOURS = {"WORKING": "#2a9d8f", "NOISY": "#e76f51", "DEAD": "#8d99ae", "": "#264653"}
_LAYOUT = dict(template="plotly_white", margin=dict(l=40, r=20, t=50, b=40), height=360,
               font=dict(size=13))


def _safe(values: object) -> np.ndarray:
    """User text for Plotly: it renders tags such as <b> or <a href> in labels, so escape."""
    return np.array([html.escape(str(v)) for v in np.asarray(values, dtype=object)],
                    dtype=object)


def criteria_chart(table: pd.DataFrame) -> go.Figure:
    """Within- vs between-candidate SD per criterion, coloured by verdict."""
    t = table[table["criterion"] != "total"].assign(
        criterion=lambda d: _safe(d["criterion"]))
    fig = go.Figure()
    fig.add_bar(name="within-candidate SD (noise)", x=t["criterion"], y=t["within_sd"],
                marker_color=[VERDICT_COLOURS.get(v, "#264653") for v in t["verdict"]],
                text=t["verdict"], textposition="outside")
    fig.add_bar(name="between-candidate SD (signal)", x=t["criterion"], y=t["between_sd"],
                marker_color="rgba(38,70,83,0.35)")
    fig.update_layout(barmode="group", title="Noise vs signal per criterion", yaxis_title="points",
                      legend=dict(orientation="h", y=-0.2), **_LAYOUT)
    return fig


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
    fig = go.Figure()
    rng = np.random.default_rng(0)
    jitter = rng.uniform(-0.25, 0.25, size=len(x))
    for mask, name, colour in ((~flip_draw, "no flip", "rgba(38,70,83,0.45)"),
                               (flip_draw, "flips at this cutoff", "#e76f51")):
        fig.add_trace(go.Scattergl(x=x[mask] + jitter[mask], y=y[mask], mode="markers",
                                   name=name, marker=dict(size=5, color=colour),
                                   customdata=labels[mask],
                                   hovertemplate="%{customdata}: %{y}<extra></extra>"))
    if band is not None:
        fig.add_hrect(y0=band.low, y1=band.high, fillcolor="rgba(233,196,106,0.25)",
                      line_width=0, annotation_text="manual-review band",
                      annotation_position="top left")
    fig.add_hline(y=cutoff, line=dict(color="#e63946", width=2),
                  annotation_text=f"cutoff {cutoff:g}", annotation_position="bottom right")
    fig.update_layout(title="Every single draw, candidates sorted by mean total",
                      xaxis_title="candidate (sorted by mean total)", yaxis_title="total",
                      legend=dict(orientation="h", y=-0.2), **_LAYOUT)
    fig.update_xaxes(showticklabels=False)
    return fig


def pool_histogram(pool: np.ndarray, cutoff: float, band: Band | None = None,
                   zones: dict[str, tuple[float, float]] | None = None,
                   bins: int = 40) -> go.Figure:
    """The pool's first-pass scores, with the cutoff, the band and (optionally) sample zones."""
    counts, edges = np.histogram(pool, bins=bins)
    centers = (edges[:-1] + edges[1:]) / 2
    fig = go.Figure(go.Bar(x=centers, y=counts, width=np.diff(edges),
                           marker_color="rgba(38,70,83,0.55)", name="applicants"))
    for name, (lo, hi) in (zones or {}).items():
        fig.add_vrect(x0=lo, x1=hi, fillcolor="rgba(42,157,143,0.15)", line_width=0,
                      annotation_text=name, annotation_position="top left")
    if band is not None:
        fig.add_vrect(x0=band.low, x1=band.high, fillcolor="rgba(233,196,106,0.35)",
                      line_width=0, annotation_text="manual review",
                      annotation_position="top right")
    fig.add_vline(x=cutoff, line=dict(color="#e63946", width=2))
    fig.update_layout(title="The req's pool (first-pass scores)", xaxis_title="first-pass score",
                      yaxis_title="applicants", showlegend=False, bargap=0.02, **_LAYOUT)
    return fig


def flip_curve_chart(curve: pd.DataFrame, cutoff: float) -> go.Figure:
    """Flip count and mean disagreement against the cutoff, current cutoff marked."""
    fig = go.Figure()
    fig.add_scatter(x=curve["cutoff"], y=curve["candidates_with_flip"], mode="lines",
                    name="candidates with any flip", line=dict(color="#e76f51"))
    fig.add_scatter(x=curve["cutoff"], y=curve["mean_disagreement"], mode="lines",
                    name="mean disagreement (two draws)", yaxis="y2",
                    line=dict(color="#264653", dash="dot"))
    fig.add_vline(x=cutoff, line=dict(color="#e63946", width=2))
    fig.update_layout(title="How the cutoff's position drives the coin flips",
                      xaxis_title="cutoff", yaxis=dict(title="candidates with a flip"),
                      yaxis2=dict(title="mean disagreement", overlaying="y", side="right",
                                  rangemode="tozero"),
                      legend=dict(orientation="h", y=-0.2), **_LAYOUT)
    return fig
