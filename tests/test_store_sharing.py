"""One DuckDB file shared by the app and the terminal (issue 8 item 9) and the store's one-line
errors (issue 12 item 10): real files, real subprocesses, the app through AppTest.

The store holds the file only while a call works on it, so ``python -m core import`` and
``python -m core run`` write to a file the app has open; the app shows their data on its next
run, without a restart.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from core.errors import InputError, StoreError
from core.store import Store
from tests.support import FIXTURES, ROOT, run_cli

TIMEOUT = 60


def _cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "core", *args], cwd=str(ROOT), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _slow_example(tmp_path: Path) -> Path:
    """examples/audit.toml with a slower simulated screener and more runs (a run of seconds)."""
    folder = tmp_path / "cfg"
    shutil.copytree(ROOT / "examples", folder)
    cfg = folder / "audit.toml"
    text = cfg.read_text().replace("latency_ms = 20", "latency_ms = 80")
    text = text.replace("runs = 15 ", "runs = 30 ")
    assert "latency_ms = 80" in text and "runs = 30 " in text
    cfg.write_text(text)
    return cfg


def test_app_open_while_terminal_import_and_run_write_the_same_file(tmp_path, monkeypatch):
    db = tmp_path / "audits.duckdb"
    monkeypatch.setenv("AUDIT_DB", str(db))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()                                  # the app opens the file and creates the demo
    assert not at.exception
    cfg = _slow_example(tmp_path)
    run = _cli("run", "--config", str(cfg), "--db", str(db), "--no-progress")
    imports, reruns_during_run = [], 0
    pages = ["flip", "criteria", "band", "run", "freeze"]
    i = 0
    while run.poll() is None or i < 3:
        if i < 3:   # imports from a terminal while the run writes and the app reads
            imports.append(_cli("import", str(FIXTURES / "draws_long.csv"), "--db", str(db),
                                "--audit", f"imported-{i}"))
        alive_before = run.poll() is None
        at.switch_page(f"pages/{pages[i % len(pages)]}.py")
        at.run()
        assert not at.exception, at.exception
        if alive_before and run.poll() is None:
            reruns_during_run += 1
        i += 1
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert "Traceback" not in err
    for p in imports:
        o, e = p.communicate(timeout=120)
        assert p.returncode == 0, e
        assert o.startswith("imported:"), o
    assert reruns_during_run >= 1   # the app really ran pages while the run was writing

    # nothing lost: every (candidate, run) of the run and every imported draw is stored
    store = Store(db, read_only=True)
    assert len(store.completed_pairs("eng-2291-sim")) == 12 * 30
    for j in range(3):
        assert len(store.completed_pairs(f"imported-{j}")) == 9   # 3 candidates × 3 runs
    # the running app (same process, same cached store) shows the new audits without a
    # restart: a page opened now lists them and analyses the run's draws
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params["audit"] = "eng-2291-sim"
    at.run()
    assert not at.exception
    options = at.sidebar.selectbox(key="active_audit").options
    assert {"eng-2291-sim", "imported-0", "imported-1", "imported-2"} <= set(options)
    assert any(c.value == "360 evaluations stored" for c in at.sidebar.caption)
    at.switch_page("pages/flip.py")
    at.run()
    assert not at.exception
    assert any("of 12" in m.value for m in at.metric)
    # and a terminal report reads the file while the app keeps it "open"
    rep = run_cli("report", "--db", str(db), "--audit", "eng-2291-sim", "--format", "json")
    assert rep.returncode == 0, rep.stderr
    assert '"evaluations": 360' in rep.stdout


def test_a_write_waits_for_a_short_lock_of_another_process(db_path):
    Store(db_path).close()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import duckdb, time
        con = duckdb.connect({str(db_path)!r})
        print("ready", flush=True)
        time.sleep(1.5)
        con.close()
        print("released", flush=True)
        time.sleep(30)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        s = Store(db_path, wait_s=20)
        s.write_results("A", None, pd.DataFrame({
            "candidate_id": "x", "run": [1, 2], "criterion": "total", "score": [1.0, 2.0],
            "request_id": ["r1", "r2"], "model": None, "clipped": False}))
        # the write happened after the other process let go, and nothing was lost
        assert holder.stdout.readline().strip() == "released"
        assert s.n_draws("A") == 2
    finally:
        holder.kill()
        holder.wait()


def test_store_holds_no_lock_between_calls(db_path):
    """Another process can open the file while a Store object exists (the app's case)."""
    s = Store(db_path)
    s.write_results("A", None, pd.DataFrame({
        "candidate_id": "x", "run": [1, 2], "criterion": "total", "score": [1.0, 2.0],
        "request_id": ["r1", "r2"], "model": None, "clipped": False}))
    probe = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import duckdb
        con = duckdb.connect({str(db_path)!r})
        con.execute("INSERT INTO meta VALUES ('probe', 'other process')")
        con.close()
    """)], capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert s.n_draws("A") == 2


def _calls(rows):
    return pd.DataFrame(rows, columns=["request_id", "candidate_id", "run"]).assign(status="ok")


def test_request_id_of_another_candidate_is_refused_and_nothing_written(store):
    store.write_results("A", _calls([("r-1", "c1", 1), ("r-2", "c1", 2)]), None)
    before = store.data_version("A")
    with pytest.raises(InputError) as exc:
        store.write_results("A", _calls([("r-9", "c2", 1), ("r-2", "c2", 2)]), pd.DataFrame({
            "candidate_id": "c2", "run": [1, 2], "criterion": "total", "score": [1.0, 2.0],
            "request_id": ["r-9", "r-2"], "model": None, "clipped": False}))
    msg = str(exc.value)
    assert "'r-2'" in msg and "candidate 'c2' run 2" in msg and "candidate 'c1' run 2" in msg
    assert store.data_version("A") == before
    # the same id for the same pair is a resume: idempotent, no error
    store.write_results("A", _calls([("r-2", "c1", 2)]), None)
    assert len(store.load_calls("A")) == 2


def test_import_whose_request_ids_clash_is_rejected_naming_the_pair(tmp_path):
    db = tmp_path / "a.duckdb"
    first = tmp_path / "first.csv"
    first.write_text("candidate_id,run,criterion,score,request_id\n"
                     "A,1,total,5,req-1\nA,2,total,6,req-2\nB,1,total,7,req-3\nB,2,total,8,req-4\n")
    second = tmp_path / "second.csv"
    second.write_text("candidate_id,run,criterion,score,request_id\n"
                      "B,3,total,5,req-7\nB,4,total,6,req-3\n")
    assert run_cli("import", str(first), "--db", str(db), "--audit", "A1").returncode == 0
    r = run_cli("import", str(second), "--db", str(db), "--audit", "A1")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "req-3" in r.stderr and "candidate 'B' run 4" in r.stderr
    assert "candidate 'B' run 1" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert len(Store(db, read_only=True).completed_pairs("A1")) == 4


def test_checksum_corrupt_database_is_named_corrupt_not_in_use(tmp_path):
    db = tmp_path / "bad.duckdb"
    assert run_cli("demo", "--db", str(db)).returncode == 0
    data = bytearray(db.read_bytes())
    data[12288 + 100:12288 + 164] = b"\xff" * 64      # inside the first data block
    db.write_bytes(bytes(data))
    r = run_cli("report", "--db", str(db), "--audit", "demo-ENG-2291")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "corrupt" in r.stderr and "in use" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def _read_only_folder_cmd(folder: Path, *cli: str) -> list[str]:
    """The command line that runs ``python -m core CLI…`` with ``folder`` read-only: a chmod
    when it binds this user, else (root ignores permissions) a read-only bind mount in a
    private mount namespace."""
    probe = folder / ".probe"
    os.chmod(folder, 0o555)
    try:
        probe.write_text("x")
        probe.unlink()
        effective = False
    except OSError:
        effective = True
    py = f"{sys.executable} -m core " + " ".join(f"'{a}'" for a in cli)
    if effective:
        return ["sh", "-c", py]
    os.chmod(folder, 0o755)
    return ["unshare", "-m", "sh", "-c",
            f"mount --bind '{folder}' '{folder}' && "
            f"mount -o remount,ro,bind '{folder}' '{folder}' && {py}"]


@pytest.mark.parametrize("what", ["import-existing", "import-new", "report"])
def test_read_only_folder_gives_one_line(tmp_path, what):
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "a.duckdb"
    assert run_cli("demo", "--db", str(db)).returncode == 0
    target = db if what != "import-new" else folder / "new.duckdb"
    cli = (["report", "--db", str(db), "--audit", "demo-ENG-2291", "--format", "json"]
           if what == "report" else
           ["import", str(FIXTURES / "draws_long.csv"), "--db", str(target), "--audit", "X"])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        r = subprocess.run(_read_only_folder_cmd(folder, *cli), cwd=str(ROOT), env=env,
                           capture_output=True, text=True, timeout=120)
    finally:
        os.chmod(folder, 0o755)
    assert "Traceback" not in r.stderr and "Exception" not in r.stderr
    if what == "report":     # reading needs no write: the report works
        assert r.returncode == 0, r.stderr
        assert '"evaluations": 600' in r.stdout
    else:
        assert r.returncode == 2
        assert "cannot be written" in r.stderr and "read-only" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_folder_path_and_missing_file_are_store_errors(tmp_path):
    with pytest.raises(StoreError, match="is a folder"):
        Store(tmp_path)
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "nope.duckdb", read_only=True)


@pytest.mark.parametrize("tail", [
    "Conflicting lock is held in /usr/bin/python3 (PID 42). See also https://duckdb.org",
    "Permission denied. However, you would be able to open this database in read-only mode, "
    "e.g. by using the -readonly parameter in the CLI. See also https://duckdb.org",
])
def test_a_lock_held_by_another_process_is_never_taken_for_a_read_only_folder(tail):
    """DuckDB's lock error can mention "read-only mode" or "Permission denied" (a race with the
    holder letting go): it is a wait-and-retry, never the read-only-folder fallback."""
    import duckdb

    from core import store as store_mod

    exc = duckdb.IOException(f'IO Error: Could not set lock on file "/x/a.duckdb": {tail}')
    assert store_mod._is_lock_conflict(exc) and not store_mod._is_unwritable(exc)
    assert "in use by another process" in store_mod._explain("/x/a.duckdb", exc)
