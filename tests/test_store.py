"""The DuckDB store: schema version, corrupt and locked files, freeze immutability, rollback."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import duckdb
import pandas as pd
import pytest

from core.errors import FrozenError, StoreError
from core.freeze import FreezeSheet
from core.store import SCHEMA_VERSION, Store


def _draws(cid="A", runs=(1, 2)):
    return pd.DataFrame({"candidate_id": cid, "run": list(runs), "criterion": "total",
                         "score": [1.0 * r for r in runs], "request_id": [f"r{r}" for r in runs],
                         "model": None, "clipped": False})


def test_new_file_gets_schema_version(db_path):
    s = Store(db_path)
    s.close()
    con = duckdb.connect(str(db_path))
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchall() == [
        (str(SCHEMA_VERSION),)]
    con.close()


def test_version_1_file_is_migrated_and_keeps_its_draws(db_path):
    """A file written before calls.meta_json existed opens, gains the column, keeps its data."""
    s = Store(db_path)
    s.write_results("A1", None, _draws())
    s.close()
    con = duckdb.connect(str(db_path))
    con.execute("ALTER TABLE calls DROP COLUMN meta_json")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    s = Store(db_path)
    assert len(s.load_draws("A1")) == 2
    s.write_results("A1", pd.DataFrame({"request_id": ["x"], "candidate_id": ["A"], "run": [3],
                                        "status": ["ok"], "meta_json": ['{"id": "resp-1"}']}),
                    None)
    assert s.load_calls("A1")["meta_json"].tolist() == ['{"id": "resp-1"}']
    s.close()
    con = duckdb.connect(str(db_path))
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchall() == [
        (str(SCHEMA_VERSION),)]
    con.close()


def test_other_schema_version_is_refused(db_path):
    Store(db_path).close()
    con = duckdb.connect(str(db_path))
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(StoreError) as exc:
        Store(db_path)
    msg = str(exc.value)
    assert "schema version 99" in msg and str(SCHEMA_VERSION) in msg and str(db_path) in msg
    assert "\n" not in msg


def test_duckdb_file_that_is_not_an_audit_database(db_path):
    con = duckdb.connect(str(db_path))
    con.execute("CREATE TABLE other (x INTEGER)")
    con.close()
    with pytest.raises(StoreError) as exc:
        Store(db_path, read_only=True)
    assert "not an audit database" in str(exc.value)


def test_corrupt_file_one_line_message(db_path):
    db_path.write_bytes(b"this is not a database\x00\x01\x02" * 300)
    with pytest.raises(StoreError) as exc:
        Store(db_path)
    msg = str(exc.value)
    assert str(db_path) in msg
    assert "\n" not in msg.strip()
    assert "corrupt or not a DuckDB file" in msg and "in use" not in msg


def test_file_held_by_another_process_says_in_use(db_path):
    Store(db_path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import duckdb, sys, time
            con = duckdb.connect({str(db_path)!r})
            print("ready", flush=True)
            time.sleep(30)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError) as exc:
            Store(db_path, wait_s=0.5)
        msg = str(exc.value)
        assert "in use" in msg and str(db_path) in msg and "\n" not in msg
        assert "waited" in msg
    finally:
        holder.kill()
        holder.wait()


def _sheet(**kw) -> FreezeSheet:
    base = {"req_id": "ENG-1", "model": "m-2025-01-01", "side_effect_free": True}
    return FreezeSheet.from_dict({**base, **kw})


def test_sheet_can_change_before_first_draw(store):
    a, b = _sheet(), _sheet(prompt_version="p2")
    store.save_audit("A", a.to_dict(), a.hash)
    store.save_audit("A", b.to_dict(), b.hash)
    assert store.get_audit("A")["harness_hash"] == b.hash


def test_sheet_frozen_after_first_draw(store):
    a, b = _sheet(), _sheet(prompt_version="p2")
    store.save_audit("A", a.to_dict(), a.hash)
    store.write_results("A", None, _draws())
    with pytest.raises(FrozenError) as exc:
        store.save_audit("A", b.to_dict(), b.hash)
    assert "new audit" in str(exc.value)
    assert store.get_audit("A")["harness_hash"] == a.hash
    # the same sheet again is fine (settings may merge)
    store.save_audit("A", a.to_dict(), a.hash, {"cutoff": 70})
    assert store.get_audit("A")["settings"]["cutoff"] == 70


def test_transaction_rollback_leaves_nothing(store):
    a = _sheet()
    store.save_audit("A", a.to_dict(), a.hash)
    before = store.data_version("A")
    with pytest.raises(RuntimeError):
        with store.transaction() as cur:
            store.write_results("A", None, _draws(), cur=cur)
            store.set_pool("A", pd.DataFrame({"candidate_id": ["p"], "first_pass_score": [1.0]}),
                           cur=cur)
            raise RuntimeError("boom")
    assert store.n_draws("A") == 0 and len(store.get_pool("A")) == 0
    assert store.data_version("A") == before


def test_writes_are_idempotent_on_keys(store):
    store.write_results("A", None, _draws())
    store.write_results("A", None, _draws())
    assert store.n_draws("A") == 2
    assert store.completed_pairs("A") == {("A", 1), ("A", 2)}


def test_data_version_changes_with_draws_pool_and_settings(store):
    a = _sheet()
    store.save_audit("A", a.to_dict(), a.hash)
    v0 = store.data_version("A")
    store.write_results("A", None, _draws())
    v1 = store.data_version("A")
    store.set_pool("A", pd.DataFrame({"candidate_id": ["p"], "first_pass_score": [1.0]}))
    v2 = store.data_version("A")
    store.update_settings("A", {"cutoff": 71})
    v3 = store.data_version("A")
    assert len({v0, v1, v2, v3}) == 4


def test_missing_audit_is_a_clear_error(store):
    with pytest.raises(StoreError, match="No audit 'nope'"):
        store.get_audit("nope")


def test_candidates_without_application_text_are_stored(db_path):
    """A sample frame with no application column (an upload, a drawn sample) is stored."""
    s = Store(db_path)
    s.upsert_candidates("A1", pd.DataFrame({"candidate_id": ["A", "B"], "stratum": "band",
                                            "first_pass_score": [70.0, 71.0]}))
    got = s.get_candidates("A1")
    assert got["candidate_id"].tolist() == ["A", "B"]
    assert got["application"].isna().all()
    s.close()


def test_sample_can_be_replaced_before_the_first_draw_only(db_path):
    s = Store(db_path)
    s.upsert_candidates("A1", pd.DataFrame({"candidate_id": ["A", "B"], "stratum": "band"}))
    s.set_candidates("A1", pd.DataFrame({"candidate_id": ["C"], "stratum": "high",
                                         "first_pass_score": [90.0]}))
    assert s.get_candidates("A1")["candidate_id"].tolist() == ["C"]
    s.write_results("A1", None, _draws("C"))
    with pytest.raises(FrozenError, match="cannot be replaced"):
        s.set_candidates("A1", pd.DataFrame({"candidate_id": ["D"]}))
    assert s.get_candidates("A1")["candidate_id"].tolist() == ["C"]
    s.close()
