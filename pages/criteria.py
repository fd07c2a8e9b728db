"""Step 4 — decompose the noise per rubric criterion before touching the total."""

import streamlit as st

from core import charts
from core.criteria import sd_interval
from core.format import (
    criteria_column_help,
    criteria_display,
    md_escape,
    num,
    pct,
    score_precision,
    sd,
    sd_table,
    share,
)
from core.invalid import describe as invalid_lines
from ui import state

state.init_state()
store, audit_id, result = state.analysed_audit()

st.title("Noise per criterion")
st.caption("For each rubric criterion: how much it moves between runs of the same application "
           "(within-SD, noise) against how much it separates candidates (between-SD, signal).")
provisional = state.provisional_banner(store, audit_id)
tag = " (provisional)" if provisional else ""

if result.withheld:
    st.error(f"Statistics are withheld: {result.withheld}.")
    st.page_link(state.PAGES["run"][0], label="See the guard panel on the Run page",
                 icon=state.NEXT)
    st.stop()
for note in result.notes:
    st.warning(md_escape(note[:1].upper() + note[1:] + "."))

comp = result.composition()
runs_txt = (str(comp["runs_min"]) if comp["runs_min"] == comp["runs_max"]
            else f"{comp['runs_min']}–{comp['runs_max']}")
st.caption(f"{comp['candidates']} candidates ({comp['band']} band, {comp['high_anchors']} high "
           f"anchors, {comp['low_anchors']} low anchors; strata: {result.strata_source}) × "
           f"{runs_txt} runs = {comp['evaluations']} evaluations.")
if getattr(result, "invalid", None) is not None:   # invalid answers, measured (SPEC §3.3)
    with st.container(key="criteria-invalid"):
        inv_lines = invalid_lines(result.invalid.to_dict())
        if result.invalid.conditioned:
            st.warning(md_escape(inv_lines[-1]))
            inv_lines = inv_lines[:-1]
        st.caption(md_escape(". ".join(x[:1].upper() + x[1:] for x in inv_lines) + "."))

if result.criteria is None:
    st.info("The screener returned only a total, so there is nothing to decompose: this step "
            "is skipped and the report says so. The flip and band steps still work.")
else:
    table = result.criteria
    s = result.settings
    precision = score_precision(table["max_points"])
    # the table takes the whole width (at 800 px a side-by-side chart would hide its last
    # columns); the chart follows it
    left, right = st.container(), st.container()
    with left:
        shown = criteria_display(table)
        if provisional:
            shown["verdict"] = shown["verdict"].map(lambda v: f"{v}{tag}" if v else v)
        st.dataframe(shown, hide_index=True, width="stretch", key="criteria-table",
                     column_config={col: st.column_config.TextColumn(help=text)
                                    for col, text in criteria_column_help().items()})
        st.caption(f"Verdicts, in this order: DEAD when both SDs are at most "
                   f"{pct(s.dead_tol_frac)} of the criterion's max points; NOISY when the "
                   "within-SD is at least the between-SD; otherwise WORKING.")
        with st.popover("Thresholds"):
            # (a stored tolerance above the usual 50% — `report --dead-tol`, a received
            # database — widens the input instead of failing the page or being rewritten)
            tol = st.number_input("DEAD tolerance (% of max points)", min_value=0.0,
                                  max_value=max(50.0, 100 * s.dead_tol_frac),
                                  value=100 * s.dead_tol_frac, step=1.0,
                                  key=f"dead-tol-{audit_id}",
                                  help="A criterion is DEAD when both its SDs are at most this "
                                       "share of its max points (of its largest score when the "
                                       "max is unknown).")
            if abs(tol / 100 - s.dead_tol_frac) > 1e-12:
                store.update_settings(audit_id, {"dead_tol_frac": tol / 100})
                st.rerun()
        rest = 1.0 - float(table.loc[table["criterion"] != "total",
                                     "share_of_within_variance"].sum())
        if abs(rest) > 0.005:
            st.caption(f"{pct(rest)} of the total's noise is in no criterion (bonus, deductions "
                       "or parsing).")
        negative = table[(table["criterion"] != "total")
                         & (table["share_of_within_variance"] < -0.0005)]
        for row in negative.itertuples():
            st.caption(f"{md_escape(row.criterion)}: {share(row.share_of_within_variance)} — a "
                       "negative share means this criterion tends to move against the rest of "
                       "the total between runs, so it cancels part of the noise.")
    with right:
        st.plotly_chart(charts.criteria_chart(table), width="stretch", key="criteria-chart")

    dead = table[(table["verdict"] == "DEAD") & (table["criterion"] != "total")]
    for row in dead.itertuples():
        mx = f"/{num(row.max_points)}" if row.max_points == row.max_points else ""
        st.warning(f"DEAD{tag} — {md_escape(row.criterion)} returns {num(row.modal_score)}{mx} for "
                   f"{row.modal_candidates}/{row.candidates} candidates: perfectly stable and "
                   "measures nothing. A stable score is not a good score.")

    st.subheader(f"Remediate first{tag}")
    if len(result.remediation) == 0:
        st.success("No criterion is noisy or dead.")
    for i, row in enumerate(result.remediation.itertuples(), start=1):
        if row.verdict == "NOISY":
            st.text(f"{i}. {row.criterion} — within-SD {sd(row.within_sd, precision)} "
                    f"carries {share(row.share_of_within_variance)} of the total's noise. "
                    f"{row.action[:1].upper()}{row.action[1:]}.")
        else:
            st.text(f"{i}. {row.criterion} — {row.action}.")

st.subheader("Reliability of a single draw")
c1, c2 = st.columns(2)
if result.icc is not None:
    lo, hi = result.icc.ci95
    c1.metric("ICC(1) of the total", f"{result.icc.icc1:.2f}",
              help="between-candidate share of the variance of one draw (one-way random "
                   "effects)")
    c1.caption(f"95% interval {lo:.2f} – {hi:.2f}")
else:
    c1.metric("ICC(1) of the total", "withheld")
    c1.caption(str(result.reliability_withheld))
wlo, whi = result.within_sd_ci95
total = result.total_row
c2.metric("Within-candidate SD of the total", f"{float(total['within_sd']):.2f} points")
c2.caption(f"95% interval {num(wlo, 2)} – {num(whi, 2)} (pooled over all candidates)")
n = comp["runs_min"]
if n >= 2:
    f_lo, f_hi = sd_interval(1.0, n - 1)
    st.caption(f"One candidate's SD from {n} runs is known only to within {f_lo:.2f}× – "
               f"{f_hi:.2f}× of its estimate (95%). 15 runs are enough for an internal cutoff; "
               "use 30 when the numbers go to counsel or a regulator.")
with st.expander("Per-candidate SD of the total, with its 95% interval"):
    st.dataframe(sd_table(result.sd_intervals), hide_index=True, width="stretch")
