"""Compare — did the fix work? Two audits of the same req side by side, with intervals.

``?a=…&b=…`` picks the audits. The comparison (core/compare.py) is built once per pair of audit
versions; the shared cutoff slider lives in a fragment and is answered by its precomputed
engines, never by the database.
"""

import re

import numpy as np
import pandas as pd
import streamlit as st

from core import compare_report as cmp
from core.comparison import Comparison
from core.demo import DEMO_AUDIT_ID, DEMO_V2_AUDIT_ID
from core.errors import AuditError
from core.format import compare_line, md_cell, md_escape, num, pct
from ui import state

state.init_state()
store = state.get_store()

st.title("Did the fix work?")
st.caption("Audit A is the harness before a change, audit B after it. Within-candidate noise "
           "per criterion with F intervals, the decision noise at one shared cutoff with a "
           "bootstrap interval, and what each audit's manual-review band costs against the "
           "same pool.")

audits = store.list_audits()
ids = [str(x) for x in audits["audit_id"]]
if len(ids) < 2:
    st.info("Comparing needs two audits of the same req: run or import a second audit after "
            "changing the harness.")
    st.page_link(state.PAGES["freeze"][0], label="Start an audit on the Freeze page",
                 icon=state.NEXT)
    st.stop()


def _default(param: str, fallback: str) -> str:
    value = st.query_params.get(param)
    return value if value in ids else fallback


default_a = _default("a", DEMO_AUDIT_ID if DEMO_AUDIT_ID in ids else ids[-1])
default_b = _default("b", DEMO_V2_AUDIT_ID if DEMO_V2_AUDIT_ID in ids and
                     default_a != DEMO_V2_AUDIT_ID else next(i for i in ids if i != default_a))
c1, c2 = st.columns(2)
a_id = c1.selectbox("Audit A (before)", ids, index=ids.index(default_a), key="cmp_a")
b_id = c2.selectbox("Audit B (after)", ids, index=ids.index(default_b), key="cmp_b")
if st.query_params.get("a") != a_id or st.query_params.get("b") != b_id:
    st.query_params["a"] = a_id
    st.query_params["b"] = b_id

for side, audit_id in (("A", a_id), ("B", b_id)):
    n = state.candidates_with_draws(store, audit_id)
    if n == 0:
        st.info(f"Audit {side} ({md_escape(audit_id)}) has no draws yet: run or import it "
                "first.")
        st.stop()

with st.expander("Bootstrap settings"):
    b1, b2 = st.columns(2)
    reps = int(b1.number_input("Replications", min_value=100, max_value=20000, value=2000,
                               step=500, key="cmp_reps"))
    seed = int(b2.number_input("Seed", min_value=0, value=0, step=1, key="cmp_seed"))


@st.cache_resource(max_entries=4, show_spinner="Comparing the audits…")
def _comparison(path: str, a: str, va: str, b: str, vb: str, reps: int, seed: int
                ) -> Comparison:
    return Comparison(state.get_result(store, a), state.get_result(store, b), reps=reps,
                          seed=seed)


try:
    comparison = _comparison(store.path, a_id, store.data_version(a_id), b_id,
                             store.data_version(b_id), reps, seed)
except AuditError as exc:
    state.show_error(exc, "These audits cannot be compared")
    st.stop()

for w in comparison.warnings:
    st.warning(md_escape(w), icon=":material/warning:")

harness = pd.DataFrame(comparison.harness)


def harness_table() -> None:
    st.subheader("Harness sheets side by side")
    h1, h2 = st.columns(2)
    h1.caption(f"Harness hash A · {md_escape(a_id)}")
    h1.code(comparison.a.harness_hash or "not frozen", language=None, wrap_lines=True)
    h2.caption(f"Harness hash B · {md_escape(b_id)}")
    h2.code(comparison.b.harness_hash or "not frozen", language=None, wrap_lines=True)
    # st.table renders Markdown in its cells: user text goes in escaped
    shown = pd.DataFrame({"field": harness["field"], "A": harness["a"].map(md_cell),
                          "B": harness["b"].map(md_cell),
                          "differs": np.where(harness["differs"], "differs", "")})
    styled = shown.style.apply(
        lambda row: ["background-color: #fff3cd" if row["differs"] else ""] * len(row),
        axis=1).hide(axis="index")
    st.table(styled)
    differ = ", ".join(harness.loc[harness["differs"], "field"]) or "none"
    st.caption(f"Fields that differ: {md_escape(differ)}.")


if comparison.withheld:
    st.error(md_escape(f"Nothing is compared: {comparison.withheld}."))
    harness_table()
    st.stop()

lo, hi = comparison.score_range
integer = bool(all(np.all(np.isnan(e.totals) | (e.totals == np.round(e.totals)))
                   for e in (comparison.engine_a, comparison.engine_b)))
safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{a_id}-vs-{b_id}")[:80] or "comparison"
_MIME = {"text": "text/plain", "md": "text/markdown", "json": "application/json",
         "html": "text/html"}
_EXT = {"text": "txt", "md": "md", "json": "json", "html": "html"}


def _criteria_frame() -> pd.DataFrame:
    rows = comparison.criteria + ([comparison.total] if comparison.total else [])
    return pd.DataFrame({
        "criterion": [md_cell(r.label) for r in rows],   # st.table renders Markdown
        "within-SD A": [round(r.within_sd_a, 2) for r in rows],
        "within-SD B": [round(r.within_sd_b, 2) for r in rows],
        "F = s²A / s²B": [num(r.f_ratio, 2) if np.isfinite(r.f_ratio) else
                          ("B has no noise" if r.f_ratio == np.inf else "—") for r in rows],
        "95% interval": [f"{num(r.f_low, 2)} – {num(r.f_high, 2)}" if np.isfinite(r.f_low)
                         else "—" for r in rows],
        "change": [r.change for r in rows],
        "verdict A → B": ["" if r.kind == "total" else f"{r.verdict_a or '—'} → "
                          f"{r.verdict_b or '—'}" for r in rows],
    })


@st.fragment
def compare_panel() -> None:
    top = st.container()
    cutoff_key = f"cmp_cutoff::{a_id}::{b_id}"
    if cutoff_key not in st.session_state:
        st.session_state[cutoff_key] = float(min(max(comparison.default_cutoff, np.floor(lo)),
                                                 np.ceil(hi)))
    s1, s2 = st.columns([3, 1])
    cutoff = s1.slider("Cutoff (one for both audits; a single draw passes at or above it)",
                       min_value=float(np.floor(lo)), max_value=float(np.ceil(hi)),
                       step=1.0 if integer else 0.5, format="%g", key=cutoff_key)
    capacity = s2.number_input("Reviewer capacity (reviews per req, both)", min_value=0.0,
                               step=5.0, value=comparison.capacity, format="%g",
                               key=f"cmp_cap::{a_id}")
    view = comparison.view(float(cutoff), capacity=capacity)
    d = view.disagreement
    top.markdown(f"#### {md_escape(view.verdict)}")
    if d.low is not None:
        top.caption("The interval for the change in mean two-draw disagreement: "
                    + ("a paired" if d.paired else "an UNPAIRED (different candidates)")
                    + f" percentile bootstrap over {d.candidates} candidates, {d.reps:,} "
                    f"replications, seed {d.seed}.")
    else:
        top.caption(f"No interval for the change: {d.note}.")
    with st.container(key="compare-live"):
        st.caption(compare_line(view.cutoff, (view.view_a.flip.candidates_with_flip,
                                              view.view_b.flip.candidates_with_flip),
                                (view.view_a.flip.candidates, view.view_b.flip.candidates),
                                (d.a, d.b), ((view.view_a.band.low, view.view_a.band.high),
                                             (view.view_b.band.low, view.view_b.band.high))))
    cols = st.columns(2)
    for col, tag, audit_id, v, mean_d in ((cols[0], "A", a_id, view.view_a, d.a),
                                          (cols[1], "B", b_id, view.view_b, d.b)):
        with col.container(border=True, key=f"side-{tag.lower()}"):
            st.markdown(f"**{tag} · {md_escape(audit_id)}**")
            # stacked, not in columns: two metrics side by side inside each audit's half are
            # cut off ("16.…") on an 800-px screen
            st.metric("Two-draw disagreement", pct(mean_d, 1),
                      help="mean two-draw disagreement: the chance that two draws of the same "
                           "application land on opposite sides of the cutoff")
            st.metric("Manual reviews per req", "needs the pool" if v.needs_pool
                      else num(round(v.manual_reviews_per_req, 1)),
                      help="manual reviews per req: the pool's applications inside the band")
            f = v.flip
            worst = ("no flip" if not f.candidates_with_flip else
                     f"{md_escape(f.worst_candidate)}, {f.worst_passes}/{f.worst_runs} runs pass")
            st.markdown(f"Candidates with any flip: **{f.candidates_with_flip} of "
                        f"{f.candidates}**  \nManual-review band: **{v.band.low:.1f} – "
                        f"{v.band.high:.1f}** (width {v.band.high - v.band.low:.1f}; "
                        f"{md_escape(v.band.rule)}, k = {v.band.k:g})  \n"
                        f"Worst candidate: {worst}")
            if v.capacity is not None and not v.needs_pool:
                if v.over_capacity:
                    st.warning(f"Needs ~{v.manual_reviews_per_req:.0f} reviews per req; the team "
                               f"can do {v.capacity:g}.")
                else:
                    st.success(f"Fits the reviewer capacity of {v.capacity:g} per req.")
    if comparison.pool_source:
        st.caption(f"Reviews per req for both use the pool of audit {comparison.pool_source} "
                   f"({len(comparison.pool)} applicants) and "
                   f"{num(comparison.applications_per_req, 0)} applications per req.")
    else:
        st.caption("Reviews per req need the req's pool of first-pass scores (Sample page).")

    figs = cmp.figures(comparison, view)
    if comparison.paired:
        left, right = st.columns(2)
        left.plotly_chart(figs[0], width="stretch", key="cmp-scatter")
        right.plotly_chart(figs[1], width="stretch", key="cmp-curves")
    else:
        st.info("The audits scored different candidates, so there is no per-candidate chart; "
                "the change above is unpaired.")
        st.plotly_chart(figs[-1], width="stretch", key="cmp-curves")

    if comparison.paired:
        with st.expander("Per candidate: pass rate and two-draw disagreement in A and B"):
            per = pd.DataFrame({
                "candidate": comparison.engine_a.candidate_ids.astype(str),
                "pass rate A": (100 * view.pass_rate_a).round(1),
                "pass rate B": (100 * view.pass_rate_b).round(1),
                "disagreement A": (100 * view.disagreement_a).round(1),
                "disagreement B": (100 * view.disagreement_b).round(1),
                "change (points)": (100 * (view.disagreement_b - view.disagreement_a)).round(1),
            }).sort_values("change (points)", key=np.abs, ascending=False, kind="stable")
            st.dataframe(per, hide_index=True, width="stretch", height=300,
                         column_config={c: st.column_config.NumberColumn(format="%.1f%%")
                                        for c in ("pass rate A", "pass rate B",
                                                  "disagreement A", "disagreement B")})

    st.subheader("Within-candidate noise per criterion")
    st.table(_criteria_frame().style.format(precision=2).hide(axis="index"))
    st.caption("F = s²_A / s²_B with degrees of freedom Σ(n_i − 1) in each audit. *improved* "
               "when the whole 95% interval is above 1, *worse* when below 1, otherwise no "
               "detectable change; each row is its own interval, so with several criteria one "
               "may cross 1 by chance.")
    for u in comparison.match.unmatched():
        st.markdown(f"- not compared one-to-one: **{md_escape(u['criterion'])}** ({u['in']} "
                    f"only) — {md_escape(u['status'])}")

    harness_table()

    st.divider()
    st.subheader("Report")
    st.caption("The report uses the cutoff and capacity above.")
    dl = st.columns(4)
    for col, fmt, label in zip(dl, cmp.FORMATS, ("Text", "Markdown", "JSON",
                                                 "HTML (with charts)")):
        col.download_button(
            f"Download {label}", data=lambda fmt=fmt: cmp.render(
                comparison, fmt, cutoff=float(cutoff), capacity=capacity),
            file_name=f"{safe}.{_EXT[fmt]}", mime=_MIME[fmt], on_click="ignore",
            key=f"cmp-dl-{fmt}", width="stretch")


compare_panel()
