"""A file from outside, before it is read: caps, faults, and one streaming pass over its text.

Order of work, so that no file can exhaust the machine:

1. **Bounds before reading whole** (:class:`Limits`, settable by environment or options): the
   file size; for Parquet the row count and uncompressed size from its metadata (a 1 MB file can
   hold 100 million rows); for text files one streaming pass in fixed-size chunks
   (:func:`core.scan.scan_text`) that checks the longest line, counts the lines, and refuses
   binary data, spreadsheets renamed ``.csv``, UTF-16 and invalid UTF-8, naming the line.
   Memory during this pass is one chunk.
2. **DuckDB's own readers** then load the file into a staging database with the line number a
   spreadsheet shows (CSV: header = line 1; JSON Lines: the file's line; Parquet: row) — that
   is SQL, so it lives in the store: :func:`core.store.files.open_table`.
3. **Checks in SQL** return every offending row up to a cap (:data:`FAULT_CAP`) as
   :class:`Fault` records (line, column, value), raised together as :class:`FileFaults`.

A Streamlit upload arrives as an in-memory buffer: it is written to a temporary file (size
checked first) and read from there (PITFALLS: DuckDB's ``read_csv`` cannot read a buffer).

The pandas helpers (:func:`read_table`, :func:`numeric_column`, :func:`require_columns`) serve
small files read elsewhere (criteria files, the ratings panel of the Drift page); the same
bounds apply before reading.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from core.errors import AuditError, InputError
from core.format import term_escape

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = ["read_table", "file_sha256", "numeric_column", "require_columns", "FORMATS",
           "Limits", "Fault", "FileFaults", "shown_value", "FAULT_CAP", "detect_format",
           "as_path", "name_of", "mb_text", "MAGIC", "Source"]

FORMATS = ("csv", "parquet", "jsonl")

#: How many faults a validation lists before it only counts the rest.
FAULT_CAP = 50


# ----------------------------------------------------------------------------- limits
def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        v = float(raw)
    except ValueError:
        raise InputError(f"the environment variable {name} must be a number, not {raw!r}"
                         ) from None
    if not math.isfinite(v) or v <= 0:
        raise InputError(f"the environment variable {name} must be a positive number")
    return v


@dataclass(frozen=True)
class Limits:
    """Caps checked before a file is read whole.

    Defaults: 1,024 MB per file (and of a Parquet file's uncompressed data), 2,000,000 rows
    (an import of that size stays within SPEC §6's 2 GB: about 0.8 GB a million rows, measured
    by benchmarks/bench_import.py), 1 MB per line. Environment: ``AUDIT_MAX_FILE_MB``,
    ``AUDIT_MAX_ROWS``, ``AUDIT_MAX_LINE_KB``, ``AUDIT_MAX_COLUMNS`` (500); the CLI has
    ``--max-file-mb``, ``--max-rows``, ``--max-line-kb``. ``memory_mb`` bounds the in-memory
    DuckDB database used for validation.
    """

    max_bytes: int = 1024 << 20
    max_rows: int = 2_000_000
    max_line_bytes: int = 1 << 20
    max_columns: int = 500
    memory_mb: int = 1024

    @classmethod
    def from_env(cls, *, max_file_mb: float | None = None, max_rows: float | None = None,
                 max_line_kb: float | None = None) -> Limits:
        """Defaults, overridden by the environment, overridden by the arguments."""
        d = cls()
        mb = max_file_mb if max_file_mb is not None else _env_number(
            "AUDIT_MAX_FILE_MB", d.max_bytes / (1 << 20))
        rows = max_rows if max_rows is not None else _env_number("AUDIT_MAX_ROWS", d.max_rows)
        kb = max_line_kb if max_line_kb is not None else _env_number(
            "AUDIT_MAX_LINE_KB", d.max_line_bytes / 1024)
        ncols = _env_number("AUDIT_MAX_COLUMNS", d.max_columns)
        for what, v in (("max file size (MB)", mb), ("max rows", rows),
                        ("max line length (KB)", kb)):
            if not math.isfinite(v) or v <= 0:
                raise InputError(f"the {what} must be a positive number, not {v!r}")
        return replace(d, max_bytes=int(mb * (1 << 20)), max_rows=int(rows),
                       max_line_bytes=int(kb * 1024), max_columns=int(ncols))

    def describe_bytes(self) -> str:
        return mb_text(self.max_bytes)


def mb_text(n: float) -> str:
    return f"{n / (1 << 20):,.0f} MB" if n >= (1 << 20) else f"{n / 1024:,.0f} KB"


# ----------------------------------------------------------------------------- faults
def shown_value(value: Any, width: int = 40) -> str:
    """A value as a fault shows it: quoted, shortened, control characters escaped."""
    if value is None:
        return "empty"
    s = str(value)
    if s.strip() == "":
        return "empty"
    if len(s) > width:
        s = s[:width] + "…"
    return "'" + term_escape(s).replace("'", "\\'") + "'"


@dataclass(frozen=True)
class Fault:
    """One fault of a file: where (line as a spreadsheet shows it, column) and what."""

    file: str
    line: int | None
    column: str | None
    value: str | None
    message: str
    locator: str = "line"

    def where(self) -> str:
        parts = [self.file]
        if self.line is not None:
            parts.append(f"{self.locator} {self.line}")
        if self.column:
            parts.append(f"column '{term_escape(self.column)}'")
        return ", ".join(parts)

    def __str__(self) -> str:
        return f"{self.where()}: {self.message}"


class FileFaults(InputError):
    """A file with one or more faults: every one of them (up to :data:`FAULT_CAP`), by line.

    ``str()`` is one line (the first fault and how many more); :meth:`lines` gives one line per
    fault for a terminal, :attr:`faults` the records for a table.
    """

    def __init__(self, faults: list[Fault], total: int | None = None) -> None:
        ordered = sorted(faults, key=lambda f: (f.line is None, f.line or 0, f.column or ""))
        self.faults = ordered[:FAULT_CAP]
        self.total = max(int(total if total is not None else len(faults)), len(self.faults))
        first = self.faults[0]
        more = self.total - 1
        text = str(first) + (f" (and {more:,} more fault{'s' if more > 1 else ''} in this "
                             "file)" if more else "")
        AuditError.__init__(self, text)
        self.file, self.row, self.column = first.file, first.line, first.column

    @property
    def hidden(self) -> int:
        """Faults counted but not listed (over the cap)."""
        return self.total - len(self.faults)

    def lines(self) -> list[str]:
        """One line per listed fault, then a count of the rest."""
        out = [str(f) for f in self.faults]
        if self.hidden:
            out.append(f"{self.file}: … and {self.hidden:,} more fault(s) not listed "
                       f"(the first {len(self.faults)} are shown)")
        return out


# ----------------------------------------------------------------------------- sources
Source = str | Path | bytes | IO[bytes]


def name_of(source: Any, name: str | None) -> str:
    if name:
        return str(name)
    if isinstance(source, (str, Path)):
        return Path(source).name
    return str(getattr(source, "name", None) or "upload")


@contextmanager
def as_path(source: Source, display: str, limits: Limits) -> Iterator[Path]:
    """A path to read: the file itself, or a temporary copy of a buffer (size checked first)."""
    if isinstance(source, (str, Path)):
        p = Path(source)
        if not p.exists():
            raise InputError("file not found; check the path", file=str(source))
        if p.is_dir():
            raise InputError("is a folder, not a file", file=str(source))
        size = p.stat().st_size
        if size > limits.max_bytes:
            raise InputError(f"the file is {mb_text(size)}, over the {limits.describe_bytes()} cap "
                             "(AUDIT_MAX_FILE_MB / --max-file-mb)", file=display)
        yield p
        return
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        size = getattr(source, "size", None)
        if isinstance(size, int) and size > limits.max_bytes:
            raise InputError(f"the file is {mb_text(size)}, over the {limits.describe_bytes()} cap "
                             "(AUDIT_MAX_FILE_MB / --max-file-mb)", file=display)
        data = source.getvalue() if hasattr(source, "getvalue") else source.read()
        if hasattr(source, "seek"):
            source.seek(0)
        if isinstance(data, str):
            data = data.encode("utf-8")
    if len(data) > limits.max_bytes:
        raise InputError(f"the file is {mb_text(len(data))}, over the "
                         f"{limits.describe_bytes()} cap (AUDIT_MAX_FILE_MB / --max-file-mb)",
                         file=display)
    suffix = Path(display).suffix[:12] if Path(display).suffix else ""
    fd, tmp = tempfile.mkstemp(prefix="audit-upload-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        del data
        yield Path(tmp)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


MAGIC = [
    (b"PK\x03\x04", "is a zip archive (an .xlsx workbook?), not a CSV: save the sheet as "
                    "'CSV UTF-8' from the spreadsheet"),
    (b"\xd0\xcf\x11\xe0", "is an Excel 97-2003 workbook, not a CSV: save the sheet as "
                          "'CSV UTF-8' from the spreadsheet"),
    (b"\xff\xfe", "is UTF-16 text: save it as 'CSV UTF-8' (or UTF-8 JSON Lines)"),
    (b"\xfe\xff", "is UTF-16 text: save it as 'CSV UTF-8' (or UTF-8 JSON Lines)"),
    (b"\x1f\x8b", "is gzip-compressed: unpack it first"),
]


def detect_format(name: str, head: bytes) -> str:
    low = name.lower()
    if head[:4] == b"PAR1" or low.endswith((".parquet", ".pq")):
        return "parquet"
    if low.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{":
        return "jsonl"
    return "csv"


def read_table(source: str | Path | bytes | IO[bytes], *, name: str | None = None,
               fmt: str | None = None, limits: Limits | None = None
               ) -> tuple[pd.DataFrame, str, str]:
    """Read a small CSV / Parquet / JSON Lines table into pandas (all values as text for CSV).

    The bounds of :func:`open_table` apply first (size, rows, line length, encoding); the file
    is then read by DuckDB and handed over as a DataFrame whose CSV values are strings (empty
    cells NaN), so validators see exactly what the file holds.

    Returns
    -------
    (DataFrame, sha256 of the bytes, display name)
    """
    from core.store.files import open_table

    with open_table(source, name=name, fmt=fmt, limits=limits, what="file") as t:
        return t.as_frame(), t.sha256, t.name


def require_columns(df: pd.DataFrame, required: list[str], display: str,
                    what: str) -> None:
    """Raise naming the missing columns and the ones found."""
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise InputError(
            f"missing column(s) {', '.join(repr(m) for m in missing)} for {what}; "
            f"found {', '.join(repr(c) for c in df.columns)}", file=display)


def numeric_column(df: pd.DataFrame, column: str, display: str, *,
                   allow_missing: bool = False) -> np.ndarray:
    """Return ``df[column]`` as float64, or raise naming the first offending row.

    A value that is not a finite number (text, empty, ``inf``, ``nan``, a boolean) is rejected
    with its 1-based data row and the column name.
    """
    import numpy as np
    import pandas as pd

    raw = df[column]
    is_bool = raw.map(lambda v: isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
    values = pd.to_numeric(raw.where(~is_bool, np.nan), errors="coerce").to_numpy(
        dtype="float64")
    bad = ~np.isfinite(values)
    if allow_missing:
        bad &= raw.notna().to_numpy() & (raw.astype(str).str.strip() != "").to_numpy()
    bad |= is_bool
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        shown = raw.iloc[i]
        shown = "empty" if (shown is None or (isinstance(shown, float) and np.isnan(shown))
                            or str(shown).strip() == "") else repr(str(shown))
        raise InputError(f"{shown} is not a finite number", file=display, row=i + 1,
                         column=column)
    return values

