"""Import (SPEC §2): every rejection rule names file, row and column and writes nothing;
clipping; re-import is a no-op; long/wide detection; CSV, Parquet and JSONL give the same draws."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURE_DRAWS, FIXTURES, long_frame

from core.draws import Draws
from core.errors import InputError
from core.ingest import (
    commit_pool,
    import_draws,
    read_criteria,
    validate_draws,
    validate_pool,
)


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
