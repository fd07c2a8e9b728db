"""The run's one writer: a background thread that batches call and draw rows into the store.

Every ``batch_rows`` results or ``flush_s`` seconds one short transaction writes a batch, a
call row and its draws always together, so the store is consistent at every moment and a
killed process re-does at most one batch on resume. The frames follow the store's own column
lists (:data:`core.store.CALL_COLUMNS`, :data:`core.store.DRAW_COLUMNS`); each column's type is
read from its values (whole numbers → ``Int64``, text → Arrow strings that DuckDB scans without
the GIL).
"""

from __future__ import annotations

import math
import numbers
import queue
import threading
import time
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from core.errors import StoreError
from core.store import CALL_COLUMNS, DRAW_COLUMNS, Store

__all__ = ["Writer", "calls_frame", "draws_frame"]

#: The columns the writer fills (the store adds ``audit_id``).
_CALLS = [c for c in CALL_COLUMNS if c != "audit_id"]
_DRAWS = [c for c in DRAW_COLUMNS if c != "audit_id"]


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _column(values: list[Any]) -> Any:
    """One column, typed by its values: bool, Int64, float64, datetime64 or Arrow string."""
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


def _frame(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: _column([r.get(c) for r in rows]) for c in columns})


def calls_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Call rows (dicts keyed by the store's call columns) as a typed frame."""
    return _frame(rows, _CALLS)


def draws_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Draw rows (dicts keyed by the store's draw columns) as a typed frame."""
    return _frame(rows, _DRAWS)


class Writer:
    """The one writer: a thread batching rows into the store."""

    def __init__(self, store: Store, audit_id: str, batch_rows: int, flush_s: float) -> None:
        self.store, self.audit_id = store, audit_id
        self.batch_rows, self.flush_s = max(1, batch_rows), max(0.01, flush_s)
        self._q: queue.Queue[Any] = queue.Queue()
        self.error: BaseException | None = None
        self.written_calls = 0
        self._thread = threading.Thread(target=self._loop, name=f"writer-{audit_id}",
                                        daemon=True)
        self._thread.start()

    def put(self, call_row: dict[str, Any], draw_rows: list[dict[str, Any]]) -> None:
        self._q.put((call_row, draw_rows))

    def flush(self, timeout: float = 60.0) -> None:
        """Block until everything put so far is written."""
        done = threading.Event()
        self._q.put(("flush", done))
        done.wait(timeout)

    def close(self, timeout: float = 120.0) -> None:
        self._q.put(None)
        self._thread.join(timeout)

    def _loop(self) -> None:
        calls: list[dict[str, Any]] = []
        draws: list[dict[str, Any]] = []
        last = time.monotonic()
        closing = False
        while not closing:
            try:
                item = self._q.get(timeout=self.flush_s)
            except queue.Empty:
                item = "tick"
            waiter = None
            if item is None:
                closing = True
            elif isinstance(item, tuple) and item[0] == "flush":
                waiter = item[1]
            elif item != "tick":
                calls.append(item[0])
                draws.extend(item[1])
            due = (len(calls) >= self.batch_rows or time.monotonic() - last >= self.flush_s
                   or closing or waiter is not None)
            if due and calls and self._write(calls, draws, final=closing):
                calls, draws = [], []
            if due:
                last = time.monotonic()
            if waiter is not None:
                waiter.set()

    def _write(self, calls: list[dict[str, Any]], draws: list[dict[str, Any]],
               final: bool = False) -> bool:
        """One batch, one short transaction (the file is held only while it commits).

        Returns False when the file stayed held by another process for the store's whole
        wait: the batch is kept and retried with the next one (the last batch fails the run).
        """
        if self.error is not None:
            return True
        try:
            self.store.write_results(self.audit_id, calls_frame(calls),
                                     draws_frame(draws) if draws else None)
            self.written_calls += len(calls)
        except StoreError as exc:
            if getattr(exc, "locked", False) and not final:
                return False
            self.error = exc
        except Exception as exc:  # noqa: BLE001 - reported through the run status; the run stops
            self.error = exc
        return True
