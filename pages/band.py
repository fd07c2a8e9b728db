"""Step 6 — the manual-review band, what it costs in reviews per req, and the report.

The k slider, the half-width override, the capacity and the applications per req are answered
by the audit's precomputed LiveAudit inside a fragment; the report is rendered from the cached
analysis with the page's live settings (no database read).
"""

import re

import numpy as np
import pandas as pd
import streamlit as st

from core import charts, report
from core.format import MISSING, count, live_line, pct, pts, reviews_txt, sd
from ui import state

NEEDS_POOL = " — needs the req's pool of first-pass scores: upload it on the Sample page"

state.init_state()
store, audit_id, result = state.analysed_audit()
live = state.live_settings(audit_id, result)

st.title("Manual-review band")
st.caption("Every application whose score lands inside the band goes to a person; everything "
           "outside keeps its automated decision. The band is the cutoff ± k within-candidate "
           "SDs, widened to the empirical rule when the scores are not normal.")
if result.withheld:
    st.error(f"Statistics are withheld: {result.withheld}.")
    st.stop()
provisional = state.provisional_banner(store, audit_id)
tag = " (provisional)" if provisional else ""

engine = result.live
lo, hi = engine.score_range
safe_id = re.sub(r"[^A-Za-z0-9._-]+", "_", audit_id)[:60] or "audit"
_MIME = {"text": "text/plain", "md": "text/markdown", "json": "application/json",
         "html": "text/html"}
_EXT = {"text": "txt", "md": "md", "json": "json", "html": "html"}


@st.fragment
def band_panel() -> None:
    c1, c2 = st.columns(2)
    with c1:
        if live["mode"] == "top-k":
            cutoff = float(live["cutoff"])
            st.info(f"Cutoff {cutoff:g}: the effective cutoff of the top {live['top_k']} "
                    "(set on the Flip page).")
        else:
            integer = bool(np.all(np.isnan(engine.totals)
                                  | (engine.totals == np.round(engine.totals))))
            st.session_state[state.LIVE][audit_id]["cutoff"] = float(
                min(max(live["cutoff"], np.floor(lo)), np.ceil(hi)))
            cutoff = st.slider("Cutoff", min_value=float(np.floor(lo)),
                               max_value=float(np.ceil(hi)), step=1.0 if integer else 0.5,
                               format="%g", **state.bind(audit_id, "cutoff"))
        k = st.slider("Band width k (within-candidate SDs each side)", min_value=0.5,
                      max_value=4.0, step=0.1, format="%.1f", **state.bind(audit_id, "k"))
        override_on = st.toggle("Set the half-width by hand",
                                **state.bind(audit_id, "override_on"))
        if override_on:
            if live["override"] is None:
                live["override"] = round(float(k) * engine.within_sd, 1)
            st.number_input("Half-width (points each side of the cutoff)", min_value=0.0,
                            step=0.5, format="%.1f", **state.bind(audit_id, "override"))
    with c2:
        st.number_input("Applications per req", min_value=1.0, step=10.0, format="%.0f",
                        help="defaults to the pool size", **state.bind(audit_id, "apps"))
        st.number_input("Reviewer capacity (manual reviews the team can do per req)",
                        min_value=0.0, step=5.0, format="%.0f",
                        **state.bind(audit_id, "capacity"))

    override = live["override"] if live["override_on"] else None
    view = engine.view(float(cutoff), float(k), override=override,
                       capacity=live["capacity"], applications_per_req=live["apps"])
    b = view.band
    m1, m2, m3, m4 = st.columns(4)
    m1.metric(f"Manual-review band{tag}", f"{pts(b.low)} – {pts(b.high)}",
              help="score range sent to a person (points)")
    m2.metric("Manual reviews per req", reviews_txt(view.manual_reviews_per_req),
              help="applications per req whose score lands in the band"
                   + ("" if view.manual_reviews_per_req is not None else NEEDS_POOL))
    m3.metric("Share of the pool in the band", pct(view.share_of_pool, 1),
              help=None if view.share_of_pool is not None else NEEDS_POOL.strip(" —"))
    m4.metric("Re-run reversals per req",
              MISSING if view.exposure is None else reviews_txt(view.exposure.reversals_per_req),
              help="automated decisions per req that a fresh draw of the same application "
                   "would reverse (a normal approximation)"
                   + ("" if view.exposure is not None else NEEDS_POOL))
    with st.container(key="band-live-numbers"):
        st.caption(live_line(float(cutoff), view.flip.candidates_with_flip,
                             view.flip.candidates, view.manual_reviews_per_req))

    if override is not None:
        st.caption(f"Half-width set by hand: ±{override:g} points (the rules below are shown "
                   "for comparison).")
    rules = pd.DataFrame({
        "side": ["lower edge", "upper edge"],
        f"2-SD rule (k = {b.k:g})": [pts(b.two_sd[0]), pts(b.two_sd[1])],
        "empirical rule": [pts(b.empirical[0]), pts(b.empirical[1])],
        "band edge": [pts(b.low), pts(b.high)],
        "bound by": [b.bound_low, b.bound_high],
    })
    st.dataframe(rules, hide_index=True, width="stretch")
    st.caption(f"Within-candidate SD of the total: {sd(engine.within_sd, 2)} points. The empirical "
               "rule uses the pooled single-draw residuals at the same tail probability as "
               f"±{b.k:g} SD; the wider rule binds each side.")

    if view.needs_pool:
        st.warning("Reviews per req, capacity and re-run exposure need the req's pool of "
                   "first-pass scores: upload it on the Sample page.")
    else:
        st.plotly_chart(charts.pool_histogram(engine.pool, float(cutoff), b), width="stretch",
                        key="pool-hist")
        reviews = view.manual_reviews_per_req
        if view.capacity is not None:
            cb = view.capacity_band
            if view.over_capacity and view.capacity == 0:
                st.warning(
                    f"The band needs ~{reviews_txt(reviews)} manual reviews per req and the team "
                    "can do none: with a capacity of 0 there is no band at all — every decision "
                    f"stays automated, and about {reviews_txt(view.left_to_chance_per_req)} "
                    "decisions per req are left to chance (expected coin-flip decisions). "
                    "Enter the reviews your team can really do, or widen the automated reject "
                    "threshold instead.")
            elif view.capacity_note is not None:
                st.warning(f"{view.capacity_note.capitalize()}: about "
                           f"{reviews_txt(view.left_to_chance_per_req)} coin-flip decisions "
                           "per req.")
            elif view.over_capacity:
                st.warning(
                    f"The band needs ~{reviews_txt(reviews)} manual reviews per req but the team "
                    f"can do {reviews_txt(view.capacity)}. A capacity-sized band "
                    f"({pts(cb[0])} – {pts(cb[1])}) leaves "
                    f"~{reviews_txt(view.left_to_chance_per_req)} decisions per req to chance "
                    "(expected coin-flip decisions outside it). If nobody reviews the band, it "
                    "is theatre: widen the automated reject threshold instead.")
            else:
                st.success(f"The band needs ~{reviews_txt(reviews)} manual reviews per req; the "
                           f"team can do {reviews_txt(view.capacity)}.")
        ex = view.exposure
        st.markdown(
            f"**Re-run exposure** — of {count(round(ex.applications_per_req))} automated "
            f"decisions per req, a fresh draw would reverse about "
            f"**{reviews_txt(ex.reversals_per_req)}**; "
            f"**{reviews_txt(ex.reversals_outside_band_per_req)}** of them outside the band "
            "(those nobody reviews).")
        note = str(ex.note)
        st.caption(note[:1].upper() + note[1:] + "." if note.lower().startswith("normal")
                   else f"A normal approximation: {note}")

    saved = result.settings
    to_save = {"k": float(k), "capacity": live["capacity"],
               "applications_per_req": live["apps"], "halfwidth_override": override}
    unchanged = all(getattr(saved, name) == value for name, value in to_save.items())
    if st.button("Save k, half-width, applications and capacity to the audit",
                 disabled=unchanged, key="save-band",
                 help="Stored with the audit, so reports from the command line "
                      "(python -m core report --db … --audit …) use them too."):
        store.update_settings(audit_id, to_save)
        st.rerun()

    st.divider()
    st.subheader("Report")
    st.caption("The report uses the cutoff and band settings above.")
    # collapsed, and rendered only while open (the expander tracks its state): a widget answer
    # then neither renders the report (~40 ms) nor sends and draws its text
    preview = st.expander("Report preview (plain text)", expanded=False, key="report-preview",
                          on_change="rerun")
    if preview.open:
        with preview:
            st.code(report.render(state.with_live(result, live), "text", cutoff=float(cutoff),
                                  k=float(k)), language=None, wrap_lines=True)


def _report(fmt: str) -> str:
    """The report with the live settings as they are when the button is clicked (the values the
    fragment's widgets last stored), so the buttons can stay outside the fragment."""
    return report.render(state.with_live(result, live), fmt, cutoff=float(live["cutoff"]),
                         k=float(live["k"]))


band_panel()
# outside the fragment: a widget answer does not redraw them (their data is made on click)
cols = st.columns(4)
for col, fmt, label in zip(cols, ("text", "md", "json", "html"),
                           ("Text report", "Markdown report", "JSON data", "HTML with charts")):
    col.download_button(label, icon=":material/download:", data=lambda fmt=fmt: _report(fmt),
                        file_name=f"{safe_id}-report.{_EXT[fmt]}", mime=_MIME[fmt],
                        on_click="ignore", key=f"dl-{fmt}", width="stretch")
