"""The store's plumbing: open (create or migrate the schema), cursors, transactions, appends."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from core.errors import StoreError
from core.store.connection import _ATTACHED, Staging, _first_line, _store_error, _wait_s
from core.store.schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION

if TYPE_CHECKING:
    import pandas as pd


class StoreBase:
    """Open, migrate and check the file; cursors, transactions (see :class:`core.store.Store`)."""

    def __init__(self, path: str | Path, *, read_only: bool = False,
                 wait_s: float | None = None) -> None:
        self.path = str(path)
        self.read_only = read_only
        self.wait_s = _wait_s() if wait_s is None else float(wait_s)
        self._mem: Staging | None = None
        self._local = threading.local()
        if self.path == ":memory:":
            # a private in-memory database in the process-wide instance (so a staged import
            # is copied into it like into a file)
            self._mem = Staging()
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
            cur.execute(SCHEMA)
            row = cur.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
            if not row:
                cur.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
            else:
                version = int(row[0][0])
                while version < SCHEMA_VERSION and version in MIGRATIONS:
                    for sql in MIGRATIONS[version]:
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

