"""The one error hierarchy of the core.

Every error a user can cause is an :class:`AuditError` (also a ``ValueError``), with a message
that names the file, row and column or parameter concerned and says how to fix it.
"""

from __future__ import annotations

__all__ = [
    "AuditError",
    "InputError",
    "StoreError",
    "FrozenError",
    "GuardError",
    "IdentificationError",
]


class AuditError(ValueError):
    """Base class: a problem the user can fix, with a one-line actionable message."""


class InputError(AuditError):
    """A file or a value from outside is not acceptable.

    Parameters
    ----------
    message : str
        What is wrong and how to fix it.
    file, row, column : optional
        Where. ``row`` is 1-based over data rows (the header is not counted), as a spreadsheet
        user would count them after the header line.
    """

    def __init__(self, message: str, *, file: str | None = None, row: int | None = None,
                 column: str | None = None) -> None:
        self.file, self.row, self.column = file, row, column
        where = []
        if file:
            where.append(str(file))
        if row is not None:
            where.append(f"row {row}")
        if column:
            where.append(f"column '{column}'")
        super().__init__(": ".join([", ".join(where), message]) if where else message)


class StoreError(AuditError):
    """The DuckDB file cannot be used (locked by another process, corrupt, wrong version)."""


class FrozenError(AuditError):
    """An attempt to change a harness freeze sheet after the audit's first draw."""


class GuardError(AuditError):
    """A guard blocks the work (side effects not cleared, deterministic pre-flight, …)."""


class IdentificationError(AuditError):
    """A model is not identified by the data (e.g. a disconnected batch-rater graph)."""
