"""One streaming pass over a text file's bytes before DuckDB reads it (step 1 of
:mod:`core.tables`): the longest line against the cap, the line count, binary data and
spreadsheets renamed ``.csv``, control bytes, ``1_000`` between digits, line endings, blank
lines, and the file's sha256 (in a thread of its own beside the pass). Memory is one chunk.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import InputError
from core.tables import MAGIC, Limits, mb_text

__all__ = ["Scan", "find_blank_lines", "scan_text"]

_CHUNK = 8 << 20


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
    raise InputError(f"line {line} is longer than {mb_text(cap)} (the line-length cap, "
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
