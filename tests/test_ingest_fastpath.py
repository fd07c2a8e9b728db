"""A CSV's number columns are read as numbers by DuckDB's reader when that cannot change what a
file means (``core.store.files._load_csv``), and ids are checked once per distinct value
(``FileTable._clean_as_written``). Whatever path a file takes, a user sees the same thing: the
same draws for a good file, the same faults (line, column, value, message) for a bad one."""

from __future__ import annotations

import pytest

import core.ingest as ingest
from core.ingest import FileFaults, validate_draws, validate_pool
from core.store.filetable import FileTable

HEADER = "candidate_id,run,criterion,score"


def _long(rows: list[str], header: str = HEADER) -> bytes:
    return ("\n".join([header, *rows]) + "\n").encode()


def _good_rows(score: dict[tuple[str, int, str], str] | None = None) -> list[str]:
    rows = []
    for c in ("a1", "a2", "a3"):
        for r in (1, 2, 3):
            for k in ("skills", "total"):
                v = (score or {}).get((c, r, k), str(r + (10 if k == "total" else 0)))
                rows.append(f"{c},{r},{k},{v}")
    return rows


def _outcome(data: bytes, name: str = "draws.csv"):
    """(draws as tuples, None) for a valid file, (None, faults as tuples) for a rejected one."""
    try:
        imp = validate_draws(data, name=name)
    except FileFaults as exc:
        return None, [(f.line, f.column, f.value, f.message) for f in exc.faults], exc.total
    return sorted(map(tuple, imp.draws[["candidate_id", "run", "criterion", "score"]]
                      .astype(str).values.tolist())), None, imp.summary()["ranges"]


@pytest.fixture
def text_only(monkeypatch):
    """The same import with every value read as text and every id checked per row."""
    def as_text():
        monkeypatch.setattr(ingest, "draw_number_columns", lambda names: set())
        monkeypatch.setattr(ingest, "pool_number_columns", lambda names: set())
        monkeypatch.setattr(FileTable, "_clean_as_written", lambda self, d, e: e)
    return as_text


TRICKY = {
    "clean": {},
    "underscore in a number": {("a1", 2, "skills"): "1_000"},
    "overflow": {("a2", 1, "skills"): "1e400"},
    "infinity": {("a2", 3, "total"): "inf"},
    "not a number": {("a3", 1, "skills"): "seven"},
    "thousands separator": {("a1", 1, "total"): '"1,234"'},
    "blank cell": {("a3", 2, "skills"): "  "},
    "empty cell": {("a1", 3, "skills"): ""},
    "boolean-like": {("a2", 2, "skills"): "true"},
    "exponent and sign": {("a1", 1, "skills"): "+1e1", ("a2", 1, "total"): " 12.5 "},
}


@pytest.mark.parametrize("case", list(TRICKY))
def test_numbers_give_the_same_result_on_either_path(case, text_only):
    data = _long(_good_rows(TRICKY[case]))
    fast = _outcome(data)
    text_only()
    assert _outcome(data) == fast
    if case == "clean":
        assert fast[1] is None
    elif case in ("exponent and sign", "thousands separator"):
        assert fast[1] is None          # accepted: 10, 12.5 and 1234
    else:
        assert fast[1], f"{case}: the file should be refused"


def test_a_refused_number_is_named_as_written_not_as_read(text_only):
    data = _long(_good_rows({("a2", 1, "skills"): "1e400", ("a3", 3, "total"): "NaN"}))
    _, faults, total = _outcome(data)
    assert total == 2
    assert [(f[0], f[1], f[2]) for f in faults] == [(8, "score", "1e400"), (19, "score", "NaN")]
    assert "too large" in faults[0][3]


IDS = {
    "formula id": ("a2", "=HYPERLINK(1)"),
    "padded id": ("a1", " a1 "),
    "empty id": ("a3", ""),
    "upper-case total": ("total", "TOTAL"),
    "signed number id": ("a3", "-12"),
}


@pytest.mark.parametrize("case", list(IDS))
def test_ids_give_the_same_result_on_either_path(case, text_only):
    old, new = IDS[case]
    rows = _good_rows()
    if old == "total":
        rows = [r.replace(",total,", f",{new},") for r in rows]
    else:
        at = next(i for i, r in enumerate(rows) if r.startswith(old + ","))
        rows[at] = new + rows[at][len(old):]
    data = _long(rows)
    fast = _outcome(data)
    text_only()
    assert _outcome(data) == fast
    # (a signed number is a valid id: here a new candidate with one run, refused for that)
    refused = case in ("formula id", "empty id", "signed number id")
    assert (fast[1] is not None) == refused


def test_wide_file_and_pool_take_the_same_path_results(text_only, tmp_path):
    wide = ("candidate_id,run,skills,total\n" + "".join(
        f"c{c},{r},{r},{r + 10}\n" for c in range(3) for r in (1, 2, 3))
        + "c9,1,1_0,3\nc9,2,2,1e999\n").encode()
    pool = b"candidate_id,first_pass_score\np1,70\np2,1_5\np3,\n"
    fast = _outcome(wide, "wide.csv")
    with pytest.raises(FileFaults) as fast_pool:
        validate_pool(pool, name="pool.csv")
    text_only()
    assert _outcome(wide, "wide.csv") == fast
    assert [f[2] for f in fast[1]] == ["1_0", "1e999"]
    with pytest.raises(FileFaults) as text_pool:
        validate_pool(pool, name="pool.csv")
    assert [(f.line, f.column, f.value) for f in fast_pool.value.faults] == \
        [(f.line, f.column, f.value) for f in text_pool.value.faults] == \
        [(3, "first_pass_score", "1_5"), (4, "first_pass_score", None)]


def test_the_command_line_import_never_loads_pandas(tmp_path):
    """`python -m core import` starts and writes without pandas (a third of its run time was
    loading it): the frames are built only where a page or a report reads them."""
    import subprocess
    import sys

    src = tmp_path / "draws.csv"
    src.write_bytes(_long(_good_rows()))
    code = ("import sys; from core.cli import main; rc = main(['import', sys.argv[1], '--db', "
            "sys.argv[2], '--audit', 'a']); print(rc, sorted(m for m in ('pandas', 'scipy', "
            "'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(src), str(tmp_path / "a.duckdb")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 []"


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_blank_lines_on_the_fast_path_keep_every_line_number(newline):
    """Blank lines are not looked for in the byte scan of a CSV; the reader's record count
    reveals them (a spreadsheet shows them as rows, so a fault after one names its line)."""
    rows = _good_rows()
    rows[3:3] = ["", ""]                    # lines 5 and 6 blank
    rows.append(rows[-1])                   # a duplicate draw, on the last line
    data = newline.join([HEADER, *rows, ""]).encode()
    draws, faults, _ = _outcome(data)
    # 18 rows and 2 blank lines after the header, then the copy: line 22, the first on 21
    assert draws is None and [(f[0], f[1]) for f in faults] == [(22, "criterion")]
    assert faults[0][3].endswith("already appears on line 21")
    # without the duplicate, the same draws as the file without blank lines
    good = newline.join([HEADER, *rows[:-1], ""]).encode()
    assert _outcome(good)[0] == _outcome(_long(_good_rows()))[0]


def test_blank_lines_do_not_count_toward_the_row_cap(monkeypatch):
    monkeypatch.setenv("AUDIT_MAX_ROWS", "18")
    rows = _good_rows()                      # 18 rows
    data = "\n".join([HEADER, *rows[:9], *[""] * 30, *rows[9:], ""]).encode()
    assert _outcome(data)[1] is None
    with pytest.raises(ingest.InputError, match="more than 18 rows"):
        validate_draws("\n".join([HEADER, *rows, rows[0].replace("a1", "a9")]).encode() + b"\n",
                       name="draws.csv")


@pytest.mark.parametrize("seed", range(4))
def test_ranges_are_the_exact_median_and_99th_percentile(seed):
    """The per-criterion median and 99th percentile of |score| (read from a histogram of
    distinct scores) against numpy's linear percentiles, on integer, one-decimal and
    continuous scores."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows, want = [], {}
    for k, crit in enumerate(("ints", "tenths", "wide")):
        n = int(rng.integers(40, 400))
        v = [rng.integers(-3, 11, n).astype(float), np.round(rng.normal(5, 2, n), 1),
             rng.normal(0, 1e3, n)][k]
        want[crit] = (np.median(v), np.percentile(np.abs(v), 99), v.min(), v.max(), n)
        rows += [f"c{i % 20},{i // 20 + 1},{crit},{float(x)!r}" for i, x in enumerate(v)]
    imp = validate_draws(_long(rows), name="draws.csv", criteria="ints,tenths,wide")
    got = {r["criterion"]: r for r in imp.summary()["ranges"]}
    for crit, (med, p99, lo, hi, n) in want.items():
        r = got[crit]
        assert (r["n"], r["min"], r["max"]) == (n, lo, hi)
        assert r["median"] == pytest.approx(med, rel=1e-12, abs=1e-12)
        assert r["p99_abs"] == pytest.approx(p99, rel=1e-12)
