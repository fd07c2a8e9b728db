"""Reading tabular files from outside: CSV, Parquet, JSON Lines (paths or in-memory buffers).

This module is **the one place that uses DuckDB to read files** (the project rule "SQL only in
core/store.py" is about the audit database; a file from outside is read here, into a private
in-memory DuckDB database that is closed when validation ends, and never touches the audit file).

Order of work, so that no file can exhaust the machine:

1. **Bounds before reading whole** (:class:`Limits`, settable by environment or options): the
   file size; for Parquet the row count and uncompressed size from its metadata (a 1 MB file can
   hold 100 million rows); for text files one streaming pass in fixed-size chunks that checks the
   longest line, counts the lines, and refuses binary data, spreadsheets renamed ``.csv``,
   UTF-16 and invalid UTF-8, naming the line. Memory during this pass is one chunk.
2. **DuckDB's own readers** load the file as text (``read_csv`` with an explicit dialect,
   ``read_parquet``, JSON Lines read line by line as text) into a table ``src`` with the line
   number a spreadsheet shows (CSV: header = line 1; JSON Lines: the file's line; Parquet: row).
   The in-memory database has a memory limit, so a file is processed or refused within it.
3. **Checks in SQL** (:class:`FileTable` methods) return every offending row up to a cap, with
   its line, column and value, plus the count of the rest.

A Streamlit upload arrives as an in-memory buffer: it is written to a temporary file (size
checked first) and read from there (PITFALLS: DuckDB's ``read_csv`` cannot read a buffer).

The older pandas helpers (:func:`read_table`, :func:`numeric_column`, :func:`require_columns`)
remain for small files read elsewhere (the ratings panel of the Drift page); they apply the same
bounds before reading.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

import duckdb
import numpy as np
import pandas as pd

from core.errors import AuditError, InputError
from core.format import term_escape

__all__ = ["read_table", "file_sha256", "numeric_column", "require_columns", "FORMATS",
           "Limits", "Fault", "FileFaults", "FileTable", "open_table", "shown_value", "FAULT_CAP"]

FORMATS = ("csv", "parquet", "jsonl")

#: How many faults a validation lists before it only counts the rest.
FAULT_CAP = 50

_CHUNK = 8 << 20


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
    if not np.isfinite(v) or v <= 0:
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
            if not np.isfinite(v) or v <= 0:
                raise InputError(f"the {what} must be a positive number, not {v!r}")
        return replace(d, max_bytes=int(mb * (1 << 20)), max_rows=int(rows),
                       max_line_bytes=int(kb * 1024), max_columns=int(ncols))

    def describe_bytes(self) -> str:
        return _mb(self.max_bytes)


def _mb(n: float) -> str:
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


def _name_of(source: Any, name: str | None) -> str:
    if name:
        return str(name)
    if isinstance(source, (str, Path)):
        return Path(source).name
    return str(getattr(source, "name", None) or "upload")


@contextmanager
def _as_path(source: Source, display: str, limits: Limits) -> Iterator[Path]:
    """A path to read: the file itself, or a temporary copy of a buffer (size checked first)."""
    if isinstance(source, (str, Path)):
        p = Path(source)
        if not p.exists():
            raise InputError("file not found; check the path", file=str(source))
        if p.is_dir():
            raise InputError("is a folder, not a file", file=str(source))
        size = p.stat().st_size
        if size > limits.max_bytes:
            raise InputError(f"the file is {_mb(size)}, over the {limits.describe_bytes()} cap "
                             "(AUDIT_MAX_FILE_MB / --max-file-mb)", file=display)
        yield p
        return
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        size = getattr(source, "size", None)
        if isinstance(size, int) and size > limits.max_bytes:
            raise InputError(f"the file is {_mb(size)}, over the {limits.describe_bytes()} cap "
                             "(AUDIT_MAX_FILE_MB / --max-file-mb)", file=display)
        data = source.getvalue() if hasattr(source, "getvalue") else source.read()
        if hasattr(source, "seek"):
            source.seek(0)
        if isinstance(data, str):
            data = data.encode("utf-8")
    if len(data) > limits.max_bytes:
        raise InputError(f"the file is {_mb(len(data))}, over the {limits.describe_bytes()} cap "
                         "(AUDIT_MAX_FILE_MB / --max-file-mb)", file=display)
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


_MAGIC = [
    (b"PK\x03\x04", "is a zip archive (an .xlsx workbook?), not a CSV: save the sheet as "
                    "'CSV UTF-8' from the spreadsheet"),
    (b"\xd0\xcf\x11\xe0", "is an Excel 97-2003 workbook, not a CSV: save the sheet as "
                          "'CSV UTF-8' from the spreadsheet"),
    (b"\xff\xfe", "is UTF-16 text: save it as 'CSV UTF-8' (or UTF-8 JSON Lines)"),
    (b"\xfe\xff", "is UTF-16 text: save it as 'CSV UTF-8' (or UTF-8 JSON Lines)"),
    (b"\x1f\x8b", "is gzip-compressed: unpack it first"),
]


def _detect_format(name: str, head: bytes) -> str:
    low = name.lower()
    if head[:4] == b"PAR1" or low.endswith((".parquet", ".pq")):
        return "parquet"
    if low.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{":
        return "jsonl"
    return "csv"


@dataclass
class _Scan:
    sha256: str
    lines: int          # physical lines that hold something
    blank_lines: list[int] = field(default_factory=list)   # 1-based, before the last data line
    newline: str = "\n"
    header: str = ""
    controls: bool = False   # bytes below 32 other than tab, CR, LF (or DEL) somewhere
    quoted_or_tab: bool = False   # a double quote or a tab somewhere
    mixed_endings: int | None = None   # first line ending unlike the header's


def _scan_text(path: Path, display: str, limits: Limits, fmt: str) -> _Scan:
    """One streaming pass over a text file: hash, line bounds, encoding. Memory: one chunk."""
    h = hashlib.sha256()
    line_no = 1            # the line the next byte belongs to
    cur_len = 0            # bytes of the current line so far
    blank: list[int] = []
    last_nonblank = 0
    header = b""
    newline = "\n"
    first = True
    controls = False
    quoted_or_tab = False
    prev_cr = False
    mixed: int | None = None
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            h.update(chunk)
            if first:
                for magic, why in _MAGIC:
                    if chunk.startswith(magic):
                        raise InputError(why, file=display)
                first = False
            nul = chunk.find(b"\x00")
            if nul >= 0:
                at = line_no + chunk.count(b"\n", 0, nul)
                raise InputError(f"holds binary data (a NUL byte on line {at}): this is not a "
                                 f"{fmt.upper()} text file", file=display)
            arr = np.frombuffer(chunk, dtype=np.uint8)
            if not controls:
                low = arr < 32
                controls = bool(np.any(low & (arr != 9) & (arr != 10) & (arr != 13))
                                or np.any(arr == 127))
            if not quoted_or_tab:
                quoted_or_tab = b'"' in chunk or b"\t" in chunk
            nl = np.flatnonzero(arr == 10)
            starts = np.concatenate(([0], nl + 1))
            ends = np.concatenate((nl, [len(chunk)]))
            lengths = ends - starts
            lengths[0] += cur_len
            # a line of only '\r' (CRLF files) is blank too
            complete = lengths[:-1] if len(nl) else lengths[:0]
            if len(complete):
                longest = int(complete.max())
                if longest > limits.max_line_bytes:
                    at = line_no + int(np.argmax(complete > limits.max_line_bytes))
                    raise InputError(f"line {at} is longer than {_mb(limits.max_line_bytes)} "
                                     "(the line-length cap, AUDIT_MAX_LINE_KB / --max-line-kb)",
                                     file=display)
                empty = complete <= 1
                if empty.any():
                    idx = np.flatnonzero(empty)
                    for i in idx[:100000]:
                        s = int(starts[i])
                        text = chunk[s:int(ends[i])] if i else chunk[:int(ends[i])]
                        if text.strip(b"\r") == b"" and (i or cur_len == 0):
                            blank.append(line_no + int(i))
                nonblank = np.flatnonzero(~empty)
                if len(nonblank):
                    last_nonblank = line_no + int(nonblank[-1])
            tail = int(lengths[-1])
            if tail > limits.max_line_bytes:
                raise InputError(f"line {line_no + len(nl)} is longer than "
                                 f"{_mb(limits.max_line_bytes)} (the line-length cap, "
                                 "AUDIT_MAX_LINE_KB / --max-line-kb)", file=display)
            if line_no == 1 and not header:
                cut = chunk.find(b"\n")
                header = chunk[:cut if cut >= 0 else min(len(chunk), 1 << 16)]
                if header.endswith(b"\r"):
                    newline = "\r\n"
            if fmt == "csv" and len(nl):
                # DuckDB's reader needs one line ending; a file that mixes them is named
                crlf = np.zeros(len(nl), dtype=bool)
                inside = nl > 0
                crlf[inside] = arr[nl[inside] - 1] == 13
                if not inside[0] and prev_cr:
                    crlf[0] = True
                other = np.flatnonzero(crlf != (newline == "\r\n"))
                if len(other) and mixed is None:
                    mixed = line_no + int(other[0])   # (or a line break inside quotes)
            prev_cr = chunk.endswith(b"\r")
            line_no += len(nl)
            cur_len = tail
            if line_no - 1 > limits.max_rows + 1 + len(blank):
                raise InputError(f"has more than {limits.max_rows:,} rows (the row cap, "
                                 "AUDIT_MAX_ROWS / --max-rows)", file=display)
    if cur_len > 0:
        last_nonblank = line_no
    return _Scan(h.hexdigest(), last_nonblank, [b for b in blank if b < last_nonblank],
                 newline, header.decode("utf-8", "replace").lstrip("\ufeff"), controls,
                 quoted_or_tab, mixed)


# ----------------------------------------------------------------------------- the table
_KIND_TEXT = "'VARCHAR'"
_THOUSANDS_RE = r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?"
_DECIMAL_COMMA_RE = r"[+-]?\d*,\d+"


def _q(name: str) -> str:
    """A quoted SQL identifier for one of this module's own column names."""
    return '"' + name.replace('"', '""') + '"'


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass
class _Declared:
    """A typed column to materialize: ``out`` from file column ``column``."""

    column: str
    out: str
    kind: str                 # "number" | "id" | "text"
    required: bool
    message: Callable[[Any, str], str]
    allowed: tuple[str, ...] | None = None
    fold: tuple[str, ...] = ()


_BAD_KINDS = "('BOOLEAN', 'OBJECT', 'ARRAY', 'BLOB', 'OTHER')"


class FileTable:
    """A file loaded as text into a private in-memory DuckDB database, for checks in SQL.

    ``src`` holds ``_line`` (the line a spreadsheet shows; Parquet: the row) and per file column
    ``c<i>`` (text, NULL when empty) with its JSON/Parquet kind where the format has types
    (``VARCHAR``, ``BIGINT``, ``DOUBLE``, ``BOOLEAN``, ``OBJECT``, ``ARRAY``, ``BLOB``…; CSV is
    all ``VARCHAR``).

    Typed columns are declared (:meth:`number`, :meth:`identifier`, :meth:`text`) and built in
    one pass by :meth:`materialize` into the table ``typed``; a value that fails its rule is
    NULL there and listed as a fault. The row-set checks then read ``typed`` (or a view of it).
    Every check returns ``(faults, count)``: at most ``cap`` faults, by line, and the count.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, display: str, fmt: str, sha256: str,
                 columns: list[str], kinds: dict[str, str], decimal_comma: bool,
                 controls: bool = True, quoted_or_tab: bool = True) -> None:
        self.con = con
        self.controls = controls   # the file may hold control characters other than \t \r \n
        self.quoted_or_tab = quoted_or_tab   # … or a quote / tab (so a value may hold \t \r \n)
        self.name = display
        self.format = fmt
        self.sha256 = sha256
        self.columns = columns
        self._col = {c: f"c{i}" for i, c in enumerate(columns)}
        self._kind = kinds
        self.decimal_comma = decimal_comma
        self.locator = "row" if fmt == "parquet" else "line"
        self._declared: list[_Declared] = []
        self._rules: dict[str, tuple[bool, float | None, float | None]] = {}
        self.rows = int(self._one("SELECT count(*) FROM src"))

    # -- plumbing
    def _one(self, sql: str, params: list[Any] | None = None) -> Any:
        return self.con.execute(sql, params or []).fetchall()[0][0]

    def _rows(self, sql: str, params: list[Any] | None = None) -> list[tuple]:
        return self.con.execute(sql, params or []).fetchall()

    def close(self) -> None:
        self.con.close()

    def has(self, column: str) -> bool:
        return column in self._col

    def fault(self, line: int | None, column: str | None, value: Any, message: str) -> Fault:
        return Fault(self.name, None if line is None else int(line), column,
                     None if value is None else str(value), message, self.locator)

    def _listed(self, sql: str, count: int, cap: int, make) -> tuple[list[Fault], int]:
        if not count:
            return [], 0
        rows = self._rows(f"SELECT * FROM ({sql}) ORDER BY 1 LIMIT {int(cap)}")
        return [make(*r) for r in rows], count

    # -- typed columns (declared, then built in one pass)
    def number(self, column: str, out: str, *, whole: bool = False, minimum: float | None = None,
               maximum: float | None = None, allow_missing: bool = False) -> None:
        """Declare ``out`` (DOUBLE) parsed from ``column``.

        Accepted: plain decimals and exponents (``12``, ``-0.5``, ``1e3``); in a comma-separated
        CSV also Excel's grouped thousands (``"1,234"``); in a semicolon-separated CSV a decimal
        comma (``7,5``). Faults: text, ``inf``/``nan``, an overflow (``1e400``), booleans and
        objects (JSON / Parquet), empty cells unless ``allow_missing``, and (``whole``,
        ``minimum``, ``maximum``) a value that is not a whole number in range.
        """
        self._declared.append(_Declared(column, out, "number", not allow_missing,
                                        lambda v, k: _number_message(
                                            v, k, whole=whole, minimum=minimum, maximum=maximum,
                                            decimal_comma=self.decimal_comma)))
        self._rules[out] = (whole, minimum, maximum)

    def identifier(self, column: str, out: str, *, what: str = "id",
                   allow_missing: bool = False, fold: tuple[str, ...] = ()) -> None:
        """Declare ``out`` (VARCHAR, trimmed) from an id column.

        Ids are text or whole numbers. Faults: empty (unless ``allow_missing``), booleans,
        decimals, objects, lists, bytes; text a spreadsheet would run as a formula (leading
        ``=``, ``@``, or ``+`` / ``-`` not followed by a number); control characters.
        ``fold``: values taken in lower case whatever their case (e.g. ``total``).
        """
        self._declared.append(_Declared(column, out, "id", not allow_missing,
                                        lambda v, k: _id_message(v, k, what), fold=fold))

    def text(self, column: str, out: str, *, allowed: tuple[str, ...] | None = None,
             lower: bool = False) -> None:
        """Declare ``out`` (VARCHAR, NULL when empty) from an optional text column."""
        self._declared.append(_Declared(
            column, out, "text-lower" if lower else "text", False,
            lambda v, k: (f"{shown_value(v)} is {_kind_words(k)}, not text"
                          if k in ("OBJECT", "ARRAY", "BLOB", "OTHER") else
                          f"{shown_value(v)} is not one of {', '.join(allowed or ())}"),
            allowed))

    def _typed_exprs(self, d: _Declared) -> tuple[str, str]:
        """(inner expression, outer expression): the inner is a candidate value computed once
        (alias ``_p<out>``), the outer refuses what breaks the rule (NULL)."""
        c, k = self._col[d.column], self._kind[d.column]
        text_only = k == _KIND_TEXT      # CSV: every value is text, no kind to test
        v = f"trim({c})"
        p = _q("_p" + d.out)
        if d.kind == "number":
            whole, minimum, maximum = self._rules[d.out]
            alt = (f"WHEN strpos({v}, ',') > 0 AND regexp_full_match({v}, "
                   f"'{_DECIMAL_COMMA_RE}') THEN TRY_CAST(replace({v}, ',', '.') AS DOUBLE) "
                   if self.decimal_comma else
                   f"WHEN strpos({v}, ',') > 0 AND regexp_full_match({v}, '{_THOUSANDS_RE}') "
                   f"THEN TRY_CAST(replace({v}, ',', '') AS DOUBLE) ")
            bad_kind = "" if text_only else f"WHEN {k} IN {_BAD_KINDS} THEN NULL "
            inner = (f"CASE {bad_kind}WHEN strpos({v}, '_') > 0 "
                     f"THEN NULL {alt}ELSE TRY_CAST({v} AS DOUBLE) END")
            ok = [f"isfinite({p})"]
            if whole:
                ok.append(f"{p} = round({p})")
            if minimum is not None:
                ok.append(f"{p} >= {float(minimum)!r}")
            if maximum is not None:
                ok.append(f"{p} <= {float(maximum)!r}")
            return inner, f"CASE WHEN {' AND '.join(ok)} THEN {p} END"
        if d.kind == "id":
            if text_only:
                inner = f"CASE WHEN {v} <> '' THEN {v} END"
            else:
                as_num = f"TRY_CAST({c} AS DOUBLE)"
                inner = (f"CASE WHEN {k} = 'DOUBLE' AND {as_num} = round({as_num}) AND "
                         f"abs({as_num}) < 1e15 THEN CAST(CAST({as_num} AS BIGINT) AS VARCHAR) "
                         f"WHEN {k} IN ('VARCHAR', 'BIGINT') AND {v} <> '' THEN {v} END")
            for word in d.fold:
                inner = f"CASE WHEN {c} ILIKE {_lit(word)} THEN {_lit(word)} ELSE {inner} END"
            if self.controls:
                control = f"regexp_matches({c}, '[\\x00-\\x1f\\x7f]')"
            elif self.quoted_or_tab:
                control = (f"(strpos({c}, chr(9)) > 0 OR strpos({c}, chr(10)) > 0 OR "
                           f"strpos({c}, chr(13)) > 0)")
            else:   # no control byte, quote or tab in the whole file: nothing to find
                control = "false"
            refuse = (f"CASE left({p}, 1) WHEN '=' THEN true WHEN '@' THEN true "
                      f"WHEN '+' THEN TRY_CAST({p} AS DOUBLE) IS NULL "
                      f"WHEN '-' THEN TRY_CAST({p} AS DOUBLE) IS NULL ELSE {control} END")
            return inner, f"CASE WHEN {refuse} THEN NULL ELSE {p} END"
        val = f"lower({v})" if d.kind == "text-lower" else v
        bad_kind = "" if text_only else f"{k} IN {_BAD_KINDS} OR "
        inner = f"CASE WHEN {bad_kind}{c} IS NULL OR {v} = '' THEN NULL ELSE {val} END"
        if d.allowed:
            return inner, f"CASE WHEN {p} IN ({', '.join(map(_lit, d.allowed))}) THEN {p} END"
        return inner, p

    def materialize(self, cap: int = FAULT_CAP) -> tuple[list[Fault], int]:
        """Build ``typed`` (``_line``, the typed values, a blank flag per optional column) in
        one pass; return the faults of every declared column, by line. The raw text of a
        faulty value is read back from ``src`` for the listed rows only."""
        used = list(dict.fromkeys(d.column for d in self._declared))
        raw = [f"{self._col[c]}" for c in used]
        kinds = [f"{self._kind[c]} AS k{self._col[c][1:]}" for c in used
                 if not self._kind[c].startswith("'")]
        exprs = [self._typed_exprs(d) for d in self._declared]
        inner = [f"{e[0]} AS {_q('_p' + d.out)}" for d, e in zip(self._declared, exprs)]
        outer = [f"{e[1]} AS {_q(d.out)}" for d, e in zip(self._declared, exprs)]
        blanks = [f"({self._col[d.column]} IS NULL OR trim({self._col[d.column]}) = '') AS "
                  f"{_q('_b' + d.out)}" for d in self._declared if not d.required]
        self.con.execute(f"CREATE OR REPLACE TABLE typed AS SELECT _line, "
                         f"{', '.join(outer + blanks)} "
                         f"FROM (SELECT _line, {', '.join(raw + kinds + inner)} FROM src)")
        conds = [f"{_q(d.out)} IS NULL" + ("" if d.required else
                                           f" AND NOT {_q('_b' + d.out)}")
                 for d in self._declared]
        counts = self._rows(f"SELECT {', '.join(f'count_if({x})' for x in conds)} FROM typed"
                            )[0] if conds else []
        faults: list[Fault] = []
        total = 0
        for d, cond, n in zip(self._declared, conds, counts):
            if not n:
                continue
            total += int(n)
            c = self._col[d.column]
            k = self._kind[d.column]
            kcol = k if k.startswith("'") else f"s.k{c[1:]}"
            for line, val, kind in self._rows(
                    f"SELECT t._line, s.{c}, {kcol} FROM (SELECT _line FROM typed WHERE {cond} "
                    f"ORDER BY _line LIMIT {int(cap)}) t JOIN src s ON s._line = t._line "
                    "ORDER BY t._line"):
                faults.append(self.fault(line, d.column, val, d.message(val, kind)))
        return faults, total

    # -- row-set checks on a table or view of this database
    def create(self, name: str, select: str, *, view: bool = False) -> None:
        """``CREATE TABLE`` (or ``VIEW``) ``name AS select`` (e.g. draws in long form)."""
        what = "VIEW" if view else "TABLE"
        self.con.execute(f"CREATE OR REPLACE {what} {_q(name)} AS {select}")

    def create_mapping(self, name: str, columns: list[str], rows: list[list[Any]]) -> None:
        """A small text table (e.g. wide score columns → criterion names)."""
        cols = ", ".join(f"{_q(c)} VARCHAR" for c in columns)
        self.con.execute(f"CREATE OR REPLACE TABLE {_q(name)} ({cols})")
        if rows:
            marks = ", ".join("?" for _ in columns)
            self.con.executemany(f"INSERT INTO {_q(name)} VALUES ({marks})", rows)

    def count(self, select: str) -> int:
        """Rows of a query over this database (a cheap test before listing faults)."""
        return int(self._one(f"SELECT count(*) FROM ({select})"))

    def duplicates(self, table: str, keys: list[str], column_of: str, *, describe,
                   cap: int = FAULT_CAP) -> tuple[list[Fault], int]:
        """Rows whose ``keys`` repeat an earlier row: one fault per repeat, naming the first line.

        ``column_of`` is a column of ``table`` holding the file column to name in the fault.
        """
        k = ", ".join(_q(x) for x in keys)
        nn = " AND ".join(f"{_q(x)} IS NOT NULL" for x in keys)
        sql = (f"SELECT _line, {k}, {_q(column_of)}, first_line FROM ("
               f"SELECT _line, {k}, {_q(column_of)}, min(_line) OVER (PARTITION BY {k}) "
               f"AS first_line, row_number() OVER (PARTITION BY {k} ORDER BY _line) AS rn "
               f"FROM {_q(table)} WHERE {nn}) WHERE rn > 1")
        n = len(keys)
        return self._listed(sql, self.count(sql), cap, lambda *r: self.fault(
            r[0], r[1 + n], r[n], describe(r[1:1 + n], r[-1])))

    def listed(self, select: str, column: str | None, *, describe, cap: int = FAULT_CAP
               ) -> tuple[list[Fault], int]:
        """Faults from a query whose rows are ``_line, value, …`` (``describe(*row)``)."""
        return self._listed(select, self.count(select), cap, lambda *r: self.fault(
            r[0], column, r[1], describe(*r)))

    def group_stats(self, table: str, group: str, value: str) -> pd.DataFrame:
        """Per group: n, min, median, max, the 99th percentile of ``|value|`` and the first
        line of the group."""
        g, v = _q(group), _q(value)
        return self.frame(
            f"SELECT {g} AS criterion, count(*) AS n, min({v}) AS min, median({v}) AS median, "
            f"max({v}) AS max, quantile_cont(abs({v}), 0.99) AS p99_abs, "
            f"min(_line) AS first_line FROM {_q(table)} "
            f"WHERE {g} IS NOT NULL AND {v} IS NOT NULL GROUP BY {g}")

    def set_bounds(self, bounds: dict[str, tuple[float, float]]) -> None:
        """A small table ``_bounds (g, lo, hi)`` for range checks and clipping."""
        self.con.execute("CREATE OR REPLACE TABLE _bounds (g VARCHAR, lo DOUBLE, hi DOUBLE)")
        if bounds:
            self.con.executemany("INSERT INTO _bounds VALUES (?, ?, ?)",
                                 [[k, float(lo), float(hi)] for k, (lo, hi) in bounds.items()])

    def bound_faults(self, table: str, group: str, value: str, column_of: str,
                     bounds: dict[str, tuple[float, float]], *, describe,
                     cap: int = FAULT_CAP) -> tuple[list[Fault], int]:
        """Rows whose ``value`` is outside ``[lo, hi]`` of their group."""
        if not bounds:
            return [], 0
        self.set_bounds(bounds)
        sql = (f"SELECT t._line, t.{_q(value)}, t.{_q(group)}, t.{_q(column_of)}, b.lo, b.hi "
               f"FROM {_q(table)} t JOIN _bounds b ON t.{_q(group)} = b.g "
               f"WHERE t.{_q(value)} < b.lo OR t.{_q(value)} > b.hi")
        return self._listed(sql, self.count(sql), cap, lambda *r: self.fault(
            r[0], r[3], _num_text(r[1]), describe(r[1], r[2], r[4], r[5])))

    def frame(self, select: str) -> pd.DataFrame:
        """A result of this database as a DataFrame (through Arrow: no per-row objects)."""
        return self.con.sql(select).to_arrow_table().to_pandas()


def _number_message(val: Any, kind: str, *, whole: bool, minimum: float | None,
                    maximum: float | None, decimal_comma: bool) -> str:
    shown = shown_value(val)
    if kind == "BOOLEAN":
        return f"{val} is a boolean, not a number"
    if kind in ("OBJECT", "ARRAY", "BLOB", "OTHER"):
        return f"{shown} is {_kind_words(kind)}, not a number"
    if val is None or str(val).strip() == "":
        return "empty is not a finite number"
    text = str(val).strip()
    if re.fullmatch(_THOUSANDS_RE if not decimal_comma else _DECIMAL_COMMA_RE, text):
        text = text.replace(",", "" if not decimal_comma else ".")
    try:
        x = float(text) if "_" not in text else None
    except ValueError:
        x = None
    if x is None or math.isnan(x) or text.lower().lstrip("+-") in ("inf", "infinity"):
        return f"{shown} is not a finite number"
    if math.isinf(x):
        return f"{shown} is not a finite number (too large: it overflows)"
    if whole and x != round(x):
        return f"{shown} is not a whole run number (runs are numbered 1, 2, 3…)"
    if minimum is not None and x < minimum:
        what = "run number" if whole else "value"
        return f"{shown} is below {minimum:g}; the first {what} is {minimum:g}"
    if maximum is not None and x > maximum:
        return f"{shown} is above {maximum:,.0f}, the largest accepted here"
    return f"{shown} is not a finite number"


def _id_message(val: Any, kind: str, what: str) -> str:
    shown = shown_value(val)
    if val is None or str(val).strip() == "":
        return f"is empty; every row needs a {what}"
    if kind not in ("VARCHAR", "BIGINT", "DOUBLE") or (kind == "DOUBLE" and not _whole(val)):
        return f"{shown} is {_kind_words(kind)}; a {what} must be text or a whole number"
    if re.search(r"[\x00-\x1f\x7f]", str(val)):
        return (f"{shown} holds control characters (a line break, tab or escape code); a "
                f"{what} must be plain text")
    return (f"{shown} starts like a spreadsheet formula (= + - @); a {what} must not (fix it "
            "in the export)")


def _whole(val: Any) -> bool:
    try:
        x = float(val)
    except (TypeError, ValueError):
        return False
    return math.isfinite(x) and x == round(x) and abs(x) < 1e15


def _num_text(v: Any) -> str:
    try:
        return f"{float(v):g}"
    except (TypeError, ValueError):
        return str(v)


def _kind_words(kind: str) -> str:
    return {"OBJECT": "an object (a JSON {…} / struct)", "ARRAY": "a list",
            "BLOB": "bytes", "BOOLEAN": "a boolean", "DOUBLE": "a decimal number",
            "OTHER": "not text or a number"}.get(kind, kind.lower())


def _parquet_kind(dtype: str) -> str:
    t = dtype.upper()
    if t.startswith(("STRUCT", "MAP", "UNION")):
        return "OBJECT"
    if t.endswith("[]") or t.startswith("LIST") or re.search(r"\[\d*\]$", t):
        return "ARRAY"
    if t in ("BLOB", "BYTEA", "BINARY", "VARBINARY"):
        return "BLOB"
    if t == "BOOLEAN":
        return "BOOLEAN"
    if t in ("VARCHAR", "TEXT", "STRING") or t.startswith("ENUM"):
        return "VARCHAR"
    if t in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
             "UINTEGER", "UBIGINT", "UHUGEINT"):
        return "BIGINT"
    if t in ("FLOAT", "DOUBLE", "REAL") or t.startswith("DECIMAL"):
        return "DOUBLE"
    return "OTHER"


def _connect(limits: Limits) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:", config={"memory_limit": f"{limits.memory_mb}MB",
                                             "threads": 2})
    con.execute("SET enable_progress_bar = false")
    return con


def _duck_error(exc: Exception, display: str, fmt: str) -> InputError:
    text = str(exc)
    m = re.search(r"CSV Error on Line: (\d+)", text)
    detail = ""
    for pat, words in ((r"Expected Number of Columns: (\d+) Found: (\d+)",
                        "expected {0} columns, found {1}"),
                       (r"unterminated quote", "a quote is opened and never closed"),
                       (r"Maximum line size", "a line is too long")):
        mm = re.search(pat, text)
        if mm:
            detail = words.format(*mm.groups())
            break
    if m and "unicode" in text.lower():
        return InputError(f"is not UTF-8 text (line {m.group(1)}): save it as 'CSV UTF-8'",
                          file=display)
    if "out of memory" in text.lower() or "memory limit" in text.lower():
        return InputError("needs more memory to check than the validation is allowed; split "
                          "the file or lower its size", file=display)
    if m:
        return InputError(f"line {m.group(1)}: cannot be read as {fmt.upper()}"
                          + (f" ({detail})" if detail else ""), file=display)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    first = re.sub(r"^[A-Za-z ]+Error: ", "", first)[:200]
    return InputError(f"cannot be read as {fmt.upper()}: {first}", file=display)


def _csv_header(header: str) -> tuple[list[str], str]:
    counts = {d: header.count(d) for d in (",", ";", "\t", "|")}
    delim = max(counts, key=lambda d: counts[d]) if any(counts.values()) else ","
    try:
        names = next(csv.reader([header], delimiter=delim))
    except (csv.Error, StopIteration):
        names = header.split(delim)
    return [n.strip() for n in names], delim


def _load_csv(con: duckdb.DuckDBPyConnection, path: Path, scan: _Scan, display: str,
              limits: Limits) -> tuple[list[str], dict[str, str], bool]:
    names, delim = _csv_header(scan.header)
    if len(names) > limits.max_columns:
        raise InputError(f"has {len(names):,} columns, over the {limits.max_columns:,}-column "
                         "cap (AUDIT_MAX_COLUMNS); a rubric has far fewer criteria",
                         file=display)
    if not any(names):
        raise InputError("the first line (the header) is empty; the first line must name the "
                         "columns", file=display)
    cols = "{" + ", ".join(f"'c{i}': 'VARCHAR'" for i in range(len(names))) + "}"
    delim_sql = {"\t": "\\t"}.get(delim, delim)
    try:
        con.execute(
            f"CREATE TABLE raw AS SELECT * FROM read_csv({_lit(str(path))}, auto_detect=false, "
            f"header=true, skip=0, delim='{delim_sql}', quote='\"', escape='\"', "
            f"columns={cols}, strict_mode=true, encoding='utf-8')")
    except duckdb.Error as exc:
        if scan.mixed_endings is not None and "invalid state" in str(exc):
            raise InputError(f"mixes Windows (CRLF) and Unix (LF) line endings (line "
                             f"{scan.mixed_endings}); save it again from the spreadsheet as "
                             "CSV UTF-8", file=display) from None
        raise _duck_error(exc, display, "csv") from None
    cols = ", ".join(f"c{i}" for i in range(len(names)))
    # rows of only empty cells (a spreadsheet's trailing rows) are not rows
    keep = " OR ".join(f"c{i} IS NOT NULL" for i in range(len(names)))
    if scan.blank_lines:
        # the reader skips blank lines; a spreadsheet shows them as rows, so the k-th record
        # (0-based) sits on the k-th non-blank line after the header
        n = int(con.execute("SELECT count(*) FROM raw").fetchall()[0][0])
        con.register("_map_df", pd.DataFrame({"r": np.arange(n, dtype=np.int64),
                                              "line": _record_lines(n, scan.blank_lines)}))
        con.execute("CREATE TABLE _map AS SELECT * FROM _map_df")
        con.unregister("_map_df")
        con.execute(f"CREATE VIEW src AS SELECT m.line AS _line, {cols} FROM raw "
                    f"JOIN _map m ON m.r = raw.rowid WHERE {keep}")
    else:
        con.execute(f"CREATE VIEW src AS SELECT rowid + 2 AS _line, {cols} FROM raw "
                    f"WHERE {keep}")
    kinds = {n: _KIND_TEXT for n in names}
    return names, kinds, delim == ";"


def _record_lines(n: int, blanks: list[int]) -> np.ndarray:
    """Line numbers of ``n`` records after a header on line 1, skipping the blank lines."""
    out = np.empty(n, dtype=np.int64)
    line, bi = 2, 0
    for k in range(n):
        while bi < len(blanks) and blanks[bi] == line:
            line += 1
            bi += 1
        out[k] = line
        line += 1
    return out


def _load_jsonl(con: duckdb.DuckDBPyConnection, path: Path, display: str,
                cap: int) -> tuple[list[str], dict[str, str], Any]:
    try:
        con.execute(f"CREATE TABLE raw AS SELECT * FROM read_csv({_lit(str(path))}, "
                    "auto_detect=false, header=false, delim='\\x01', quote='', escape='', "
                    "columns={'j': 'VARCHAR'}, null_padding=true, strict_mode=false)")
        con.execute("CREATE TABLE lines AS SELECT rowid + 1 AS _line, j FROM raw "
                    "WHERE j IS NOT NULL AND trim(j) <> '' ORDER BY rowid")
        con.execute("DROP TABLE raw")
        bad = con.execute(
            "SELECT _line, j, json_valid(j) FROM lines WHERE NOT json_valid(j) OR "
            "json_type(j) <> 'OBJECT' ORDER BY _line").fetchmany(cap + 1)
        nbad = int(con.execute("SELECT count(*) FROM lines WHERE NOT json_valid(j) OR "
                               "json_type(j) <> 'OBJECT'").fetchall()[0][0])
    except duckdb.Error as exc:
        raise _duck_error(exc, display, "jsonl") from None
    faults = [Fault(display, int(r[0]), None, r[1],
                    "not valid JSON" if not r[2] else "each line must be a JSON object {…}")
              for r in bad[:cap]]
    if nbad:
        return [], {}, (faults, nbad)
    names = _json_keys(con)
    parts = []
    for i, n in enumerate(names):
        p = "$." + json.dumps(n)
        parts.append(f"json_extract_string(j, {_lit(p)}) AS c{i}, "
                     f"coalesce(json_type(j, {_lit(p)}), 'NULL') AS k{i}")
    con.execute(f"CREATE TABLE src AS SELECT _line{', ' if parts else ''}{', '.join(parts)} "
                "FROM lines ORDER BY _line")
    con.execute("DROP TABLE lines")
    kinds = {n: f"k{i}" for i, n in enumerate(names)}
    for i, _ in enumerate(names):
        con.execute(f"UPDATE src SET k{i} = CASE k{i} WHEN 'UBIGINT' THEN 'BIGINT' "
                    f"WHEN 'NULL' THEN 'VARCHAR' ELSE k{i} END")
    return names, kinds, None


def _json_keys(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = con.execute("SELECT k, min(_line) AS first FROM (SELECT _line, "
                       "unnest(json_keys(j)) AS k FROM lines) GROUP BY k "
                       "ORDER BY first, k").fetchall()
    return [str(r[0]) for r in rows]


def _load_parquet(con: duckdb.DuckDBPyConnection, path: Path, display: str, limits: Limits
                  ) -> tuple[list[str], dict[str, str], str]:
    import pyarrow.parquet as pq

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    try:
        meta = pq.ParquetFile(path).metadata
    except Exception as exc:  # noqa: BLE001 - any reader failure is one clear line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot be read as Parquet: {first[:200]}", file=display) from None
    if meta.num_rows > limits.max_rows:
        raise InputError(f"holds {meta.num_rows:,} rows (from its metadata), over the "
                         f"{limits.max_rows:,}-row cap (AUDIT_MAX_ROWS / --max-rows); nothing "
                         "was read", file=display)
    raw_size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if raw_size > limits.max_bytes:
        raise InputError(f"unpacks to {_mb(raw_size)} (from its metadata), over the "
                         f"{limits.describe_bytes()} cap (AUDIT_MAX_FILE_MB / --max-file-mb); "
                         "nothing was read", file=display)
    try:
        desc = con.execute(f"DESCRIBE SELECT * FROM read_parquet({_lit(str(path))})").fetchall()
        names = [str(r[0]).strip() for r in desc]
        types = [str(r[1]) for r in desc]
        kinds_of = [_parquet_kind(t) for t in types]
        sel = []
        for i, (n, k) in enumerate(zip([r[0] for r in desc], kinds_of)):
            src = _q(str(n))
            if k == "BLOB":
                sel.append(f"CASE WHEN {src} IS NULL THEN NULL ELSE "
                           f"'<' || octet_length({src}) || ' bytes>' END AS c{i}")
            elif k in ("OBJECT", "ARRAY", "OTHER"):
                sel.append(f"CAST({src} AS VARCHAR) AS c{i}")
            else:
                sel.append(f"CASE WHEN trim(CAST({src} AS VARCHAR)) = '' THEN NULL ELSE "
                           f"CAST({src} AS VARCHAR) END AS c{i}")
        con.execute(f"CREATE TABLE src AS SELECT file_row_number + 1 AS _line, "
                    f"{', '.join(sel)} FROM read_parquet({_lit(str(path))}, "
                    "file_row_number=true) ORDER BY file_row_number")
    except duckdb.Error as exc:
        raise _duck_error(exc, display, "parquet") from None
    kinds = {n: _lit(k) for n, k in zip(names, kinds_of)}
    return names, kinds, h.hexdigest()


@contextmanager
def open_table(source: Source, *, name: str | None = None, fmt: str | None = None,
               limits: Limits | None = None, what: str = "draws") -> Iterator[FileTable]:
    """Load a file into a :class:`FileTable` after checking its bounds; closed on exit.

    Raises
    ------
    InputError
        Over a cap (naming it); empty; no data rows; binary, a spreadsheet workbook, UTF-16 or
        not UTF-8 (with the line); unreadable as its format (with the line when known). A JSON
        Lines file with lines that are not JSON objects raises
        :class:`~core.ingest.FileFaults`-like ``InputError`` listing them (see ``faults``).
    """
    limits = limits or Limits.from_env()
    display = _name_of(source, name)
    with _as_path(source, display, limits) as path:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(4096)
        if not head.strip(b"\xef\xbb\xbf \t\r\n"):
            raise InputError(f"the file is empty; export the {what} again", file=display)
        kind = fmt or _detect_format(display, head)
        if kind not in FORMATS:
            raise InputError(f"unknown format '{kind}'; use one of {', '.join(FORMATS)}",
                             file=display)
        if kind == "jsonl" and head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"[":
            raise InputError("is a JSON array, not JSON Lines: write one JSON object per line "
                             "(records, not a list)", file=display)
        if kind == "parquet" and head[:4] != b"PAR1":
            for magic, why in _MAGIC:
                if head.startswith(magic):
                    raise InputError(why, file=display)
            raise InputError("is named like a Parquet file but is not one (no PAR1 magic)",
                             file=display)
        con = _connect(limits)
        try:
            decimal_comma = False
            controls = quoted_or_tab = True
            if kind == "parquet":
                names, kinds, digest = _load_parquet(con, path, display, limits)
            else:
                scan = _scan_text(path, display, limits, kind)
                digest = scan.sha256
                if kind == "csv":
                    names, kinds, decimal_comma = _load_csv(con, path, scan, display, limits)
                    controls, quoted_or_tab = scan.controls, scan.quoted_or_tab
                else:
                    names, kinds, bad = _load_jsonl(con, path, display, FAULT_CAP)
                    if bad:
                        raise FileFaults(*bad)
            del size
            if len(names) > limits.max_columns:
                raise InputError(f"has {len(names):,} columns, over the "
                                 f"{limits.max_columns:,}-column cap (AUDIT_MAX_COLUMNS); a rubric "
                                 "has far fewer criteria", file=display)
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise InputError(f"the header names column(s) {', '.join(map(repr, dupes))} "
                                 "more than once", file=display)
            table = FileTable(con, display, kind, digest, names, kinds, decimal_comma,
                              controls, quoted_or_tab)
            if table.rows == 0:
                raise InputError("the file has a header but no rows" if kind == "csv" else
                                 "the file has no rows", file=display)
            try:
                yield table
            except duckdb.Error as exc:
                # a check that fails inside DuckDB (memory limit, an odd value) is one line too
                raise _duck_error(exc, display, kind) from None
            except MemoryError:
                raise InputError("needs more memory to check than this machine allows; split "
                                 "the file", file=display) from None
        finally:
            con.close()


# ----------------------------------------------------------------------------- pandas helpers
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
    with open_table(source, name=name, fmt=fmt, limits=limits, what="file") as t:
        cols = ", ".join(f"CASE WHEN trim({t._col[c]}) = '' THEN NULL ELSE {t._col[c]} END "
                         f"AS {_q(c)}" for c in t.columns)
        df = t.frame(f"SELECT {cols} FROM src ORDER BY _line")
        if t.format == "parquet":
            for c in t.columns:
                if t._kind[c] in ("'BIGINT'", "'DOUBLE'"):
                    df[c] = pd.to_numeric(df[c], errors="coerce")
        df = df.astype(object).where(df.notna(), np.nan)
        return df.reset_index(drop=True), t.sha256, t.name


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

