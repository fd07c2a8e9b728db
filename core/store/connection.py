"""Connection: the audit file attached to one process-wide in-memory DuckDB instance per use.

* **The file is held only while it is used.** DuckDB lets one process at a time open a file for
  writing, and while it does no other process may open it at all. So a store holds no
  connection: every read, write or transaction attaches the file to a process-wide in-memory
  DuckDB instance (``ATTACH``), works, and detaches it again (``DETACH``, which checkpoints).
  The app, a terminal ``import`` / ``report`` / ``run`` / ``drift`` and a background run can
  then share one file. Attaching costs ~2 ms for a read and ~10–20 ms for a write (the
  checkpoint) against ~20–50 ms for a new DuckDB instance, hence attach rather than connect.
* **A bounded wait on the lock.** When another process holds the file, the attach is retried
  with backoff for up to ``wait_s`` seconds (``AUDIT_DB_WAIT_S``, default 30), then a
  :class:`StoreError` says the file is in use.
* **Threads.** Attachments are reference-counted per file, so threads (page runs, a run's
  writer) share an attachment while any of them works; each operation has a cursor of its own,
  because a DuckDB connection refuses concurrent calls. Writes of one process are serialised.
* **Staging.** A file from outside is read into an in-memory database attached to the same
  instance (:func:`stage`), so a validated import is copied into the audit file by one
  ``INSERT … SELECT`` inside DuckDB, never through Python objects.
* A file held by another process, a corrupt file, an unwritable folder: :class:`StoreError` with
  one line.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from core.errors import StoreError

#: Seconds to wait for a file held by another process before giving up (``AUDIT_DB_WAIT_S``).
DEFAULT_WAIT_S = 30.0

#: Memory the process-wide DuckDB instance may use (validation of a file from outside included);
#: a file that needs more is refused with one line (SPEC §6: any input within 2 GB).
MEMORY_LIMIT_MB = 1024


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _text(exc: BaseException) -> str:
    """The error's text, lower-case, without quoted parts (a file name such as
    "corrupt-copy.duckdb" must not decide what the error is)."""
    return re.sub(r'"[^"]*"', '""', str(exc)).lower()


def _is_lock_conflict(exc: BaseException) -> bool:
    """Another process (or another handle in this one) holds the file."""
    low = _text(exc)
    return ("could not set lock" in low or "conflicting lock" in low
            or "unique file handle conflict" in low)


def _is_corrupt(low: str) -> bool:
    return ("corrupt" in low or "checksum" in low or "not a valid duckdb" in low
            or "magic" in low or "invalid database" in low)


def _is_unwritable(exc: BaseException) -> bool:
    low = _text(exc)
    if _is_lock_conflict(exc):
        return False
    return (isinstance(exc, PermissionError) or "permission denied" in low
            or "read-only file system" in low or "read only file system" in low
            or "read-only mode" in low
            or "no space left" in low)


def _explain(path: str, exc: BaseException, *, waited: float | None = None) -> str:
    """One line for a DuckDB or OS error on ``path`` (checked in order: corruption first —
    DuckDB's checksum message says "in block", which contains "lock")."""
    low = _text(exc)
    if _is_corrupt(low):
        return (f"The database file {path} is corrupt or not a DuckDB file "
                f"({_first_line(exc)[:160]}). Move it aside (keep a copy) and start again; "
                "the app recreates the demo.")
    if _is_lock_conflict(exc):
        held = f" (waited {waited:.0f} s)" if waited else ""
        return (f"The database file {path} is in use by another process{held}, for example a "
                "long import or a run in another terminal. Try again when it has finished, or "
                "pass another file with --db.")
    if _is_unwritable(exc):
        why = ("the disk is full" if "no space left" in low else
               "its folder is read-only or not writable by this user")
        return (f"The database file {path} cannot be written: {why}. Pass a file in a "
                "writable folder with --db (or set AUDIT_DB for the app).")
    if "serializ" in low or "incompatible" in low or "storage version" in low:
        return (f"The database file {path} was written by an incompatible DuckDB version. "
                "Upgrade with 'pip install -U duckdb' or move the file aside.")
    return f"The database file {path} cannot be used: {_first_line(exc)[:200]}"


def _store_error(path: str, exc: BaseException, *, waited: float | None = None) -> StoreError:
    err = StoreError(_explain(path, exc, waited=waited))
    err.locked = _is_lock_conflict(exc) and not _is_corrupt(_text(exc))
    return err


def _wait_s() -> float:
    try:
        value = float(os.environ.get("AUDIT_DB_WAIT_S", DEFAULT_WAIT_S))
    except ValueError:
        return DEFAULT_WAIT_S
    return value if value >= 0 else DEFAULT_WAIT_S


class _Attachment:
    __slots__ = ("alias", "users", "read_only", "forced")

    def __init__(self, alias: str, read_only: bool, forced: bool) -> None:
        self.alias, self.users, self.read_only, self.forced = alias, 0, read_only, forced


class _Attachments:
    """Process-wide: one in-memory DuckDB instance to which each file is attached while in use.

    Reference-counted per file: the first user attaches (retrying while another process holds
    the file), the last one detaches, which checkpoints and releases the file's lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._files: dict[str, _Attachment] = {}
        self._path_locks: dict[str, threading.Lock] = {}
        self._write_locks: dict[str, threading.RLock] = {}
        self._names = itertools.count(1)

    def con(self) -> duckdb.DuckDBPyConnection:
        with self._lock:
            if self._con is None:
                # spills (a large check under the memory limit) go to the system's temporary
                # folder, not to a '.tmp' in whatever folder the user started from
                self._con = duckdb.connect(":memory:", config={
                    "memory_limit": f"{MEMORY_LIMIT_MB}MB",
                    "temp_directory": os.path.join(tempfile.gettempdir(),
                                                   f"screening-audit-{os.getpid()}")})
                self._con.execute("SET enable_progress_bar = false")
            return self._con

    def new_alias(self, prefix: str) -> str:
        return f"{prefix}_{next(self._names)}"

    def _locks(self, key: str) -> tuple[threading.Lock, threading.RLock]:
        with self._lock:
            return (self._path_locks.setdefault(key, threading.Lock()),
                    self._write_locks.setdefault(key, threading.RLock()))

            return (self._path_locks.setdefault(key, threading.Lock()),
                    self._write_locks.setdefault(key, threading.RLock()))

    def write_lock(self, key: str) -> threading.RLock:
        return self._locks(key)[1]

    def acquire(self, key: str, read_only: bool, wait_s: float, shown: str) -> str:
        """Attach ``key`` (or join its attachment); returns the alias to ``USE``."""
        deadline = time.monotonic() + wait_s
        started = time.monotonic()
        path_lock, _ = self._locks(key)
        while True:
            with path_lock:
                att = self._files.get(key)
                if att is None:
                    alias, ro = self._attach(key, read_only, deadline, started, shown)
                    att = _Attachment(alias, ro, forced=ro and not read_only)
                    self._files[key] = att
                # a read-write attachment serves readers; a file that can only be read (its
                # folder is read-only) serves everyone, and a write then fails with one line
                if read_only or not att.read_only or att.forced:
                    att.users += 1
                    return att.alias
            # a read-only attachment is in use and this user writes: wait for it to end
            if time.monotonic() >= deadline:
                raise StoreError(_explain(shown, RuntimeError("conflicting lock"),
                                          waited=time.monotonic() - started))
            time.sleep(0.01)

    def _attach(self, key: str, read_only: bool, deadline: float, started: float,
                shown: str) -> tuple[str, bool]:
        """Attach with a bounded wait on the lock; returns the alias and whether read-only."""
        alias = self.new_alias("audit_db")
        quoted = key.replace("'", "''")
        sql = f"ATTACH '{quoted}' AS {alias}"
        attempt = 0
        cur = self.con().cursor()
        try:
            while True:
                try:
                    cur.execute(sql + (" (READ_ONLY)" if read_only else ""))
                    return alias, read_only
                except (duckdb.Error, OSError) as exc:
                    # the lock first: "Could not set lock …: Permission denied" (EACCES from
                    # fcntl) is another process holding the file, not a read-only folder
                    if _is_lock_conflict(exc):
                        if time.monotonic() < deadline:
                            pause = min(0.25, 0.01 * 2 ** attempt) * (0.5 + random.random())
                            time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
                            attempt += 1
                            continue
                    elif (not read_only and _is_unwritable(exc) and not _is_corrupt(_text(exc))
                            and Path(key).is_file()):
                        read_only = True   # an existing file in a read-only place: read it
                        continue
                    raise _store_error(shown, exc,
                                       waited=time.monotonic() - started) from None
        finally:
            cur.close()

    def release(self, key: str, shown: str) -> None:
        path_lock, _ = self._locks(key)
        with path_lock:
            att = self._files[key]
            att.users -= 1
            if att.users > 0:
                return
            del self._files[key]
            cur = self.con().cursor()
            try:
                cur.execute(f"DETACH {att.alias}")
            except (duckdb.Error, OSError) as exc:
                raise _store_error(shown, exc) from None
            finally:
                cur.close()


_ATTACHED = _Attachments()


def attachments() -> _Attachments:
    """The process-wide instance and its attachments."""
    return _ATTACHED


class Staging:
    """A private in-memory database attached to the process-wide instance: a file from outside
    is read and checked there, and a validated import is copied from it into an audit file.

    ``cursor()`` gives a cursor whose default database is the staging one. Dropped (detached,
    its memory freed) by :meth:`close` or when garbage collected.
    """

    def __init__(self) -> None:
        self.alias = _ATTACHED.new_alias("stage")
        cur = _ATTACHED.con().cursor()
        try:
            cur.execute(f"ATTACH ':memory:' AS {self.alias}")
        finally:
            cur.close()
        self._closed = False

    def cursor(self) -> duckdb.DuckDBPyConnection:
        cur = _ATTACHED.con().cursor()
        cur.execute(f"USE {self.alias}")
        return cur

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        cur = _ATTACHED.con().cursor()
        try:
            cur.execute("USE memory")
            cur.execute(f"DETACH DATABASE IF EXISTS {self.alias}")
        except duckdb.Error:
            pass
        finally:
            cur.close()

    def __del__(self) -> None:  # a validated import that is never committed frees its memory
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit the module may be gone
            pass
