"""Step 5 — the flip rate at the cutoff, on single draws (never means).

The cutoff slider (or top k of n) is answered by the audit's precomputed LiveAudit inside a
fragment: a slider move reruns only the panel, never reads the database or re-analyses.
"""

import numpy as np
import streamlit as st

from core import charts
from core.flip import effective_cutoff
from core.format import (
    count,
    flip_display,
    live_line,
    md_escape,
    ordinal,
    pct,
    pts,
    reviews_txt,
)
from ui import state

state.init_state()
store, audit_id, result = state.analysed_audit()
live = state.live_settings(audit_id, result)

st.title("Flip rate at the cutoff")
st.caption("How often does the same application land on the other side of the cutoff when it "
           "is scored again? Computed on single draws, because production takes one draw and "
           "decides — never on the average of the runs.")
provisional = state.provisional_banner(store, audit_id)
tag = " (provisional)" if provisional else ""
if result.withheld:
    st.error(f"Statistics are withheld: {result.withheld}.")
    st.page_link(state.PAGES["run"][0], label="See the guard panel on the Run page",
                 icon=state.NEXT)
    st.stop()

strict = st.toggle("A draw must score strictly above the cutoff to pass (>)",
                   value=result.settings.comparison == ">", key=f"strict-{audit_id}",
                   help="Off: a draw passes at or above the cutoff (≥), the default.")
if strict != (result.settings.comparison == ">"):
    store.update_settings(audit_id, {"comparison": ">" if strict else ">="})
    st.rerun()
engine = result.live
lo, hi = engine.score_range
integer_scores = bool(np.all(np.isnan(engine.totals) | (engine.totals == np.round(engine.totals))))
step = 1.0 if integer_scores else 0.5
MAX_TABLE_ROWS = 500


@st.fragment
def flip_panel() -> None:
    mode = st.radio("Set the cutoff", ["score", "top-k"], horizontal=True,
                    format_func=lambda m: {"score": "by score (slider)",
                                           "top-k": "by top k of a ranked list"}[m],
                    **state.bind(audit_id, "mode"))
    if mode == "top-k":
        if engine.pool is None:
            st.warning("The effective cutoff needs the req's pool of first-pass scores: upload "
                       "it on the Sample page. Until then, set the cutoff by score.")
            cutoff = float(live["cutoff"])
        else:
            if live["top_k"] is None:
                live["top_k"] = min(40, len(engine.pool))
            # a pool replaced by a smaller one in this session: the top k is the whole pool
            live["top_k"] = int(min(max(int(live["top_k"]), 1), len(engine.pool)))
            if live["of_n"] is None:
                live["of_n"] = len(engine.pool)
            c1, c2 = st.columns(2)
            top_k = c1.number_input("The recruiter works the top k", min_value=1,
                                    max_value=len(engine.pool), step=1,
                                    **state.bind(audit_id, "top_k"))
            c2.number_input("of a ranked list of n", min_value=1, step=1,
                            **state.bind(audit_id, "of_n"))
            cutoff = effective_cutoff(engine.pool, int(top_k))
            live["cutoff"] = cutoff
    else:
        st.session_state[state.LIVE][audit_id]["cutoff"] = float(
            min(max(live["cutoff"], np.floor(lo)), np.ceil(hi)))
        cutoff = st.slider("Cutoff (a single draw passes at or above it)"
                           if engine.comparison == ">=" else "Cutoff (passes above it)",
                           min_value=float(np.floor(lo)), max_value=float(np.ceil(hi)),
                           step=step, format="%g", **state.bind(audit_id, "cutoff"))
    conf = result.configured_cutoff
    if conf is not None and float(conf) != float(cutoff):
        if mode == "top-k" and engine.pool is not None:
            k_th = int(live["top_k"])
            st.caption(f"Cutoff audited: {cutoff:g} — the score of the {ordinal(k_th)} best "
                       f"applicant in the pool, where working the top {k_th} really cuts; the "
                       f"screener's settings say {conf:g}.")
        else:
            st.caption(f"Cutoff audited: {cutoff:g} (set with the slider); the screener's "
                       f"settings say {conf:g}.")

    view = engine.view(float(cutoff), float(live["k"]),
                       override=live["override"] if live["override_on"] else None,
                       capacity=live["capacity"], applications_per_req=live["apps"])
    fs = view.flip
    m1, m2, m3, m4 = st.columns(4)
    m1.metric(f"Candidates with any flip{tag}",
              f"{count(fs.candidates_with_flip)} of {count(fs.candidates)}")
    if fs.worst_candidate is not None and fs.candidates_with_flip:
        m2.metric("Worst candidate", f"{fs.worst_passes}/{fs.worst_runs} pass",
                  help=f"{md_escape(fs.worst_candidate)}: flip rate {pct(fs.worst_flip_rate)}")
        m2.caption(f"{md_escape(fs.worst_candidate)} · flip rate {pct(fs.worst_flip_rate)}")
    else:
        m2.metric("Worst candidate", "no flip")
    fi = fs.flip_interval
    m3.metric("Flip interval", "none" if fi is None else f"{pts(fi[0])} – {pts(fi[1])}",
              help="the range of mean totals of the candidates that flip: the honest width "
                   "of the machine's indecision")
    m4.metric("Manual reviews per req", reviews_txt(view.manual_reviews_per_req),
              help=("" if view.manual_reviews_per_req is not None else
                    "— needs the req's pool of first-pass scores (upload it on Sample). ")
                   + f"applications inside the band {pts(view.band.low)} – {pts(view.band.high)} "
                   f"(k = {view.band.k:g}); set k on the Band page")
    with st.container(key="live-numbers"):
        st.caption(live_line(float(cutoff), fs.candidates_with_flip, fs.candidates,
                             view.manual_reviews_per_req))

    table = engine.flip_table(float(cutoff))
    fig = charts.draws_strip(result.draws.candidate_ids, result.draws.cand, result.draws.total,
                             engine.means, table["flips"].to_numpy(), float(cutoff), view.band,
                             max_candidates=200)
    st.plotly_chart(fig, width="stretch", key="strip")
    if result.draws.K > 200:
        st.caption(f"The strip shows the 200 candidates nearest the cutoff of {result.draws.K}.")

    st.subheader("Flip table")
    shown = flip_display(table, limit=MAX_TABLE_ROWS)
    st.dataframe(shown, hide_index=True, width="stretch", height=320,
                 column_config={
                     "flip rate": st.column_config.NumberColumn(format="%.1f%%"),
                     "disagreement": st.column_config.NumberColumn(
                         format="%.1f%%", help="chance two draws of the same application "
                                               "land on opposite sides"),
                     "flips": st.column_config.CheckboxColumn()})
    if len(table) > MAX_TABLE_ROWS:
        st.caption(f"Showing the {MAX_TABLE_ROWS} candidates with the largest flip rates "
                   f"of {len(table)}; the report carries the headline numbers.")


flip_panel()
# the curve covers every cutoff, so it stays outside the fragment: a slider move neither
# rebuilds nor re-sends nor re-draws it (a Plotly redraw is most of a move's browser time)
st.plotly_chart(state.flip_curve_figure(store, audit_id), width="stretch", key="curve")
st.caption("Flips at every cutoff: move the cutoff slider above along this line to see the "
           "numbers at that point.")
