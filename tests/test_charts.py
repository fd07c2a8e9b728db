"""The shared figures: valid under Plotly's full validator, with the cutoff, band and zones a
user looks for, and user text escaped."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from core import charts


@pytest.fixture(scope="module")
def demo(demo_result):
    return demo_result


def _validated(fig: go.Figure) -> go.Figure:
    """Round-trip through the validating constructor: raises on any invalid property."""
    return go.Figure(fig.to_dict())


def test_every_figure_is_valid_plotly(demo):
    e = demo.live
    band = e.band(78.0, 2.0)
    table = e.flip_table(78.0)
    figs = [charts.criteria_chart(demo.criteria),
            charts.draws_strip(demo.draws.candidate_ids, demo.draws.cand, demo.draws.total,
                               e.means, table["flips"].to_numpy(), 78.0, band),
            charts.pool_histogram(e.pool, 78.0, band, {"band": (72.0, 84.0)}),
            charts.flip_curve_chart(e.flip_curve(np.arange(60, 96, 1.0)), 78.0)]
    for fig in figs:
        _validated(fig)
        assert fig.layout.template.layout.plot_bgcolor == "white"  # plotly_white


def test_strip_marks_the_cutoff_the_band_and_the_flipping_draws(demo):
    e = demo.live
    band = e.band(78.0, 2.0)
    table = e.flip_table(78.0)
    fig = charts.draws_strip(demo.draws.candidate_ids, demo.draws.cand, demo.draws.total,
                             e.means, table["flips"].to_numpy(), 78.0, band)
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert [s.y0 for s in lines] == [78.0]
    assert (rects[0].y0, rects[0].y1) == (band.low, band.high)
    flipping = next(t for t in fig.data if t.name == "flips at this cutoff")
    n_flip_draws = int(table.loc[table["flips"], "runs"].sum())
    assert len(flipping.y) == n_flip_draws
    assert sum(len(t.y) for t in fig.data) == demo.draws.N


def test_histogram_counts_the_whole_pool_and_marks_the_cutoff(demo):
    pool = demo.live.pool
    fig = charts.pool_histogram(pool, 78.0, demo.live.band(78.0, 2.0))
    assert int(np.sum(fig.data[0].y)) == len(pool) == 410
    assert any(s.type == "line" and s.x0 == 78.0 for s in fig.layout.shapes)


def test_zone_names_are_escaped():
    fig = charts.pool_histogram(np.array([1.0, 2.0, 3.0]), 2.0, None,
                                {"<b>zone</b>": (1.0, 2.0)})
    assert fig.layout.annotations[0].text == "&lt;b&gt;zone&lt;/b&gt;"


def test_strip_plot_is_svg_for_a_demo_sized_audit_and_webgl_for_a_large_one():
    """A WebGL context costs a software-rendering browser more than a few thousand SVG points:
    600 draws are SVG, 6,000 are WebGL."""
    import numpy as np

    from core.charts import SVG_MAX_POINTS, draws_strip
    for k, n in ((40, 15), (200, 30)):
        cand = np.repeat(np.arange(k), n)
        total = np.random.default_rng(1).normal(70, 10, k * n)
        means = np.array([total[cand == i].mean() for i in range(k)])
        fig = draws_strip(np.array([f"c{i}" for i in range(k)]), cand, total, means,
                          np.zeros(k, bool), 70.0, None, max_candidates=200)
        kinds = {tr.type for tr in fig.data}
        assert kinds == ({"scatter"} if k * n <= SVG_MAX_POINTS else {"scattergl"}), (k, n)


def test_flip_curve_axes_share_their_zero_and_the_right_axis_reads_in_percent(demo):
    """Issue 9: the right axis had ticks like 0.0098 and its zero sat above the left one, so
    the dotted line dipped below zero. Both axes start at 0 (zeros on one line), the right one
    reads in whole percent, and no point of either line lies outside its axis."""
    curve = demo.live.flip_curve(np.arange(60, 96, 1.0))
    fig = charts.flip_curve_chart(curve, 78.0)
    left, right = fig.layout.yaxis, fig.layout.yaxis2
    assert left.range[0] == 0 and right.range[0] == 0
    assert right.overlaying == "y" and right.tickformat == ".0%"
    flips, disagreement = fig.data
    assert disagreement.yaxis == "y2" and disagreement.line.shape in ("vh", "hv")
    assert 0 <= min(disagreement.y) and max(disagreement.y) <= right.range[1]
    assert 0 <= min(flips.y) and max(flips.y) <= left.range[1]
