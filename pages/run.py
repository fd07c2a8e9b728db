"""Step 3 — get the draws: run the screener N times per candidate, or upload exported draws.

The run console, top to bottom: (1) the screener — a form until the audit's first draw, then a
read-only summary, because the harness is frozen; (2) the estimate — calls, tokens, cost and
wall time of what is left, refined by the 3-run pre-flight's measured latency, over the price
table kept with the audit; (3) the run — a background thread (core.run.handle.RunHandle) held by
the process-wide registry, so it survives page switches, widget clicks and reloads; this page
only polls it. An upload is validated and summarised first; nothing is stored before the
confirm button.
"""

import re

import pandas as pd
import streamlit as st

from core.errors import AuditError
from core.estimate import audit_estimate
from core.format import md_escape, money, num, seconds
from core.guards import cache_verdict_of, model_populations_of
from core.ingest import (
    commit_draws,
    ranges_frame,
    target_criteria,
    validate_draws,
)
from core.invalid import describe as invalid_lines
from core.invalid import invalid_answers
from core.run.options import CONCURRENCY_RANGE, RUNS_RANGE, PriceTable
from ui import run_forms as forms
from ui import screener_form, state
from ui.faults import show_faults

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


def _guard_panel(summary: pd.DataFrame | None = None) -> None:
    """Distinct payloads, calls by status / error / model, retries, invalid answers (from the
    store; ``summary`` is the call summary the caller already read, so that every counter on
    the page comes from one read)."""
    summary = store.call_summary(audit_id) if summary is None else summary
    if not len(summary):
        st.caption("No calls stored yet.")
        return
    verdict = cache_verdict_of(store, audit_id)
    (st.error if verdict.cache_test else st.caption)(md_escape("Cache guard: " + verdict.message
                                                               + "."))
    counts = verdict.table
    judged = counts[counts["calls_with_payload"] >= 2] if len(counts) else counts
    g1, g2, g3, g4 = st.columns(4)
    g1.metric("Calls stored", num(int(summary["calls"].sum())))
    bad = summary[summary["status"] != "ok"]
    g2.metric("Failed or unparsed calls", num(int(bad["calls"].sum()) if len(bad) else 0))
    g3.metric("Retries", num(int(summary["retries"].fillna(0).sum())))
    g4.metric("Distinct payloads per candidate (min)",
              num(int(judged["distinct_payloads"].min()))
              if len(judged) and verdict.candidates else "—",
              help="Counted once every candidate has two successful calls")
    inv = invalid_answers(store.load_calls(audit_id), store.load_draws(audit_id),
                          (sheet.on_invalid if sheet else None) or settings.get("on_invalid"))
    with st.container(key="invalid-answers"):
        lines = invalid_lines(inv.to_dict())
        if inv.conditioned:
            st.warning(md_escape(lines[-1]))
            lines = lines[:-1]
        st.caption(md_escape(". ".join(x[:1].upper() + x[1:] for x in lines) + "."))
    models = sorted(m for m in summary["model"].unique() if m)
    pops = model_populations_of(store, audit_id, (sheet.model if sheet else None))
    if pops.split:
        st.error(md_escape(pops.message[:1].upper() + pops.message[1:]))
    st.caption(md_escape("Model ids seen: " + (", ".join(models) if models else "none reported")))
    view = summary.rename(columns={"http_status": "HTTP", "mean_latency_ms": "mean latency (ms)"})
    view["mean latency (ms)"] = view["mean latency (ms)"].map(lambda v: num(v, 0))
    view["HTTP"] = view["HTTP"].map(lambda v: "" if not v else str(int(v)))
    view["calls"] = view["calls"].map(num)
    view["retries"] = view["retries"].map(num)
    view["cost"] = view["cost"].map(money)
    st.dataframe(view, hide_index=True, width="stretch", key="call-summary")


# ----------------------------------------------------------------------------- run
with tab_run:
    handle = registry.get(audit_id)
    active = handle is not None and handle.running
    candidates = store.get_candidates(audit_id)
    has_draws = store.n_draws(audit_id) > 0
    secrets = forms.streamlit_secrets()
    if handle is not None and not active:
        # a latency the pre-flight measured is kept with the audit, so the estimate (here and
        # on the Sample page) survives a restart; nothing else is called "measured"
        measured = handle.status().preflight_latency_s
        if measured is not None and settings.get("preflight_latency_s") != measured:
            store.update_settings(audit_id, {"preflight_latency_s": measured})
            settings = store.get_audit(audit_id)["settings"]

    if sheet is None:
        st.info("The freeze sheet is not complete: finish it before any run.")
        st.page_link(state.PAGES["freeze"][0], label="Go to step 1 · Freeze", icon=state.NEXT)
    else:
        st.subheader("1 · The screener")
        if has_draws or active:
            st.caption("Frozen with the harness at the audit's first draw. To call another "
                       "screener, start a new audit from this sheet on the Freeze page.")
            kind, options = screener_form.saved_screener(settings)
            screener_form.render_screener_summary(kind, options, settings, sheet)
        else:
            st.caption("Where each call goes, saved with the audit. Never a key: name the "
                       "environment variable (or Streamlit secret) that holds it. Editable "
                       "until the first draw.")
            if screener_form.render_screener_form(store, audit_id, settings, sheet, secrets):
                settings = store.get_audit(audit_id)["settings"]
        kind, options = screener_form.saved_screener(settings)
        if not has_draws and not active:
            # the sheet freezes what the saved screener is asked to answer (format, schema from
            # the current criteria, output limit, invalid policy): kept in step until the
            # first draw, e.g. after the criteria were edited on the Freeze page
            try:
                synced = screener_form.frozen_answer_sheet(
                    sheet, kind, options, forms.saved_limits(settings)["on_invalid"])
            except AuditError:
                synced = sheet
            if synced.hash != sheet.hash:
                store.save_audit(audit_id, synced.to_dict(), synced.hash)
                sheet = synced

    ready = sheet is not None and not sheet.blockers() and len(candidates) > 0
    if sheet is not None and sheet.blockers():
        st.error("Blocked because " + sheet.blockers()[0] + ". No call is made until the "
                 "clearance is confirmed on the Freeze page.")
        st.page_link(state.PAGES["freeze"][0], label="Go to step 1 · Freeze", icon=state.NEXT)
    elif sheet is not None and not len(candidates):
        st.info("This audit has no sample yet: frame one from the pool first (or upload "
                "exported draws in the other tab).")
        st.page_link(state.PAGES["sample"][0], label="Go to step 2 · Sample", icon=state.NEXT)
    if ready:
        st.subheader("2 · Estimate")
        st.caption("What is left to run, before anything runs. 15 runs per candidate by "
                   "default; 30 when the numbers go to counsel or a regulator.")
        k = f"run-{audit_id}"
        c1, c2, c3 = st.columns(3)
        # the runner's bounds (core.run.options): an audit saved from a config with
        # runs = 200 opens here as it is (a max of 100 made the page fail)
        (r_lo, r_hi), (c_lo, c_hi) = RUNS_RANGE, CONCURRENCY_RANGE
        runs = c1.number_input("Runs per candidate", min_value=r_lo, max_value=r_hi, step=1,
                               value=min(max(int(settings.get("runs") or 15), r_lo), r_hi),
                               key=f"{k}-runs", disabled=active)
        conc = c2.number_input("Calls in flight", min_value=c_lo, max_value=c_hi, step=1,
                               value=min(max(int(settings.get("concurrency") or 8), c_lo), c_hi),
                               key=f"{k}-conc",
                               disabled=active)
        seed = c3.number_input("Seed (call order)", min_value=0, step=1,
                               value=int(settings.get("seed") or 0), key=f"{k}-seed",
                               disabled=active)
        screener = None
        try:
            screener = screener_form.build(kind, options, sheet, seed=int(seed),
                                           secrets=secrets, settings=settings)
            run_opts = forms.run_options(settings, runs=int(runs), concurrency=int(conc),
                                         seed=int(seed))
        except AuditError as exc:
            screener = None
            state.show_error(exc, "The saved screener cannot run")
        prices = PriceTable.from_dict(settings.get("prices"))
        completed = store.completed_pairs(audit_id)
        done = len(completed)
        planned = len(candidates) * int(runs)
        if screener is not None:
            est = audit_estimate({**settings, "rpm": run_opts.rpm,
                                  "max_calls_per_pair": run_opts.max_calls_per_pair},
                                 frozen_model=sheet.model, criteria=sheet.criteria,
                                 candidates=candidates, runs=int(runs), completed=completed,
                                 concurrency=int(conc))
            forms.render_estimate(est)
            st.caption(md_escape(forms.destination(screener)))
            if not has_draws and not active:
                if st.button("Run the 3-run pre-flight", key="start-preflight",
                             help="Three runs of one band candidate: measures the latency "
                                  "for the wall time, and stops here if the answers are "
                                  "byte-identical (deterministic or cached)."):
                    try:
                        registry.start(store, audit_id, screener, run_opts, prices=prices,
                                       until="preflight")
                    except AuditError as exc:
                        state.show_error(exc, "The pre-flight did not start")
                    else:
                        st.rerun()
        with st.expander("Prices, $ per million tokens (kept with the audit; used by the "
                         "estimate and by the run's cost per call)",
                         expanded=not has_draws or (screener is not None and kind != "simulated"
                                                    and prices.get(screener.model) is None)):
            forms.render_prices(store, audit_id, settings,
                                screener.model if screener is not None else sheet.model)

        st.subheader("3 · Run")
        after_preflight = handle is not None and handle.runner.until == "preflight"
        label = ("Resume the run" if 0 < done < planned and not after_preflight
                 else "Start the run")
        b1, b2 = st.columns([1, 3])
        # a guard that blocked this audit (deterministic pre-flight) blocks it for good: its
        # stored identical payloads would block again; a new audit is the way on
        blocked = handle is not None and not active and handle.status().state == "blocked"
        if b1.button(label, type="primary", key="start-run",
                     disabled=screener is None or active or blocked or done >= planned):
            try:
                # stored (never a key), so the disabled inputs of a running audit show them
                store.update_settings(audit_id, {"runs": int(runs), "concurrency": int(conc),
                                                 "seed": int(seed)})
                registry.start(store, audit_id, screener, run_opts, prices=prices)
            except AuditError as exc:
                state.show_error(exc, "The run did not start")
            else:
                st.rerun()
        if done >= planned and not active:
            b2.success(f"Every candidate has its {int(runs)} runs ({done} draws).")

        @st.fragment(run_every=1.0 if active else None)
        def progress() -> None:
            # one source for every counter of this panel: the store, read once per refresh
            # (the run writes its batches there at least every second)
            d = len(store.completed_pairs(audit_id))
            summary = store.call_summary(audit_id)
            n_calls = int(summary["calls"].sum()) if len(summary) else 0
            h = registry.get(audit_id)
            if h is None:
                st.progress(min(d / planned, 1.0) if planned else 0.0,
                            text=f"{d} of {planned} draws stored · {n_calls} calls · "
                                 "not running")
                st.subheader("Guards")
                _guard_panel(summary)
                return
            s = h.status()
            preflight = h.runner.until == "preflight"
            eta = "" if s.eta_s is None or not h.running else f" · about {seconds(s.eta_s)} left"
            what = "pre-flight · " if preflight else ""
            st.progress(min(d / planned, 1.0) if planned else 0.0,
                        text=f"{what}{d} of {planned} draws stored · {n_calls} calls · "
                             f"{s.state}{eta}")
            with st.container(key="run-state"):
                st.caption(f"run state: {s.state}{' (pre-flight)' if preflight else ''} · "
                           f"draws {d} of {planned}")
            if s.state == "blocked":
                with st.container(key="run-blocked"):
                    st.error("**Blocked by a guard; nothing more is called.** "
                             + md_escape(s.message))
                    st.page_link(state.PAGES["freeze"][0], icon=state.NEXT,
                                 label="Start a new audit from this sheet (step 1 · Freeze)")
            elif preflight and s.state == "finished" and s.preflight_latency_s is not None:
                st.success(f"Pre-flight done: three runs of one candidate, a median of "
                           f"{s.preflight_latency_s:.2f} s a call, and the answers differ — "
                           "the wall time above uses the measured latency.")
            elif s.breaker:
                with st.container(key="run-breaker"):
                    st.error(md_escape(s.message))
            elif s.message:
                (st.error if s.state == "failed" else st.info)(md_escape(s.message))
            for f in s.findings:
                st.warning(md_escape("Finding: " + f))
            if h.running:
                if st.button("Stop the run", key="stop-run"):
                    h.stop()
                    h.join(timeout=10)
                    st.rerun(scope="app")
            elif active:  # it just ended: redraw the page (sidebar, buttons, estimate)
                st.rerun(scope="app")
            st.subheader("Guards")
            _guard_panel(summary)

        progress()
    else:
        st.subheader("Guards")
        _guard_panel()

# ----------------------------------------------------------------------------- upload



with tab_upload:
    st.caption("A vendor's export of repeated scorings: long (candidate_id, run, criterion, "
               "score) or wide (candidate_id, run, [total], one column per criterion); CSV, "
               "Parquet or JSON Lines. You see a summary first; nothing is stored until you "
               "confirm.")
    # a write never goes to an audit picked silently (a bare URL opens the demo): a new audit
    # by default, or an existing one chosen by name
    target = st.radio("Import into", ["a new audit", "an existing audit"], horizontal=True,
                      key="import-target")
    dest = ""
    crit_spec = ""
    crit: list | str | None = None
    if target == "a new audit":
        c1, c2 = st.columns(2)
        dest = c1.text_input("New audit id", key="import-new-id",
                             placeholder="e.g. vendor-eng-2291").strip()
        crit_spec = c2.text_input(
            "Criteria maxima (name:max[:weight], …)", key="import-criteria",
            placeholder="e.g. technical_skills:10, experience:25:2",
            help="Checks every score against 0..max. Without maxima, a score far outside its "
                 "criterion's other scores (or beyond 1,000,000) rejects the file.").strip()
        crit = crit_spec or None
    else:
        ids = [str(a) for a in store.list_audits()["audit_id"]]
        dest = st.selectbox("Existing audit", ids, index=None, key="import-existing",
                            placeholder="choose the audit the draws belong to") or ""
        if dest:
            crit = target_criteria(store, dest)
            frozen = ", ".join(f"{c.name} ≤ {num(c.max_points, 2)}" if c.max_points else c.name
                               for c in crit) or "none"
            st.caption(md_escape(f"Checked against the frozen criteria of '{dest}': {frozen}. "
                                 "Only draws of its sample's candidates and of its frozen model "
                                 "are accepted."))
    clip = st.checkbox("Clip scores outside 0..max points instead of rejecting the file",
                       key="import-clip")
    upload = st.file_uploader("Draws file", type=["csv", "parquet", "jsonl", "json"],
                              key=f"draws-upload-{st.session_state[state.UPLOAD_NONCE]}")
    if upload is not None and target == "an existing audit" and not dest:
        st.info("Choose the audit these draws belong to, or import them into a new audit.")
    elif upload is not None:
        sig = (upload.file_id, target, dest if target == "an existing audit" else "", crit_spec,
               clip)
        pending = st.session_state[state.PENDING_DRAWS]
        imp = None
        if pending is not None and pending[0] == sig:
            imp = pending[1]
        else:
            try:
                imp = validate_draws(upload, name=upload.name, criteria=crit, clip=clip)
            except AuditError as exc:
                st.session_state[state.PENDING_DRAWS] = None
                show_faults(exc)
            else:
                st.session_state[state.PENDING_DRAWS] = (sig, imp)
        if imp is not None:
            s = imp.summary()
            runs_txt = (str(s["runs_min"]) if s["runs_min"] == s["runs_max"]
                        else f"{s['runs_min']}–{s['runs_max']}")
            with st.container(key="import-summary"):
                st.success(f"The file is valid: {num(s['rows'])} rows, {num(s['candidates'])} "
                           f"candidates × {runs_txt} runs = {num(s['evaluations'])} evaluations "
                           f"({s['layout']} layout).")
                st.caption("The range of each criterion, as it will be stored: check it before "
                           "you confirm.")
                st.dataframe(ranges_frame(imp), hide_index=True, key="import-ranges")
                st.dataframe(pd.DataFrame({
                    "check": ["criteria", "screener's own total", "raw payloads (cache guard)",
                              "strata", "first-pass scores", "model ids", "scores clipped"],
                    "found": [", ".join(s["criteria"]) or "none (total only)",
                              "yes" if s["has_total"] else "no (sum of criteria)",
                              "yes" if s["has_payloads"] else "no (cache guard not checked)",
                              "yes" if s["has_strata"] else "no (derived)",
                              "yes" if s["has_first_pass"] else "no",
                              ", ".join(s["models"]) or "none reported",
                              str(s["clipped"])]}), hide_index=True, key="import-checks")
                for w in s["warnings"]:
                    st.warning(md_escape(w[:1].upper() + w[1:] + "."))
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
                        out = commit_draws(store, dest, imp, new=target == "a new audit")
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
