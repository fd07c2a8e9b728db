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

import atexit
import logging
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from core.audit import AuditResult, analyze
from core.demo import DEMO_AUDIT_ID, ensure_demo
from core.errors import AuditError
from core.format import md_escape
from core.freeze import FreezeSheet
from core.run.handle import RunRegistry, registry
from core.serving import access_from, check, email_allowed
from core.steps import RunProgress, StepStatus, run_progress
from core.steps import step_status as _core_step_status
from core.store import Store

__all__ = [
    "ACTIVE_AUDIT", "PENDING_AUDIT", "LIVE", "PENDING_DRAWS", "PENDING_POOL", "SAMPLE_DRAFT",
    "DEFAULTS", "PAGES", "app_pages", "db_path", "get_store", "get_result",
    "flip_curve_figure", "run_registry",
    "init_state", "active_audit", "switch_audit", "live_settings", "bind", "with_live",
    "require",
    "sidebar", "step_status", "StepStatus", "sheet_of", "show_error", "access_gate",
    "progress", "provisional_banner", "layout", "VIEW_KEYS", "remember_view", "RunProgress",
]

_log = logging.getLogger("audit.app")

# ----------------------------------------------------------------------------- session keys
ACTIVE_AUDIT = "active_audit"        # the sidebar picker (a widget key drawn on every page)
LAST_URL_AUDIT = "last_url_audit"    # the ?audit=… this session last saw (Back / links win)
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
    "compare": ("pages/compare.py", "Compare"),
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


@st.cache_resource(max_entries=8, show_spinner=False)
def _flip_curve_figure(path: str, audit_id: str, version: str) -> Any:
    from core import charts  # plotly only where a figure is drawn
    result = _analysis(path, audit_id, version)
    conf = result.configured_cutoff
    return charts.flip_curve_chart(
        _flip_curve(path, audit_id, version), None if conf is None else float(conf),
        result.settings.comparison, label="" if conf is None else f"screener's cutoff {conf:g}")


def flip_curve_figure(store: Store, audit_id: str) -> Any:
    """The flip curve's figure (cached per data version, built once): it does not depend on the
    slider, so the Flip page draws it outside the slider's fragment and a slider move neither
    rebuilds nor re-sends it. Marked at the screener's configured cutoff, when known."""
    return _flip_curve_figure(store.path, audit_id, store.data_version(audit_id))


@st.cache_resource
def run_registry() -> RunRegistry:
    """The process-wide registry of background runs (survives page switches and reloads)."""
    return registry()


# ----------------------------------------------------------------------------- session
_ROUTED = "_routed_by_app"      # set by app.py on every run
_REROUTED = "_rerouted_once"


def app_pages() -> dict[str, Any]:
    """The router's pages: url_path → ``st.Page`` of every page file present, in :data:`PAGES`
    order, after ``"home"`` — Freeze again at "/" (the default), so that ``/freeze`` (a
    bookmark, a shared link) is a page of its own."""
    home = st.Page(PAGES["freeze"][0], title=PAGES["freeze"][1], url_path="home", default=True)
    return {"home": home, **{url: st.Page(path, title=title, url_path=url)
                             for url, (path, title) in PAGES.items()
                             if (_ROOT / path).exists()}}


def _route_through_app() -> None:
    """Make sure a page runs under app.py's ``st.navigation``.

    Why this is still needed with a folder named ``pages/``: Streamlit decides per *process*
    whether to treat ``pages/`` the legacy way. The first session of a server starts in legacy
    mode when a folder called ``pages`` sits next to the entry script
    (``PagesManager.__init__``); in that mode the script runner does not execute app.py for
    a page URL but runs the matching ``pages/<name>.py`` alone (``script_runner._mpa_v1``).
    Only a call of ``st.navigation`` switches the process to Page-and-navigation, "as soon as
    any session executes it, across all sessions" (the documented contract of
    ``st.navigation``). So when the very first request after a server start is a deep link
    (``/flip``), app.py — the one place that calls ``st.navigation`` — never runs, and the page
    would be drawn without the router and its sidebar.

    The way out uses that public contract instead of the private flag the code used to set
    (``PagesManager.uses_pages_directory``): a page started alone calls ``st.navigation`` with
    the app's own pages (hidden, nothing drawn) and reruns once; the rerun goes through app.py
    and lands on the same URL. It can only happen in the first session of a process (later
    sessions start in Page-and-navigation mode), and only once per session. Held by
    ``tests/browser/test_links_and_layout.py``
    (``test_every_page_opens_by_its_own_url_on_a_fresh_server``). Renaming the folder would make
    this unnecessary; the folder keeps its name because ``pages/`` is the project's agreed layout.
    """
    ss = st.session_state
    if ss.get(_ROUTED) or ss.get(_REROUTED):
        return
    ss[_REROUTED] = True
    st.navigation(list(app_pages().values()), position="hidden")
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


def _default_audit(ids: list[str]) -> str | None:
    return DEMO_AUDIT_ID if DEMO_AUDIT_ID in ids else (ids[0] if ids else None)


def active_audit(store: Store) -> str | None:
    """The active audit: the sidebar's pick, else the URL's ``?audit=``, else the demo, else the
    newest; None when empty.

    Resolved here as well as in the sidebar so a page works on its own (``AppTest`` of a page).
    """
    ss = st.session_state
    current = ss.get(ACTIVE_AUDIT)
    if current is not None and store.audit_exists(current):
        return current
    ids = [str(a) for a in store.list_audits()["audit_id"]]
    from_url = st.query_params.get(URL_AUDIT)
    choice = from_url if from_url in ids else _default_audit(ids)
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


#: The Band page's k slider (pages/band.py): a stored k outside it (a database from elsewhere,
#: a saved ``--k 7``) is drawn at the nearest end, never handed to the slider as it is.
K_RANGE = (0.5, 4.0)

#: The live values kept per audit in the store (a reload or a shared link shows the same view).
VIEW_KEYS = ("mode", "cutoff", "top_k", "of_n", "k", "override_on", "override", "capacity", "apps")


def live_settings(audit_id: str, result: AuditResult | None = None) -> dict[str, Any]:
    """The slider values of ``audit_id``: the view last stored for it (so a reload or a shared
    link shows the same view), else its analysis's settings the first time."""
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
        try:
            store = get_store()
            stored = VIEW_WRITER.pending(store.path, audit_id) or store.get_view(audit_id)
        except Exception as exc:  # the view is a convenience: never stop a page for it
            _log.warning("could not read the view of %s: %s", audit_id, exc)
            stored = {}
        for name in VIEW_KEYS:
            if name in stored and _valid_view_value(name, stored[name]):
                live[name] = stored[name]
        live["k"] = float(min(max(live["k"], K_RANGE[0]), K_RANGE[1]))
        # a top k stored for a larger pool (the pool replaced since, a received database)
        # is the whole pool: the Flip page's input would show its minimum, the caption the k
        if live["top_k"] is not None and result.pool_size:
            live["top_k"] = int(min(max(int(live["top_k"]), 1), int(result.pool_size)))
    return live


def _valid_view_value(name: str, value: Any) -> bool:
    if value is None:
        return name in ("top_k", "of_n", "override", "capacity", "apps")
    if name == "mode":
        return value in ("score", "top-k")
    if name == "override_on":
        return isinstance(value, bool)
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and bool(np.isfinite(value)) and (name == "cutoff" or value >= 0))


def _sync(audit_id: str, name: str, wkey: str) -> None:
    live = st.session_state[LIVE][audit_id]
    live[name] = st.session_state[wkey]
    remember_view(audit_id)


class _ViewWriter:
    """Stores page views in a background thread, the latest per (file, audit) only.

    Why: a widget's callback runs before its rerun, so a write there (a transaction and a
    checkpoint of the file: 3 ms on a quiet machine, 100–300 ms measured while the browser and
    other work share the cores) delayed every widget answer. The view is a convenience
    (``get_view`` is read once, when a session first shows an audit), so it is written a moment
    later, and :meth:`pending` lets a session of this process read a view not yet written.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued: dict[tuple[str, str], tuple[Store, dict[str, Any]]] = {}
        self._wake = threading.Condition(self._lock)
        self._busy = False
        self._thread: threading.Thread | None = None

    def put(self, store: Store, audit_id: str, view: dict[str, Any]) -> None:
        with self._lock:
            self._queued[(store.path, audit_id)] = (store, dict(view))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="view-writer",
                                                daemon=True)
                self._thread.start()
            self._wake.notify_all()

    def pending(self, path: str, audit_id: str) -> dict[str, Any] | None:
        with self._lock:
            item = self._queued.get((path, audit_id))
            return None if item is None else dict(item[1])

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued view is written (tests; the process's exit)."""
        with self._lock:
            return self._wake.wait_for(lambda: not self._queued and not self._busy, timeout)

    def _loop(self) -> None:
        while True:
            with self._lock:
                self._wake.wait_for(lambda: bool(self._queued))
                (path, audit_id), (store, view) = next(iter(self._queued.items()))
                self._busy = True
            try:
                store.set_view(audit_id, view)
            except Exception as exc:  # a read-only or full disk: only the memory is lost
                _log.warning("could not store the view of %s: %s", audit_id, exc)
            with self._lock:
                # a newer view queued meanwhile stays queued (it is written next)
                if self._queued.get((path, audit_id), (None, None))[1] == view:
                    del self._queued[(path, audit_id)]
                self._busy = False
                self._wake.notify_all()


VIEW_WRITER = _ViewWriter()
atexit.register(VIEW_WRITER.flush, 5.0)


def remember_view(audit_id: str) -> None:
    """Store the live values of ``audit_id``, off the widget's answer (:class:`_ViewWriter`);
    failures to write only cost the memory of the view."""
    live = st.session_state.get(LIVE, {}).get(audit_id)
    if not live:
        return
    VIEW_WRITER.put(get_store(), audit_id, {n: live[n] for n in VIEW_KEYS})


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
def _running(audit_id: str) -> tuple[int, int] | None:
    handle = run_registry().get(audit_id)
    if handle is not None and handle.running:
        stt = handle.status()
        return int(stt.done), int(stt.total)
    return None


@st.cache_resource(max_entries=32, show_spinner=False)
def _step_status(path: str, audit_id: str, version: str,
                 running: tuple[int, int] | None) -> list[StepStatus]:
    return _core_step_status(_open_store(path), audit_id, running)


def step_status(store: Store, audit_id: str) -> list[StepStatus]:
    """Each wizard step's status (:func:`core.steps.step_status` with this process's run),
    cached per data version: a page switch does not re-count the audit's draws."""
    return _step_status(store.path, audit_id, store.data_version(audit_id), _running(audit_id))


def progress(store: Store, audit_id: str) -> RunProgress:
    """Draws stored against draws expected (:func:`core.steps.run_progress`)."""
    return run_progress(store, audit_id, _running(audit_id))


def provisional_banner(store: Store, audit_id: str) -> bool:
    """One banner on a statistics page while the audit's draws are incomplete.

    Returns True when the numbers are provisional (verdicts should say so).
    """
    prog = progress(store, audit_id)
    if not prog.incomplete:
        return False
    how = "a run is in progress" if prog.running else "the run is not complete"
    with st.container(key="provisional-banner"):
        st.warning(f"**Provisional: {prog.label()}** — {how}. Every number and verdict on this "
                   "page can still change; wait for the last draw before acting on it.",
                   icon=":material/hourglass_top:")
    return True


_ICONS = {"done": ":green[:material/check_circle:]",
          "needs": ":gray[:material/radio_button_unchecked:]",
          "blocked": ":red[:material/block:]",
          "running": ":orange[:material/pending:]"}

_SECTIONS = {"Audit": ("freeze", "sample", "run", "criteria", "flip", "band"),
             "Compare": ("compare",), "Over time": ("drift",)}


def _picked() -> None:
    """The picker changed: put the audit in the URL now, so Back undoes the switch."""
    audit_id = st.session_state.get(ACTIVE_AUDIT)
    if audit_id is not None:
        st.query_params[URL_AUDIT] = audit_id
        st.session_state[LAST_URL_AUDIT] = audit_id


def sidebar(store: Store, pages: dict[str, Any] | None = None) -> str | None:
    """The shared sidebar: page links (carrying ``?audit=``), the active audit picker, harness
    hash, step status. Returns the audit.

    The URL is the authority on the active audit when it changed under this session (Back, a
    link, a reload); the picker otherwise. A page switch through these links is one history
    entry; switching the audit is another, so Back undoes it.
    """
    ss = st.session_state
    audits = store.list_audits()
    ids = [str(a) for a in audits["audit_id"]]
    evaluations = dict(zip(ids, audits["evaluations"]))
    from_url = st.query_params.get(URL_AUDIT)
    pending = ss.pop(PENDING_AUDIT, None)
    if pending in ids:
        ss[ACTIVE_AUDIT] = pending
    elif from_url in ids and from_url != ss.get(LAST_URL_AUDIT):
        ss[ACTIVE_AUDIT] = from_url
    elif ss.get(ACTIVE_AUDIT) not in ids:
        ss[ACTIVE_AUDIT] = from_url if from_url in ids else _default_audit(ids)
    audit_id = ss.get(ACTIVE_AUDIT)
    if audit_id is not None and (from_url is not None or audit_id != _default_audit(ids)) \
            and from_url != audit_id:
        st.query_params[URL_AUDIT] = audit_id
    ss[LAST_URL_AUDIT] = audit_id if (from_url is not None or audit_id != _default_audit(ids)) \
        else None
    if from_url is not None and from_url not in ids and audit_id is not None:
        # a shared link to an audit this database does not hold: say so, never show another
        # audit as if it were the linked one (in the page: at 800 px the sidebar is closed)
        named = from_url if len(from_url) <= 80 else from_url[:80] + "…"
        st.warning(md_escape(f"The link names the audit '{named}', which is not in this "
                             f"database ({store.path}); showing '{audit_id}' instead."))
    with st.sidebar:
        if pages:
            link_args = {"query_params": {URL_AUDIT: audit_id}} if audit_id else {}
            for section, urls in _SECTIONS.items():
                shown = [u for u in urls if u in pages]
                if not shown:
                    continue
                st.caption(section)
                for u in shown:
                    st.page_link(pages[u], **link_args)
            st.divider()
        if not ids:
            st.warning("No audit in the database yet: start one on the Freeze page.")
            return None
        # options are the bare ids: a label that changes (e.g. a live draw count) would make
        # Streamlit treat it as a new widget and reset the choice
        audit_id = st.selectbox("Active audit", ids, key=ACTIVE_AUDIT, on_change=_picked,
                                help=f"Audits stored in {store.path}")
        audit = store.get_audit(audit_id)
        # while a run of this process fills the audit, the count and the steps refresh by
        # themselves (the same store read as the Run page's progress), not only on a rerun
        running = _running(audit_id) is not None
        st.fragment(_sidebar_status, run_every=2.0 if running else None)(
            store, audit_id, int(evaluations.get(audit_id, 0)), running)
        st.caption("Harness hash (the audit's version)")
        st.code(audit["harness_hash"] or "not frozen", language=None, wrap_lines=True)
    return audit_id


def _sidebar_status(store: Store, audit_id: str, evaluations: int, running: bool) -> None:
    """The evaluations count and the step list of the sidebar (a fragment during a run)."""
    done = progress(store, audit_id).done if running else evaluations
    st.caption(f"{int(done):,} evaluations stored" + (" (run in progress)" if running else ""))
    st.caption("Steps")
    for s in step_status(store, audit_id):
        title = PAGES[s.step][1]
        st.markdown(f"{_ICONS[s.state]} **{title}** — {md_escape(s.text)}")


# ----------------------------------------------------------------------------- layout
#: Fixed markup (no user text): metric values, metric labels and button labels wrap instead of
#: being cut off with "…" on narrow screens; at 800 px and below the sidebar starts collapsed
#: (once per browser tab, so a user who opens it again keeps it open). Streamlit collapses it
#: by itself only at 768 px and below.
_LAYOUT = """
<style>
[data-testid="stMetricValue"] > div, [data-testid="stMetricLabel"] *,
[data-testid="stMetricValue"] * {
  white-space: normal !important; overflow: visible !important;
  text-overflow: clip !important; overflow-wrap: anywhere;
}
[data-testid="stMetricValue"] { overflow: visible !important; height: auto !important; }
[data-testid="stDownloadButton"] button p, [data-testid="stButton"] button p,
[data-testid="stBaseButton-secondary"] p, [data-testid="stBaseButton-primary"] p {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
}
</style>
<script>
(function () {
  const KEY = "audit-sidebar-auto-collapsed";
  if (window.innerWidth > 800 || window.sessionStorage.getItem(KEY)) return;
  let tries = 0;
  const t = window.setInterval(function () {
    const side = document.querySelector('[data-testid="stSidebar"]');
    const btn = document.querySelector('[data-testid="stSidebarCollapseButton"] button');
    tries += 1;
    if (side && btn && side.getAttribute("aria-expanded") !== "false") {
      btn.click();
      window.sessionStorage.setItem(KEY, "1");
      window.clearInterval(t);
    } else if (tries > 50) {
      window.clearInterval(t);
    }
  }, 100);
})();
</script>
"""


def layout() -> None:
    """The narrow-screen fixes (see ``_LAYOUT``); drawn once per run by the router."""
    with st.sidebar:
        st.html(_LAYOUT, unsafe_allow_javascript=True)


# ----------------------------------------------------------------------------- who may see it
@st.cache_resource(show_spinner=False)
def _log_refusal(message: str) -> bool:
    """Say it once per process in the server's terminal."""
    _log.error(message)
    print(message, flush=True)
    return True


def _secrets() -> dict[str, Any]:
    try:
        return st.secrets.to_dict()
    except Exception:  # no secrets file (FileNotFoundError, StreamlitSecretNotFoundError…)
        return {}


def access_gate() -> None:
    """Refuse to serve on a non-loopback address without a login; ask for the login when one
    is configured (core/serving.py holds the policy)."""
    address = str(st.get_option("server.address") or "")
    access = access_from(_secrets(), os.environ)
    problem = check(address, access)
    if problem:
        _log_refusal(problem)
        st.error(problem)
        st.stop()
    if access.oidc_configured and access.allowed_domains:
        if not st.user.is_logged_in:
            st.title("Screening score variance audit")
            st.info("Sign in to see the audits.")
            st.button("Sign in", on_click=st.login, type="primary")
            st.stop()
        if not email_allowed(st.user.get("email"), access.allowed_domains):
            st.error("This account is not allowed to see the audits (its e-mail domain is not "
                     "on the allow-list).")
            st.button("Sign out", on_click=st.logout)
            st.stop()
