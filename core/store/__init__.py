"""The one package that speaks SQL: the DuckDB file of audits, calls and draws, and the reading
of files from outside (which DuckDB's own readers do, in a staging database).

Modules
-------
``connection``   the file attached per use to one process-wide instance; staging databases
``schema``       tables, column lists (CALL_COLUMNS, DRAW_COLUMNS), versioned migrations
``base``         open / migrate, cursors, transactions
``audits``       audits, rubric, sample, pool, import log, drift results, page views
``draws``        calls and draws: writes that never store a draw twice, and reads
``files``        a file from outside into a staging database (bounds first), as a
                 :class:`~core.store.filetable.FileTable`
``filetable``    typed columns and row checks in SQL, each fault with its line
``draw_checks``  the SQL of a draws / pool file's checks and its normalized, staged result

Writes are batched (``INSERT … SELECT`` from a registered frame or a staging table, never
``executemany``); each import is one transaction and a failure rolls everything back. A
schema version is stored in ``meta``, migrated and checked on open.
"""

from __future__ import annotations

from core.store.audits import AuditRecords
from core.store.connection import DEFAULT_WAIT_S
from core.store.draws import DrawRecords
from core.store.schema import CALL_COLUMNS, DRAW_COLUMNS, SCHEMA_VERSION

__all__ = ["Store", "SCHEMA_VERSION", "DEFAULT_WAIT_S", "CALL_COLUMNS", "DRAW_COLUMNS",
           "DEFAULT_DB"]

#: The database file used when none is given (``--db``, ``AUDIT_DB``).
DEFAULT_DB = "data/audits.duckdb"


class Store(AuditRecords, DrawRecords):
    """The DuckDB file of draws; holds the file only while a method works on it.

    Parameters
    ----------
    path : str or Path
        The database file; created (with its folder) when missing. ``":memory:"`` for tests
        (then one private in-memory database, held for the store's life).
    read_only : bool
        Never write (a report or a listing).
    wait_s : float, optional
        How long to wait for a file held by another process before a
        :class:`~core.errors.StoreError`; default ``AUDIT_DB_WAIT_S`` or 30 s.

    Notes
    -----
    Every public method opens the file, works and closes it (see :mod:`core.store.connection`),
    so several processes can share a file; :meth:`session` keeps it open across several calls
    of one thread when a consistent view is wanted or many small reads follow each other.
    """
