"""What a run reports while it runs (:class:`RunStatus`) and how it is asked to stop
(:class:`StopToken`); both are safe to use from any thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RunStatus", "StopToken"]


@dataclass(frozen=True)
class RunStatus:
    """A snapshot of a run, safe to read from any thread.

    ``state``: ``idle`` → ``preflight`` → ``running`` → ``finished`` | ``stopped`` |
    ``blocked`` (a guard stopped it) | ``failed`` (an error; see ``message``).
    ``done``/``total`` count ``(candidate, run)`` pairs with a draw, earlier sessions included.
    """

    state: str = "idle"
    done: int = 0
    total: int = 0
    calls: int = 0
    errors: int = 0
    parse_errors: int = 0
    retries: int = 0
    cancelled: int = 0
    eta_s: float | None = None
    elapsed_s: float = 0.0
    cost: float = 0.0
    message: str = ""
    findings: tuple[str, ...] = ()
    preflight_latency_s: float | None = None
    reported_models: tuple[str, ...] = ()
    #: Failed calls of this session by kind: parse_error, out_of_range, truncated, refused,
    #: and "HTTP 503" / "timeout or connection" / "error" for calls that got no answer.
    failures: tuple[tuple[str, int], ...] = ()
    #: The circuit breaker's paragraph when it stopped the run.
    breaker: str | None = None
    #: Pairs of this run without a draw at the end, by why (the last failure's kind).
    missing: tuple[tuple[str, int], ...] = ()

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0

    @property
    def active(self) -> bool:
        return self.state in ("idle", "preflight", "running", "stopping")


class StopToken:
    """Thread-safe stop request; the engine cancels its in-flight calls when it is set."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def set(self) -> None:
        self._event.set()
        with self._lock:
            callbacks = list(self._callbacks)
        for cb in callbacks:
            try:
                cb()
            except RuntimeError:  # loop already closed
                pass

    def is_set(self) -> bool:
        return self._event.is_set()

    def on_set(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)
        if self._event.is_set():
            callback()
