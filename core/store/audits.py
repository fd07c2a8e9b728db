"""Audits, their rubric, sample, pool, import log, drift results and stored page views."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import duckdb

from core.errors import FrozenError, StoreError
from core.store.base import StoreBase
from core.store.connection import _now
from core.store.draws import all_draws
from core.store.schema import CANDIDATE_COLUMNS

if TYPE_CHECKING:
    import pandas as pd


class AuditRecords(StoreBase):
    """Everything of an audit but its calls and draws."""

    # ------------------------------------------------------------------ audits
    def list_audits(self) -> pd.DataFrame:
        """Audits with their draw counts, newest first."""
        return self._df(f"""
            SELECT a.audit_id, a.created_at, a.harness_hash,
                   (SELECT count(DISTINCT candidate_id || '|' || run)
                      FROM {all_draws('a.audit_id')} d) AS evaluations
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
            f"SELECT count(*) FROM {all_draws()} d", [audit_id])[0][0])

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
                n = cur.execute(f"SELECT count(*) FROM {all_draws()} d",
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
            for table in ("draws", "imported_draws", "calls", "imported_calls", "candidates",
                          "pool", "criteria", "imports", "audits"):
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

    def write_criteria(self, audit_id: str, rows: list[tuple[str, float | None, float]],
                       cur: duckdb.DuckDBPyConnection) -> None:
        """Replace the audit's criteria from plain ``(criterion, max_points, weight)`` rows in
        rubric order (no frame: an import from the command line never loads pandas)."""
        cur.execute("DELETE FROM criteria WHERE audit_id = ?", [audit_id])
        if rows:
            cur.executemany("INSERT INTO criteria (audit_id, criterion, position, max_points, "
                            "weight) VALUES (?, ?, ?, ?, ?)",
                            [[audit_id, n, i, m, w] for i, (n, m, w) in enumerate(rows)])

    def candidate_ids(self, audit_id: str) -> list[str]:
        """The audit's sample, as plain ids."""
        return [str(r[0]) for r in self._rows(
            "SELECT candidate_id FROM candidates WHERE audit_id = ? ORDER BY 1", [audit_id])]

    def get_criteria(self, audit_id: str) -> pd.DataFrame:
        return self._df("SELECT criterion, position, max_points, weight FROM criteria "
                        "WHERE audit_id = ? ORDER BY position, criterion", [audit_id])

    def criteria_rows(self, audit_id: str) -> list[tuple[str, float | None, float | None]]:
        """``(criterion, max_points, weight)`` in rubric order, as plain values."""
        return [(r[0], r[1], r[2]) for r in self._rows(
            "SELECT criterion, max_points, weight FROM criteria WHERE audit_id = ? "
            "ORDER BY position, criterion", [audit_id])]

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
            n = cur.execute(f"SELECT count(*) FROM {all_draws()} d",
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



def _candidate_frame(audit_id: str, candidates: pd.DataFrame) -> pd.DataFrame:
    """Candidates with every column present and typed (text columns as text even when empty)."""
    import pandas as pd

    frame = candidates.assign(audit_id=audit_id).reindex(columns=CANDIDATE_COLUMNS)
    for col in ("audit_id", "candidate_id", "stratum", "application"):
        frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
        frame[col] = frame[col].map(lambda v: None if v is None else str(v))
    frame["first_pass_score"] = pd.to_numeric(frame["first_pass_score"], errors="coerce")
    return frame

