"""The audit file's schema: tables, column lists and the versioned migrations.

Version 4 stores an import whose file gives nothing of its calls (no request id, model or
payload column) leanly. Each call is its pair alone, in ``imported_calls``: every other column
of such a call is a constant (:data:`IMPLIED_CALL`), and 150,000 full ``calls`` rows, most of
their 21 columns empty, cost ~0.15 s to store against ~0.03 s for the pairs. Its draws, when none
was clipped, go to ``imported_draws`` without the request id, model and clipped columns (empty
or false for every such draw: each column costs ~35–50 ms per million rows to store). Readers
see each pair of tables as one relation (:func:`core.store.draws.all_calls`,
:func:`core.store.draws.all_draws`); the writers keep a draw unique across both.

Version 3 (issue 12) keeps ``draws`` and ``calls`` without a primary key: an index entry per
draw cost 4–8 s a million rows on import against ~1 s without it (and the calls' index another
~0.4 s per 150,000 calls). Uniqueness of a draw ``(audit_id, candidate_id, run, criterion)``
and of a call ``(audit_id, request_id)`` is kept by the writers instead, always inside the
write transaction (one writer per file: the file lock and the store's write lock): an import
refuses a duplicate within its file and a pair already stored (naming the line), and
:meth:`~core.store.Store.write_results` inserts only the calls and draws not stored yet (an
anti-join), so a resumed run never writes a pair twice.
"""

from __future__ import annotations

__all__ = ["SCHEMA_VERSION", "SCHEMA", "MIGRATIONS", "CALL_COLUMNS", "DRAW_COLUMNS",
           "CANDIDATE_COLUMNS", "DRAW_KEY", "IMPLIED_CALL",
           "LEAN_DRAW_COLUMNS", "implied_request_id"]

SCHEMA_VERSION = 4

#: Migrations from version N to N + 1, applied in order on open (one transaction).
MIGRATIONS: dict[int, list[str]] = {
    1: ["ALTER TABLE calls ADD COLUMN IF NOT EXISTS meta_json VARCHAR"],
    # DuckDB cannot drop a primary key: copy the draws (sorted by the key, which also makes the
    # audit's scans contiguous) into a table without it
    2: ["CREATE TABLE draws_v3 AS SELECT audit_id, candidate_id, run, criterion, score, "
        "request_id, model, clipped FROM draws ORDER BY audit_id, candidate_id, run, criterion",
        "DROP TABLE draws",
        "ALTER TABLE draws_v3 RENAME TO draws",
        "CREATE TABLE calls_v3 AS SELECT * FROM calls ORDER BY audit_id, candidate_id, run, "
        "request_id",
        "DROP TABLE calls",
        "ALTER TABLE calls_v3 RENAME TO calls"],
    # version 4 adds ``imported_calls`` and ``imported_draws`` (created by SCHEMA): nothing
    # to move
    3: [],
}

SCHEMA = """
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
    cost DOUBLE, seed BIGINT, source VARCHAR, meta_json VARCHAR
);
CREATE TABLE IF NOT EXISTS imported_calls (
    audit_id VARCHAR, candidate_id VARCHAR, run INTEGER
);
CREATE TABLE IF NOT EXISTS imported_draws (
    audit_id VARCHAR, candidate_id VARCHAR, run INTEGER, criterion VARCHAR, score DOUBLE
);
CREATE TABLE IF NOT EXISTS draws (
    audit_id VARCHAR, candidate_id VARCHAR, run INTEGER, criterion VARCHAR, score DOUBLE,
    request_id VARCHAR, model VARCHAR, clipped BOOLEAN
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
#: The columns of an implied call (a row of ``imported_calls``) that are not NULL; the request
#: id is the one made up for an imported row without one.
def implied_request_id(table: str = "") -> str:
    """The SQL of the request id made up for an imported call without one,
    ``import:<candidate>:<run>`` (``table``: the alias its columns are read from)."""
    t = f"{table}." if table else ""
    return f"'import:' || {t}candidate_id || ':' || {t}run"


IMPLIED_CALL = {"request_id": implied_request_id(), "attempts": "1",
                "status": "'ok'", "source": "'import'"}
CANDIDATE_COLUMNS = ["audit_id", "candidate_id", "stratum", "first_pass_score", "application"]


#: The columns of a draw in ``imported_draws`` (the others are NULL, and ``clipped`` false).
LEAN_DRAW_COLUMNS = ["audit_id", "candidate_id", "run", "criterion", "score"]

#: What makes a draw unique (kept by the writers, see the module notes).
DRAW_KEY = ["audit_id", "candidate_id", "run", "criterion"]
