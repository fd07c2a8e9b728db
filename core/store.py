"""The one module that speaks SQL: the DuckDB file of audits, calls and draws.

Design
------
* **The file is held only while it is used.** DuckDB lets one process at a time open a file for
  writing, and while it does no other process may open it at all. So a :class:`Store` holds no
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
* Writes are batched: DataFrames are registered and copied with ``INSERT … SELECT``, never
  ``executemany``. Each import is one transaction; a failure rolls everything back.
* ``ON CONFLICT DO NOTHING`` on primary keys makes resumed writes idempotent; a request id stored
  for another ``(candidate, run)`` is refused (:meth:`Store.request_id_clashes`).
* A schema version is stored in ``meta`` and checked on open.
* A file held by another process, a corrupt file, an unwritable folder: :class:`StoreError` with
  one line.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from core.errors import FrozenError, InputError, StoreError

__all__ = ["Store", "SCHEMA_VERSION", "DEFAULT_WAIT_S"]

SCHEMA_VERSION = 2

#: Seconds to wait for a file held by another process before giving up (``AUDIT_DB_WAIT_S``).
DEFAULT_WAIT_S = 30.0

#: Migrations from version N to N + 1, applied in order on open.
_MIGRATIONS = {
    1: ["ALTER TABLE calls ADD COLUMN IF NOT EXISTS meta_json VARCHAR"],
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS audits (
    audit_id VARCHAR PRIMARY KEY,
    created_at TIMESTAMP,
    freeze_json VARCHAR,
    harness_hash VARCHAR,
    settings_json VARCHAR
);
CREATE TABLE IF NOT EXISTS criteria (
    audit_id VARCHAR, criterion VARCHAR, position INTEGER,
    max_points DOUBLE, weight DOUBLE,
    PRIMARY KEY (audit_id, criterion)
);
CREATE TABLE IF NOT EXISTS candidates (
    audit_id VARCHAR, candidate_id VARCHAR, stratum VARCHAR, first_pass_score DOUBLE,
    application VARCHAR,
    PRIMARY KEY (audit_id, candidate_id)
);
CREATE TABLE IF NOT EXISTS pool (
    audit_id VARCHAR, candidate_id VARCHAR, first_pass_score DOUBLE,
    PRIMARY KEY (audit_id, candidate_id)
);
CREATE TABLE IF NOT EXISTS calls (
    audit_id VARCHAR, request_id VARCHAR, candidate_id VARCHAR, run INTEGER,
    attempts INTEGER, started_at TIMESTAMP, finished_at TIMESTAMP, latency_ms DOUBLE,
    http_status INTEGER, status VARCHAR, error VARCHAR,
    raw_payload VARCHAR, payload_sha256 VARCHAR, model VARCHAR,
    input_tokens BIGINT, output_tokens BIGINT, cached_input_tokens BIGINT,
    cost DOUBLE, seed BIGINT, source VARCHAR, meta_json VARCHAR,
    PRIMARY KEY (audit_id, request_id)
);
CREATE TABLE IF NOT EXISTS draws (
    audit_id VARCHAR, candidate_id VARCHAR, run INTEGER, criterion VARCHAR, score DOUBLE,
    request_id VARCHAR, model VARCHAR, clipped BOOLEAN,
    PRIMARY KEY (audit_id, candidate_id, run, criterion)
);
CREATE TABLE IF NOT EXISTS imports (
    audit_id VARCHAR, file_sha256 VARCHAR, kind VARCHAR, file_name VARCHAR, rows BIGINT,
    imported_at TIMESTAMP,
    PRIMARY KEY (audit_id, file_sha256, kind)
);
CREATE TABLE IF NOT EXISTS drift_results (
    screener VARCHAR, computed_at TIMESTAMP, result_json VARCHAR
);
"""

CALL_COLUMNS = [
    "audit_id", "request_id", "candidate_id", "run", "attempts", "started_at", "finished_at",
    "latency_ms", "http_status", "status", "error", "raw_payload", "payload_sha256", "model",
    "input_tokens", "output_tokens", "cached_input_tokens", "cost", "seed", "source", "meta_json",
]
DRAW_COLUMNS = ["audit_id", "candidate_id", "run", "criterion", "score", "request_id", "model",
                "clipped"]
CANDIDATE_COLUMNS = ["audit_id", "candidate_id", "stratum", "first_pass_score", "application"]


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
                self._con = duckdb.connect(":memory:")
            return self._con

    def _locks(self, key: str) -> tuple[threading.Lock, threading.RLock]:
        with self._lock:
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
        alias = f"audit_db_{next(self._names)}"
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


class Store:
    """The DuckDB file of draws; holds the file only while a method works on it.

    Parameters
    ----------
    path : str or Path
        The database file; created (with its folder) when missing. ``":memory:"`` for tests
        (then one private in-memory database, held for the store's life).
    read_only : bool
        Never write (a report or a listing).
    wait_s : float, optional
        How long to wait for a file held by another process before a :class:`StoreError`;
        default ``AUDIT_DB_WAIT_S`` or 30 s.

    Notes
    -----
    Every public method opens the file, works and closes it (see the module notes), so several
    processes can share a file; :meth:`session` keeps it open across several calls of one
    thread when a consistent view is wanted or many small reads follow each other.
    """

    def __init__(self, path: str | Path, *, read_only: bool = False,
                 wait_s: float | None = None) -> None:
        self.path = str(path)
        self.read_only = read_only
        self.wait_s = _wait_s() if wait_s is None else float(wait_s)
        self._mem: duckdb.DuckDBPyConnection | None = None
        self._local = threading.local()
        if self.path == ":memory:":
            self._mem = duckdb.connect(":memory:")
            self._key = ":memory:"
            self._mem_write_lock = threading.RLock()
        else:
            p = Path(self.path)
            if read_only and not p.exists():
                raise StoreError(f"The database file {self.path} does not exist; create it with "
                                 "'python -m core import' or 'python -m core demo'.")
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"The folder of the database file {self.path} cannot be "
                                 f"created ({exc.strerror or _first_line(exc)}); pass another "
                                 "file with --db (or set AUDIT_DB for the app).") from None
            if p.exists() and p.is_dir():
                raise StoreError(f"{self.path} is a folder, not a database file; pass a file "
                                 "name such as data/audits.duckdb with --db.")
            self._key = str(p.resolve())
        if not read_only:
            self._init_schema()
        self._check_version()

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def session(self) -> Iterator[None]:
        """Keep the file attached for several calls of this thread (re-entrant)."""
        if self._mem is not None:
            yield
            return
        _ATTACHED.acquire(self._key, self.read_only, self.wait_s, self.path)
        try:
            yield
        finally:
            _ATTACHED.release(self._key, self.path)

    @contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A fresh cursor on the attached file; any DuckDB or OS error becomes a StoreError.

        Re-entrant on one thread: a method called inside a :meth:`transaction` of the same
        thread works on the transaction's cursor (it sees the uncommitted writes).
        """
        outer = getattr(self._local, "cur", None)
        if outer is not None:
            yield outer
            return
        if self._mem is not None:
            cur = self._mem.cursor()
            try:
                yield cur
            except (duckdb.Error, OSError) as exc:
                raise _store_error(self.path, exc) from None
            finally:
                cur.close()
            return
        alias = _ATTACHED.acquire(self._key, self.read_only, self.wait_s, self.path)
        try:
            cur = _ATTACHED.con().cursor()
            try:
                cur.execute(f"USE {alias}")
                yield cur
            except (duckdb.Error, OSError) as exc:
                raise _store_error(self.path, exc) from None
            finally:
                cur.close()
        finally:
            _ATTACHED.release(self._key, self.path)

    def _write_lock(self) -> threading.RLock:
        return self._mem_write_lock if self._mem is not None else \
            _ATTACHED.write_lock(self._key)

    def _schema_is_current(self) -> bool:
        with self._cursor() as cur:
            has_meta = cur.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'meta' "
                "AND database_name = current_database() AND schema_name = 'main'").fetchall()
            if not has_meta[0][0]:
                return False
            row = cur.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        return bool(row) and row[0][0] == str(SCHEMA_VERSION)

    def _init_schema(self) -> None:
        """Create or migrate the schema; writes nothing when the file is current (so a file in
        a read-only folder can still be read)."""
        if self._schema_is_current():
            return
        with self.transaction() as cur:
            cur.execute(_SCHEMA)
            row = cur.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
            if not row:
                cur.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
            else:
                version = int(row[0][0])
                while version < SCHEMA_VERSION and version in _MIGRATIONS:
                    for sql in _MIGRATIONS[version]:
                        cur.execute(sql)
                    version += 1
                    cur.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                                [str(version)])

    def _check_version(self) -> None:
        with self._cursor() as cur:
            has_meta = cur.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'meta' "
                "AND database_name = current_database() AND schema_name = 'main'").fetchall()
            if not has_meta[0][0]:
                raise StoreError(f"The database file {self.path} is not an audit database "
                                 "(no schema version). Pass another file with --db.")
            row = cur.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        if not row or int(row[0][0]) != SCHEMA_VERSION:
            found = row[0][0] if row else "none"
            raise StoreError(f"The database file {self.path} has schema version {found}; this "
                             f"version of the product reads {SCHEMA_VERSION}. Move it aside.")

    def close(self) -> None:
        """Release the store (a file store holds nothing between calls)."""
        if self._mem is not None:
            self._mem.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One transaction on a cursor of its own; rolled back on any exception.

        Writes of one process are serialised; the file is held until the commit.
        """
        if self.read_only:
            raise StoreError(f"The database file {self.path} was opened read-only.")
        outer = getattr(self._local, "cur", None)
        if outer is not None:   # nested: part of the enclosing transaction
            yield outer
            return
        with self._write_lock(), self._cursor() as cur:
            cur.execute("BEGIN TRANSACTION")
            self._local.cur = cur
            try:
                yield cur
            except BaseException:
                self._local.cur = None
                try:
                    cur.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                raise
            else:
                self._local.cur = None
                cur.execute("COMMIT")

    def _append(self, cur: duckdb.DuckDBPyConnection, table: str, df: pd.DataFrame,
                columns: list[str], *, ignore_conflicts: bool = True) -> None:
        if df is None or len(df) == 0:
            return
        frame = df.reindex(columns=columns)
        name = f"_incoming_{table}"
        cur.register(name, frame)
        try:
            cols = ", ".join(columns)
            tail = " ON CONFLICT DO NOTHING" if ignore_conflicts else ""
            cur.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {name}{tail}")
        finally:
            cur.unregister(name)

    def _df(self, sql: str, params: list[Any] | None = None) -> pd.DataFrame:
        with self._cursor() as cur:
            return cur.execute(sql, params or []).df()

    def _rows(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        with self._cursor() as cur:
            return cur.execute(sql, params or []).fetchall()

    # ------------------------------------------------------------------ audits
    def list_audits(self) -> pd.DataFrame:
        """Audits with their draw counts, newest first."""
        return self._df("""
            SELECT a.audit_id, a.created_at, a.harness_hash,
                   (SELECT count(DISTINCT candidate_id || '|' || run) FROM draws d
                     WHERE d.audit_id = a.audit_id) AS evaluations
            FROM audits a ORDER BY a.created_at DESC, a.audit_id""")

    def audit_exists(self, audit_id: str) -> bool:
        return bool(self._rows(
            "SELECT count(*) FROM audits WHERE audit_id = ?", [audit_id])[0][0])

    def get_audit(self, audit_id: str) -> dict[str, Any]:
        """The audit's freeze sheet, hash and settings as plain dicts."""
        rows = self._rows(
            "SELECT freeze_json, harness_hash, settings_json, created_at FROM audits "
            "WHERE audit_id = ?", [audit_id])
        if not rows:
            raise StoreError(f"No audit '{audit_id}' in {self.path}. "
                             "List them with 'python -m core audits --db ...'.")
        freeze_json, harness_hash, settings_json, created_at = rows[0]
        return {
            "audit_id": audit_id,
            "freeze": json.loads(freeze_json) if freeze_json else {},
            "harness_hash": harness_hash,
            "settings": json.loads(settings_json) if settings_json else {},
            "created_at": created_at,
        }

    def n_draws(self, audit_id: str) -> int:
        return int(self._rows(
            "SELECT count(*) FROM draws WHERE audit_id = ?", [audit_id])[0][0])

    def save_audit(self, audit_id: str, freeze: dict[str, Any], harness_hash: str,
                   settings: dict[str, Any] | None = None) -> None:
        """Create an audit, or update its sheet while it has no draw.

        Raises
        ------
        FrozenError
            When the audit has draws and the sheet's hash differs: a changed harness is a new
            audit.
        """
        with self.transaction() as cur:
            rows = cur.execute("SELECT harness_hash, settings_json FROM audits WHERE audit_id = ?",
                               [audit_id]).fetchall()
            if rows:
                old_hash = rows[0][0]
                n = cur.execute("SELECT count(*) FROM draws WHERE audit_id = ?",
                                [audit_id]).fetchall()[0][0]
                if n and old_hash != harness_hash:
                    raise FrozenError(
                        f"Audit '{audit_id}' is frozen (harness {old_hash[:12]}) since its first "
                        "draw; a changed harness makes a new audit — give it a new id.")
                merged = json.loads(rows[0][1] or "{}")
                merged.update(settings or {})
                cur.execute("UPDATE audits SET freeze_json = ?, harness_hash = ?, "
                            "settings_json = ? WHERE audit_id = ?",
                            [json.dumps(freeze, sort_keys=True), harness_hash,
                             json.dumps(merged, sort_keys=True), audit_id])
            else:
                cur.execute("INSERT INTO audits VALUES (?, ?, ?, ?, ?)",
                            [audit_id, _now(), json.dumps(freeze, sort_keys=True), harness_hash,
                             json.dumps(settings or {}, sort_keys=True)])

    def update_settings(self, audit_id: str, settings: dict[str, Any]) -> None:
        """Merge ``settings`` (cutoff, prices, …: never secrets) into the audit's settings."""
        with self.transaction() as cur:
            current = self.get_audit(audit_id)["settings"]
            current.update(settings)
            cur.execute("UPDATE audits SET settings_json = ? WHERE audit_id = ?",
                        [json.dumps(current, sort_keys=True), audit_id])

    def delete_audit(self, audit_id: str) -> None:
        with self.transaction() as cur:
            for table in ("draws", "calls", "candidates", "pool", "criteria", "imports",
                          "audits"):
                cur.execute(f"DELETE FROM {table} WHERE audit_id = ?", [audit_id])

    # ------------------------------------------------------------------ criteria / candidates
    def set_criteria(self, audit_id: str, criteria: pd.DataFrame,
                     cur: duckdb.DuckDBPyConnection | None = None) -> None:
        """Replace the audit's criteria (``criterion, position, max_points, weight``)."""
        def _do(c: duckdb.DuckDBPyConnection) -> None:
            c.execute("DELETE FROM criteria WHERE audit_id = ?", [audit_id])
            frame = criteria.assign(audit_id=audit_id)
            self._append(c, "criteria", frame,
                         ["audit_id", "criterion", "position", "max_points", "weight"])
        if cur is not None:
            _do(cur)
        else:
            with self.transaction() as c:
                _do(c)

    def get_criteria(self, audit_id: str) -> pd.DataFrame:
        return self._df("SELECT criterion, position, max_points, weight FROM criteria "
                        "WHERE audit_id = ? ORDER BY position, criterion", [audit_id])

    def upsert_candidates(self, audit_id: str, candidates: pd.DataFrame,
                          cur: duckdb.DuckDBPyConnection | None = None) -> None:
        """Insert candidates; existing ones get their stratum / first-pass score filled in."""
        frame = _candidate_frame(audit_id, candidates)

        def _do(c: duckdb.DuckDBPyConnection) -> None:
            c.register("_incoming_candidates", frame)
            try:
                c.execute("""
                    INSERT INTO candidates SELECT audit_id, candidate_id, stratum,
                        first_pass_score, application FROM _incoming_candidates
                    ON CONFLICT (audit_id, candidate_id) DO UPDATE SET
                      stratum = coalesce(excluded.stratum, candidates.stratum),
                      first_pass_score = coalesce(excluded.first_pass_score,
                                                  candidates.first_pass_score),
                      application = coalesce(excluded.application, candidates.application)""")
            finally:
                c.unregister("_incoming_candidates")
        if cur is not None:
            _do(cur)
        else:
            with self.transaction() as c:
                _do(c)

    def set_candidates(self, audit_id: str, candidates: pd.DataFrame) -> None:
        """Replace the audit's sample (a redrawn sample) while it has no draw.

        Raises
        ------
        FrozenError
            When the audit already has draws: its sample is part of what was measured.
        """
        frame = _candidate_frame(audit_id, candidates)
        with self.transaction() as cur:
            n = cur.execute("SELECT count(*) FROM draws WHERE audit_id = ?",
                            [audit_id]).fetchall()[0][0]
            if n:
                raise FrozenError(f"Audit '{audit_id}' has {n} draws: its sample cannot be "
                                  "replaced; start a new audit from its sheet.")
            cur.execute("DELETE FROM candidates WHERE audit_id = ?", [audit_id])
            self._append(cur, "candidates", frame, CANDIDATE_COLUMNS, ignore_conflicts=False)

    def get_candidates(self, audit_id: str) -> pd.DataFrame:
        return self._df("SELECT candidate_id, stratum, first_pass_score, application "
                        "FROM candidates WHERE audit_id = ? ORDER BY candidate_id", [audit_id])

    # ------------------------------------------------------------------ pool
    def set_pool(self, audit_id: str, pool: pd.DataFrame,
                 cur: duckdb.DuckDBPyConnection | None = None) -> None:
        """Replace the req's pool (``candidate_id, first_pass_score``)."""
        def _do(c: duckdb.DuckDBPyConnection) -> None:
            c.execute("DELETE FROM pool WHERE audit_id = ?", [audit_id])
            self._append(c, "pool", pool.assign(audit_id=audit_id),
                         ["audit_id", "candidate_id", "first_pass_score"])
        if cur is not None:
            _do(cur)
        else:
            with self.transaction() as c:
                _do(c)

    def get_pool(self, audit_id: str) -> pd.DataFrame:
        return self._df("SELECT candidate_id, first_pass_score FROM pool WHERE audit_id = ? "
                        "ORDER BY candidate_id", [audit_id])

    # ------------------------------------------------------------------ imports
    def import_seen(self, audit_id: str, file_sha256: str, kind: str) -> bool:
        return bool(self._rows(
            "SELECT count(*) FROM imports WHERE audit_id = ? AND file_sha256 = ? AND kind = ?",
            [audit_id, file_sha256, kind])[0][0])

    def record_import(self, cur: duckdb.DuckDBPyConnection, audit_id: str, file_sha256: str,
                      kind: str, file_name: str, rows: int) -> None:
        cur.execute("INSERT INTO imports VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    [audit_id, file_sha256, kind, file_name, rows, _now()])

    def list_imports(self, audit_id: str) -> pd.DataFrame:
        return self._df("SELECT * FROM imports WHERE audit_id = ? ORDER BY imported_at",
                        [audit_id])

    # ------------------------------------------------------------------ calls and draws
    def write_results(self, audit_id: str, calls: pd.DataFrame | None,
                      draws: pd.DataFrame | None,
                      cur: duckdb.DuckDBPyConnection | None = None) -> None:
        """Write a batch of calls and their draws in one transaction (idempotent on keys)."""
        def _do(c: duckdb.DuckDBPyConnection) -> None:
            if calls is not None and len(calls):
                self._refuse_request_id_clashes(c, audit_id, calls)
                self._append(c, "calls", calls.assign(audit_id=audit_id), CALL_COLUMNS)
            if draws is not None and len(draws):
                self._append(c, "draws", draws.assign(audit_id=audit_id), DRAW_COLUMNS)
        if cur is not None:
            _do(cur)
        else:
            with self.transaction() as c:
                _do(c)

    def _refuse_request_id_clashes(self, cur: duckdb.DuckDBPyConnection, audit_id: str,
                                   calls: pd.DataFrame) -> None:
        """A request id already stored for another ``(candidate, run)`` is an error, not a
        silent no-op of ``ON CONFLICT``: the new call's draws would point at another
        candidate's payload. The same id for the same pair is a resume (idempotent).

        Raises
        ------
        InputError
            Naming the first clashing id, its candidate and run, and the stored ones.
        """
        if "request_id" not in calls.columns:
            return
        frame = pd.DataFrame({"request_id": calls["request_id"].astype(object),
                              "candidate_id": calls["candidate_id"].astype(object),
                              "run": pd.to_numeric(calls["run"], errors="coerce")})
        cur.register("_incoming_ids", frame)
        try:
            rows = cur.execute("""
                SELECT i.request_id, i.candidate_id, i.run, s.candidate_id, s.run,
                       count(*) OVER () AS n
                FROM _incoming_ids i JOIN calls s
                  ON s.audit_id = ? AND s.request_id = i.request_id
                WHERE s.candidate_id IS DISTINCT FROM i.candidate_id
                   OR s.run IS DISTINCT FROM i.run
                ORDER BY i.candidate_id, i.run LIMIT 1""", [audit_id]).fetchall()
        finally:
            cur.unregister("_incoming_ids")
        if rows:
            rid, cand, run, s_cand, s_run, n = rows[0]
            raise InputError(
                f"request id '{rid}' of candidate '{cand}' run {_run_text(run)} is already "
                f"stored in audit '{audit_id}' for candidate '{s_cand}' run {_run_text(s_run)} "
                f"({n} clashing id(s)); every call needs its own request id — nothing was "
                "written: fix the ids or import into a new audit", column="request_id")

    def load_draws(self, audit_id: str) -> pd.DataFrame:
        """All draws of an audit, long: ``candidate_id, run, criterion, score, model``."""
        return self._df("SELECT candidate_id, run, criterion, score, model, request_id, clipped "
                        "FROM draws WHERE audit_id = ? ORDER BY candidate_id, run, criterion",
                        [audit_id])

    def load_calls(self, audit_id: str, *, with_payload: bool = False) -> pd.DataFrame:
        cols = [c for c in CALL_COLUMNS if c != "audit_id"
                and (with_payload or c != "raw_payload")]
        return self._df(f"SELECT {', '.join(cols)} FROM calls WHERE audit_id = ? "
                        "ORDER BY started_at NULLS LAST, request_id", [audit_id])

    def payload_counts(self, audit_id: str) -> pd.DataFrame:
        """Per candidate: successful calls with a payload, and distinct payload hashes."""
        return self._df("""
            SELECT candidate_id, count(*) AS calls_with_payload,
                   count(DISTINCT payload_sha256) AS distinct_payloads
            FROM calls WHERE audit_id = ? AND status = 'ok' AND payload_sha256 IS NOT NULL
            GROUP BY candidate_id ORDER BY candidate_id""", [audit_id])

    def call_summary(self, audit_id: str) -> pd.DataFrame:
        """Counts of calls by status / error kind / model, for the guard panel."""
        return self._df("""
            SELECT status, coalesce(http_status, 0) AS http_status, coalesce(model, '') AS model,
                   count(*) AS calls, sum(coalesce(attempts, 1) - 1) AS retries,
                   avg(latency_ms) AS mean_latency_ms, sum(coalesce(cost, 0)) AS cost
            FROM calls WHERE audit_id = ? GROUP BY ALL ORDER BY calls DESC""", [audit_id])

    def completed_pairs(self, audit_id: str) -> set[tuple[str, int]]:
        """``(candidate_id, run)`` pairs that already have a draw (resume skips them)."""
        rows = self._rows(
            "SELECT DISTINCT candidate_id, run FROM draws WHERE audit_id = ?",
            [audit_id])
        return {(r[0], int(r[1])) for r in rows}

    def data_version(self, audit_id: str) -> str:
        """A short token that changes whenever the audit's draws, pool or settings change.

        Used as a cache key by the app (``st.cache_data`` keyed on audit id + version).
        """
        row = self._rows("""
            SELECT (SELECT count(*) FROM draws WHERE audit_id = $1),
                   (SELECT count(*) FROM calls WHERE audit_id = $1),
                   (SELECT count(*) FROM pool WHERE audit_id = $1),
                   (SELECT coalesce(sum(hash(candidate_id || coalesce(stratum, ''))), 0)
                      FROM candidates WHERE audit_id = $1),
                   (SELECT coalesce(hash(settings_json || harness_hash), 0) FROM audits
                     WHERE audit_id = $1),
                   (SELECT coalesce(sum(hash(criterion || coalesce(max_points, -1) ||
                                             coalesce(weight, 1))), 0)
                      FROM criteria WHERE audit_id = $1)""", [audit_id])[0]
        return "-".join(str(x) for x in row)

    # ------------------------------------------------------------------ drift
    def save_drift_result(self, screener: str, result: dict[str, Any]) -> None:
        """Keep a drift analysis so audit reports of that screener carry its re-audit date."""
        with self.transaction() as cur:
            cur.execute("INSERT INTO drift_results VALUES (?, ?, ?)",
                        [screener, _now(), json.dumps(result, default=str)])

    def latest_drift_result(self, screener: str) -> dict[str, Any] | None:
        rows = self._rows(
            "SELECT result_json, computed_at FROM drift_results WHERE screener = ? "
            "ORDER BY computed_at DESC LIMIT 1", [screener])
        if not rows:
            return None
        out = json.loads(rows[0][0])
        out["computed_at"] = str(rows[0][1])
        return out

    # ------------------------------------------------------------------ page view per audit
    def get_view(self, audit_id: str) -> dict[str, Any]:
        """The slider values last set on the pages for ``audit_id`` (cutoff, k, half-width,
        capacity…), so a reload or a shared link shows the same view. Not settings: reports
        and the analysis never read them (and they do not change :meth:`data_version`)."""
        rows = self._rows("SELECT value FROM meta WHERE key = ?", [f"view:{audit_id}"])
        try:
            out = json.loads(rows[0][0]) if rows else {}
        except ValueError:
            return {}
        return out if isinstance(out, dict) else {}

    def set_view(self, audit_id: str, view: dict[str, Any]) -> None:
        """Replace the stored page view of ``audit_id`` (plain JSON values)."""
        with self.transaction() as cur:
            cur.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                        [f"view:{audit_id}", json.dumps(view, sort_keys=True)])


def _run_text(run: Any) -> str:
    try:
        return str(int(run))
    except (TypeError, ValueError):
        return str(run)


def _candidate_frame(audit_id: str, candidates: pd.DataFrame) -> pd.DataFrame:
    """Candidates with every column present and typed (text columns as text even when empty)."""
    frame = candidates.assign(audit_id=audit_id).reindex(columns=CANDIDATE_COLUMNS)
    for col in ("audit_id", "candidate_id", "stratum", "application"):
        frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
        frame[col] = frame[col].map(lambda v: None if v is None else str(v))
    frame["first_pass_score"] = pd.to_numeric(frame["first_pass_score"], errors="coerce")
    return frame

