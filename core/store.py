"""The one module that speaks SQL: the DuckDB file of audits, calls and draws.

Design
------
* One process-wide connection per file; every method works on a cursor of its own thread
  (``threading.local``), because a DuckDB connection refuses concurrent calls.
* Writes are batched: DataFrames are registered and copied with ``INSERT … SELECT``, never
  ``executemany``. Each import is one transaction; a failure rolls everything back.
* ``ON CONFLICT DO NOTHING`` on primary keys makes resumed writes idempotent.
* A schema version is stored in ``meta`` and checked on open.
* A file held by another process or a corrupt file raises :class:`StoreError` with one line.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from core.errors import FrozenError, StoreError

__all__ = ["Store", "SCHEMA_VERSION", "open_store"]

SCHEMA_VERSION = 2

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


def _explain_open_error(path: str, exc: Exception) -> str:
    text = str(exc)
    low = text.lower()
    if "lock" in low:
        return (f"The database file {path} is in use by another process (for example the app "
                "or a running audit). Close it, or pass another file with --db.")
    if "not a valid duckdb" in low or "corrupt" in low or "invalid" in low or "magic" in low:
        return (f"The database file {path} is not a readable DuckDB file (corrupt, or written by "
                "another program). Move it aside and start again; the app recreates the demo.")
    if "version" in low or "serializ" in low:
        return (f"The database file {path} was written by an incompatible DuckDB version. "
                "Upgrade with 'pip install -U duckdb' or move the file aside.")
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return f"The database file {path} cannot be opened: {first}"


class Store:
    """The DuckDB file of draws. Thread-safe through one cursor per thread.

    Parameters
    ----------
    path : str or Path
        The database file; created (with its folder) when missing. ``":memory:"`` for tests.
    read_only : bool
        Open without write access (a CLI report on a file another process is not holding).
    """

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._con = duckdb.connect(self.path, read_only=read_only)
        except (duckdb.Error, OSError) as exc:
            raise StoreError(_explain_open_error(self.path, exc)) from None
        self._local = threading.local()
        self._write_lock = threading.RLock()
        if not read_only:
            self._init_schema()
        self._check_version()

    # ------------------------------------------------------------------ plumbing
    def _cur(self) -> duckdb.DuckDBPyConnection:
        cur = getattr(self._local, "cur", None)
        if cur is None:
            cur = self._con.cursor()
            self._local.cur = cur
        return cur

    def _init_schema(self) -> None:
        cur = self._cur()
        try:
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
        except duckdb.Error as exc:
            raise StoreError(_explain_open_error(self.path, exc)) from None

    def _check_version(self) -> None:
        try:
            row = self._cur().execute(
                "SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        except duckdb.Error:
            raise StoreError(f"The database file {self.path} is not an audit database "
                             "(no schema version). Pass another file with --db.") from None
        if not row or int(row[0][0]) != SCHEMA_VERSION:
            found = row[0][0] if row else "none"
            raise StoreError(f"The database file {self.path} has schema version {found}; this "
                             f"version of the product reads {SCHEMA_VERSION}. Move it aside.")

    def close(self) -> None:
        self._con.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One transaction on this thread's cursor; rolled back on any exception."""
        with self._write_lock:
            cur = self._cur()
            cur.execute("BEGIN TRANSACTION")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            else:
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
        return self._cur().execute(sql, params or []).df()

    # ------------------------------------------------------------------ audits
    def list_audits(self) -> pd.DataFrame:
        """Audits with their draw counts, newest first."""
        return self._df("""
            SELECT a.audit_id, a.created_at, a.harness_hash,
                   (SELECT count(DISTINCT candidate_id || '|' || run) FROM draws d
                     WHERE d.audit_id = a.audit_id) AS evaluations
            FROM audits a ORDER BY a.created_at DESC, a.audit_id""")

    def audit_exists(self, audit_id: str) -> bool:
        return bool(self._cur().execute(
            "SELECT count(*) FROM audits WHERE audit_id = ?", [audit_id]).fetchall()[0][0])

    def get_audit(self, audit_id: str) -> dict[str, Any]:
        """The audit's freeze sheet, hash and settings as plain dicts."""
        rows = self._cur().execute(
            "SELECT freeze_json, harness_hash, settings_json, created_at FROM audits "
            "WHERE audit_id = ?", [audit_id]).fetchall()
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
        return int(self._cur().execute(
            "SELECT count(*) FROM draws WHERE audit_id = ?", [audit_id]).fetchall()[0][0])

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
        current = self.get_audit(audit_id)["settings"]
        current.update(settings)
        with self.transaction() as cur:
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
        return bool(self._cur().execute(
            "SELECT count(*) FROM imports WHERE audit_id = ? AND file_sha256 = ? AND kind = ?",
            [audit_id, file_sha256, kind]).fetchall()[0][0])

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
                self._append(c, "calls", calls.assign(audit_id=audit_id), CALL_COLUMNS)
            if draws is not None and len(draws):
                self._append(c, "draws", draws.assign(audit_id=audit_id), DRAW_COLUMNS)
        if cur is not None:
            _do(cur)
        else:
            with self.transaction() as c:
                _do(c)

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
        rows = self._cur().execute(
            "SELECT DISTINCT candidate_id, run FROM draws WHERE audit_id = ?",
            [audit_id]).fetchall()
        return {(r[0], int(r[1])) for r in rows}

    def data_version(self, audit_id: str) -> str:
        """A short token that changes whenever the audit's draws, pool or settings change.

        Used as a cache key by the app (``st.cache_data`` keyed on audit id + version).
        """
        row = self._cur().execute("""
            SELECT (SELECT count(*) FROM draws WHERE audit_id = $1),
                   (SELECT count(*) FROM calls WHERE audit_id = $1),
                   (SELECT count(*) FROM pool WHERE audit_id = $1),
                   (SELECT coalesce(sum(hash(candidate_id || coalesce(stratum, ''))), 0)
                      FROM candidates WHERE audit_id = $1),
                   (SELECT coalesce(hash(settings_json || harness_hash), 0) FROM audits
                     WHERE audit_id = $1),
                   (SELECT coalesce(sum(hash(criterion || coalesce(max_points, -1) ||
                                             coalesce(weight, 1))), 0)
                      FROM criteria WHERE audit_id = $1)""", [audit_id]).fetchall()[0]
        return "-".join(str(x) for x in row)

    # ------------------------------------------------------------------ drift
    def save_drift_result(self, screener: str, result: dict[str, Any]) -> None:
        """Keep a drift analysis so audit reports of that screener carry its re-audit date."""
        with self.transaction() as cur:
            cur.execute("INSERT INTO drift_results VALUES (?, ?, ?)",
                        [screener, _now(), json.dumps(result, default=str)])

    def latest_drift_result(self, screener: str) -> dict[str, Any] | None:
        rows = self._cur().execute(
            "SELECT result_json, computed_at FROM drift_results WHERE screener = ? "
            "ORDER BY computed_at DESC LIMIT 1", [screener]).fetchall()
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
        rows = self._cur().execute("SELECT value FROM meta WHERE key = ?",
                                   [f"view:{audit_id}"]).fetchall()
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


def _candidate_frame(audit_id: str, candidates: pd.DataFrame) -> pd.DataFrame:
    """Candidates with every column present and typed (text columns as text even when empty)."""
    frame = candidates.assign(audit_id=audit_id).reindex(columns=CANDIDATE_COLUMNS)
    for col in ("audit_id", "candidate_id", "stratum", "application"):
        frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
        frame[col] = frame[col].map(lambda v: None if v is None else str(v))
    frame["first_pass_score"] = pd.to_numeric(frame["first_pass_score"], errors="coerce")
    return frame


def open_store(path: str | Path, *, read_only: bool = False) -> Store:
    """Open (or create) the audit database at ``path``; see :class:`Store`."""
    return Store(path, read_only=read_only)
