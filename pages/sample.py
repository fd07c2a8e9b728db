"""Step 2 — frame a stratified sample from the req's pool: band candidates plus anchors."""

import numpy as np
import streamlit as st

from core import charts
from core.errors import AuditError
from core.estimate import DEFAULT_LATENCY_S, audit_estimate
from core.flip import effective_cutoff
from core.format import count, md_escape, num, ordinal, readable
from core.freeze import FreezeSheet
from core.ingest import FileFaults, commit_pool, faults_frame, validate_pool
from core.sample import DEFAULT_DESIGN, REDUCED_DESIGN, stratified_sample
from ui import run_forms, state

state.init_state()
store = state.get_store()
audit_id = state.active_audit(store)
state.require(audit_id is not None, "Start an audit on the Freeze page first.", "freeze",
              "Go to step 1 · Freeze")

st.title("Frame the sample")
st.caption("Pick the candidates to re-run: most of them near the cutoff (the only ones whose "
           "outcome can flip), plus high and low anchors well clear of it — without anchors the "
           "reliability ratio collapses by construction.")

audit = store.get_audit(audit_id)
settings = audit["settings"]


def _estimate(cands, runs: int, key: str) -> None:
    """The run's estimate — the same function, inputs and numbers as the Run page's."""
    sheet = state.sheet_of(store, audit_id)
    criteria = sheet.criteria if isinstance(sheet, FreezeSheet) else ()
    est = audit_estimate(settings, frozen_model=str(audit["freeze"].get("model") or ""),
                         criteria=criteria, candidates=cands, runs=int(runs),
                         completed=store.completed_pairs(audit_id))
    run_forms.render_estimate(est, key=key)

pool = store.get_pool(audit_id)
candidates = store.get_candidates(audit_id)
has_draws = store.n_draws(audit_id) > 0

# ----------------------------------------------------------------------------- the pool
st.subheader("The req's pool")
st.caption("One row per applicant: candidate_id, first_pass_score (CSV, Parquet or JSON Lines). "
           "It gives the effective cutoff and the cost of the band in reviews per req.")
if len(pool):
    st.text(f"{len(pool)} applicants stored; first-pass scores "
            f"{pool['first_pass_score'].min():g} – {pool['first_pass_score'].max():g}.")
upload = st.file_uploader("Upload the pool" if not len(pool) else "Replace the pool",
                          type=["csv", "parquet", "jsonl", "json"],
                          key=f"pool-upload-{st.session_state[state.UPLOAD_NONCE]}")
if upload is not None:
    try:
        imp = validate_pool(upload, name=upload.name)
    except FileFaults as exc:
        with st.container(key="pool-error"):
            st.error(md_escape(f"The pool was not stored, and nothing was written: "
                               f"{num(exc.total)} fault(s) in {exc.file}. Fix them in the file "
                               "and upload it again."))
            st.dataframe(faults_frame(exc), hide_index=True, width="stretch", key="pool-faults")
            if exc.hidden:
                st.caption(f"… and {num(exc.hidden)} more fault(s) not listed (the first "
                           f"{len(exc.faults)} are shown).")
    except AuditError as exc:
        with st.container(key="pool-error"):
            state.show_error(exc, "The pool was not stored, and nothing was written")
    else:
        scores = imp.pool["first_pass_score"]
        st.info(f"{md_escape(imp.file_name)}: {num(len(imp.pool))} applicants, first-pass "
                f"scores {num(scores.min(), 2)} – {num(scores.max(), 2)} (median "
                f"{num(scores.median(), 2)}). Nothing is stored until you confirm.")
        # the button names the audit it writes to (a bare URL opens the demo)
        if st.button(f"Store this pool in {md_escape(audit_id)}", type="primary",
                     key="store-pool"):
            commit_pool(store, audit_id, imp)
            st.session_state[state.UPLOAD_NONCE] += 1
            st.rerun()

if not len(pool):
    st.info("Upload the pool to draw a sample. Already have a vendor's exported draws? "
            "Upload them on the Run page instead.")
    st.page_link(state.PAGES["run"][0], label="Go to step 3 · Run", icon=state.NEXT)
    st.stop()

scores = pool["first_pass_score"].to_numpy(dtype="float64")

# ----------------------------------------------------------------------------- a saved sample
if len(candidates):
    counts = candidates["stratum"].fillna("unknown").value_counts()
    st.subheader("The saved sample")
    st.success(f"{count(len(candidates))} candidates: " + ", ".join(
        f"{int(n)} {s}" for s, n in counts.items()) + (" — locked: the audit has draws."
                                                        if has_draws else "."))
    st.dataframe(readable(candidates[["candidate_id", "stratum", "first_pass_score"]], nd=1),
                 hide_index=True, height=260, key="saved-sample")
    _estimate(candidates, int(settings.get("runs") or 15), "sample-estimate-saved")
    if settings.get("cutoff") is not None:
        zones_t = float(settings.get("cutoff"))
        if settings.get("top_k"):
            zones_t = effective_cutoff(scores, min(int(settings["top_k"]), len(scores)))
        st.plotly_chart(charts.pool_histogram(scores, zones_t), width="stretch",
                        key="saved-hist")
    redraw_key = f"redraw-{audit_id}"
    if has_draws:
        st.caption("To draw another sample, start a new audit from this sheet on the Freeze "
                   "page.")
    elif not st.session_state.get(redraw_key):
        if st.button("Draw another sample", help="Replaces the saved sample (no run has "
                     "used it yet)."):
            st.session_state[redraw_key] = True
            st.rerun()
    if has_draws or not st.session_state.get(redraw_key):
        st.page_link(state.PAGES["run"][0], label="Next: step 3 · Run", icon=state.NEXT)
        st.stop()

# ----------------------------------------------------------------------------- framing
st.subheader("Cutoff and expected spread")
k = f"smp-{audit_id}"
c1, c2, c3 = st.columns(3)
with c1:
    how = st.radio("The cutoff is", ["a score", "the top k of a ranked list"], key=f"{k}-how",
                   index=1 if settings.get("top_k") else 0)
    if how == "a score":
        cutoff = st.number_input("Cutoff", value=float(settings.get("cutoff")
                                                       or np.median(scores)),
                                 step=1.0, key=f"{k}-cutoff")
        top_k = None
    else:
        top_k = st.number_input("The recruiter works the top k", min_value=1,
                                max_value=len(scores),
                                # a top k saved for a larger pool is the whole pool
                                value=min(int(settings.get("top_k") or 40), len(scores)),
                                step=1, key=f"{k}-topk")
        cutoff = effective_cutoff(scores, int(top_k))
        st.caption(f"Effective cutoff {cutoff:g} (the {ordinal(int(top_k))} highest of "
                   f"{count(len(scores))})"
                   + (f"; the screener's settings say {settings['cutoff']:g}"
                      if settings.get("cutoff") is not None else "") + ".")
with c2:
    spread = st.number_input("Expected within-candidate spread σₑ (points)", min_value=0.1,
                             value=float(settings.get("spread") or 4.0), step=0.5,
                             key=f"{k}-spread",
                             help="your estimate, or a pilot's pooled SD")
    design_name = st.radio("Design", ["standard", "reduced"], key=f"{k}-design",
                           format_func=lambda d: {"standard": "standard: 24 band + 8 + 8, 15 runs",
                                                  "reduced": "reduced: 24 band + 6 + 6, 6 runs "
                                                             "(wider intervals)"}[d])
    design = DEFAULT_DESIGN if design_name == "standard" else REDUCED_DESIGN
with c3:
    runs = st.number_input("Runs per candidate", min_value=2, max_value=100,
                           value=int(design.runs), step=1, key=f"{k}-runs-{design_name}",
                           help="15 for an internal cutoff; 30 when the numbers go to counsel "
                                "or a regulator")
    seed = st.number_input("Seed", min_value=0, value=int(settings.get("seed") or 0), step=1,
                           key=f"{k}-seed")

zones = {"band": (cutoff - design.band_sigma * spread, cutoff + design.band_sigma * spread),
         "high anchors": (cutoff + design.anchor_sigma * spread, float(scores.max())),
         "low anchors": (float(scores.min()), cutoff - design.anchor_sigma * spread)}
zones = {name: z for name, z in zones.items() if z[1] > z[0]}
st.plotly_chart(charts.pool_histogram(scores, float(cutoff), None, zones), width="stretch",
                key="pool-zones")

try:
    frame = stratified_sample(pool, float(cutoff), float(spread), design, seed=int(seed))
except AuditError as exc:
    state.show_error(exc, "No sample")
    st.stop()
c = frame.counts
st.subheader("The sample")
st.text(f"{c['band']} band, {c['high']} high anchors, {c['low']} low anchors "
        f"({count(sum(c.values()))} candidates) × {int(runs)} runs = "
        f"{count(sum(c.values()) * int(runs))} calls")
for s in frame.shortfalls:
    st.warning(md_escape(s[:1].upper() + s[1:] + "."))

lat = st.number_input("Expected latency per call (seconds), for the estimate", min_value=0.0,
                      value=float(settings.get("latency_s") or DEFAULT_LATENCY_S), step=0.5,
                      key=f"{k}-lat",
                      help="Kept with the audit; the Run page's estimate uses it too until the "
                           "pre-flight measures the real latency.")
if settings.get("latency_s") is None and float(lat) != DEFAULT_LATENCY_S or \
        settings.get("latency_s") is not None and float(lat) != float(settings["latency_s"]):
    store.update_settings(audit_id, {"latency_s": float(lat)})
    settings = store.get_audit(audit_id)["settings"]
st.caption("Estimate of the run (the pre-flight's three calls are runs of one candidate, "
           "not extra calls):")
_estimate(frame.sample, int(runs), "sample-estimate")
st.dataframe(readable(frame.sample, nd=1), hide_index=True, height=260, key="sample-draft")

if st.button("Save this sample to the audit", type="primary"):
    try:
        # no application text yet (a simulated screener derives a profile from the id);
        # replaces a sample saved earlier (refused once the audit has draws)
        store.set_candidates(audit_id, frame.sample)
        st.session_state.pop(f"redraw-{audit_id}", None)
        store.update_settings(audit_id, {"cutoff": float(cutoff) if top_k is None
                                         else settings.get("cutoff", float(cutoff)),
                                         "top_k": None if top_k is None else int(top_k),
                                         "of_n": None if top_k is None else len(scores),
                                         "spread": float(spread), "runs": int(runs),
                                         "seed": int(seed), "design": design.name})
    except AuditError as exc:
        state.show_error(exc, "The sample was not saved")
    else:
        st.rerun()
