"""Step 3 — get the draws: run the screener N times per candidate, or upload exported draws.

A run lives in a background thread (core.runner.RunHandle) held by the process-wide registry, so
it survives page switches, widget clicks and reloads; this page only polls it. An upload is
validated and summarised first; nothing is stored before the confirm button.
"""

import re
from typing import Any

import pandas as pd
import streamlit as st

from core.errors import AuditError
from core.ingest import commit_draws, validate_draws
from core.runner import PriceTable, RunOptions, cache_verdict
from core.screeners.registry import COMMON_KEYS, KIND_KEYS, build_screener
from ui import state
from ui.format import md_escape, num, seconds

state.init_state()
store = state.get_store()
audit_id = state.active_audit(store)
state.require(audit_id is not None, "Start an audit on the Freeze page first.", "freeze",
              "Go to step 1 · Freeze")
registry = state.run_registry()

st.title("Get the draws")
st.caption("Each candidate is scored N separate times, each call cold with its own request id "
           "— never several runs in one prompt. Or bring the draws a vendor exported.")

audit = store.get_audit(audit_id)
settings = audit["settings"]
sheet = state.sheet_of(store, audit_id)
tab_run, tab_upload = st.tabs(["Run the screener", "Upload exported draws"])


def _secrets() -> dict[str, Any] | None:
    """Streamlit secrets when a secrets file exists (API keys are read there or from env)."""
    try:
        return {k: st.secrets[k] for k in st.secrets}
    except Exception:  # noqa: BLE001 - no secrets file is the normal case
        return None


def _guard_panel() -> None:
    """Distinct payloads, calls by status / error / model, retries (from the store)."""
    summary = store.call_summary(audit_id)
    if not len(summary):
        st.caption("No calls stored yet.")
        return
    verdict = cache_verdict(store, audit_id)
    (st.error if verdict.cache_test else st.caption)(md_escape("Cache guard: " + verdict.message
                                                               + "."))
    counts = verdict.table
    g1, g2, g3, g4 = st.columns(4)
    g1.metric("Calls stored", num(int(summary["calls"].sum())))
    bad = summary[summary["status"] != "ok"]
    g2.metric("Failed or unparsed calls", num(int(bad["calls"].sum()) if len(bad) else 0))
    g3.metric("Retries", num(int(summary["retries"].fillna(0).sum())))
    g4.metric("Distinct payloads per candidate (min)",
              num(int(counts["distinct_payloads"].min())) if len(counts) else "—")
    models = sorted(m for m in summary["model"].unique() if m)
    frozen = (sheet.model if sheet else "") or ""
    other = [m for m in models if frozen and m != frozen]
    if other:
        st.error(md_escape(f"The screener reported a model id other than the frozen "
                           f"'{frozen}': {', '.join(other)}. Those draws are a second "
                           "population and are excluded from the statistics."))
    st.caption(md_escape("Model ids seen: " + (", ".join(models) if models else "none reported")))
    view = summary.rename(columns={"http_status": "HTTP", "mean_latency_ms": "mean latency (ms)"})
    view["mean latency (ms)"] = view["mean latency (ms)"].round(0)
    view["HTTP"] = view["HTTP"].map(lambda v: "" if not v else str(int(v)))
    st.dataframe(view, hide_index=True, width="stretch", key="call-summary")


# ----------------------------------------------------------------------------- run
with tab_run:
    handle = registry.get(audit_id)
    active = handle is not None and handle.running
    candidates = store.get_candidates(audit_id)
    screener_cfg = dict(settings.get("screener") or {"kind": "simulated"})
    kind = str(screener_cfg.pop("kind", "simulated"))

    if sheet is None:
        st.info("The freeze sheet is not complete: finish it before any run.")
        st.page_link(state.PAGES["freeze"][0], label="Go to step 1 · Freeze", icon=state.NEXT)
    elif sheet.blockers():
        st.error("Blocked because " + sheet.blockers()[0] + ". No call is made until the "
                 "clearance is confirmed on the Freeze page.")
        st.page_link(state.PAGES["freeze"][0], label="Go to step 1 · Freeze", icon=state.NEXT)
    elif not len(candidates):
        st.info("This audit has no sample yet: frame one from the pool first (or upload "
                "exported draws in the other tab).")
        st.page_link(state.PAGES["sample"][0], label="Go to step 2 · Sample", icon=state.NEXT)
    else:
        allowed = COMMON_KEYS | KIND_KEYS.get(kind, set())
        options = {k: v for k, v in screener_cfg.items() if k in allowed}
        st.text(f"Screener: {kind} · model {options.get('model') or sheet.model or '—'}")
        k = f"run-{audit_id}"
        c1, c2, c3, c4 = st.columns(4)
        runs = c1.number_input("Runs per candidate", min_value=2, max_value=100, step=1,
                               value=int(settings.get("runs") or 15), key=f"{k}-runs",
                               disabled=active)
        conc = c2.number_input("Calls in flight", min_value=1, max_value=256, step=1,
                               value=int(settings.get("concurrency") or 8), key=f"{k}-conc",
                               disabled=active)
        seed = c3.number_input("Seed (call order)", min_value=0, step=1,
                               value=int(settings.get("seed") or 0), key=f"{k}-seed",
                               disabled=active)
        if kind == "simulated":
            latency = c4.number_input("Simulated latency per call (ms)", min_value=0, step=50,
                                      value=int(options.get("latency_ms", 200)),
                                      key=f"{k}-lat", disabled=active)
            options["latency_ms"] = int(latency)
        if kind != "simulated":
            st.caption("The API key is read from the environment variable named in the "
                       "audit's config, or from Streamlit secrets; it is never shown or stored.")
        done = len(store.completed_pairs(audit_id))
        planned = len(candidates) * int(runs)
        label = ("Resume the run" if 0 < done < planned else "Start the run")
        b1, b2 = st.columns([1, 3])
        if b1.button(label, type="primary", disabled=active or done >= planned,
                     key="start-run"):
            try:
                screener = build_screener(kind, options, criteria=sheet.criteria, sheet=sheet,
                                          seed=int(seed), secrets=_secrets())
                # stored (never a key), so the disabled inputs of a running audit show them
                store.update_settings(audit_id, {"runs": int(runs), "concurrency": int(conc),
                                                 "seed": int(seed),
                                                 "screener": {**options, "kind": kind}})
                registry.start(store, audit_id, screener,
                               RunOptions(runs=int(runs), concurrency=int(conc), seed=int(seed)),
                               prices=PriceTable.from_dict(settings.get("prices")))
            except AuditError as exc:
                state.show_error(exc, "The run did not start")
            else:
                st.rerun()
        if done >= planned and not active:
            b2.success(f"Every candidate has its {int(runs)} runs ({done} draws).")

        @st.fragment(run_every=1.0 if active else None)
        def progress() -> None:
            h = registry.get(audit_id)
            if h is None:
                d = len(store.completed_pairs(audit_id))
                st.progress(min(d / planned, 1.0) if planned else 0.0,
                            text=f"{d} of {planned} draws stored · not running")
                st.subheader("Guards")
                _guard_panel()
                return
            s = h.status()
            eta = "" if s.eta_s is None or not h.running else f" · about {seconds(s.eta_s)} left"
            st.progress(min(s.fraction, 1.0),
                        text=f"{s.done} of {s.total} draws · {s.state}{eta}")
            with st.container(key="run-state"):
                st.caption(f"run state: {s.state} · draws {s.done} of {s.total}")
            if s.message:
                (st.error if s.state in ("blocked", "failed") else st.info)(md_escape(s.message))
            for f in s.findings:
                st.warning(md_escape("Finding: " + f))
            if h.running:
                if st.button("Stop the run", key="stop-run"):
                    h.stop()
                    h.join(timeout=10)
                    st.rerun(scope="app")
            elif active:  # it just ended: redraw the page (sidebar, buttons)
                st.rerun(scope="app")
            st.subheader("Guards")
            _guard_panel()

        progress()
    if not (sheet is not None and not sheet.blockers() and len(candidates)):
        st.subheader("Guards")
        _guard_panel()

# ----------------------------------------------------------------------------- upload
with tab_upload:
    st.caption("A vendor's export of repeated scorings: long (candidate_id, run, criterion, "
               "score) or wide (candidate_id, run, [total], one column per criterion); CSV, "
               "Parquet or JSON Lines. You see a summary first; nothing is stored until you "
               "confirm.")
    target = st.radio("Import into", ["a new audit", "the active audit"], horizontal=True,
                      key="import-target")
    new_id = ""
    if target == "a new audit":
        new_id = st.text_input("New audit id", key="import-new-id",
                               placeholder="e.g. vendor-eng-2291").strip()
    clip = st.checkbox("Clip scores outside 0..max points instead of rejecting the file",
                       key="import-clip")
    upload = st.file_uploader("Draws file", type=["csv", "parquet", "jsonl", "json"],
                              key=f"draws-upload-{st.session_state[state.UPLOAD_NONCE]}")
    if upload is not None:
        crit = list(sheet.criteria) if (target == "the active audit" and sheet) else None
        sig = (upload.file_id, target, clip)
        pending = st.session_state[state.PENDING_DRAWS]
        imp = None
        if pending is not None and pending[0] == sig:
            imp = pending[1]
        else:
            try:
                imp = validate_draws(upload.getvalue(), name=upload.name, criteria=crit,
                                     clip=clip)
            except AuditError as exc:
                st.session_state[state.PENDING_DRAWS] = None
                with st.container(key="import-error"):
                    st.error(md_escape("The file was not imported, and nothing was stored: "
                                       f"{exc}"))
            else:
                st.session_state[state.PENDING_DRAWS] = (sig, imp)
        if imp is not None:
            s = imp.summary()
            runs_txt = (str(s["runs_min"]) if s["runs_min"] == s["runs_max"]
                        else f"{s['runs_min']}–{s['runs_max']}")
            with st.container(key="import-summary"):
                st.success(f"The file is valid: {s['rows']} rows, {s['candidates']} candidates "
                           f"× {runs_txt} runs = {s['evaluations']} evaluations ({s['layout']} "
                           "layout).")
                st.dataframe(pd.DataFrame({
                    "check": ["criteria", "screener's own total", "raw payloads (cache guard)",
                              "strata", "first-pass scores", "scores clipped"],
                    "found": [", ".join(s["criteria"]) or "none (total only)",
                              "yes" if s["has_total"] else "no (sum of criteria)",
                              "yes" if s["has_payloads"] else "no (cache guard not checked)",
                              "yes" if s["has_strata"] else "no (derived)",
                              "yes" if s["has_first_pass"] else "no",
                              str(s["clipped"])]}), hide_index=True, key="import-checks")
                for w in s["warnings"]:
                    st.warning(md_escape(w[:1].upper() + w[1:] + "."))
            dest = new_id if target == "a new audit" else audit_id
            if st.button(f"Confirm: store these draws in {md_escape(dest) or '…'}",
                         type="primary", key="confirm-import"):
                if not dest:
                    st.error("Give the new audit an id first.")
                elif target == "a new audit" and (store.audit_exists(dest)
                                                  or not re.match(r"^[\w.\-]+$", dest)):
                    st.error(md_escape(f"'{dest}' cannot be used: it exists already, or has "
                                       "characters other than letters, digits, '.', '-', '_'."))
                else:
                    try:
                        out = commit_draws(store, dest, imp)
                    except AuditError as exc:
                        state.show_error(exc, "Nothing was stored")
                    else:
                        st.session_state[state.PENDING_DRAWS] = None
                        st.session_state[state.UPLOAD_NONCE] += 1
                        if out["status"] == "already imported":
                            st.info("This exact file was imported into that audit before: "
                                    "nothing new was stored.")
                        else:
                            state.switch_audit(dest, "criteria")
