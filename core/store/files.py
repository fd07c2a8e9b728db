"""Reading a file from outside (CSV, Parquet, JSON Lines; a path or an upload's buffer) with
DuckDB's own readers into a staging database, after its bounds are checked
(:mod:`core.tables`); the result is a :class:`~core.store.filetable.FileTable`.

The staging database is attached to the store's process-wide in-memory instance (its memory
limit bounds any file), so a validated import is later copied into the audit file by one
``INSERT … SELECT`` (:meth:`core.store.Store.write_staged`).
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from core.errors import InputError
from core.scan import Scan, find_blank_lines, scan_text
from core.store.connection import MEMORY_LIMIT_MB, Staging
from core.store.filetable import _KIND_TEXT, FileTable, _lit, _q
from core.tables import (
    FAULT_CAP,
    FORMATS,
    MAGIC,
    Fault,
    FileFaults,
    Limits,
    Source,
    as_path,
    detect_format,
    mb_text,
    name_of,
)

__all__ = ["open_table", "NumberColumns"]

#: Given a file's column names, the ones that hold numbers (read as numbers on the fast path).
NumberColumns = Callable[[list[str]], set[str]]

_CHUNK = 8 << 20


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


def _load_csv(con: duckdb.DuckDBPyConnection, path: Path, scan: Scan, display: str,
              limits: Limits, numbers: NumberColumns | None = None
              ) -> tuple[list[str], dict[str, str], bool, set[str]]:
    """Read a CSV into ``raw`` and the view ``src`` (see :class:`FileTable`); returns the
    names, kinds, whether it uses a decimal comma, and the columns read as numbers.

    Every value is read as text, except on the fast path: the columns ``numbers`` names are
    read as DOUBLE by DuckDB's reader when the file can hold no number our rules read
    otherwise (no decimal comma, no '_' between digits). A value the reader cannot take
    makes it fail, and the file is then read as text, where each fault gets its line and
    value; a typed value that breaks a rule sends the table back to text as well
    (:meth:`FileTable.materialize`). Both paths accept exactly the same files.
    """
    names, delim = _csv_header(scan.header)
    if len(names) > limits.max_columns:
        raise InputError(f"has {len(names):,} columns, over the {limits.max_columns:,}-column "
                         "cap (AUDIT_MAX_COLUMNS); a rubric has far fewer criteria",
                         file=display)
    if not any(names):
        raise InputError("the first line (the header) is empty; the first line must name the "
                         "columns", file=display)
    typed = set(numbers(names)) & set(names) if numbers else set()
    if delim == ";" or scan.digit_underscore:
        typed = set()
    delim_sql = {"\t": "\\t"}.get(delim, delim)

    def read(as_number: set[str]) -> None:
        cols = "{" + ", ".join(f"'c{i}': '{'DOUBLE' if n in as_number else 'VARCHAR'}'"
                               for i, n in enumerate(names)) + "}"
        con.execute(
            f"CREATE TABLE raw AS SELECT * FROM read_csv({_lit(str(path))}, auto_detect=false, "
            f"header=true, skip=0, delim='{delim_sql}', quote='\"', escape='\"', "
            f"columns={cols}, strict_mode=true, encoding='utf-8')")

    if typed:
        try:
            read(typed)
        except duckdb.Error:
            con.execute("DROP TABLE IF EXISTS raw")
            typed = set()
    try:
        if not typed:
            read(set())
    except duckdb.Error as exc:
        if scan.mixed_endings is not None and "invalid state" in str(exc):
            raise InputError(f"mixes Windows (CRLF) and Unix (LF) line endings (line "
                             f"{scan.mixed_endings}); save it again from the spreadsheet as "
                             "CSV UTF-8", file=display) from None
        raise _duck_error(exc, display, "csv") from None
    cols = ", ".join(f"c{i}" for i in range(len(names)))
    # rows of only empty cells (a spreadsheet's trailing rows) are not rows
    keep = " OR ".join(f"c{i} IS NOT NULL" for i in range(len(names)))
    n = int(con.execute("SELECT count(*) FROM raw").fetchall()[0][0])
    if scan.blank_lines is None:
        # not looked for in the scan: one record per line (no quote) and a record for every
        # line but the header means no line was skipped
        scan.blank_lines = [] if not scan.quoted_or_tab and n + 1 == scan.line_count else \
            find_blank_lines(path)
    if scan.blank_lines:
        # the reader skips blank lines; a spreadsheet shows them as rows, so the k-th record
        # (0-based) sits on the k-th non-blank line after the header
        con.execute("CREATE TABLE _map AS SELECT generate_subscripts(l, 1) - 1 AS r, "
                    "unnest(l) AS line FROM (SELECT CAST(? AS BIGINT[]) AS l)",
                    [_record_lines(n, scan.blank_lines)])
        con.execute(f"CREATE VIEW src AS SELECT m.line AS _line, {cols} FROM raw "
                    f"JOIN _map m ON m.r = raw.rowid WHERE {keep}")
    else:
        con.execute(f"CREATE VIEW src AS SELECT rowid + 2 AS _line, {cols} FROM raw "
                    f"WHERE {keep}")
    kinds = {n: _KIND_TEXT for n in names}
    return names, kinds, delim == ";", typed


def _record_lines(n: int, blanks: list[int]) -> list[int]:
    """Line numbers of ``n`` records after a header on line 1, skipping the blank lines."""
    out = [0] * n
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
        raise InputError(f"unpacks to {mb_text(raw_size)} (from its metadata), over the "
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
               limits: Limits | None = None, what: str = "draws",
               numbers: NumberColumns | None = None) -> Iterator[FileTable]:
    """Load a file into a :class:`FileTable` after checking its bounds; closed on exit.

    ``numbers``: which columns hold numbers, from the header (a CSV's fast path, see
    :func:`_load_csv`); without it every CSV value is read as text.

    Raises
    ------
    InputError
        Over a cap (naming it); empty; no data rows; binary, a spreadsheet workbook, UTF-16 or
        not UTF-8 (with the line); unreadable as its format (with the line when known). A JSON
        Lines file with lines that are not JSON objects raises
        :class:`~core.ingest.FileFaults`-like ``InputError`` listing them (see ``faults``).
    """
    limits = limits or Limits.from_env()
    display = name_of(source, name)
    with as_path(source, display, limits) as path:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(4096)
        if not head.strip(b"\xef\xbb\xbf \t\r\n"):
            raise InputError(f"the file is empty; export the {what} again", file=display)
        kind = fmt or detect_format(display, head)
        if kind not in FORMATS:
            raise InputError(f"unknown format '{kind}'; use one of {', '.join(FORMATS)}",
                             file=display)
        if kind == "jsonl" and head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"[":
            raise InputError("is a JSON array, not JSON Lines: write one JSON object per line "
                             "(records, not a list)", file=display)
        if kind == "parquet" and head[:4] != b"PAR1":
            for magic, why in MAGIC:
                if head.startswith(magic):
                    raise InputError(why, file=display)
            raise InputError("is named like a Parquet file but is not one (no PAR1 magic)",
                             file=display)
        staging = Staging()
        con = staging.cursor()
        table: FileTable | None = None
        # the instance's memory limit bounds the validation; a tighter cap is set meanwhile
        tighter = limits.memory_mb < MEMORY_LIMIT_MB
        if tighter:
            con.execute(f"SET memory_limit = '{int(limits.memory_mb)}MB'")
        try:
            decimal_comma = False
            controls = quoted_or_tab = True
            typed: set[str] = set()
            as_text = None
            if kind == "parquet":
                names, kinds, digest = _load_parquet(con, path, display, limits)
            else:
                # a CSV's blank lines are looked for only when its record count says so
                scan = scan_text(path, display, limits, kind, blanks=kind != "csv")
                digest = scan.sha256
                if kind == "csv":
                    names, kinds, decimal_comma, typed = _load_csv(con, path, scan, display,
                                                                   limits, numbers)
                    controls, quoted_or_tab = scan.controls, scan.quoted_or_tab
                    if typed:
                        def as_text(scan: Scan = scan) -> None:
                            for kind_, name_ in (("VIEW", "src"), ("TABLE", "_map"),
                                                 ("TABLE", "raw")):
                                con.execute(f"DROP {kind_} IF EXISTS {name_}")
                            _load_csv(con, path, scan, display, limits)
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
            table = FileTable(con, staging, display, kind, digest, names, kinds,
                              decimal_comma, controls, quoted_or_tab, typed=typed,
                              as_text=as_text)
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
            if tighter:
                con.execute(f"SET memory_limit = '{MEMORY_LIMIT_MB}MB'")
            con.close()
            if table is None or not table.kept:
                staging.close()

