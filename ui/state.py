"""Session state, cached resources and the shared sidebar — the one place pages get state from.

Session keys are the constants below (no bare strings in pages). Values that must survive a
page switch live in non-widget keys: widgets get a ``w_…`` key that is seeded from the
persistent value before it is drawn and copied back by an ``on_change`` callback
(PITFALLS: widget values vanish when their page is not drawn).

Cached resources:

* :func:`get_store` — one process-wide :class:`~core.store.Store` per database file; it holds
  the file only while a call works on it, so terminal commands can use the same file while the
  app is open. The demo audit is created on first start. Pages read ``data_version`` on every
  run (one short read), so data written by a terminal shows without a restart.
* :func:`get_result` — one :class:`~core.audit.AuditResult` per (file, audit id, data version):
  the sliders are answered by its :attr:`~core.audit.AuditResult.live` object, never by the
  database. ``st.cache_resource`` (not ``cache_data``) so a large audit is never copied.
* :func:`run_registry` — the process-wide registry of background runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from core.audit import AuditResult, analyze
from core.demo import DEMO_AUDIT_ID, ensure_demo
from core.errors import AuditError
from core.format import md_escape
from core.freeze import FreezeSheet
from core.runner import RunRegistry, registry
from core.store import Store

__all__ = [
    "ACTIVE_AUDIT", "PENDING_AUDIT", "LIVE", "PENDING_DRAWS", "PENDING_POOL", "SAMPLE_DRAFT",
    "DEFAULTS", "PAGES", "db_path", "get_store", "get_result", "flip_curve", "run_registry",
    "init_state", "active_audit", "switch_audit", "live_settings", "bind", "with_live",
    "require",
    "sidebar", "step_status", "StepStatus", "sheet_of", "show_error",
]

# ----------------------------------------------------------------------------- session keys
ACTIVE_AUDIT = "active_audit"        # the sidebar picker (a widget key drawn on every page)
PENDING_AUDIT = "pending_audit"      # set by a page, applied by the sidebar on the next run
LIVE = "live_settings"               # {audit_id: {cutoff, k, override, …}} for the sliders
PENDING_DRAWS = "pending_draws"      # a validated draws import waiting for the confirm button
PENDING_POOL = "pending_pool"        # a validated pool import waiting for the confirm button
SAMPLE_DRAFT = "sample_draft"        # a drawn (not yet saved) stratified sample
UPLOAD_NONCE = "upload_nonce"        # bumps the uploader keys to clear them after a commit
URL_AUDIT = "audit"                  # the active audit in the URL (?audit=…), so a reload keeps it

#: Defaults of every slider-driven value (per audit); ``None`` = "take it from the audit".
DEFAULTS: dict[str, Any] = {
    "mode": "score",            # the cutoff is set by score ("score") or by top k of n ("top-k")
    "cutoff": None,             # the audited cutoff (effective cutoff of the analysis)
    "top_k": None,
    "of_n": None,
    "k": 2.0,                   # band width in within-candidate SDs
    "override_on": False,
    "override": None,           # manual half-width (points)
    "capacity": None,           # manual reviews the team can do per req
    "apps": None,               # applications per req
}

#: url_path → (file, title). The router lists them in this order; drift is another engineer's.
PAGES: dict[str, tuple[str, str]] = {
    "freeze": ("pages/freeze.py", "1 · Freeze"),
    "sample": ("pages/sample.py", "2 · Sample"),
    "run": ("pages/run.py", "3 · Run"),
    "criteria": ("pages/criteria.py", "4 · Criteria"),
    "flip": ("pages/flip.py", "5 · Flip"),
    "band": ("pages/band.py", "6 · Band"),
    "drift": ("pages/drift.py", "Drift"),
}

_ROOT = Path(__file__).resolve().parent.parent
NEXT = ":material/arrow_forward:"   # the icon of "go to the step that fixes it" links


def db_path() -> str:
    """``AUDIT_DB`` when set, else ``data/audits.duckdb`` next to the app."""
    return os.environ.get("AUDIT_DB") or str(_ROOT / "data" / "audits.duckdb")


# ----------------------------------------------------------------------------- resources
@st.cache_resource(show_spinner="Opening the audit database…")
def _open_store(path: str) -> Store:
    store = Store(path)
    ensure_demo(store)
    return store


def show_error(exc: BaseException, what: str = "") -> None:
    """A user-facing sentence (never a traceback)."""
    prefix = f"{what}: " if what else ""
    st.error(md_escape(f"{prefix}{exc}"))


def get_store() -> Store:
    """The process-wide store; a locked or corrupt file stops the page with its message."""
    try:
        return _open_store(db_path())
    except AuditError as exc:
        show_error(exc)
        st.stop()
        raise  # unreachable: st.stop raises


@st.cache_resource(max_entries=8, show_spinner="Analysing the audit…")
def _analysis(path: str, audit_id: str, version: str) -> AuditResult:
    return analyze(_open_store(path), audit_id)


def get_result(store: Store, audit_id: str) -> AuditResult:
    """The cached analysis of ``audit_id`` at its current data version (errors stop the page)."""
    try:
        return _analysis(store.path, audit_id, store.data_version(audit_id))
    except AuditError as exc:
        show_error(exc, "This audit cannot be analysed")
        st.stop()
        raise


@st.cache_resource(max_entries=8, show_spinner=False)
def _flip_curve(path: str, audit_id: str, version: str) -> pd.DataFrame:
    # at most CURVE_POINTS cutoffs, never one per score unit (scores of 1e8 exist)
    return _analysis(path, audit_id, version).live.flip_curve()


def flip_curve(store: Store, audit_id: str) -> pd.DataFrame:
    """Flip count and mean disagreement over the score range (cached per data version)."""
    return _flip_curve(store.path, audit_id, store.data_version(audit_id))


@st.cache_resource
def run_registry() -> RunRegistry:
    """The process-wide registry of background runs (survives page switches and reloads)."""
    return registry()


# ----------------------------------------------------------------------------- session
_ROUTED = "_routed_by_app"      # set by app.py on every run
_REROUTED = "_rerouted_once"


def _route_through_app() -> None:
    """Make sure a page runs under app.py's ``st.navigation``.

    Streamlit 1.67 decides per *process* whether to treat ``pages/`` the legacy way, and only
    switches that off once some run calls ``st.navigation``. So when the very first request
    after a server start is a deep link (``/flip``), the page script runs alone, without the
    router and its sidebar. Detect it, switch the legacy mode off, and rerun once: the rerun
    goes through app.py and lands on the same URL.
    """
    ss = st.session_state
    if ss.get(_ROUTED) or ss.get(_REROUTED):
        return
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False
    ss[_REROUTED] = True
    st.rerun()


def init_state(*, router: bool = False) -> None:
    """Create every non-widget key with its default (idempotent).

    ``router=True`` from app.py; a page calls it without, and is re-routed through app.py when
    it was started alone (see :func:`_route_through_app`).
    """
    ss = st.session_state
    if router:
        ss[_ROUTED] = True
    else:
        _route_through_app()
    ss.setdefault(LIVE, {})
    ss.setdefault(PENDING_DRAWS, None)
    ss.setdefault(PENDING_POOL, None)
    ss.setdefault(SAMPLE_DRAFT, None)
    ss.setdefault(UPLOAD_NONCE, 0)


def active_audit(store: Store) -> str | None:
    """The active audit: the sidebar's pick, else the demo, else the newest; None when empty.

    Resolved here as well as in the sidebar so a page works on its own (``AppTest`` of a page).
    """
    ss = st.session_state
    current = ss.get(ACTIVE_AUDIT)
    if current is not None and store.audit_exists(current):
        return current
    ids = [str(a) for a in store.list_audits()["audit_id"]]
    from_url = st.query_params.get(URL_AUDIT)
    choice = (from_url if from_url in ids else DEMO_AUDIT_ID if DEMO_AUDIT_ID in ids
              else (ids[0] if ids else None))
    if choice is not None:
        ss[ACTIVE_AUDIT] = choice
    return choice


def switch_audit(audit_id: str, page: str | None = None) -> None:
    """Make ``audit_id`` the active audit and rerun, on ``page`` when given (the sidebar
    applies it)."""
    st.session_state[PENDING_AUDIT] = audit_id
    if page is not None:
        st.switch_page(PAGES[page][0])
    st.rerun()


def live_settings(audit_id: str, result: AuditResult | None = None) -> dict[str, Any]:
    """The slider values of ``audit_id``, filled from its analysis the first time."""
    per_audit = st.session_state.setdefault(LIVE, {})
    live = per_audit.setdefault(audit_id, dict(DEFAULTS))
    if result is not None and live["cutoff"] is None:
        s = result.settings
        live["cutoff"] = float(result.cutoff)
        live["k"] = float(s.k)
        live["top_k"] = s.top_k
        live["of_n"] = s.of_n or (result.pool_size or None)
        live["override"] = s.halfwidth_override
        live["override_on"] = s.halfwidth_override is not None
        live["capacity"] = s.capacity
        live["apps"] = s.applications_per_req or (float(result.pool_size)
                                                  if result.pool_size else None)
    return live


def _sync(audit_id: str, name: str, wkey: str) -> None:
    st.session_state[LIVE][audit_id][name] = st.session_state[wkey]


def bind(audit_id: str, name: str) -> dict[str, Any]:
    """Widget kwargs (``key`` + ``on_change``) bound to the persistent live value ``name``.

    Seeds the widget from the persistent value before it is drawn, so it survives a page
    switch, and copies every change back. An empty value becomes ``value=None`` (an empty
    number input).
    """
    wkey = f"w_{name}"
    value = st.session_state[LIVE][audit_id][name]
    kwargs: dict[str, Any] = {"key": wkey, "on_change": _sync, "args": (audit_id, name, wkey)}
    if value is None:
        st.session_state.pop(wkey, None)
        kwargs["value"] = None
    else:
        st.session_state[wkey] = value
    return kwargs


def with_live(result: AuditResult, live: dict[str, Any]) -> AuditResult:
    """``result`` with the page's live band settings (for the report preview and downloads).

    A shallow copy: no database read, no re-analysis.
    """
    s = replace(result.settings, k=float(live["k"]),
                halfwidth_override=live["override"] if live["override_on"] else None,
                capacity=live["capacity"], applications_per_req=live["apps"])
    return replace(result, settings=s)


def require(ok: bool, message: str, page: str, label: str) -> None:
    """Guard a prerequisite: explain, link to the step that fixes it, stop the page."""
    if not ok:
        st.info(message)
        st.page_link(PAGES[page][0], label=label, icon=NEXT)
        st.stop()


def candidates_with_draws(store: Store, audit_id: str) -> int:
    return len({c for c, _ in store.completed_pairs(audit_id)})


def analysed_audit() -> tuple[Store, str, AuditResult]:
    """The statistics pages' prerequisites: an active audit with draws from at least two
    candidates (a pre-flight's three draws of one candidate are not an audit yet).

    Returns the store, the audit id and its cached analysis; otherwise explains and stops.
    """
    store = get_store()
    audit_id = active_audit(store)
    require(audit_id is not None, "Start an audit on the Freeze page first.", "freeze",
            "Go to step 1 · Freeze")
    n = candidates_with_draws(store, audit_id)
    require(n > 0, "This audit has no draws yet: run the screener or upload exported draws "
            "first.", "run", "Go to step 3 · Run")
    require(n > 1, "Only one candidate has draws so far (the pre-flight): start the run to "
            "measure the spread between candidates.", "run", "Go to step 3 · Run")
    return store, audit_id, get_result(store, audit_id)


def sheet_of(store: Store, audit_id: str) -> FreezeSheet | None:
    """The audit's freeze sheet, or None when it is missing or invalid."""
    try:
        return FreezeSheet.from_dict(store.get_audit(audit_id)["freeze"])
    except (AuditError, TypeError, KeyError):
        return None


# ----------------------------------------------------------------------------- step status
@dataclass(frozen=True)
class StepStatus:
    step: str
    state: str   # "done" | "needs" | "blocked" | "running"
    text: str


def step_status(store: Store, audit_id: str) -> list[StepStatus]:
    """Each wizard step's status for the sidebar: done / needs … / blocked because …."""
    audit = store.get_audit(audit_id)
    sheet = sheet_of(store, audit_id)
    n_draws = store.n_draws(audit_id)
    n_cands = len(store.get_candidates(audit_id))
    n_pool = len(store.get_pool(audit_id))
    out: list[StepStatus] = []
    if sheet is None:
        out.append(StepStatus("freeze", "needs", "needs a complete freeze sheet"))
    elif sheet.blockers():
        out.append(StepStatus("freeze", "blocked",
                              "blocked because side-effect clearance is missing"))
    else:
        out.append(StepStatus("freeze", "done", "done — harness frozen"))
    if n_cands:
        out.append(StepStatus("sample", "done", f"done — {n_cands} candidates"))
    elif n_pool:
        out.append(StepStatus("sample", "needs", "needs a sample drawn from the pool"))
    else:
        out.append(StepStatus("sample", "needs", "needs the pool (or upload draws on Run)"))
    handle = run_registry().get(audit_id)
    runs = audit["settings"].get("runs")
    pairs = len(store.completed_pairs(audit_id)) if n_draws else 0
    if handle is not None and handle.running:
        stt = handle.status()
        out.append(StepStatus("run", "running", f"running — {stt.done} of {stt.total} draws"
                              if stt.total else "running — starting"))
    elif not n_draws:
        blocked = sheet is not None and sheet.blockers() and n_cands
        out.append(StepStatus("run", "blocked" if blocked else "needs",
                              "blocked because side-effect clearance is missing" if blocked
                              else "needs draws (run the screener or upload)"))
    elif runs and n_cands and pairs < n_cands * int(runs):
        out.append(StepStatus("run", "needs",
                              f"needs {n_cands * int(runs) - pairs} more draws (resume)"))
    else:
        out.append(StepStatus("run", "done", f"done — {pairs} draws"))
    if not n_draws or candidates_with_draws(store, audit_id) < 2:
        for step in ("criteria", "flip", "band"):
            out.append(StepStatus(step, "needs", "needs draws" if not n_draws else
                                  "needs draws from at least 2 candidates"))
        return out
    partial = bool(runs and n_cands and pairs < n_cands * int(runs))
    done = "preliminary — the run is not complete" if partial else "done"
    state_ = "needs" if partial else "done"
    crit = store.get_criteria(audit_id)
    out.append(StepStatus("criteria", state_ if len(crit) else "needs",
                          done if len(crit) else "skipped — the screener returns only a total"))
    out.append(StepStatus("flip", state_, f"{done} — move the cutoff"))
    out.append(StepStatus("band", state_ if n_pool else "needs",
                          done if n_pool else "needs the pool for reviews per req"))
    return out


_ICONS = {"done": ":green[:material/check_circle:]",
          "needs": ":gray[:material/radio_button_unchecked:]",
          "blocked": ":red[:material/block:]",
          "running": ":orange[:material/pending:]"}


def sidebar(store: Store) -> str | None:
    """The shared sidebar: active audit picker, harness hash, step status. Returns the audit."""
    ss = st.session_state
    audits = store.list_audits()
    ids = [str(a) for a in audits["audit_id"]]
    evaluations = dict(zip(ids, audits["evaluations"]))
    pending = ss.pop(PENDING_AUDIT, None)
    if pending in ids:
        ss[ACTIVE_AUDIT] = pending
    if ss.get(ACTIVE_AUDIT) not in ids:
        from_url = st.query_params.get(URL_AUDIT)  # a reload keeps the audit (it is in the URL)
        ss[ACTIVE_AUDIT] = (from_url if from_url in ids else DEMO_AUDIT_ID
                            if DEMO_AUDIT_ID in ids else (ids[0] if ids else None))
    with st.sidebar:
        if not ids:
            st.warning("No audit in the database yet: start one on the Freeze page.")
            return None
        # options are the bare ids: a label that changes (e.g. a live draw count) would make
        # Streamlit treat it as a new widget and reset the choice
        audit_id = st.selectbox("Active audit", ids, key=ACTIVE_AUDIT,
                                help=f"Audits stored in {store.path}")
        st.caption(f"{int(evaluations.get(audit_id, 0))} evaluations stored")
        if st.query_params.get(URL_AUDIT) != audit_id:
            st.query_params[URL_AUDIT] = audit_id
        audit = store.get_audit(audit_id)
        st.caption("Harness hash (the audit's version)")
        st.code(audit["harness_hash"] or "not frozen", language=None, wrap_lines=True)
        st.caption("Steps")
        for s in step_status(store, audit_id):
            title = PAGES[s.step][1]
            st.markdown(f"{_ICONS[s.state]} **{title}** — {md_escape(s.text)}")
    return audit_id
