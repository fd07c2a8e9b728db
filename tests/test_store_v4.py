"""Schema version 4: an imported pair whose file gives nothing of its call (no request id,
model or payload column) is stored as the pair alone (``imported_calls``), its draws without
the empty columns (``imported_draws``, when none was clipped), and every reader sees the same
calls and draws as when full rows were stored."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

from core.errors import InputError
from core.ingest import commit_draws, import_draws, validate_draws
from core.store import SCHEMA_VERSION, Store
from tests.test_store_v3 import _v2_file


def _long_csv(path, cands=("A", "B", "C"), runs=(1, 2, 3), extra: dict | None = None):
    rows = []
    for i, c in enumerate(cands):
        for r in runs:
            for crit, base in (("skills", 4.0), ("fit", 6.0)):
                row = {"candidate_id": c, "run": r, "criterion": crit,
                       "score": base + (i + r) % 3}
                for k, v in (extra or {}).items():
                    row[k] = v(c, r)
                rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _count(db, sql):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()[0][0]
    finally:
        con.close()


def test_a_file_without_call_columns_stores_its_pairs_and_reads_back_the_same_calls(tmp_path):
    db = tmp_path / "a.duckdb"
    csv = _long_csv(tmp_path / "d.csv")
    imp = validate_draws(csv)
    staged = imp.calls          # what the upload panel previews: one call per pair
    s = Store(db)
    commit_draws(s, "A", imp)
    got = s.load_calls("A", with_payload=True)
    summary = s.call_summary("A")
    s.close()
    # stored as 9 pairs, no full call row
    assert _count(db, "SELECT count(*) FROM imported_calls WHERE audit_id = 'A'") == 9
    assert _count(db, "SELECT count(*) FROM calls WHERE audit_id = 'A'") == 0
    # read back: the same calls as staged (made-up ids, status ok, source import, 1 attempt)
    key = ["candidate_id", "run"]
    want = staged.sort_values(key).reset_index(drop=True)
    have = got.sort_values(key).reset_index(drop=True)[list(want.columns)]
    assert have["request_id"].tolist() == [f"import:{c}:{r}" for c in "ABC" for r in (1, 2, 3)]
    def plain(df):   # the staged frame holds None where the store's typed frame has NaT
        return df.astype(object).where(df.notna(), None)
    pd.testing.assert_frame_equal(plain(have), plain(want), check_dtype=False)
    assert summary["calls"].sum() == 9 and summary["status"].tolist() == ["ok"]


def test_a_file_with_a_model_column_keeps_full_call_rows(tmp_path):
    db = tmp_path / "a.duckdb"
    csv = _long_csv(tmp_path / "d.csv", extra={"model": lambda c, r: "m-1"})
    s = Store(db)
    import_draws(s, "A", csv)
    calls = s.load_calls("A")
    s.close()
    assert _count(db, "SELECT count(*) FROM calls WHERE audit_id = 'A'") == 9
    assert _count(db, "SELECT count(*) FROM imported_calls") == 0
    assert set(calls["model"]) == {"m-1"}


def test_a_made_up_id_of_an_implied_call_still_clashes_with_another_pairs_id(tmp_path):
    """The implied call of B run 1 has the id 'import:B:1'; a later file that gives that id to
    another pair is refused, as when the call row was stored."""
    db = tmp_path / "a.duckdb"
    s = Store(db)
    import_draws(s, "A", _long_csv(tmp_path / "one.csv", cands=("A", "B")))
    clash = _long_csv(tmp_path / "two.csv", cands=("A", "B"), runs=(4, 5),
                      extra={"request_id": lambda c, r: "import:B:1" if (c, r) == ("A", 4)
                             else f"q-{c}-{r}"})
    with pytest.raises(InputError, match="request id 'import:B:1' of candidate 'A' run 4 is "
                                         "already stored in audit 'A' for candidate 'B' run 1"):
        import_draws(s, "A", clash)
    # a runner's batch whose request id is an implied call's, for another pair: refused too
    with pytest.raises(InputError, match="import:B:2"):
        s.write_results("A", pd.DataFrame({"request_id": ["import:B:2"], "candidate_id": ["Z"],
                                           "run": [1], "status": ["ok"]}), None)
    # the same pair and id again is a resume: nothing is stored twice
    s.write_results("A", pd.DataFrame({"request_id": ["import:B:2"], "candidate_id": ["B"],
                                       "run": [2], "status": ["ok"]}), None)
    assert len(s.load_calls("A")) == 6 and len(s.load_draws("A")) == 2 * 3 * 2
    s.close()


def test_deleting_an_audit_deletes_its_implied_calls_and_the_version_moves(tmp_path):
    db = tmp_path / "a.duckdb"
    s = Store(db)
    before = s.data_version("A")
    import_draws(s, "A", _long_csv(tmp_path / "d.csv"))
    import_draws(s, "B", _long_csv(tmp_path / "e.csv", cands=("X",)))
    assert s.data_version("A") != before
    s.delete_audit("A")
    assert s.load_calls("A").empty and len(s.load_calls("B")) == 3
    s.close()
    assert _count(db, "SELECT count(*) FROM imported_calls WHERE audit_id = 'A'") == 0


def test_a_version_3_file_migrates_to_4_and_takes_a_lean_import(tmp_path):
    db = tmp_path / "v2.duckdb"
    _v2_file(db)          # a version-2 file migrates through 3 to 4
    s = Store(db)
    import_draws(s, "new", _long_csv(tmp_path / "d.csv"))
    assert len(s.load_calls("old")) == 6 and len(s.load_calls("new")) == 9
    s.close()
    assert _count(db, "SELECT value FROM meta WHERE key = 'schema_version'") == \
        str(SCHEMA_VERSION) == "4"


def test_lean_draws_read_back_as_staged_and_a_clipped_import_keeps_full_rows(tmp_path):
    db = tmp_path / "a.duckdb"
    imp = validate_draws(_long_csv(tmp_path / "d.csv"))
    staged = imp.draws
    s = Store(db)
    commit_draws(s, "A", imp)
    got = s.load_draws("A")
    # a file with a score over its criterion's maximum, clipped: full rows with the flag
    over = _long_csv(tmp_path / "over.csv", cands=("X", "Y"))
    import_draws(s, "C", over, criteria="skills:5,fit:10", clip=True)
    clipped = s.load_draws("C")
    s.close()
    assert _count(db, "SELECT count(*) FROM imported_draws WHERE audit_id = 'A'") == 18
    assert _count(db, "SELECT count(*) FROM draws WHERE audit_id = 'A'") == 0
    cols = ["candidate_id", "run", "criterion", "score", "request_id", "clipped"]
    pd.testing.assert_frame_equal(got[cols].reset_index(drop=True),
                                  staged.sort_values(cols[:3])[cols].reset_index(drop=True),
                                  check_dtype=False)
    assert got["model"].isna().all() and not got["clipped"].any()
    assert _count(db, "SELECT count(*) FROM draws WHERE audit_id = 'C'") == 12
    assert _count(db, "SELECT count(*) FROM imported_draws WHERE audit_id = 'C'") == 0
    skills = clipped[clipped["criterion"] == "skills"]
    assert clipped["clipped"].sum() == 2 and skills["score"].max() == 5.0


@pytest.mark.parametrize("fresh_calls", [False, True], ids=["checked-ids", "runner-fresh-ids"])
def test_a_run_into_an_imported_audit_skips_imported_pairs_and_never_stores_a_draw_twice(
        tmp_path, fresh_calls):
    db = tmp_path / "a.duckdb"
    s = Store(db)
    import_draws(s, "A", _long_csv(tmp_path / "d.csv", cands=("A", "B"), runs=(1, 2)))
    assert s.completed_pairs("A") == {(c, r) for c in "AB" for r in (1, 2)}
    assert s.n_draws("A") == 8 and s.list_audits()["evaluations"].tolist() == [4]
    # a writer's batch holding an imported draw again and a new one: only the new one lands
    s.write_results("A", pd.DataFrame({"request_id": ["q-new"], "candidate_id": ["A"],
                                       "run": [3], "status": ["ok"]}),
                    pd.DataFrame({"candidate_id": ["A", "A"], "run": [1, 3],
                                  "criterion": ["skills", "skills"], "score": [99.0, 5.0],
                                  "request_id": ["q-old", "q-new"]}),
                    fresh_calls=fresh_calls)
    got = s.load_draws("A")
    assert len(got) == 9 and 99.0 not in got["score"].tolist()
    assert s.load_calls("A")["request_id"].tolist().count("q-new") == 1
    assert got.loc[got["run"] == 3, "request_id"].tolist() == ["q-new"]
    # a second file with a pair already imported is refused, naming its line
    with pytest.raises(InputError, match="line 2: candidate 'B' run 2 is already stored"):
        import_draws(s, "A", _long_csv(tmp_path / "e.csv", cands=("B",), runs=(2, 4)))
    assert s.n_draws("A") == 9
    s.close()
