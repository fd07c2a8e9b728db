"""Schema version 3 (issue 12): draws and calls without a primary key, uniqueness kept by the
writers. A version-2 file written by the old code migrates with its data intact; a draw already
stored is refused (import) or skipped (a resumed run), never stored twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import duckdb
import pandas as pd
import pytest

from core.errors import InputError
from core.ingest import import_draws
from core.store import SCHEMA_VERSION, Store
from tests.fakeserver import FakeServer
from tests.support import ROOT, http_json_config, run_cli

# The schema of version 2 as the old code (core/store.py before issue 12) created it.
V2_DDL = """
CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE audits (audit_id VARCHAR PRIMARY KEY, created_at TIMESTAMP, freeze_json VARCHAR,
    harness_hash VARCHAR, settings_json VARCHAR);
CREATE TABLE criteria (audit_id VARCHAR, criterion VARCHAR, position INTEGER,
    max_points DOUBLE, weight DOUBLE, PRIMARY KEY (audit_id, criterion));
CREATE TABLE candidates (audit_id VARCHAR, candidate_id VARCHAR, stratum VARCHAR,
    first_pass_score DOUBLE, application VARCHAR, PRIMARY KEY (audit_id, candidate_id));
CREATE TABLE pool (audit_id VARCHAR, candidate_id VARCHAR, first_pass_score DOUBLE,
    PRIMARY KEY (audit_id, candidate_id));
CREATE TABLE calls (audit_id VARCHAR, request_id VARCHAR, candidate_id VARCHAR, run INTEGER,
    attempts INTEGER, started_at TIMESTAMP, finished_at TIMESTAMP, latency_ms DOUBLE,
    http_status INTEGER, status VARCHAR, error VARCHAR, raw_payload VARCHAR,
    payload_sha256 VARCHAR, model VARCHAR, input_tokens BIGINT, output_tokens BIGINT,
    cached_input_tokens BIGINT, cost DOUBLE, seed BIGINT, source VARCHAR, meta_json VARCHAR,
    PRIMARY KEY (audit_id, request_id));
CREATE TABLE draws (audit_id VARCHAR, candidate_id VARCHAR, run INTEGER, criterion VARCHAR,
    score DOUBLE, request_id VARCHAR, model VARCHAR, clipped BOOLEAN,
    PRIMARY KEY (audit_id, candidate_id, run, criterion));
CREATE TABLE imports (audit_id VARCHAR, file_sha256 VARCHAR, kind VARCHAR, file_name VARCHAR,
    rows BIGINT, imported_at TIMESTAMP, PRIMARY KEY (audit_id, file_sha256, kind));
CREATE TABLE drift_results (screener VARCHAR, computed_at TIMESTAMP, result_json VARCHAR);
INSERT INTO meta VALUES ('schema_version', '2');
"""


def _v2_file(path) -> None:
    con = duckdb.connect(str(path))
    con.execute(V2_DDL)
    con.execute("INSERT INTO audits VALUES ('old', TIMESTAMP '2026-01-02 03:04:05', '{}', "
                "'h1', '{\"cutoff\": 7}')")
    for cand in ("A", "B"):
        for run in (1, 2, 3):
            rid = f"r-{cand}-{run}"
            con.execute("INSERT INTO calls (audit_id, request_id, candidate_id, run, status, "
                        "raw_payload, model) VALUES ('old', ?, ?, ?, 'ok', '{}', 'm1')",
                        [rid, cand, run])
            for crit, score in (("skills", run + 0.5), ("total", 2 * run + 1.0)):
                con.execute("INSERT INTO draws VALUES ('old', ?, ?, ?, ?, ?, 'm1', false)",
                            [cand, run, crit, score, rid])
    con.close()


def _keys(path) -> tuple[int, int, int, int]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        # the calls and draws a reader sees: stored rows and the lean ones of imports without
        # call columns (schema 4: a made-up call id is 'import:<candidate>:<run>')
        calls = ("(SELECT audit_id, request_id FROM calls UNION ALL SELECT audit_id, 'import:' "
                 "|| candidate_id || ':' || run FROM imported_calls)")
        draws = ("(SELECT audit_id, candidate_id, run, criterion FROM draws UNION ALL SELECT "
                 "audit_id, candidate_id, run, criterion FROM imported_draws)")
        return con.execute(
            f"SELECT (SELECT count(*) FROM {draws}), (SELECT count(DISTINCT (audit_id, "
            f"candidate_id, run, criterion)) FROM {draws}), (SELECT count(*) FROM {calls}), "
            f"(SELECT count(DISTINCT (audit_id, request_id)) FROM {calls})").fetchall()[0]
    finally:
        con.close()


def test_a_version_2_file_migrates_to_the_current_version_with_its_draws_and_calls_intact(tmp_path):
    db = tmp_path / "v2.duckdb"
    _v2_file(db)
    con = duckdb.connect(str(db), read_only=True)
    before = con.execute("SELECT * FROM draws ORDER BY candidate_id, run, criterion").fetchall()
    calls_before = con.execute("SELECT request_id, candidate_id, run, raw_payload FROM calls "
                               "ORDER BY request_id").fetchall()
    con.close()
    s = Store(db)
    got = s.load_draws("old")
    assert len(got) == 12 and s.get_audit("old")["settings"] == {"cutoff": 7}
    assert sorted(s.completed_pairs("old")) == [(c, r) for c in "AB" for r in (1, 2, 3)]
    s.close()
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == [
        (str(SCHEMA_VERSION),)] and SCHEMA_VERSION == 4
    assert con.execute("SELECT * FROM draws ORDER BY candidate_id, run, criterion"
                       ).fetchall() == before
    assert con.execute("SELECT request_id, candidate_id, run, raw_payload FROM calls "
                       "ORDER BY request_id").fetchall() == calls_before
    # the primary keys of draws and calls are gone (the others stay)
    keys = {r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY'"
    ).fetchall()}
    con.close()
    assert "draws" not in keys and "calls" not in keys and {"audits", "candidates"} <= keys
    # writing the migrated draws again (a resume) stores nothing twice
    s = Store(db)
    s.write_results("old", None, got.drop(columns=["request_id"]).assign(
        request_id=got["request_id"]))
    s.close()
    assert _keys(db) == (12, 12, 6, 6)


def test_a_written_batch_written_again_stores_no_draw_or_call_twice(tmp_path):
    """A writer that resumes (or a pair answered twice) skips what is stored: the first draw
    of a key stays, and a request id is stored once."""
    db = tmp_path / "a.duckdb"
    s = Store(db)
    calls = pd.DataFrame({"request_id": ["q1", "q2"], "candidate_id": ["A", "A"], "run": [1, 2],
                          "status": ["ok", "ok"]})
    draws = pd.DataFrame({"candidate_id": ["A", "A", "A"], "run": [1, 2, 2],
                          "criterion": ["total"] * 3, "score": [1.0, 2.0, 9.0],
                          "request_id": ["q1", "q2", "q2"]})
    s.write_results("X", calls, draws)
    s.write_results("X", calls, draws)
    again = pd.DataFrame({"candidate_id": ["A"], "run": [2], "criterion": ["total"],
                          "score": [5.0], "request_id": ["q3"]})
    s.write_results("X", pd.DataFrame({"request_id": ["q3"], "candidate_id": ["A"], "run": [2],
                                       "status": ["ok"]}), again)
    got = s.load_draws("X").set_index("run")["score"].to_dict()
    s.close()
    assert got == {1: 1.0, 2: 2.0}
    assert _keys(db) == (2, 2, 3, 3)


def _csv(path, rows) -> None:
    pd.DataFrame(rows, columns=["candidate_id", "run", "criterion", "score"]).to_csv(
        path, index=False)


def test_a_draw_already_stored_is_refused_with_its_line_and_nothing_is_written(tmp_path):
    db = tmp_path / "a.duckdb"
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    _csv(first, [(c, r, "total", float(r)) for c in ("A", "B") for r in (1, 2)])
    # lines 2-4 are new; candidate B run 2 (line 5) is stored already
    _csv(second, [("A", 3, "total", 1.0), ("A", 4, "total", 2.0), ("B", 3, "total", 3.0),
                  ("B", 2, "total", 9.0)])
    s = Store(db)
    import_draws(s, "aud", first)
    with pytest.raises(InputError) as exc:
        import_draws(s, "aud", second)
    msg = str(exc.value)
    assert "second.csv" in msg and "line 5" in msg and "'B' run 2" in msg
    assert "already stored" in msg and "new audit" in msg
    assert len(s.load_draws("aud")) == 4 and s.load_draws("aud")["score"].max() == 2.0
    s.close()
    assert _keys(db) == (4, 4, 4, 4)
    res = run_cli("import", str(second), "--db", str(db), "--audit", "aud")
    assert res.returncode == 2 and "line 5" in res.stderr and "already stored" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert _keys(db) == (4, 4, 4, 4)


def test_a_staged_import_checks_stored_pairs_again_when_it_writes(tmp_path):
    """Between the validation and the write, another writer may store the same pair: the
    write's own anti-join refuses it (naming the line) inside the transaction."""
    from core.ingest import validate_draws

    db = tmp_path / "a.duckdb"
    f = tmp_path / "f.csv"
    _csv(f, [(c, r, "total", float(r)) for c in ("A", "B") for r in (1, 2)])
    s = Store(db)
    s.write_results("aud", None, pd.DataFrame({"candidate_id": ["X"], "run": [1],
                                               "criterion": ["total"], "score": [1.0]}))
    imp = validate_draws(f)
    s.write_results("aud", None, pd.DataFrame({"candidate_id": ["B"], "run": [1],
                                               "criterion": ["total"], "score": [7.0]}))
    with s.transaction() as cur, pytest.raises(InputError) as exc:
        s.write_staged(cur, "aud", imp.staging.alias, file_name=imp.file_name)
    assert "line 4" in str(exc.value) and "'B' run 1" in str(exc.value)
    assert len(s.load_draws("aud")) == 2
    s.close()




def test_a_run_killed_twice_and_resumed_stores_each_draw_once(tmp_path):
    """kill -9 twice mid-run, then resume to the end and once more: without primary keys every
    (candidate, run, criterion) is stored exactly once and every request id once."""
    runs, k = 5, 10
    with FakeServer() as server:
        server.set(latency_ms=15, p500=0.1, seed=3)
        cfg = http_json_config(tmp_path, server.url, runs, k)
        db = tmp_path / "audit.duckdb"
        env = {**os.environ, "FAKE_SCREENER_KEY": "sk-test-kill-resume-0001",
               "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-m", "core", "run", "--config", str(cfg), "--db", str(db),
               "--no-progress"]
        for stop_at in (12, 30):
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            deadline = time.monotonic() + 30
            while (sum(1 for e in server.log if e.status == 200) < stop_at
                   and time.monotonic() < deadline and proc.poll() is None):
                time.sleep(0.005)
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=10)
        for _ in range(2):
            done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=90)
            assert done.returncode == 0, done.stderr.decode()
    n_draws, distinct_draws, n_calls, distinct_calls = _keys(db)
    assert n_draws == distinct_draws == runs * k * 5   # 4 criteria and the total
    assert n_calls == distinct_calls >= runs * k
    s = Store(db, read_only=True)
    assert len(s.completed_pairs("kill")) == runs * k
