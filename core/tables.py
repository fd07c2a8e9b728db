"""A file from outside, before it is read: caps, faults, and one streaming pass over its text.

Order of work, so that no file can exhaust the machine:

1. **Bounds before reading whole** (:class:`Limits`, settable by environment or options): the
   file size; for Parquet the row count and uncompressed size from its metadata (a 1 MB file can
   hold 100 million rows); for text files one streaming pass in fixed-size chunks
   (:func:`scan_text`) that checks the longest line, counts the lines, and refuses binary data,
   spreadsheets renamed ``.csv``, UTF-16 and invalid UTF-8, naming the line. Memory during this
   pass is one chunk.
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
import re
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from core.errors import AuditError, InputError
from core.format import term_escape

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = ["read_table", "file_sha256", "numeric_column", "require_columns", "FORMATS",
           "Limits", "Fault", "FileFaults", "shown_value", "FAULT_CAP", "scan_text",
           "find_blank_lines", "detect_format", "as_path", "name_of", "MAGIC", "Source"]

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


@dataclass
class Scan:
    sha256: str
    lines: int          # physical lines that hold something
    #: 1-based, before the last data line; None when not looked for (``scan_text(blanks=False)``)
    blank_lines: list[int] | None = field(default_factory=list)
    newline: str = "\n"
    header: str = ""
    controls: bool = False   # bytes below 32 other than tab, CR, LF (or DEL) somewhere
    quoted_or_tab: bool = False   # a double quote or a tab somewhere
    mixed_endings: int | None = None   # first line ending unlike the header's
    #: a '_' between two digits somewhere ("1_000"): DuckDB's number reader takes it as 1000,
    #: our rule refuses it, so such a file is read as text (see core.store.files)
    digit_underscore: bool = False
    line_count: int = 0    # lines that hold at least one byte (a last line without newline too)


def scan_text(path: Path, display: str, limits: Limits, fmt: str, *,
              blanks: bool = True) -> Scan:
    """One streaming pass over a text file: hash, line bounds, encoding. Memory: one chunk.

    ``blanks=False`` skips the search for blank lines (a third of the pass on a CSV whose
    every line ends in a newline); ``Scan.blank_lines`` is then None and the caller asks
    :func:`find_blank_lines` only when the reader's record count says some line was skipped.
    The hash is computed by a thread of its own meanwhile (``hashlib`` releases the GIL).
    """
    hasher = _Hasher(path)
    hasher.start()
    try:
        try:
            scan = _scan(path, display, limits, fmt, blanks)
        except _NeedBlanks:
            scan = _scan(path, display, limits, fmt, True)
    except BaseException:
        hasher.stop = True     # a refused file is not read to its end
        raise
    finally:
        hasher.join()
    scan.sha256 = hasher.digest
    return scan


class _NeedBlanks(Exception):
    """The row cap is reached counting blank lines as rows: count again, exactly."""


class _Hasher(threading.Thread):
    """The file's sha256, read and hashed beside the scan; ``stop`` ends it early."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.stop, self.digest = path, False, ""

    def run(self) -> None:
        h = hashlib.sha256()
        try:
            with open(self.path, "rb") as fh:
                while not self.stop:
                    chunk = fh.read(_CHUNK)
                    if not chunk:
                        break
                    h.update(chunk)
            self.digest = h.hexdigest()
        except OSError:   # the scan reads the same file and names the problem
            pass


class _Blanks:
    """Blank lines (nothing or only '\\r') found chunk by chunk, across chunk edges."""

    def __init__(self) -> None:
        self.found: list[int] = []
        self.last_nonblank = 0
        self.cur_blank = True       # the current line so far holds nothing but '\\r'

    def feed(self, chunk: bytes, line_no: int, n_nl: int, first_nl: int, last_nl: int,
             has_cr: bool) -> None:
        if not n_nl:
            self.cur_blank = self.cur_blank and not chunk.strip(b"\r")
            return
        if self.cur_blank and not chunk[:first_nl].strip(b"\r"):
            self.found.append(line_no)
        self.found.extend(_blank_lines(chunk, first_nl, line_no, 100000, has_cr))
        # the last complete line that is not blank
        k, i = line_no + n_nl - 1, len(self.found) - 1
        while i >= 0 and self.found[i] == k:
            k, i = k - 1, i - 1
        if k >= line_no:
            self.last_nonblank = k
        self.cur_blank = not chunk[last_nl + 1:].strip(b"\r")

    def result(self, line_no: int, cur_len: int) -> tuple[int, list[int]]:
        """(the last line that holds something, the blank lines before it)."""
        last = line_no if cur_len > 0 else self.last_nonblank
        return last, [b for b in self.found if b < last]


def find_blank_lines(path: Path) -> list[int]:
    """The blank lines of a text file before its last line that holds something (1-based),
    as :func:`scan_text` finds them."""
    track = _Blanks()
    line_no, cur_len = 1, 0
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            n_nl = chunk.count(b"\n")
            last_nl = chunk.rfind(b"\n")
            track.feed(chunk, line_no, n_nl, chunk.find(b"\n"), last_nl, b"\r" in chunk)
            cur_len = len(chunk) - last_nl - 1 if n_nl else cur_len + len(chunk)
            line_no += n_nl
    return track.result(line_no, cur_len)[1]


def _scan(path: Path, display: str, limits: Limits, fmt: str, blanks: bool) -> Scan:
    line_no = 1            # the line the next byte belongs to
    cur_len = 0            # bytes of the current line so far
    track = _Blanks() if blanks else None
    header = b""
    newline = "\n"
    first = True
    controls = False
    quoted_or_tab = False
    prev_cr = False
    mixed: int | None = None
    digit_us = False
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            if first:
                for magic, why in MAGIC:
                    if chunk.startswith(magic):
                        raise InputError(why, file=display)
                first = False
            nul = chunk.find(b"\x00")
            if nul >= 0:
                at = line_no + chunk.count(b"\n", 0, nul)
                raise InputError(f"holds binary data (a NUL byte on line {at}): this is not a "
                                 f"{fmt.upper()} text file", file=display)
            cap = limits.max_line_bytes
            if not digit_us and b"_" in chunk:
                # one translation answers both: digits as '0' (to find '0_0'), control bytes
                # as '\x01'; a '_' at the chunk's edge has its neighbour in another chunk:
                # say yes and let the caller take the careful path
                mapped = chunk.translate(_SCAN_MAP)
                digit_us = chunk[:1] == b"_" or chunk[-1:] == b"_" or b"0_0" in mapped
                controls = controls or b"\x01" in mapped
            elif not controls:
                controls = bool(chunk.translate(None, _NOT_CONTROL))
            if not quoted_or_tab:
                quoted_or_tab = b'"' in chunk or b"\t" in chunk
            n_nl = chunk.count(b"\n")
            has_cr = b"\r" in chunk
            first_nl = chunk.find(b"\n")
            last_nl = chunk.rfind(b"\n")
            if n_nl:
                # the first line may have begun in the chunk before (cur_len bytes)
                if cur_len + first_nl > cap:
                    _too_long(line_no, cap, display)
                at = _long_line_at(chunk, first_nl + 1, last_nl, cap)
                if at is not None:
                    _too_long(line_no + chunk.count(b"\n", 0, at), cap, display)
                tail = len(chunk) - last_nl - 1
            else:
                tail = cur_len + len(chunk)
            if track is not None:
                track.feed(chunk, line_no, n_nl, first_nl, last_nl, has_cr)
            if tail > cap:
                _too_long(line_no + n_nl, cap, display)
            if line_no == 1 and not header:
                header = chunk[:first_nl if first_nl >= 0 else min(len(chunk), 1 << 16)]
                if header.endswith(b"\r"):
                    newline = "\r\n"
            if fmt == "csv" and n_nl and mixed is None:
                # DuckDB's reader needs one line ending; a file that mixes them is named
                crlf = (chunk.count(b"\r\n") if has_cr else 0) + (
                    1 if prev_cr and first_nl == 0 else 0)
                if crlf != (n_nl if newline == "\r\n" else 0):
                    mixed = _first_other_ending(chunk, line_no, prev_cr, newline == "\r\n")
            prev_cr = chunk.endswith(b"\r")
            line_no += n_nl
            cur_len = tail
            if line_no - 1 > limits.max_rows + 1 + (len(track.found) if track else 0):
                if track is None:
                    raise _NeedBlanks
                raise InputError(f"has more than {limits.max_rows:,} rows (the row cap, "
                                 "AUDIT_MAX_ROWS / --max-rows)", file=display)
    count = line_no - 1 + (1 if cur_len > 0 else 0)
    last, blank = track.result(line_no, cur_len) if track else (count, None)
    return Scan("", last, blank, newline, header.decode("utf-8", "replace").lstrip("\ufeff"),
                controls, quoted_or_tab, mixed, digit_us, count)


#: every byte but the control bytes (below 32 other than tab, LF, CR; and DEL)
_NOT_CONTROL = bytes([9, 10, 13, *range(32, 127), *range(128, 256)])
#: digits mapped to '0' (to find '0_0'), control bytes (as in _NOT_CONTROL) to '\x01'
_SCAN_MAP = bytes(0x30 if 0x31 <= b <= 0x39 else 1 if (b < 32 and b not in (9, 10, 13)) or
                  b == 127 else b for b in range(256))
_BLANK_RE = re.compile(rb"\n\r*(?=\n)")


def _too_long(line: int, cap: int, display: str) -> None:
    raise InputError(f"line {line} is longer than {_mb(cap)} (the line-length cap, "
                     "AUDIT_MAX_LINE_KB / --max-line-kb)", file=display)


def _long_line_at(chunk: bytes, start: int, end: int, cap: int) -> int | None:
    """Offset of the first line in ``chunk[start:end]`` (whole lines, ``end`` the last
    newline) longer than ``cap`` bytes, or None. A line from ``pos`` is longer exactly when
    no newline lies within its first ``cap + 1`` bytes; every shorter line is stepped over
    at once (the last newline in that window), so a chunk takes about len/cap searches."""
    pos = start
    while end - pos > cap:
        q = chunk.rfind(b"\n", pos, pos + cap + 1)
        if q < 0:
            return pos
        pos = q + 1
    return None


def _blank_lines(chunk: bytes, first_nl: int, line_no: int, most: int,
                 has_cr: bool = True) -> list[int]:
    """Line numbers of the blank lines (nothing or only '\r') that start after the chunk's
    first newline (``line_no`` is the chunk's first line). Rare: a quick test first."""
    if b"\n\n" not in chunk and not (has_cr and b"\n\r" in chunk):
        return []
    out: list[int] = []
    seen, at = 0, line_no
    for m in _BLANK_RE.finditer(chunk, first_nl):
        at += chunk.count(b"\n", seen, m.start() + 1)
        seen = m.start() + 1
        out.append(at)
        if len(out) >= most:
            break
    return out


def _first_other_ending(chunk: bytes, line_no: int, prev_cr: bool, crlf: bool) -> int:
    """The first line of the chunk whose ending differs from the header's (``crlf``)."""
    pos, line = 0, line_no
    while True:
        q = chunk.find(b"\n", pos)
        if q < 0:
            return line
        is_crlf = chunk[q - 1:q] == b"\r" if q else prev_cr
        if is_crlf != crlf:
            return line
        pos, line = q + 1, line + 1


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

