"""Calls and draws: batched writes that never store a draw twice, and the reads of them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import duckdb

from core.errors import InputError
from core.store.base import StoreBase
from core.store.schema import CALL_COLUMNS, DRAW_COLUMNS, IMPLIED_CALL, LEAN_DRAW_COLUMNS

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


#: A draw's request id; imported draws without one share their call's made-up id.
_REQUEST_ID = f"coalesce(request_id, {IMPLIED_CALL['request_id']})"


def all_calls(audit: str = "$1") -> str:
    """Every call of one audit as a relation with the columns of :data:`CALL_COLUMNS`: the
    stored calls and the implied calls of imported pairs (``imported_calls``, see
    :mod:`core.store.schema`). ``audit`` is the SQL of the audit id (a parameter)."""
    stored = ("audit_id", "candidate_id", "run")
    implied = ", ".join(c if c in stored else IMPLIED_CALL.get(c, "NULL") for c in CALL_COLUMNS)
    return (f"(SELECT * FROM calls WHERE audit_id = {audit} UNION ALL SELECT {implied} "
            f"FROM imported_calls WHERE audit_id = {audit})")


def all_draws(audit: str = "$1") -> str:
    """Every draw of one audit as a relation with the columns of :data:`DRAW_COLUMNS`: the
    stored draws and the lean ones of imports (``imported_draws``, see
    :mod:`core.store.schema`). ``audit`` is the SQL of the audit id (a parameter, or a column
    of an outer query)."""
    lean = ", ".join(c if c in LEAN_DRAW_COLUMNS else "false" if c == "clipped" else "NULL"
                     for c in DRAW_COLUMNS)
    return (f"(SELECT {', '.join(DRAW_COLUMNS)} FROM draws WHERE audit_id = {audit} "
            f"UNION ALL SELECT {lean} FROM imported_draws WHERE audit_id = {audit})")


def _columns(batch: pd.DataFrame | pa.Table, columns: list[str]) -> pd.DataFrame | pa.Table:
    """``batch`` with exactly ``columns``, in order (a missing one empty), for DuckDB to scan."""
    if hasattr(batch, "reindex"):  # pandas
        return batch.reindex(columns=columns)
    # an Arrow table (pyarrow is loaded already)
    import pyarrow as pa

    have = set(batch.column_names)
    return pa.table({c: batch.column(c) if c in have else pa.nulls(batch.num_rows)
                     for c in columns})


class DrawRecords(StoreBase):
    """The calls made (or imported) and the draws they yielded."""

    # ------------------------------------------------------------------ calls and draws
    def write_results(self, audit_id: str, calls: pd.DataFrame | pa.Table | None,
                      draws: pd.DataFrame | pa.Table | None,
                      cur: duckdb.DuckDBPyConnection | None = None, *,
                      fresh_calls: bool = False) -> None:
        """Write a batch of calls and their draws in one transaction (idempotent on keys).

        ``calls`` and ``draws`` are pandas frames or Arrow tables (the runner's writer) with
        the columns of :data:`CALL_COLUMNS` / :data:`DRAW_COLUMNS` (a missing one is empty;
        ``audit_id`` is the argument's).

        A call already stored (same request id, same pair) and a draw already stored (same
        candidate, run, criterion) are skipped, so a resumed run never stores a draw twice;
        within the batch the first of two equal keys is kept.

        ``fresh_calls`` (the runner's writer): the calls were made by this process moments ago,
        each under a new random 128-bit request id, written once, and at most one answer per
        pair: no id can be stored already or twice in the batch, so the id checks are skipped
        (~25 ms of the ~70 ms a transaction costs). The draws are still checked against the
        stored ones: another process may have drawn the same pair meanwhile.
        """
        def _do(c: duckdb.DuckDBPyConnection) -> None:
            if calls is not None and len(calls):
                c.register("_incoming_calls", _columns(calls, CALL_COLUMNS[1:]))
                try:
                    if fresh_calls:
                        c.execute(f"INSERT INTO calls ({', '.join(CALL_COLUMNS)}) SELECT $1, "
                                  f"{', '.join(CALL_COLUMNS[1:])} FROM _incoming_calls",
                                  [audit_id])
                    else:
                        self._refuse_request_id_clashes(c, audit_id, "_incoming_calls",
                                                        has_request_id=True)
                        self._insert_new_calls(c, audit_id, "_incoming_calls")
                finally:
                    c.unregister("_incoming_calls")
            if draws is not None and len(draws):
                c.register("_incoming_draws", _columns(draws, DRAW_COLUMNS[1:]))
                try:
                    self._insert_new_draws(c, audit_id, "_incoming_draws",
                                           unique=fresh_calls)
                finally:
                    c.unregister("_incoming_draws")
        if cur is not None:
            _do(cur)
        else:
            with self.transaction() as c:
                _do(c)

    @staticmethod
    def _insert_new_calls(cur: duckdb.DuckDBPyConnection, audit_id: str, source: str, *,
                          unique: bool = False) -> None:
        """Insert the calls of ``source`` whose request id is not stored yet in the audit (an
        anti-join: no primary key, see :mod:`core.store.schema`); the first of two equal ids
        in ``source`` is kept (``unique``: ``source`` has none, as a validated import)."""
        cols = ", ".join(CALL_COLUMNS[1:])
        stored = cur.execute(f"SELECT count(*) FROM (SELECT 1 FROM {all_calls()} LIMIT 1)",
                             [audit_id]).fetchall()[0][0]
        rows = (f"(SELECT *, request_id AS _id, 1 AS _n FROM {source})" if unique else
                f"(SELECT *, CAST(request_id AS VARCHAR) AS _id, row_number() OVER "
                f"(PARTITION BY _id) AS _n FROM {source})")
        new = ("" if not stored else f" AND NOT EXISTS (SELECT 1 FROM {all_calls()} s WHERE "
               "s.request_id = i._id)")
        cur.execute(f"INSERT INTO calls ({', '.join(CALL_COLUMNS)}) SELECT $1, {cols} "
                    f"FROM {rows} i WHERE i._n = 1{new}", [audit_id])

    @staticmethod
    def _insert_new_draws(cur: duckdb.DuckDBPyConnection, audit_id: str, source: str, *,
                          unique: bool = False) -> None:
        """Insert the draws of ``source`` whose key is not stored yet (an anti-join: the table
        has no primary key, see :mod:`core.store.schema`), sorted by the key; the first of two
        equal keys in ``source`` is kept (``unique``: ``source`` has none)."""
        cols = ", ".join(DRAW_COLUMNS[1:])
        keyed = ("SELECT *, CAST(candidate_id AS VARCHAR) AS _c, CAST(run AS INTEGER) AS _r, "
                 "CAST(criterion AS VARCHAR) AS _k")
        rows = (f"{keyed}, 1 AS _n FROM {source}" if unique else
                f"{keyed}, row_number() OVER (PARTITION BY _c, _r, _k) AS _n FROM {source}")
        cur.execute(f"""
            INSERT INTO draws ({", ".join(DRAW_COLUMNS)})
            SELECT $1, {cols} FROM ({rows}) i
            WHERE i._n = 1 AND NOT EXISTS (
                SELECT 1 FROM {all_draws()} d WHERE d.candidate_id = i._c
                   AND d.run = i._r AND d.criterion = i._k)
            ORDER BY i._c, i._r, i._k""", [audit_id])

    def stored_pair(self, audit_id: str, relation: str,
                    cur: duckdb.DuckDBPyConnection | None = None
                    ) -> tuple[int, str, int, int] | None:
        """The first ``(candidate_id, run)`` of ``relation`` (a staged import's calls, with
        ``first_line``) that already has a draw in the audit: ``(line, candidate, run, how
        many pairs overlap)``, or None. An anti-join inside DuckDB, not a Python set."""
        sql = f"""
            SELECT i.first_line, i.candidate_id, i.run, count(*) OVER () FROM {relation} i
            WHERE EXISTS (SELECT 1 FROM {all_draws()} d
                          WHERE d.candidate_id = i.candidate_id AND d.run = i.run)
            ORDER BY i.first_line LIMIT 1"""
        if cur is not None:
            rows = cur.execute(sql, [audit_id]).fetchall()
        else:
            rows = self._rows(sql, [audit_id])
        return (int(rows[0][0]), str(rows[0][1]), int(rows[0][2]), int(rows[0][3])) \
            if rows else None

    def write_staged(self, cur: duckdb.DuckDBPyConnection, audit_id: str, stage: str,
                     *, file_name: str, implied_calls: bool = False, lean_draws: bool = False
                     ) -> None:
        """Copy a validated import from its staging database ``stage`` (tables ``out_calls``,
        ``out_draws``, ``out_candidates``: :mod:`core.store.draw_checks`) into the audit, in
        the caller's transaction ``cur``: one ``INSERT … SELECT`` per table. With
        ``implied_calls`` (the file has no request id, model or payload column) a call is
        stored as its pair alone, in ``imported_calls``; with ``lean_draws`` as well (none of
        the draws was clipped) the draws go to ``imported_draws``.

        Raises
        ------
        InputError
            A pair of the file already has a draw in the audit (naming its line), or a request
            id of the file is stored for another pair.
        """
        from core.format import term_escape

        hit = self.stored_pair(audit_id, f"{stage}.main.out_calls", cur)
        if hit:
            line, cand, run, n = hit
            raise InputError(f"line {line}: candidate '{term_escape(cand)}' run {run} is "
                             f"already stored in audit '{term_escape(audit_id)}' ({n:,} pair(s) "
                             "of the file overlap); nothing was written: import into a new "
                             "audit instead", file=file_name, column="run")
        self._refuse_request_id_clashes(cur, audit_id, f"{stage}.main.out_calls")
        # rows may land in any order (readers sort): DuckDB then writes whole row groups
        # straight to the file, and the checkpoint at DETACH has almost nothing left to do
        # (~90 ms of a million-row import). The cursor is this transaction's own.
        cur.execute("SET SESSION preserve_insertion_order = false")
        if implied_calls:
            # the file gives nothing of its calls: the pairs alone (see core.store.schema)
            cur.execute(f"INSERT INTO imported_calls SELECT $1, candidate_id, run "
                        f"FROM {stage}.main.out_calls", [audit_id])
        else:
            # a call of an already stored pair without draws (a failed call) keeps its row
            self._insert_new_calls(cur, audit_id, f"{stage}.main.out_calls", unique=True)
        lean = implied_calls and lean_draws
        columns, table = (LEAN_DRAW_COLUMNS, "imported_draws") if lean else (DRAW_COLUMNS, "draws")
        # unsorted: readers sort (load_draws), and a sort here cost ~10% of the write's CPU on
        # a million rows
        cur.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT $1, "
                    f"{', '.join(columns[1:])} FROM {stage}.main.out_draws", [audit_id])
        cur.execute(f"""
            INSERT INTO candidates SELECT $1, candidate_id, stratum, first_pass_score,
                application FROM {stage}.main.out_candidates
            ON CONFLICT (audit_id, candidate_id) DO UPDATE SET
              stratum = coalesce(excluded.stratum, candidates.stratum),
              first_pass_score = coalesce(excluded.first_pass_score,
                                          candidates.first_pass_score)""", [audit_id])

    def _refuse_request_id_clashes(self, cur: duckdb.DuckDBPyConnection, audit_id: str,
                                   relation: str, *, has_request_id: bool = False) -> None:
        """A request id already stored for another ``(candidate, run)`` is an error, not a
        silent no-op of ``ON CONFLICT``: the new call's draws would point at another
        candidate's payload. The same id for the same pair is a resume (idempotent).

        Raises
        ------
        InputError
            Naming the first clashing id, its candidate and run, and the stored ones.
        """
        if not has_request_id:
            names = {r[0] for r in cur.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()}
            if "request_id" not in names:
                return
        rows = cur.execute(f"""
            SELECT i.request_id, i.candidate_id, i.run, s.candidate_id, s.run,
                   count(*) OVER () AS n
            FROM (SELECT CAST(request_id AS VARCHAR) AS request_id,
                         CAST(candidate_id AS VARCHAR) AS candidate_id,
                         TRY_CAST(run AS DOUBLE) AS run FROM {relation}) i
            JOIN {all_calls()} s ON s.request_id = i.request_id
            WHERE s.candidate_id IS DISTINCT FROM i.candidate_id
               OR s.run IS DISTINCT FROM i.run
            ORDER BY i.candidate_id, i.run LIMIT 1""", [audit_id]).fetchall()
        if rows:
            rid, cand, run, s_cand, s_run, n = rows[0]
            raise InputError(
                f"request id '{rid}' of candidate '{cand}' run {_run_text(run)} is already "
                f"stored in audit '{audit_id}' for candidate '{s_cand}' run {_run_text(s_run)} "
                f"({n} clashing id(s)); every call needs its own request id — nothing was "
                "written: fix the ids or import into a new audit", column="request_id")

    def load_draws(self, audit_id: str) -> pd.DataFrame:
        """All draws of an audit, long: ``candidate_id, run, criterion, score, model,
        request_id, clipped``. An imported draw without a request id has its call's made-up
        one, ``import:<candidate>:<run>`` (stored with the call only)."""
        return self._df(f"SELECT candidate_id, run, criterion, score, model, {_REQUEST_ID} "
                        f"AS request_id, clipped FROM {all_draws()} d "
                        "ORDER BY candidate_id, run, criterion", [audit_id])

    def load_calls(self, audit_id: str, *, with_payload: bool = False) -> pd.DataFrame:
        cols = [c for c in CALL_COLUMNS if c != "audit_id"
                and (with_payload or c != "raw_payload")]
        return self._df(f"SELECT {', '.join(cols)} FROM {all_calls()} c "
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
        return self._df(f"""
            SELECT status, coalesce(http_status, 0) AS http_status, coalesce(model, '') AS model,
                   count(*) AS calls, sum(coalesce(attempts, 1) - 1) AS retries,
                   avg(latency_ms) AS mean_latency_ms, sum(coalesce(cost, 0)) AS cost
            FROM {all_calls()} c GROUP BY ALL ORDER BY calls DESC""", [audit_id])

    def completed_pairs(self, audit_id: str) -> set[tuple[str, int]]:
        """``(candidate_id, run)`` pairs that already have a draw (resume skips them)."""
        rows = self._rows(f"SELECT DISTINCT candidate_id, run FROM {all_draws()} d",
                          [audit_id])
        return {(r[0], int(r[1])) for r in rows}

    def data_version(self, audit_id: str) -> str:
        """A short token that changes whenever the audit's draws, pool or settings change.

        Used as a cache key by the app (``st.cache_data`` keyed on audit id + version).
        """
        row = self._rows(f"""
            SELECT (SELECT count(*) FROM {all_draws()} d),
                   (SELECT count(*) FROM {all_calls()} c),
                   (SELECT count(*) FROM pool WHERE audit_id = $1),
                   (SELECT coalesce(sum(hash(candidate_id || coalesce(stratum, ''))), 0)
                      FROM candidates WHERE audit_id = $1),
                   (SELECT coalesce(hash(settings_json || harness_hash), 0) FROM audits
                     WHERE audit_id = $1),
                   (SELECT coalesce(sum(hash(criterion || coalesce(max_points, -1) ||
                                             coalesce(weight, 1))), 0)
                      FROM criteria WHERE audit_id = $1)""", [audit_id])[0]
        return "-".join(str(x) for x in row)


def _run_text(run: Any) -> str:
    try:
        return str(int(run))
    except (TypeError, ValueError):
        return str(run)


