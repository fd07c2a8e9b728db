"""Import (SPEC §2): every rejection rule names file, row and column and writes nothing;
clipping; re-import is a no-op; long/wide detection; CSV, Parquet and JSONL give the same draws."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pandas as pd
import pytest

from core.draws import Draws
from core.errors import InputError
from core.ingest import (
    FAULT_CAP,
    FileFaults,
    commit_pool,
    criteria_frame,
    import_draws,
    ranges_frame,
    read_criteria,
    validate_draws,
    validate_pool,
)
from core.tables import shown_value
from tests.support import FIXTURE_DRAWS, FIXTURES, long_frame, run_cli


def _snapshot(store, audit_id: str) -> tuple:
    return (store.data_version(audit_id), store.n_draws(audit_id),
            len(store.load_calls(audit_id)), len(store.list_imports(audit_id)),
            len(store.get_candidates(audit_id)), len(store.get_criteria(audit_id)),
            len(store.list_audits()))


@pytest.fixture
def loaded(store):
    """A store that already holds one good import in audit 'A1'."""
    res = import_draws(store, "A1", FIXTURES / "draws_long.csv", criteria="a:10,b:10")
    assert res["status"] == "imported"
    return store


# (file, criteria, line as a spreadsheet shows it (CSV header = line 1), column, words)
REJECTIONS = [
    ("bad_score_text.csv", None, 5, "score", "'abc' is not a finite number"),
    ("bad_score_empty.csv", None, 4, "score", "empty is not a finite number"),
    ("bad_score_inf.csv", None, 3, "score", "'inf' is not a finite number"),
    ("bad_score_nan.csv", None, 2, "score", "'nan' is not a finite number"),
    ("bad_duplicate.csv", None, 5, "criterion", "duplicate draw"),
    ("bad_one_run.csv", None, 4, "run", "candidate 'Y' has only 1 run"),
    ("bad_out_of_range.csv", "a:10", 6, "score", "outside 0..10"),
    ("bad_run_fraction.csv", None, 3, "run", "not a whole run number"),
    ("bad_run_text.csv", None, 3, "run", "'two' is not a finite number"),
    ("bad_run_nonpositive.csv", None, 4, "run", "below 1"),
    ("bad_wide_cell.csv", None, 3, "b", "'n/a' is not a finite number"),
    ("bad_line.jsonl", None, 3, None, "not valid JSON"),
    ("empty.csv", None, None, None, "empty"),
    ("header_only.csv", None, None, None, "header but no rows"),
    ("bad_missing_candidate.csv", None, None, "candidate_id", "missing column"),
    ("bad_missing_score.csv", None, None, "score", "missing column"),
]


@pytest.mark.parametrize("name, criteria, row, column, words", REJECTIONS,
                         ids=[r[0] for r in REJECTIONS])
@pytest.mark.parametrize("audit", ["A1", "fresh"])
def test_rejection_names_file_row_column_and_writes_nothing(loaded, name, criteria, row, column,
                                                            words, audit):
    before = _snapshot(loaded, audit)
    with pytest.raises(InputError) as exc:
        import_draws(loaded, audit, FIXTURES / name, criteria=criteria)
    err, msg = exc.value, str(exc.value)
    assert words in msg
    assert err.file == name and msg.startswith(name)
    if row is not None:
        assert err.row == row and f"line {row}" in msg
    if column is not None:
        assert column in msg
        if row is not None:
            assert err.column == column and f"column '{column}'" in msg
    assert "\n" not in msg
    assert _snapshot(loaded, audit) == before
    if audit == "fresh":
        assert not loaded.audit_exists("fresh")


def test_minus_inf_and_parquet_inf_rejected_with_row():
    csv = b"candidate_id,run,criterion,score\nX,1,a,1\nX,2,a,-inf\nY,1,a,1\nY,2,a,1\n"
    with pytest.raises(InputError, match=r"x\.csv, line 3, column 'score'"):
        validate_draws(csv, name="x.csv")
    buf = io.BytesIO()
    long_frame({"X": {"a": [1, np.inf]}, "Y": {"a": [1, 2]}}).to_parquet(buf, index=False)
    with pytest.raises(InputError) as exc:
        validate_draws(buf.getvalue(), name="x.parquet")
    assert (exc.value.row, exc.value.column) == (2, "score") and "row 2" in str(exc.value)


def test_wide_out_of_range_names_the_criterion_column():
    csv = b"candidate_id,run,a,b\nX,1,1,4\nX,2,2,40\nY,1,5,2\nY,2,5,2\n"
    with pytest.raises(InputError) as exc:
        validate_draws(csv, name="w.csv", criteria="a:10,b:10")
    assert (exc.value.row, exc.value.column) == (3, "b")
    assert "outside 0..10" in str(exc.value)
    with pytest.raises(InputError):
        validate_draws(b"candidate_id,run,a\nX,1,-1\nX,2,2\nY,1,5\nY,2,5\n", name="w.csv",
                       criteria="a:10")


def test_clip_counts_and_reports(store):
    imp = validate_draws(FIXTURES / "bad_out_of_range.csv", criteria="a:10", clip=True)
    assert imp.clipped == 1
    assert "1 score(s) outside 0..max were clipped" in imp.warnings
    res = import_draws(store, "C", FIXTURES / "bad_out_of_range.csv", criteria="a:10", clip=True)
    assert res["clipped"] == 1 and res["status"] == "imported"
    d = store.load_draws("C")
    row = d[(d.candidate_id == "Y") & (d.run == 3)].iloc[0]
    assert row["score"] == 10 and bool(row["clipped"])
    assert int(d["clipped"].sum()) == 1


def test_reimport_same_file_is_a_noop(loaded):
    before = _snapshot(loaded, "A1")
    res = import_draws(loaded, "A1", FIXTURES / "draws_long.csv", criteria="a:10,b:10")
    assert res["status"] == "already imported"
    assert _snapshot(loaded, "A1") == before
    assert loaded.n_draws("A1") == 18


def test_same_draws_from_another_file_are_refused_not_duplicated(loaded):
    before = _snapshot(loaded, "A1")
    with pytest.raises(InputError, match="already stored"):
        import_draws(loaded, "A1", FIXTURES / "draws_wide.csv")
    assert _snapshot(loaded, "A1") == before


def _norm(df: pd.DataFrame) -> pd.DataFrame:
    return (df[["candidate_id", "run", "criterion", "score"]]
            .astype({"candidate_id": str, "run": "int64", "criterion": str, "score": float})
            .sort_values(["candidate_id", "run", "criterion"]).reset_index(drop=True))


def test_long_and_wide_detected():
    assert validate_draws(FIXTURES / "draws_long.csv").layout == "long"
    assert validate_draws(FIXTURES / "draws_wide.csv").layout == "wide"
    assert validate_draws(FIXTURES / "draws_wide_total.csv").layout == "wide"


def test_csv_parquet_jsonl_long_and_wide_give_the_same_draws():
    expect = _norm(long_frame(FIXTURE_DRAWS))
    for name in ("draws_long.csv", "draws_long.parquet", "draws_long.jsonl", "draws_wide.csv"):
        got = _norm(validate_draws(FIXTURES / name).draws)
        pd.testing.assert_frame_equal(got, expect, check_dtype=False, obj=name)


def test_wide_with_total_keeps_the_screeners_total():
    imp = validate_draws(FIXTURES / "draws_wide_total.csv")
    assert "total" in set(imp.draws["criterion"]) and imp.summary()["has_total"]
    d = Draws.from_long(imp.draws)
    assert d.total_source == "screener" and d.total_mismatch == 0
    assert d.criteria == ("a", "b")


def test_imported_audit_round_trips(loaded):
    stored = _norm(loaded.load_draws("A1"))
    pd.testing.assert_frame_equal(stored, _norm(long_frame(FIXTURE_DRAWS)), check_dtype=False)
    crit = loaded.get_criteria("A1").set_index("criterion")
    assert crit.loc["a", "max_points"] == 10 and crit.loc["b", "weight"] == 1


def test_criteria_file(tmp_path):
    p = tmp_path / "criteria.csv"
    p.write_text("criterion,max,weight\na,10,2\nb,,\n")
    got = read_criteria(p)
    assert [(c.name, c.max_points, c.weight) for c in got] == [("a", 10.0, 2.0), ("b", None, 1.0)]


def test_pool_import_and_duplicate_applicant(store):
    imp = validate_pool(FIXTURES / "pool.csv")
    assert len(imp.pool) == 10
    commit_pool(store, "P", imp)
    assert len(store.get_pool("P")) == 10
    with pytest.raises(InputError) as exc:
        validate_pool(b"candidate_id,first_pass_score\na,1\nb,2\na,3\n", name="pool.csv")
    assert (exc.value.row, exc.value.column) == (4, "candidate_id")
    with pytest.raises(InputError) as exc:
        validate_pool(b"candidate_id,first_pass_score\na,1\nb,x\n", name="pool.csv")
    assert (exc.value.row, exc.value.column) == (3, "first_pass_score")


def test_clipped_draws_are_reported_in_the_stored_audit_report(store):
    from core.audit import analyze
    from core.report import render_text

    import_draws(store, "C", FIXTURES / "bad_out_of_range.csv", criteria="a:10", clip=True)
    text = render_text(analyze(store, "C", cutoff=3))
    assert "clipped" in text


# ----------------------------------------------------------------------------- issue 9: every fault
def _spreadsheet_csv(rows: list[str], *, header: str = "candidate_id,run,criterion,score") -> bytes:
    """A CSV as a spreadsheet exports it: UTF-8 BOM, CRLF, two trailing empty rows."""
    return ("\ufeff" + "\r\n".join([header, *rows, ",,,", ",,,"]) + "\r\n").encode("utf-8")


def _five_fault_rows() -> tuple[list[str], dict[tuple[int, str], str]]:
    """60 good data rows (30 candidates × 2 runs), then the five faults of issue 9.

    Data row 51 is line 52 (the header is line 1)."""
    rows = [f"c{i:02d},{r},skills,{(i * 3 + r) % 9}" for i in range(30) for r in (1, 2)]
    rows[50] = "c25,1,skills,seven"                 # data row 51: a non-number -> line 52
    rows[9] = "c04,2,skills,1e400"                  # data row 10: an overflow -> line 11
    rows.append("c07,1,skills,3")                   # data row 61: a duplicate key -> line 62
    rows.append("loner,1,skills,4")                 # data row 62: a one-run candidate -> line 63
    rows.append('"=HYPERLINK(""http://x"")",1,skills,2')   # data row 63: formula-like id
    expect = {(52, "score"): "'seven'", (11, "score"): "'1e400'",
              (62, "criterion"): "'skills'", (63, "run"): "'loner'",
              (64, "candidate_id"): "'=HYPERLINK(\"http://x\")'"}
    return rows, expect


def test_a_file_with_five_faults_lists_all_five_with_spreadsheet_lines(tmp_path, store):
    rows, expect = _five_fault_rows()
    path = tmp_path / "five.csv"
    path.write_bytes(_spreadsheet_csv(rows))
    before = _snapshot(store, "five")
    with pytest.raises(FileFaults) as exc:
        import_draws(store, "five", path)
    err = exc.value
    assert err.total == 5 and len(err.faults) == 5
    got = {(f.line, f.column): shown_value(f.value) for f in err.faults}
    assert got == expect
    words = [f.message for f in err.faults]
    assert "'1e400' is not a finite number (too large: it overflows)" in words[0]
    assert "'seven' is not a finite number" in words[1]
    assert "already appears on line 16" in words[2]       # c07 run 1 is data row 15
    assert "has only 1 run" in words[3]
    assert "spreadsheet formula" in words[4]
    assert _snapshot(store, "five") == before and not store.audit_exists("five")
    # the one-line form names the first fault and the count of the rest
    assert str(err).startswith("five.csv, line 11, column 'score'") and "4 more faults" in str(err)


def test_cli_prints_one_line_per_fault_and_writes_nothing(tmp_path):
    rows, expect = _five_fault_rows()
    path = tmp_path / "five.csv"
    path.write_bytes(_spreadsheet_csv(rows))
    db = tmp_path / "a.duckdb"
    res = run_cli("import", str(path), "--db", str(db), "--audit", "five")
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error: five.csv, line")]
    assert [int(re.search(r"line (\d+)", ln).group(1)) for ln in lines] == [11, 52, 62, 63, 64]
    assert "5 faults in all; nothing was imported" in res.stderr
    assert not db.exists()


def test_faults_over_the_cap_are_counted_not_listed():
    rows = [f"c{i:03d},{r},a,{'x' if i < 60 else 1}" for i in range(100) for r in (1, 2)]
    with pytest.raises(FileFaults) as exc:
        validate_draws(_spreadsheet_csv(rows), name="many.csv")
    err = exc.value
    assert err.total == 120 and len(err.faults) == FAULT_CAP and err.hidden == 70
    assert [f.line for f in err.faults] == list(range(2, 2 + FAULT_CAP))
    assert "70 more fault(s) not listed" in err.lines()[-1]


def test_faults_name_control_characters_escaped():
    rows = ["X,1,a,1", "X,2,a,2", "\"Y\x1b[31mred\",1,a,3", "\"Y\x1b[31mred\",2,a,4"]
    with pytest.raises(FileFaults) as exc:
        validate_draws(_spreadsheet_csv(rows), name="esc.csv")
    assert exc.value.total == 2
    assert all("\x1b" not in ln for ln in exc.value.lines())
    assert "\\x1b[31mred" in exc.value.lines()[0]


# ----------------------------------------------------------------------------- issue 8.5: plausibility
def _bulk_rows(extra: list[str]) -> list[str]:
    return [f"c{i:03d},{r},skills,{(i + r) % 7}" for i in range(100) for r in (1, 2)] + extra


def test_absurd_score_without_maxima_is_refused_with_row_column_and_way_out():
    rows = _bulk_rows(["c005,3,skills,562074743", "c006,3,skills,700"])
    with pytest.raises(FileFaults) as exc:
        validate_draws(_spreadsheet_csv(rows), name="vendor.csv")
    err = exc.value
    assert [(f.line, f.column) for f in err.faults] == [(202, "score"), (203, "score")]
    assert "implausible" in err.faults[0].message and "--criteria" in err.faults[0].message
    assert "--clip" in err.faults[0].message
    # 700 is > 100 × the 99th percentile of |score| (6) though below 1e6
    assert "99th percentile" in err.faults[1].message


def test_plausible_file_passes_and_a_score_beyond_a_million_never_does():
    ok = validate_draws(_spreadsheet_csv(_bulk_rows(["c005,3,skills,550"])), name="ok.csv")
    assert ok.ranges.set_index("criterion").loc["skills", "max"] == 550
    big = [f"c{i},{r},total,{2_000_000 + i}" for i in range(5) for r in (1, 2)]
    with pytest.raises(FileFaults) as exc:
        validate_draws(_spreadsheet_csv(big), name="big.csv")
    assert exc.value.total == 10 and "beyond 1,000,000" in exc.value.faults[0].message


def test_with_maxima_the_range_is_checked_or_clipped_and_counted(store):
    rows = _bulk_rows(["c005,3,skills,562074743"])
    data = _spreadsheet_csv(rows)
    with pytest.raises(FileFaults) as exc:
        validate_draws(data, name="v.csv", criteria="skills:10")
    assert exc.value.faults[0].line == 202 and "outside 0..10" in exc.value.faults[0].message
    imp = validate_draws(data, name="v.csv", criteria="skills:10", clip=True)
    assert imp.clipped == 1
    r = imp.ranges.set_index("criterion").loc["skills"]
    assert (r["max"], r["max_points"]) == (10, 10)


def test_validation_summary_gives_each_criterions_min_median_max():
    rng = np.random.default_rng(3)
    frame = pd.DataFrame([(f"c{i}", r, c, float(rng.integers(0, 20)))
                          for i in range(15) for r in (1, 2, 3) for c in ("a", "b", "total")],
                         columns=["candidate_id", "run", "criterion", "score"])
    imp = validate_draws(frame.to_csv(index=False).encode(), name="s.csv")
    got = imp.ranges.set_index("criterion")
    assert list(got.index) == ["a", "b", "total"]
    for c, g in frame.groupby("criterion")["score"]:
        assert (got.loc[c, "min"], got.loc[c, "median"], got.loc[c, "max"]) == (
            g.min(), g.median(), g.max())
    table = ranges_frame(imp)
    assert list(table.columns) == ["criterion", "draws", "min", "median", "max", "max points"]
    assert table.loc[0, "max points"] == "—"


@pytest.mark.parametrize("spec, words", [
    ("a:inf", "max points of 'a'"), ("a:nan", "max points"), ("a:1e9", "up to 1,000,000"),
    ("a:10:-1", "weight of 'a'"), ("a:10:inf", "weight"), ("a:10:nan", "weight"),
    ("a:10:5000", "from 0 to 1,000"), ("a:10,a:5", "given twice"),
])
def test_absurd_or_non_finite_maxima_and_weights_are_refused(spec, words):
    with pytest.raises(InputError, match=re.escape(words)):
        validate_draws(FIXTURES / "draws_long.csv", criteria=spec)


def test_criteria_file_with_infinite_weight_is_refused(tmp_path):
    p = tmp_path / "criteria.csv"
    p.write_text("criterion,max,weight\na,10,inf\n")
    with pytest.raises(InputError, match="not a finite number"):
        read_criteria(p)


# ----------------------------------------------------------------------------- issue 8.8: targets
def test_draws_never_go_into_an_audit_whose_sample_does_not_hold_them(demo_db, tmp_path):
    import shutil

    from core.demo import DEMO_AUDIT_ID
    from core.store import Store

    db = tmp_path / "demo.duckdb"
    shutil.copy(demo_db, db)
    s = Store(db)
    try:
        before = _snapshot(s, DEMO_AUDIT_ID)
        with pytest.raises(InputError, match="not in the sample of audit"):
            import_draws(s, DEMO_AUDIT_ID, FIXTURES / "draws_long.csv")
        assert _snapshot(s, DEMO_AUDIT_ID) == before
        # the same draws into a new audit are fine; a new audit must be new
        res = import_draws(s, "vendor-1", FIXTURES / "draws_long.csv", new=True)
        assert res["status"] == "imported" and res["new_audit"]
        with pytest.raises(InputError, match="exists already"):
            import_draws(s, DEMO_AUDIT_ID, FIXTURES / "draws_wide.csv", new=True)
        with pytest.raises(InputError, match="no audit 'typo'"):
            import_draws(s, "typo", FIXTURES / "draws_wide.csv", new=False)
        assert not s.audit_exists("typo")
    finally:
        s.close()


def test_draws_of_another_model_or_criterion_are_refused(store):
    from core.freeze import Criterion, FreezeSheet

    sheet = FreezeSheet(req_id="R", screener="s", model="vendor-model-2026-01-01",
                        sampling="not-exposed", side_effect_free=True,
                        criteria=(Criterion("a", 10), Criterion("b", 10)))
    store.save_audit("R", sheet.to_dict(), sheet.hash, {})
    store.set_criteria("R", criteria_frame(list(sheet.criteria)))
    other = b"candidate_id,run,criterion,score,model\nX,1,a,1,gpt-x\nX,2,a,2,gpt-x\n"
    with pytest.raises(InputError, match="frozen on 'vendor-model-2026-01-01'"):
        import_draws(store, "R", other, name="other.csv")
    extra = b"candidate_id,run,criterion,score\nX,1,zeta,1\nX,2,zeta,2\n"
    with pytest.raises(InputError, match="not in the frozen rubric"):
        import_draws(store, "R", extra, name="extra.csv")
    assert store.n_draws("R") == 0 and len(store.list_imports("R")) == 0
    # its own model, its own criteria: accepted, checked against its frozen maxima
    mine = (b"candidate_id,run,criterion,score,model\nX,1,a,1,vendor-model-2026-01-01\n"
            b"X,2,a,12,vendor-model-2026-01-01\n")
    with pytest.raises(FileFaults, match="outside 0..10"):
        import_draws(store, "R", mine, name="mine.csv")
    assert import_draws(store, "R", mine, name="mine.csv", clip=True)["clipped"] == 1


# ----------------------------------------------------------------------------- issue 12: ids and types
def test_jsonl_ids_must_be_text_or_whole_numbers_and_booleans_are_not_scores():
    lines = [
        {"candidate_id": {"a": 1}, "run": 1, "criterion": "a", "score": 1},
        {"candidate_id": [1, 2], "run": 2, "criterion": "a", "score": 1},
        {"candidate_id": "X", "run": 1, "criterion": "a", "score": True},
        {"candidate_id": "X", "run": 2, "criterion": "a", "score": 2},
        {"candidate_id": 7, "run": 1, "criterion": "a", "score": 2},
        {"candidate_id": 7, "run": 2, "criterion": "a", "score": 3},
    ]
    data = ("\n".join(json.dumps(x) for x in lines) + "\n").encode()
    with pytest.raises(FileFaults) as exc:
        validate_draws(data, name="d.jsonl")
    got = {(f.line, f.column): f.message for f in exc.value.faults}
    assert set(got) == {(1, "candidate_id"), (2, "candidate_id"), (3, "score")}
    assert "an object" in got[(1, "candidate_id")] and "a list" in got[(2, "candidate_id")]
    assert "is a boolean, not a number" in got[(3, "score")]
    ok = validate_draws(data.replace(b"true", b"1").split(b"\n", 2)[2], name="d.jsonl")
    assert set(ok.draws["candidate_id"]) == {"X", "7"}


def test_parquet_bytes_struct_ids_and_boolean_scores_are_refused_with_the_row():
    import pyarrow as pa
    import pyarrow.parquet as pq

    def parquet(ids: pa.Array, scores: pa.Array) -> bytes:
        buf = io.BytesIO()
        pq.write_table(pa.table({"candidate_id": ids, "run": [1, 2, 1, 2],
                                 "criterion": ["a"] * 4, "score": scores}), buf)
        return buf.getvalue()

    with pytest.raises(FileFaults) as exc:
        validate_draws(parquet(pa.array([b"x", b"x", b"y", b"y"]), pa.array([1.0] * 4)),
                       name="b.parquet")
    assert exc.value.total == 4 and "bytes" in exc.value.faults[0].message
    assert str(exc.value).startswith("b.parquet, row 1, column 'candidate_id'")
    with pytest.raises(FileFaults) as exc:
        validate_draws(parquet(pa.array([{"k": 1}] * 4), pa.array([1.0] * 4)), name="s.parquet")
    assert "an object" in exc.value.faults[0].message
    with pytest.raises(FileFaults) as exc:
        validate_draws(parquet(pa.array(["x", "x", "y", "y"]),
                               pa.array([True, False, True, True])), name="bool.parquet")
    assert exc.value.total == 4 and "boolean" in exc.value.faults[0].message
    # integer ids are ids; whole float ids (pandas with NaN elsewhere) read as integers
    ok = validate_draws(parquet(pa.array([1.0, 1.0, 2.0, 2.0]), pa.array([1.0, 2, 3, 4])),
                        name="f.parquet")
    assert sorted(set(ok.draws["candidate_id"])) == ["1", "2"]


def test_a_request_id_used_for_two_draws_in_one_file_is_a_fault_with_its_line():
    data = (b"candidate_id,run,criterion,score,request_id\n"
            b"X,1,a,1,r1\nX,1,b,1,r1\nX,2,a,1,r2\nX,2,b,1,r2\nY,1,a,1,r1\nY,2,a,1,r3\n")
    with pytest.raises(FileFaults) as exc:
        validate_draws(data, name="rid.csv")
    f = exc.value.faults[0]
    assert (exc.value.total, f.line, f.column) == (1, 6, "request_id")
    assert "candidate 'X' run 1 on line 2" in f.message


# ----------------------------------------------------------------------------- CSV as exported
def test_semicolon_csv_with_decimal_commas_reads_as_numbers():
    data = ("\ufeffcandidate_id;run;criterion;score\r\nX;1;a;7,5\r\nX;2;a;8\r\n"
            "Y;1;a;\"1,25\"\r\nY;2;a;2\r\n;;;\r\n").encode()
    imp = validate_draws(data, name="eu.csv")
    got = dict(zip(imp.draws["candidate_id"] + imp.draws["run"].astype(str), imp.draws["score"]))
    assert got == {"X1": 7.5, "X2": 8.0, "Y1": 1.25, "Y2": 2.0}


def test_excel_thousands_quoted_fields_and_multiline_payloads():
    data = (b'candidate_id,run,criterion,score,raw_payload\n'
            b'X,1,a,"1,234","{""a"": 1,\n ""why"": ""long, with comma""}"\n'
            b'X,2,a,"1,200.5",plain\n'
            b'Y,1,a,1000,\n'
            b'Y,2,a,"12,34",\n')
    with pytest.raises(FileFaults) as exc:
        validate_draws(data, name="x.csv")
    # "12,34" is not a grouped thousand; the quoted two-line payload still counts as one row
    assert [(f.line, f.column) for f in exc.value.faults] == [(5, "score")]
    imp = validate_draws(data.replace(b'"12,34"', b'"12,340"'), name="x.csv")
    scores = imp.draws.set_index(["candidate_id", "run"])["score"]
    assert scores[("X", 1)] == 1234 and scores[("X", 2)] == 1200.5 and scores[("Y", 2)] == 12340
    payload = imp.calls.set_index(["candidate_id", "run"])["raw_payload"][("X", 1)]
    assert payload == '{"a": 1,\n "why": "long, with comma"}'


def test_blank_lines_count_as_spreadsheet_rows():
    data = b"candidate_id,run,criterion,score\nX,1,a,1\n\nX,2,a,1\nY,1,a,zz\nY,2,a,1\n\n\n"
    with pytest.raises(FileFaults) as exc:
        validate_draws(data, name="gaps.csv")
    assert [f.line for f in exc.value.faults] == [5]


def test_pool_lists_every_fault():
    data = b"candidate_id,first_pass_score\na,1\nb,x\na,3\n,4\nc,1e400\n"
    with pytest.raises(FileFaults) as exc:
        validate_pool(data, name="pool.csv")
    got = [(f.line, f.column) for f in exc.value.faults]
    assert got == [(3, "first_pass_score"), (4, "candidate_id"), (5, "candidate_id"),
                   (6, "first_pass_score")]
