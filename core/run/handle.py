"""A run in a background thread for the app and the terminal: :class:`RunHandle`
(``start()``, ``stop()``, ``status()``, never touching streamlit) and the process-wide
:class:`RunRegistry` of handles (:func:`registry`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from core.errors import GuardError
from core.run.engine import Runner
from core.run.options import PriceTable, RunOptions
from core.run.status import RunStatus, StopToken
from core.screeners.base import scrub
from core.store import Store

__all__ = ["RunHandle", "RunRegistry", "registry"]


class RunHandle:
    """A run in a background thread, for the app (and the CLI).

    The thread owns its own event loop and HTTP client and never calls streamlit. The page
    polls :meth:`status` (or the database) from a ``st.fragment(run_every=…)``.

    Examples
    --------
    >>> handle = RunHandle(store, "eng-2291", screener, RunOptions(runs=15)).start()
    >>> handle.status().fraction        # poll
    >>> handle.stop(); handle.join()    # stop cleanly; start a new handle to resume
    """

    def __init__(self, store: Store, audit_id: str, screener: Any,
                 options: RunOptions | None = None, *, prices: PriceTable | None = None,
                 until: str = "all",
                 on_progress: Callable[[RunStatus], None] | None = None) -> None:
        self.audit_id = audit_id
        self.stop_token = StopToken()
        self._on_progress = on_progress
        self.runner = Runner(store, audit_id, screener, options, prices=prices,
                             stop=self.stop_token, until=until, progress=on_progress)
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.result: RunStatus | None = None
        # Set when the run has ended. Waiting on an Event survives a Ctrl-C in the waiting
        # thread; Thread.join interrupted by KeyboardInterrupt can leave is_alive() False
        # while the thread still runs (CPython), and the store would be closed under it.
        self._done = threading.Event()

    def start(self) -> RunHandle:
        if self._thread is not None:
            raise GuardError("this run was started already; make a new handle to resume")
        self._thread = threading.Thread(target=self._main, name=f"run-{self.audit_id}",
                                        daemon=True)
        self._thread.start()
        return self

    def _main(self) -> None:
        try:
            self.result = asyncio.run(self.runner.run())
        except BaseException as exc:  # noqa: BLE001 - kept for the page; the status says what happened
            self.error = exc
            st = self.runner.status()
            if st.state not in ("blocked", "failed"):
                state = "blocked" if isinstance(exc, GuardError) else "failed"
                self.runner._update(force=True, state=state, message=scrub(str(exc)))
        finally:
            self._done.set()

    def stop(self) -> None:
        """Ask the run to stop: in-flight calls are cancelled and recorded, writes flushed."""
        self.stop_token.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True when it has ended."""
        if self._thread is None:
            return True
        return self._done.wait(timeout)

    def status(self) -> RunStatus:
        return self.runner.status()

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._done.is_set()


class RunRegistry:
    """Process-wide handles by audit id (the app keeps one in ``st.cache_resource``)."""

    def __init__(self) -> None:
        self._handles: dict[str, RunHandle] = {}
        self._lock = threading.Lock()

    def start(self, store: Store, audit_id: str, screener: Any,
              options: RunOptions | None = None, **kwargs: Any) -> RunHandle:
        """Start (or resume) a run; refuses while one is running for the audit."""
        with self._lock:
            old = self._handles.get(audit_id)
            if old is not None and old.running:
                raise GuardError(f"a run of audit '{audit_id}' is already in progress")
            handle = RunHandle(store, audit_id, screener, options, **kwargs)
            self._handles[audit_id] = handle
        return handle.start()

    def get(self, audit_id: str) -> RunHandle | None:
        with self._lock:
            return self._handles.get(audit_id)

    def stop(self, audit_id: str) -> None:
        handle = self.get(audit_id)
        if handle is not None:
            handle.stop()

    def active(self) -> list[str]:
        with self._lock:
            return [a for a, h in self._handles.items() if h.running]


_REGISTRY = RunRegistry()


def registry() -> RunRegistry:
    """The process-wide :class:`RunRegistry`."""
    return _REGISTRY
