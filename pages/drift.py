"""Drift and grader severity — a thin page over :mod:`core.drift` (no statistics here).

Upload a ratings panel (batch, rater, score [, item, category]) or load the demo panel; read
grader severities, raw vs adjusted batch means, the smoothed path, q with its test, the
re-audit date, the trend, deployment contrasts, an optional outcome check and the cost
condition.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from core.drift.analysis import DriftAnalysis, analyse_drift
from core.drift.demo import demo_outcomes, demo_panel
from core.drift.horizon import horizon
from core.drift.outcomes import break_even_share, outcome_trend, read_outcome_series
from core.drift.panel import panel_from_audits, read_panel
from core.drift.result import drift_result_json, reaudit_overdue
from core.drift.severity import default_reference
from core.errors import AuditError
from core.format import decimals, md_escape, p_equals, pct, readable
from ui.faults import show_faults
from ui.state import active_audit, get_store, init_state

# ---------------------------------------------------------------- session-state keys (local)
K_PANEL_BYTES = "drift_panel_bytes"
K_PANEL_NAME = "drift_panel_name"
K_PANEL_SHA = "drift_panel_sha"
K_UPLOAD_SEEN = "drift_upload_seen"
K_OUTCOME_BYTES = "drift_outcome_bytes"
K_OUTCOME_SEEN = "drift_outcome_seen"
K_OUTCOME_NAME = "drift_outcome_name"
K_DEPLOYMENTS = "drift_deployments"
K_FREE_STEPS = "drift_free_steps"
K_REFERENCE = "drift_reference"
K_COVARIANCE = "drift_covariance"
K_D = "drift_D"
K_D_FOR = "drift_D_for"
K_SPLITS = "drift_splits"
K_COST = "drift_cost_per_month"
K_VALUE = "drift_value_per_escalation"
K_AVOIDED = "drift_avoided_per_month"
K_STORED_ERROR = "drift_stored_error"

DEFAULTS = {K_UPLOAD_SEEN: None, K_OUTCOME_SEEN: None,
            K_PANEL_BYTES: None, K_PANEL_NAME: None, K_PANEL_SHA: None, K_OUTCOME_BYTES: None,
            K_OUTCOME_NAME: None, K_DEPLOYMENTS: "", K_FREE_STEPS: "", K_COVARIANCE: "full",
            K_SPLITS: "", K_COST: 7806.0, K_VALUE: 100.0, K_AVOIDED: 428.0, K_D_FOR: None}

DEMO_PANEL = Path(__file__).resolve().parents[1] / "data" / "demo_panel.csv"
DEMO_DEPLOYMENTS = "2026-04-12, 2026-07-16, 2026-07-29"
DEMO_SPLITS = "2026-06-08, 2026-07-15"
BOOT_REPS, BOOT_SEED = 999, 0

init_state()  # (a first request to /drift is re-routed through app.py and its sidebar)
for _k, _v in DEFAULTS.items():
    st.session_state.setdefault(_k, _v)

# ---------------------------------------------------------------- callbacks
def _load_demo() -> None:
    data = DEMO_PANEL.read_bytes() if DEMO_PANEL.exists() else \
        demo_panel().to_csv(index=False).encode("utf-8")
    st.session_state[K_PANEL_BYTES] = data
    st.session_state[K_PANEL_NAME] = "demo_panel.csv"
    st.session_state[K_PANEL_SHA] = hashlib.sha256(data).hexdigest()
    st.session_state[K_DEPLOYMENTS] = DEMO_DEPLOYMENTS
    st.session_state.pop(K_REFERENCE, None)


def _load_stored_audits() -> None:
    """The panel from this database's audits: batch = audit date, rater = model snapshot,
    item = candidate, score = total."""
    try:
        panel = panel_from_audits(get_store())
    except AuditError as exc:
        st.session_state[K_STORED_ERROR] = str(exc)
        return
    st.session_state.pop(K_STORED_ERROR, None)
    data = panel.assign(batch=panel["batch"].astype(str)).to_csv(index=False).encode("utf-8")
    st.session_state[K_PANEL_BYTES] = data
    st.session_state[K_PANEL_NAME] = "stored audits"
    st.session_state[K_PANEL_SHA] = hashlib.sha256(data).hexdigest()
    st.session_state.pop(K_REFERENCE, None)


def _load_demo_outcomes() -> None:
    st.session_state[K_OUTCOME_BYTES] = demo_outcomes().to_csv(index=False).encode("utf-8")
    st.session_state[K_OUTCOME_NAME] = "demo_outcomes.csv"
    st.session_state[K_SPLITS] = DEMO_SPLITS


# ---------------------------------------------------------------- cached core calls
@st.cache_data(show_spinner=False, max_entries=8)
def _panel(sha: str, name: str, _data: bytes) -> pd.DataFrame:
    return read_panel(_data, name=name)


@st.cache_data(show_spinner="Fitting severities, drift and trend…", max_entries=16)
def _analysis(sha: str, name: str, deployments: str, free_steps: str, reference: str | None,
              covariance: str, _data: bytes) -> DriftAnalysis:
    panel = _panel(sha, name, _data)
    return analyse_drift(panel, deployments=deployments, free_steps=free_steps,
                            reference=reference, covariance=covariance, reps=BOOT_REPS,
                            seed=BOOT_SEED, panel_name=name)


# ---------------------------------------------------------------- charts (display only)
def _deployment_lines(fig: go.Figure, deployments: list[pd.Timestamp]) -> None:
    for d in deployments:
        fig.add_shape(type="line", x0=d, x1=d, y0=0, y1=1, yref="paper",
                      line={"color": "#e63946", "dash": "dash", "width": 1.5})
        fig.add_annotation(x=d, y=1, yref="paper", text="deployment", showarrow=False,
                           yanchor="bottom", font={"size": 11, "color": "#e63946"})


def _means_chart(batches: pd.DataFrame, deployments: list[pd.Timestamp],
                 reference: str) -> go.Figure:
    fig = go.Figure()
    fig.add_scatter(x=batches["batch"], y=batches["raw_mean"], mode="lines+markers",
                    name="raw batch mean", line={"color": "#8d99ae"})
    fig.add_scatter(x=batches["batch"], y=batches["adjusted"], mode="lines+markers",
                    name=f"adjusted (as if scored by {reference})",
                    error_y={"type": "data", "array": 1.96 * batches["se"], "visible": True},
                    line={"color": "#264653"})
    _deployment_lines(fig, deployments)
    fig.update_layout(title="Raw vs adjusted batch means", yaxis_title="score",
                      template="plotly_white", height=380, legend={"orientation": "h", "y": -0.2})
    return fig


def _smoothed_chart(batches: pd.DataFrame, deployments: list[pd.Timestamp]) -> go.Figure:
    lo = batches["smoothed"] - 1.96 * batches["smoothed_se"]
    hi = batches["smoothed"] + 1.96 * batches["smoothed_se"]
    fig = go.Figure()
    fig.add_scatter(x=batches["batch"], y=hi, mode="lines", line={"width": 0},
                    showlegend=False, hoverinfo="skip")
    fig.add_scatter(x=batches["batch"], y=lo, mode="lines", line={"width": 0}, fill="tonexty",
                    fillcolor="rgba(42,157,143,0.2)", name="95% band")
    fig.add_scatter(x=batches["batch"], y=batches["smoothed"], mode="lines",
                    name="smoothed state", line={"color": "#2a9d8f", "width": 3})
    fig.add_scatter(x=batches["batch"], y=batches["adjusted"], mode="markers",
                    name="stage 1 batch effect", marker={"color": "#264653", "size": 7})
    _deployment_lines(fig, deployments)
    fig.update_layout(title="Smoothed path (local-level model)", yaxis_title="score",
                      template="plotly_white", height=380, legend={"orientation": "h", "y": -0.2})
    return fig


# ---------------------------------------------------------------- page
st.title("Drift and grader severity")
st.caption("Repeated scores mix three things: the system's state, who graded it, and noise. "
           "This page separates the grader from the system, estimates how fast the system "
           "moves beyond what the change log explains, and dates when the audit goes stale.")

up_col, demo_col = st.columns([3, 1])
with up_col:
    upload = st.file_uploader("Ratings panel (batch, rater, score [, item, category])",
                              type=["csv", "parquet", "jsonl", "json"], key="drift_upload")
with demo_col:
    st.write("")
    st.button("Load the demo panel", key="drift_demo", on_click=_load_demo,
              help="A seeded panel shaped like the paper's: 14 batches, graders A, B, C.")
    st.button("Build from the stored audits", key="drift_stored", on_click=_load_stored_audits,
              help="Every audit in this database with draws: batch = the audit's date, rater = "
                   "the model snapshot that scored, item = candidate, score = total.")
if st.session_state.get(K_STORED_ERROR):
    st.error(md_escape(st.session_state[K_STORED_ERROR]))

if upload is not None:
    data = upload.getvalue()
    sha = hashlib.sha256(data).hexdigest()
    if sha != st.session_state[K_UPLOAD_SEEN]:  # a new upload (the demo button still wins)
        st.session_state[K_UPLOAD_SEEN] = sha
        st.session_state[K_PANEL_BYTES] = data
        st.session_state[K_PANEL_NAME] = upload.name
        st.session_state[K_PANEL_SHA] = sha
        st.session_state.pop(K_REFERENCE, None)

if st.session_state[K_PANEL_BYTES] is None:
    st.info("Upload a ratings panel or load the demo panel to start.")
    st.stop()

name, sha, data = (st.session_state[K_PANEL_NAME], st.session_state[K_PANEL_SHA],
                   st.session_state[K_PANEL_BYTES])
try:
    panel = _panel(sha, name, data)
except AuditError as exc:
    show_faults(exc, action="analysed", key="panel")
    st.stop()

st.text(f"Panel: {name} — {len(panel):,} ratings, {panel['batch'].nunique()} batches, "
        f"{panel['rater'].nunique()} raters")

raters = sorted(panel["rater"].unique().tolist())
if st.session_state.get(K_REFERENCE) not in raters:
    st.session_state[K_REFERENCE] = default_reference(panel)
s1, s2, s3, s4 = st.columns([2, 2, 1, 1])
s1.text_input("Deployment dates (ISO, comma-separated)", key=K_DEPLOYMENTS,
              help="The state may jump freely at each date (the change log's deployments).")
s2.text_input("Extra free-step dates (variant)", key=K_FREE_STEPS,
              help="Dates where the state may also jump, e.g. an unattributed step.")
s3.selectbox("Reference rater", raters, key=K_REFERENCE,
             help="Default: the rater present in most batches.")
s4.radio("Sampling covariance", ["full", "diagonal"], key=K_COVARIANCE,
         help="Carry stage 1's full HC1 covariance (off-diagonals from shared raters) "
              "into stage 2, or only its diagonal.")

try:
    analysis = _analysis(sha, name, st.session_state[K_DEPLOYMENTS],
                         st.session_state[K_FREE_STEPS], st.session_state[K_REFERENCE],
                         st.session_state[K_COVARIANCE], data)
except AuditError as exc:
    st.error(md_escape(exc))
    st.stop()

sev, st2 = analysis.severity, analysis.stage2
batches = analysis.batches
for note in analysis.notes:
    st.caption(note)

# ---- stage 1
st.header("Graders")
m1, m2, m3 = st.columns(3)
m1.metric("Reference rater", sev.reference)
m2.metric("Ratings", f"{sev.n:,}")
m3.metric("Batches", f"{len(sev.batches)}")
if sev.raters.empty:
    st.info("One rater only: there is no severity table; batch effects are that rater's means.")
else:
    st.subheader("Grader severity (relative to the reference; score units)")
    st.dataframe(readable(sev.raters), hide_index=True, width="stretch")
    het = pd.DataFrame([{"rater": h.rater, "pooled gap": h.pooled, "se": h.se,
                         "Cochran's Q": h.q, "df": h.df, "p": h.p, "shared batches": h.k}
                        for h in analysis.heterogeneity])
    st.caption("Is each grader's gap the same in every batch shared with the reference? "
               "(inverse-variance pooled difference, Cochran's Q)")
    st.dataframe(readable(het, counts=("df", "shared batches")), hide_index=True, width="stretch")
if not analysis.categories.empty:
    st.subheader("Severity by category")
    st.dataframe(readable(analysis.categories), hide_index=True, width="stretch")

st.plotly_chart(_means_chart(batches, analysis.deployments, sev.reference),
                width="stretch")
st.caption("composition = raw − adjusted: the part of a raw batch mean that is the grader mix.")
st.dataframe(readable(batches), hide_index=True, width="stretch")

# ---- stage 2
st.header("Drift")
if not st2.identified:
    st.warning("q cannot be estimated: no two batches share a segment between resets.")
else:
    st.plotly_chart(_smoothed_chart(batches, analysis.deployments), width="stretch")
    q1, q2, q3, q4 = st.columns(4)
    q1.metric("q (per week)", decimals(st2.q, 5))
    q2.metric("q 95% interval", f"{decimals(st2.q_ci95[0], 5)} – {decimals(st2.q_ci95[1], 5)}")
    q3.metric("Innovation SD / week", decimals(st2.innovation_sd),
              help=f"95% {decimals(st2.innovation_sd_ci95[0])} – "
                   f"{decimals(st2.innovation_sd_ci95[1])}")
    q4.metric("LR test of q = 0", p_equals(st2.lr_pvalue),
              help=f"LR = {decimals(st2.lr, 2)}; boundary p-value ½·P(χ²₁ > LR)")
    st.caption("q: variance per week of movement the resets (deployments, free steps) do not "
               "explain; profile-likelihood interval.")
    st.dataframe(readable(analysis.variants, nd=4), hide_index=True, width="stretch")


@st.fragment
def _horizon_panel() -> None:
    d_default = float(analysis.D_default)
    hi = max(1.0, round(3 * d_default, 2))
    if st.session_state.get(K_D_FOR) != (sha, d_default) or K_D not in st.session_state:
        st.session_state[K_D] = min(round(d_default, 3), hi)
        st.session_state[K_D_FOR] = (sha, d_default)
    st.slider("D — a change that matters (score units)", 0.01, hi, key=K_D, step=0.01,
              help="Default: the largest deployment contrast.")
    try:
        hz = horizon(st2, float(st.session_state[K_D]), sev.batches["batch"].iloc[-1])
    except AuditError as exc:
        st.error(md_escape(exc))
        return
    h1, h2, h3, h4 = st.columns(4)
    h1.metric("Predictive SD at 4 weeks", decimals(hz.sd_at_weeks[4]))
    h2.metric("at 8 weeks", decimals(hz.sd_at_weeks[8]))
    h3.metric("at 12 weeks", decimals(hz.sd_at_weeks[12]))
    h4.metric("Weeks until SD reaches D", decimals(hz.weeks, 1),
              help=f"95% {decimals(hz.weeks_ci95[0], 1)} – {decimals(hz.weeks_ci95[1], 1)} weeks")
    if hz.date is not None:
        why = (f"last batch {hz.last_batch.isoformat()}; {decimals(hz.weeks_ci95[0], 1)} to "
               f"{decimals(hz.weeks_ci95[1], 1)} weeks")
        overdue = reaudit_overdue(hz.date)
        with st.container(key="reaudit"):
            if overdue:
                st.warning(f"Re-audit {overdue.lower()} — the audit's numbers may no longer "
                           f"describe the screener ({why}): run a new audit.",
                           icon=":material/event_busy:")
            else:
                st.success(f"Re-audit by {hz.date.isoformat()} ({why}).")
    elif st2.identified:
        st.info("No unexplained drift detected (q = 0): the records give no re-audit date.")
    _carry_into_reports(float(st.session_state[K_D]))


def _carry_into_reports(D: float) -> None:
    """Save this analysis so audit reports of one screener carry its re-audit date."""
    store = get_store()
    audit_id = active_audit(store)
    default = ""
    if audit_id is not None:
        default = str(store.get_audit(audit_id)["freeze"].get("screener") or "")
    c1, c2 = st.columns([3, 1])
    screener = c1.text_input("Screener whose audit reports carry this date", value=default,
                             key="drift_save_screener",
                             help="The freeze sheet's screener name; every audit of it then "
                                  "says 're-audit by …' under WHAT INVALIDATES THIS AUDIT.")
    c2.write("")
    if c2.button("Save to audit reports", key="drift_save", disabled=not screener.strip()):
        try:
            store.save_drift_result(screener.strip(), drift_result_json(analysis, D))
        except AuditError as exc:
            st.error(md_escape(exc))
            return
        st.success(f"Saved: reports of {md_escape(screener.strip())} now carry this re-audit date.")


st.header("Horizon")
if st2.identified:
    _horizon_panel()
else:
    st.info("No horizon without an estimate of q.")

# ---- trend and contrasts
st.header("Trend")
tr = pd.DataFrame([{"specification": "rater fixed effects", "slope per month": analysis.trend.slope,
                    "se (clustered by batch)": analysis.trend.se,
                    "p (cluster)": analysis.trend.p_cluster,
                    "p (wild cluster bootstrap)": analysis.trend.p_wild},
                   {"specification": "raw (no rater effects)",
                    "slope per month": analysis.raw_trend.slope,
                    "se (clustered by batch)": analysis.raw_trend.se,
                    "p (cluster)": analysis.raw_trend.p_cluster,
                    "p (wild cluster bootstrap)": analysis.raw_trend.p_wild}])
st.dataframe(readable(tr, reps={"p (wild cluster bootstrap)": BOOT_REPS}), hide_index=True,
             width="stretch")
st.caption(f"Restricted wild cluster bootstrap, Webb weights, {BOOT_REPS} replications, seed "
           f"{BOOT_SEED}; {analysis.trend.n_clusters} batches.")
if not analysis.category_trends.empty:
    st.subheader("Per-category trends (Holm and Benjamini–Hochberg adjusted)")
    st.dataframe(readable(analysis.category_trends), hide_index=True, width="stretch")

st.header("Deployment contrasts")
if analysis.contrasts.empty:
    st.info("Enter deployment dates above to compare the two batches after each with the two "
            "before.")
else:
    st.dataframe(readable(analysis.contrasts), hide_index=True, width="stretch")
    st.caption("Read by magnitude, not significance: each contrast rests on four batches, so a "
               "p-value clustered by batch has almost no degrees of freedom.")

# ---- outcome check
st.header("Outcome check (optional)")
st.caption("Does the evaluation move with a consequential outcome? Direction and magnitude "
           "beside the evaluation's trend — never a causal effect.")
o1, o2 = st.columns([3, 1])
with o1:
    oup = st.file_uploader("Daily counts (date + two or more series)",
                           type=["csv", "parquet", "jsonl", "json"], key="drift_outcome_upload")
with o2:
    st.write("")
    st.button("Load demo outcome series", key="drift_outcome_demo", on_click=_load_demo_outcomes)
if oup is not None:
    o_sha = hashlib.sha256(oup.getvalue()).hexdigest()
    if o_sha != st.session_state[K_OUTCOME_SEEN]:
        st.session_state[K_OUTCOME_SEEN] = o_sha
        st.session_state[K_OUTCOME_BYTES] = oup.getvalue()
        st.session_state[K_OUTCOME_NAME] = oup.name
if st.session_state[K_OUTCOME_BYTES] is not None:
    try:
        daily = read_outcome_series(st.session_state[K_OUTCOME_BYTES],
                                       name=st.session_state[K_OUTCOME_NAME])
        series = [c for c in daily.columns if c != "date"]
        c1, c2, c3 = st.columns(3)
        num = c1.selectbox("Numerator series", series, index=0, key="drift_outcome_num")
        den = c2.selectbox("Comparison series", series, index=min(1, len(series) - 1),
                           key="drift_outcome_den")
        c3.text_input("Split dates (post − pre)", key=K_SPLITS)
        out = outcome_trend(daily, num, den, splits=st.session_state[K_SPLITS])
        e1, e2, e3 = st.columns(3)
        e1.metric("Log ratio, % per month", pct(out.pct_per_month, 1))
        e2.metric("t (Newey–West, 7 lags)", decimals(out.t, 2))
        e3.metric("Evaluation trend / month", decimals(analysis.trend.slope))
        if out.dropped_days:
            st.caption(f"{out.dropped_days} day(s) with a zero count left out of the log ratio.")
        if not out.splits.empty:
            st.dataframe(readable(out.splits), hide_index=True, width="stretch")
    except AuditError as exc:
        st.error(md_escape(exc))

# ---- cost condition
st.header("Cost condition")
k1, k2, k3 = st.columns(3)
k1.number_input("Evaluation cost per month ($)", min_value=0.0, key=K_COST, step=100.0)
k2.number_input("Value of one avoided escalation ($)", min_value=0.0, key=K_VALUE, step=10.0)
k3.number_input("Avoided escalations per month", min_value=0.0, key=K_AVOIDED, step=10.0)
try:
    share = break_even_share(st.session_state[K_COST], st.session_state[K_VALUE],
                                st.session_state[K_AVOIDED])
    st.metric("Break-even share", "never" if math.isinf(share) else pct(share, 1))
    st.caption("The share of the improvement that must be credited to the evaluation for it to "
               "pay for itself — a condition, not an estimate of the evaluation's effect.")
except AuditError as exc:
    st.error(md_escape(exc))
