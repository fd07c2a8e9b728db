"""Reading files from outside (core/tables.py, core/scan.py, core/store/files.py): bounds checked before reading whole, and files
that are not what they claim refused with one clear line — on real files written to tmp."""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import zipfile

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import InputError
from core.ingest import validate_draws, validate_pool
from core.store.files import open_table
from core.tables import Limits, read_table
from tests.support import FIXTURES, run_cli

HEADER = "candidate_id,run,criterion,score\n"


def _uploads_left() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("audit-upload-")}


@pytest.fixture
def no_leftovers():
    before = _uploads_left()
    yield
    assert _uploads_left() == before, "a temporary copy of an upload was left behind"


# ----------------------------------------------------------------------------- caps
def test_file_size_cap_refuses_before_reading(tmp_path):
    p = tmp_path / "big.csv"
    p.write_text(HEADER + "X,1,a,1\n" * 200_000)
    with pytest.raises(InputError, match=r"over the 1 MB cap \(AUDIT_MAX_FILE_MB"):
        validate_draws(p, limits=Limits.from_env(max_file_mb=1))


def test_file_size_cap_applies_to_uploaded_buffers(no_leftovers):
    data = (HEADER + "X,1,a,1\n" * 200_000).encode()
    buf = io.BytesIO(data)
    buf.name = "upload.csv"
    with pytest.raises(InputError, match="over the 1 MB cap"):
        validate_draws(buf, limits=Limits.from_env(max_file_mb=1))


def test_row_cap_for_text_files(tmp_path):
    p = tmp_path / "rows.csv"
    p.write_text(HEADER + "".join(f"c{i},{r},a,1\n" for i in range(60) for r in (1, 2)))
    with pytest.raises(InputError, match=r"more than 100 rows \(the row cap, AUDIT_MAX_ROWS"):
        validate_draws(p, limits=Limits.from_env(max_rows=100))
    assert validate_draws(p, limits=Limits.from_env(max_rows=120)).rows == 120


def test_row_cap_from_the_environment(tmp_path, monkeypatch):
    p = tmp_path / "rows.csv"
    p.write_text(HEADER + "".join(f"c{i},{r},a,1\n" for i in range(10) for r in (1, 2)))
    monkeypatch.setenv("AUDIT_MAX_ROWS", "5")
    with pytest.raises(InputError, match="more than 5 rows"):
        validate_draws(p)
    monkeypatch.setenv("AUDIT_MAX_ROWS", "lots")
    with pytest.raises(InputError, match="AUDIT_MAX_ROWS must be a number"):
        validate_draws(p)


def test_parquet_bomb_is_refused_from_its_metadata(tmp_path):
    """A tiny file of millions of rows: refused from the footer, before any row is read."""
    n = 3_000_000
    table = pa.table({"candidate_id": pa.array(["x"] * 1).take(pa.array([0] * n)),
                      "run": pa.array([1] * 1, pa.int64()).take(pa.array([0] * n)),
                      "criterion": pa.array(["a"]).take(pa.array([0] * n)),
                      "score": pa.array([1.0]).take(pa.array([0] * n))})
    p = tmp_path / "bomb.parquet"
    pq.write_table(table, p, compression="zstd")
    assert p.stat().st_size < 2_000_000
    with pytest.raises(InputError) as exc:
        validate_draws(p, limits=Limits.from_env(max_rows=1_000_000))
    msg = str(exc.value)
    assert "holds 3,000,000 rows (from its metadata)" in msg and "nothing was read" in msg
    assert "AUDIT_MAX_ROWS" in msg


def test_long_line_is_refused_with_its_line_number(tmp_path):
    p = tmp_path / "long_id.csv"
    with open(p, "w") as fh:
        fh.write(HEADER + "X,1,a,1\nX,2,a,1\n")
        fh.write("Y" * (3 << 20) + ",1,a,1\n")
    with pytest.raises(InputError, match=r"line 4 is longer than 1 MB \(the line-length cap"):
        validate_draws(p)
    with pytest.raises(InputError, match=r"line 4 is longer than 512 KB"):
        validate_draws(p, limits=Limits.from_env(max_line_kb=512))


def test_caps_must_be_positive_numbers():
    with pytest.raises(InputError, match="max rows must be a positive number"):
        Limits.from_env(max_rows=0)
    with pytest.raises(InputError, match="max file size"):
        Limits.from_env(max_file_mb=float("nan"))


def test_cli_caps_are_options(tmp_path):
    p = tmp_path / "rows.csv"
    p.write_text(HEADER + "".join(f"c{i},{r},a,1\n" for i in range(10) for r in (1, 2)))
    db = tmp_path / "a.duckdb"
    res = run_cli("import", str(p), "--db", str(db), "--audit", "A", "--max-rows", "10")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().count("\n") == 0 and "row cap" in res.stderr
    assert not db.exists()


# ----------------------------------------------------------------------------- not what it claims
def _xlsx_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/workbook.xml", "<workbook/>")
    return buf.getvalue()


BROKEN = [
    ("empty.csv", b"", "the file is empty"),
    ("blank.csv", b"\r\n\r\n  \r\n", "the file is empty"),
    ("header_only.csv", HEADER.encode(), "header but no rows"),
    ("trailing_empty_rows.csv", (HEADER + ",,,\r\n,,,\r\n").encode(), "header but no rows"),
    ("garbage.csv", bytes(range(256)) * 40, "holds binary data"),
    ("sheet.csv", _xlsx_bytes(), "an .xlsx workbook"),
    ("old.csv", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512, "Excel 97-2003"),
    ("utf16.csv", (HEADER + "X,1,a,1\n").encode("utf-16"), "UTF-16"),
    ("latin1.csv", (HEADER + "X,1,a,1\nJos\xe9,2,a,1\n").encode("latin-1"),
     "is not UTF-8 text (line 3)"),
    ("nothing_known.csv", b"foo;bar\n1;2\n", "missing column(s) 'candidate_id', 'run'"),
    ("ragged.csv", (HEADER + "X,1,a,1,9\n").encode(), "line 2: cannot be read as CSV "
     "(expected 4 columns, found 5)"),
    ("open_quote.csv", (HEADER + 'X,1,"a,1\n').encode(), "cannot be read as CSV"),
    ("dup_header.csv", b"candidate_id,run,score,score\nX,1,1,2\n", "more than once"),
    ("fake.parquet", b"not parquet at all", "not one (no PAR1 magic)"),
    ("lines.jsonl", b'{"candidate_id": "X"}\n[1, 2]\nnot json\n', "line 2"),
    ("array.json", b'[\n {"candidate_id": "X", "run": 1}\n]\n', "a JSON array, not JSON Lines"),
    ("mixed.csv", (HEADER + "X,1,a,1\r\nX,2,a,1\n").encode(),
     "mixes Windows (CRLF) and Unix (LF) line endings (line 2)"),
]


@pytest.mark.parametrize("name, data, words", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_files_get_one_clear_line_and_write_nothing(tmp_path, store, name, data, words,
                                                            no_leftovers):
    from core.ingest import import_draws

    p = tmp_path / name
    p.write_bytes(data)
    for source in (p, io.BytesIO(data)):
        with pytest.raises(InputError) as exc:
            import_draws(store, "x", source, name=name)
        msg = str(exc.value)
        assert words in msg and msg.startswith(name) and "\n" not in msg
        assert "Traceback" not in msg and "Error:" not in msg
    assert not store.audit_exists("x") and len(store.list_audits()) == 0


def test_broken_file_on_the_cli_is_one_line_exit_2(tmp_path):
    p = tmp_path / "sheet.csv"
    p.write_bytes(_xlsx_bytes())
    db = tmp_path / "a.duckdb"
    res = run_cli("import", str(p), "--db", str(db), "--audit", "A")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert "xlsx" in res.stderr and not db.exists()


def test_one_row_file_names_the_one_run_candidate():
    with pytest.raises(InputError, match="line 2, column 'run': candidate 'X' has only 1 run"):
        validate_draws((HEADER + "X,1,a,1\n").encode(), name="one.csv")


def test_every_column_missing_is_named():
    with pytest.raises(InputError, match="missing column") as exc:
        validate_pool(b"name,score\nx,1\n", name="pool.csv")
    assert "'candidate_id', 'first_pass_score'" in str(exc.value)


# ----------------------------------------------------------------------------- the readers
def test_upload_buffer_is_read_through_a_temporary_file_that_is_removed(no_leftovers):
    data = (FIXTURES / "draws_long.csv").read_bytes()
    buf = io.BytesIO(data)
    buf.name = "vendor.csv"
    imp = validate_draws(buf)
    assert imp.file_name == "vendor.csv" and len(imp.draws) == 18
    assert buf.read() == data       # the caller's buffer is left at its start


def test_lines_of_quoted_multiline_records_and_crlf(tmp_path):
    p = tmp_path / "q.csv"
    p.write_bytes(b'candidate_id,note\r\n"a\r\nb",1\r\nc,2\r\n')
    with open_table(p) as t:
        lines = [r[0] for r in t.frame("SELECT _line FROM src ORDER BY _line").itertuples(
            index=False)]
    assert lines == [2, 3]


def test_read_table_keeps_csv_values_as_text(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("batch,rater,score\n2026-01-05,r1, 007\n2026-01-05,r2,\n")
    df, sha, name = read_table(p)
    assert list(df.columns) == ["batch", "rater", "score"] and name == "t.csv"
    assert df.loc[0, "score"] == " 007" and pd.isna(df.loc[1, "score"])
    assert len(sha) == 64


def test_read_table_parquet_keeps_numbers():
    buf = io.BytesIO()
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), buf)
    df, _, _ = read_table(buf.getvalue(), name="t.parquet")
    assert list(df["a"]) == [1, 2] and list(df["b"]) == ["x", "y"]


def _wide(ncol: int) -> bytes:
    hdr = "candidate_id,run," + ",".join(f"k{i}" for i in range(ncol))
    rows = [f"c{c},{r}," + ",".join(str((c + r + i) % 5) for i in range(ncol))
            for c in range(4) for r in (1, 2)]
    return ("\n".join([hdr, *rows]) + "\n").encode()


def test_column_cap_refuses_a_file_of_thousands_of_columns_before_reading():
    with pytest.raises(InputError, match="has 2,002 columns, over the 500-column cap"):
        validate_draws(_wide(2000), name="wide.csv")


def test_a_wide_file_of_hundreds_of_criteria_reads_every_cell():
    imp = validate_draws(_wide(300), name="wide.csv")
    assert len(imp.draws) == 4 * 2 * 300 and len(imp.criteria) == 300
    got = imp.draws.set_index(["candidate_id", "run", "criterion"])["score"]
    assert got[("c3", 2, "k299")] == (3 + 2 + 299) % 5


def test_excel_multiline_cell_in_a_crlf_file_is_one_row():
    data = (b"candidate_id,run,criterion,score,raw_payload\r\n"
            b'X,1,a,1,"first\nsecond"\r\nX,2,a,2,\r\n')
    imp = validate_draws(data, name="excel.csv")
    assert imp.calls.set_index("run")["raw_payload"][1] == "first\nsecond"


def test_a_check_over_the_memory_limit_is_one_line(tmp_path):
    """The validation database has a memory limit: past it, one line, never a traceback."""
    p = tmp_path / "big.csv"
    p.write_text(HEADER + "".join(f"c{i:06d},{r},criterion_{k},{(i + r + k) % 9}\n"
                                  for i in range(20_000) for r in (1, 2) for k in range(5)))
    tight = Limits(memory_mb=8)
    with pytest.raises(InputError) as exc:
        validate_draws(p, limits=tight)
    msg = str(exc.value)
    assert msg.startswith("big.csv") and "\n" not in msg and "memory" in msg


def test_column_cap_from_the_environment(monkeypatch):
    monkeypatch.setenv("AUDIT_MAX_COLUMNS", "10")
    with pytest.raises(InputError, match=r"over the 10-column cap \(AUDIT_MAX_COLUMNS\)"):
        validate_draws(_wide(20), name="wide.csv")


# ----------------------------------------------------------------------------- the byte scan
def _reference_scan(data: bytes, cap: int):
    """What scan_text must find, computed the slow and obvious way on the whole file."""
    parts = data.split(b"\n")
    complete, tail = parts[:-1], parts[-1]
    for i, line in enumerate(parts, start=1):
        if len(line) > cap:
            return ("too long", i)
    blank = [i for i, line in enumerate(complete, start=1) if not line.strip(b"\r")]
    nonblank = [i for i, line in enumerate(complete, start=1) if line.strip(b"\r")]
    last = len(parts) if tail else (nonblank[-1] if nonblank else 0)
    crlf_header = bool(complete) and complete[0].endswith(b"\r")
    mixed = next((i for i, line in enumerate(complete, start=1)
                  if line.endswith(b"\r") != crlf_header), None)
    controls = any(b < 32 and b not in (9, 10, 13) or b == 127 for b in data)
    digit_us = any(data[i] == 95 and chr(data[i - 1]).isdigit() and chr(data[i + 1]).isdigit()
                   for i in range(1, len(data) - 1))
    return ("ok", [b for b in blank if b < last], mixed, controls,
            b'"' in data or b"\t" in data, digit_us)


_PIECES = [b"a", b"7", b"_", b"\n", b"\r\n", b"\r", b",", b'"', b"\t", b"\x01", b"\x7f", b"xyz",
           b"12", b"\n\n", b"\r\n\r\n"]


@pytest.mark.parametrize("seed", range(6))
def test_the_byte_scan_finds_what_the_whole_file_holds_at_any_chunk_size(seed, monkeypatch,
                                                                         tmp_path):
    """Blank lines, the first line over the cap, mixed line endings, control bytes and a '_'
    between digits are found wherever they fall against the chunk boundaries."""
    import random

    import core.scan as scan

    rng = random.Random(seed)
    path = tmp_path / "f.csv"
    for _ in range(400):
        data = (b"h,a\r\n" if rng.random() < 0.5 else b"h,a\n") + b"".join(
            rng.choice(_PIECES) for _ in range(rng.randint(0, 40)))
        cap = rng.choice([5, 9, 1000])
        # (chunks hold the header line whole, as the real 8 MB chunks do under the line cap)
        monkeypatch.setattr(scan, "_CHUNK", rng.choice([6, 7, 9, 13, 64, 1 << 16]))
        path.write_bytes(data)
        want = _reference_scan(data, cap)
        try:
            got = scan.scan_text(path, "f.csv", Limits.from_env(max_line_kb=cap / 1024),
                                   "csv")
        except InputError as exc:
            assert want[0] == "too long", (data, exc)
            assert f"line {want[1]} is longer" in str(exc), (data, str(exc), want)
            continue
        assert want[0] == "ok", (data, want)
        assert (got.blank_lines, got.mixed_endings, got.controls, got.quoted_or_tab) == \
            want[1:5], (data, scan._CHUNK)
        # the same blank lines from the pass that looks for nothing else, and the same scan
        # but the blank lines when they are not looked for (a CSV's fast path)
        assert scan.find_blank_lines(path) == want[1], (data, scan._CHUNK)
        quick = scan.scan_text(path, "f.csv", Limits.from_env(max_line_kb=cap / 1024),
                                 "csv", blanks=False)
        assert quick.blank_lines is None and quick.sha256 == got.sha256 == \
            hashlib.sha256(data).hexdigest()
        assert (quick.mixed_endings, quick.controls, quick.quoted_or_tab,
                quick.digit_underscore) == (got.mixed_endings, got.controls,
                                            got.quoted_or_tab, got.digit_underscore)
        assert quick.line_count == got.line_count == data.count(b"\n") + (
            0 if data.endswith(b"\n") else 1)
        # (a '_' at a chunk's edge is reported too: the careful path is taken then)
        assert got.digit_underscore or not want[5], data
