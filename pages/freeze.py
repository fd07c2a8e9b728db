"""Step 1 — freeze the harness: everything a variance number depends on, hashed.

Editable until the audit's first draw; then read-only with its hash, and "new audit from this
sheet" is the way to change anything.
"""

import pandas as pd
import streamlit as st

from core.errors import AuditError
from core.format import MISSING, md_escape, readable
from core.freeze import GATES, SAMPLING_REGIMES, TEMPERATURE_ZERO_NOTE, FreezeSheet
from core.ingest import criteria_frame
from core.steps import IMPORTED_SCREENER
from ui import state

state.init_state()
store = state.get_store()
audit_id = state.active_audit(store)

st.title("Freeze the harness")
st.caption("Pin everything the score depends on before anything runs: a variance number "
           "computed across two prompt versions measures your deploy history, not your "
           "screener. The sheet is hashed; the hash is the audit's version in every report.")
st.info(TEMPERATURE_ZERO_NOTE)

_GATES = {"auto-advance": "auto-advance (above the cutoff moves on)",
          "auto-reject": "auto-reject (below the cutoff is rejected)",
          "sorted-list": "a sorted list a recruiter works top-down"}
_SAMPLING = {"settable": "settable — record the values",
             "not-exposed": "not exposed by the vendor — unknown",
             "cannot-be-set": "cannot be set (the API rejects temperature/top_p/top_k)"}
_FIELDS = [("req_id", "Req id"), ("req_title", "Req title"), ("gates", "The cutoff gates"),
           ("screener", "Screener"), ("screener_version", "Screener version"),
           ("model", "Exact model id"), ("prompt_version", "Prompt version"),
           ("rubric_version", "Rubric version"), ("parser_version", "Parser version"),
           ("sampling", "Sampling regime"), ("temperature", "Temperature"), ("top_p", "top_p"),
           ("top_k", "top_k"), ("endpoint", "Endpoint"),
           ("side_effect_free", "Side-effect clearance"),
           ("result_cache_off", "Result cache off"),
           ("distinct_request_ids", "Distinct request id per call"),
           ("prefix_caching", "Prefix caching on (allowed)")]


def _criteria_table(sheet_dict: dict) -> pd.DataFrame:
    rows = sheet_dict.get("criteria") or []
    return pd.DataFrame({"name": [str(c.get("name", "")) for c in rows],
                         "max": [c.get("max", c.get("max_points")) for c in rows],
                         "weight": [float(c.get("weight", 1.0)) for c in rows]},
                        columns=["name", "max", "weight"]).astype(
        {"name": "object", "max": "float64", "weight": "float64"})


def _show_findings(sheet: FreezeSheet) -> None:
    for w in sheet.warnings():
        st.warning(md_escape(w[:1].upper() + w[1:] + "."))
    for b in sheet.blockers():
        st.error(md_escape("Blocked because " + b + ". No run starts until it is confirmed."))


def _new_audit(source: dict | None) -> None:
    """Create a new audit (from this sheet, or blank) and make it active."""
    with st.form("new-audit", border=True):
        st.markdown("**Start a new audit**")
        new_id = st.text_input("New audit id", placeholder="e.g. eng-2291-r8")
        origin = st.radio("Start from", ["this sheet", "a blank sheet"], horizontal=True,
                          disabled=source is None)
        if not st.form_submit_button("Create the audit"):
            return
    new_id = new_id.strip()
    if not new_id:
        st.error("Give the new audit an id, for example the req and rubric version.")
        return
    if store.audit_exists(new_id):
        st.error(md_escape(f"An audit called '{new_id}' exists already: pick another id."))
        return
    try:
        if origin == "this sheet" and source is not None:
            sheet = FreezeSheet.from_dict(source["freeze"])
            # the same harness: keep the stored sheet and its hash byte for byte
            store.save_audit(new_id, source["freeze"], source["harness_hash"],
                             dict(source["settings"]))
            store.set_criteria(new_id, criteria_frame(list(sheet.criteria)))
            pool = store.get_pool(source["audit_id"])
            if len(pool):
                store.set_pool(new_id, pool)
        else:
            sheet = FreezeSheet(req_id=new_id)
            store.save_audit(new_id, sheet.to_dict(), sheet.hash, {})
    except AuditError as exc:
        state.show_error(exc, "The new audit was not created")
        return
    state.switch_audit(new_id)


if audit_id is None:
    _new_audit(None)
    st.stop()

audit = store.get_audit(audit_id)
freeze = dict(audit["freeze"])
locked = store.n_draws(audit_id) > 0

if locked:
    if freeze.get("screener") == IMPORTED_SCREENER:
        st.warning("Not frozen here: this audit's draws were imported, so no harness was "
                   "recorded (prompt, rubric and model versions are unknown to the app). To "
                   "record it, start a new audit below from a filled sheet and import the same "
                   "draws into it.")
    else:
        st.success("This harness is frozen: the audit has draws, so the sheet can no longer "
                   "change. A changed harness is a new audit.")
    st.caption("Harness hash")
    st.code(audit["harness_hash"], language=None)
    values = [MISSING if freeze.get(f) in (None, "") else
              {True: "yes", False: "no"}.get(freeze.get(f), str(freeze.get(f)))
              if isinstance(freeze.get(f), bool) else str(freeze.get(f)) for f, _ in _FIELDS]
    st.dataframe(pd.DataFrame({"field": [label for _, label in _FIELDS], "value": values}),
                 hide_index=True, width="stretch", key="frozen-sheet")
    st.dataframe(readable(_criteria_table(freeze), nd=1), hide_index=True,
                 key="frozen-criteria")
    try:
        _show_findings(FreezeSheet.from_dict(freeze))
    except AuditError as exc:
        state.show_error(exc, "The stored sheet is incomplete")
    _new_audit(audit)
    st.stop()

# ----------------------------------------------------------------------------- editable sheet
k = f"fz-{audit_id}"  # widget keys per audit, so switching audits reloads the stored sheet
c1, c2 = st.columns(2)
with c1:
    req_id = st.text_input("Req id", value=str(freeze.get("req_id") or audit_id), key=f"{k}-req")
    req_title = st.text_input("Req title", value=str(freeze.get("req_title") or ""),
                              key=f"{k}-title")
    gates = st.selectbox("What the cutoff gates", GATES, format_func=_GATES.get,
                         index=GATES.index(freeze.get("gates") or "sorted-list"), key=f"{k}-gates")
    screener = st.text_input("Screener name", value=str(freeze.get("screener") or ""),
                             key=f"{k}-screener")
    screener_version = st.text_input("Screener version",
                                     value=str(freeze.get("screener_version") or ""),
                                     key=f"{k}-sv")
    model = st.text_input("Exact model id (snapshot, not an alias)",
                          value=str(freeze.get("model") or ""), key=f"{k}-model")
    endpoint = st.text_input("Endpoint", value=str(freeze.get("endpoint") or ""),
                             key=f"{k}-endpoint")
with c2:
    prompt_version = st.text_input("Prompt version", value=str(freeze.get("prompt_version") or ""),
                                   key=f"{k}-pv")
    rubric_version = st.text_input("Rubric version", value=str(freeze.get("rubric_version") or ""),
                                   key=f"{k}-rv")
    parser_version = st.text_input("Parser version", value=str(freeze.get("parser_version") or ""),
                                   key=f"{k}-parser")
    sampling = st.radio("Sampling regime", SAMPLING_REGIMES, format_func=_SAMPLING.get,
                        index=SAMPLING_REGIMES.index(freeze.get("sampling") or "not-exposed"),
                        key=f"{k}-sampling")
    temperature = top_p = top_k = None
    if sampling == "settable":
        s1, s2, s3 = st.columns(3)
        temperature = s1.number_input("temperature", min_value=0.0, max_value=2.0, step=0.1,
                                      value=freeze.get("temperature"), key=f"{k}-temp")
        top_p = s2.number_input("top_p", min_value=0.0, max_value=1.0, step=0.05,
                                value=freeze.get("top_p"), key=f"{k}-topp")
        top_k = s3.number_input("top_k", min_value=1, step=1, value=freeze.get("top_k"),
                                key=f"{k}-topk")

st.subheader("Rubric criteria")
crit_df = st.data_editor(_criteria_table(freeze), num_rows="dynamic", hide_index=True,
                         key=f"{k}-criteria",
                         column_config={"name": st.column_config.TextColumn("criterion",
                                                                            required=True),
                                        "max": st.column_config.NumberColumn("max points",
                                                                             min_value=0.0),
                                        "weight": st.column_config.NumberColumn(
                                            "weight", min_value=0.0, default=1.0)})

st.subheader("Safety and cache defeat")
side_effect_free = st.checkbox(
    "Side-effect clearance: this runs against a sandbox req, or the call path is confirmed "
    "side-effect free (no score events, webhooks or mails) — required before any run",
    value=bool(freeze.get("side_effect_free")), key=f"{k}-sef")
result_cache_off = st.checkbox("The screener's result cache is off",
                               value=bool(freeze.get("result_cache_off")), key=f"{k}-rco")
distinct_ids = st.checkbox("Every call carries a distinct request id",
                           value=bool(freeze.get("distinct_request_ids", True)), key=f"{k}-ids")
prefix = st.checkbox("Prompt-prefix caching is on (allowed: it does not remove sampling "
                     "variance)", value=bool(freeze.get("prefix_caching")), key=f"{k}-prefix")

criteria = [{"name": str(r["name"]).strip(),
             "max": None if pd.isna(r["max"]) else float(r["max"]),
             "weight": 1.0 if pd.isna(r["weight"]) else float(r["weight"])}
            for _, r in crit_df.iterrows() if isinstance(r["name"], str) and r["name"].strip()]
draft = {"req_id": req_id.strip(), "req_title": req_title.strip(), "gates": gates,
         "screener": screener.strip(), "screener_version": screener_version.strip(),
         "model": model.strip(), "prompt_version": prompt_version.strip(),
         "rubric_version": rubric_version.strip(), "parser_version": parser_version.strip(),
         "sampling": sampling, "temperature": temperature, "top_p": top_p,
         "top_k": None if top_k is None else int(top_k), "endpoint": endpoint.strip(),
         "side_effect_free": side_effect_free, "result_cache_off": result_cache_off,
         "distinct_request_ids": distinct_ids, "prefix_caching": prefix, "criteria": criteria}

try:
    sheet = FreezeSheet.from_dict(draft)
except AuditError as exc:
    state.show_error(exc, "The sheet is not complete")
    sheet = None
if sheet is not None:
    _show_findings(sheet)
    st.caption("Harness hash of this sheet")
    st.code(sheet.hash, language=None)
    if st.button("Save the freeze sheet", type="primary"):
        try:
            store.save_audit(audit_id, sheet.to_dict(), sheet.hash)
            store.set_criteria(audit_id, criteria_frame(list(sheet.criteria)))
        except AuditError as exc:
            state.show_error(exc, "Not saved")
        else:
            st.success("Saved. Next: frame the sample.")
            st.page_link(state.PAGES["sample"][0], label="Go to step 2 · Sample", icon=state.NEXT)

_new_audit(audit)
