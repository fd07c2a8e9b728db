"""The run's one writer: a background thread that batches call and draw rows into the store.

Every ``flush_s`` seconds (sooner when ``batch_rows`` results are waiting) one short
transaction writes what arrived since the last one, a call row and its draws always together,
so the store is consistent at every moment and a killed process re-does at most the last
``flush_s`` seconds of calls (plus the batch being written) on resume. A batch thus grows with
the call rate: a transaction costs ~40–50 ms of CPU whatever its size (the file is attached,
checked and checkpointed each time), so a fixed small batch would spend a core at a high rate.

:meth:`Writer.put` only appends to a deque: the engine's event loop never waits for the
writer's thread, and the thread wakes once per batch, not once per result (each wake-up would
hand the GIL back and forth with the loop).

The batches are Arrow tables with the store's own column lists (:data:`core.store.CALL_COLUMNS`,
:data:`core.store.DRAW_COLUMNS`), each column typed by its values: Arrow reads a list of Python
values in one C loop (~4 ms for 1,000 calls and their 5,000 draws, against ~27 ms column by
column through pandas), which is time the writer's thread holds the GIL and the event loop
waits; DuckDB then scans the tables without the GIL.
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from collections import deque
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from core.errors import StoreError
from core.store import CALL_COLUMNS, DRAW_COLUMNS, Store

__all__ = ["Writer", "calls_frame", "draws_frame"]

#: The columns the writer fills (the store adds ``audit_id``).
_CALLS = [c for c in CALL_COLUMNS if c != "audit_id"]
_DRAWS = [c for c in DRAW_COLUMNS if c != "audit_id"]
_CLOSE = object()   # the mark that ends the writer's thread


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _typed_by_hand(values: list[Any]) -> Any:
    """A column Arrow cannot type by itself (mixed kinds): bool, Int64, float64, datetime64,
    else text."""
    present = [v for v in values if not _missing(v)]
    if present and all(isinstance(v, (bool, np.bool_)) for v in present):
        return pd.array(values, dtype="boolean")
    if present and all(isinstance(v, numbers.Integral) for v in present):
        return pd.array([None if _missing(v) else int(v) for v in values], dtype="Int64")
    if present and all(isinstance(v, numbers.Real) for v in present):
        return np.array([np.nan if _missing(v) else float(v) for v in values],
                        dtype="float64")
    if present and all(isinstance(v, datetime) for v in present):
        return pd.to_datetime(pd.Series(values, dtype="object")).to_numpy()
    return pd.array([None if _missing(v) else str(v) for v in values],
                    dtype="string[pyarrow]")


def _column(values: list[Any]) -> pa.Array:
    """One column typed by its values (None and NaN are missing)."""
    try:
        return pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array(_typed_by_hand(values), from_pandas=True)


def _table(rows: list[dict[str, Any]], columns: list[str]) -> pa.Table:
    return pa.table({c: _column([r.get(c) for r in rows]) for c in columns})


def calls_frame(rows: list[dict[str, Any]]) -> pa.Table:
    """Call rows (dicts keyed by the store's call columns) as a typed Arrow table."""
    return _table(rows, _CALLS)


def draws_frame(rows: list[dict[str, Any]]) -> pa.Table:
    """Draw rows (dicts keyed by the store's draw columns) as a typed Arrow table."""
    return _table(rows, _DRAWS)


class Writer:
    """The one writer: a thread batching rows into the store.

    Parameters
    ----------
    store, audit_id
        Where the rows go.
    batch_rows : int
        Most results in one transaction; this many waiting wake the writer before its time.
    flush_s : float
        Longest time a result waits to be written (what a kill -9 can lose).
    """

    def __init__(self, store: Store, audit_id: str, batch_rows: int, flush_s: float) -> None:
        self.store, self.audit_id = store, audit_id
        self.batch_rows, self.flush_s = max(1, batch_rows), max(0.01, flush_s)
        # results, flush waiters and the closing mark, in the order they were put
        self._items: deque[Any] = deque()
        self._wake = threading.Event()
        self._now = False                      # write_soon() was called
        self.error: BaseException | None = None
        self.written_calls = 0
        self.batches = 0
        self._thread = threading.Thread(target=self._loop, name=f"writer-{audit_id}",
                                        daemon=True)
        self._thread.start()

    def put(self, call_row: dict[str, Any], draw_rows: list[dict[str, Any]]) -> None:
        """Queue one call row and its draws (never blocks; wakes the writer only when a full
        batch is waiting)."""
        self._items.append((call_row, draw_rows))
        if len(self._items) >= self.batch_rows and not self._wake.is_set():
            self._wake.set()

    def write_soon(self) -> None:
        """Write what is waiting without waiting for the clock, and without blocking (the
        engine calls it when the last calls are in flight, so that the batch left for
        :meth:`close` is small)."""
        self._now = True
        self._wake.set()

    def flush(self, timeout: float = 60.0) -> None:
        """Block until everything put so far is written."""
        done = threading.Event()
        self._items.append(done)
        self._wake.set()
        done.wait(timeout)

    def close(self, timeout: float = 120.0) -> None:
        """Write what is waiting and end the thread."""
        self._items.append(_CLOSE)
        self._wake.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        pending: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        due = time.monotonic() + self.flush_s
        closing = False
        while not closing:
            self._wake.wait(max(0.0, due - time.monotonic()))
            self._wake.clear()
            waiters: list[threading.Event] = []
            while self._items:                 # only this thread takes items out
                item = self._items.popleft()
                if item is _CLOSE:
                    closing = True
                elif isinstance(item, threading.Event):
                    waiters.append(item)
                else:
                    pending.append(item)
            soon, self._now = self._now, False
            if closing or waiters or soon or time.monotonic() >= due \
                    or len(pending) >= self.batch_rows:
                while pending:
                    batch = pending[:self.batch_rows]
                    if not self._write(batch, final=closing):
                        break                  # the file stayed held: kept for the next time
                    del pending[:len(batch)]
                due = time.monotonic() + self.flush_s
            for w in waiters:
                w.set()

    def _write(self, batch: list[tuple[dict[str, Any], list[dict[str, Any]]]],
               final: bool = False) -> bool:
        """One batch, one short transaction (the file is held only while it commits).

        Returns False when the file stayed held by another process for the store's whole
        wait: the batch is kept and retried with the next one (the last batch fails the run).
        """
        if self.error is not None:
            return True
        calls = [call for call, _ in batch]
        draws = [d for _, rows in batch for d in rows]
        try:
            self.store.write_results(self.audit_id, calls_frame(calls),
                                     draws_frame(draws) if draws else None, fresh_calls=True)
            self.written_calls += len(calls)
            self.batches += 1
        except StoreError as exc:
            if getattr(exc, "locked", False) and not final:
                return False
            self.error = exc
        except Exception as exc:  # noqa: BLE001 - reported through the run status; the run stops
            self.error = exc
        return True
