"""Every subcommand over bad options and degenerate inputs: one line, never a traceback.

Each case runs ``python -m core …`` in a subprocess, as a user would, and fails on a
``Traceback`` in stderr or an exit code other than 0 (done) and 2 (bad input, one ``error:``
line naming the file, row, column or option). A degenerate input that can be analysed gives a
report with numbers or "withheld: <reason>".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.support import FIXTURES, ROOT

COMMANDS = ["import", "report", "sample", "demo", "audits", "compare", "run", "drift"]


def _long_csv(path: Path, totals: dict[str, list[float]]) -> Path:
    lines = ["candidate_id,run,criterion,score"]
    for cid, values in totals.items():
        lines += [f"{cid},{j},total,{float(v)!r}" for j, v in enumerate(values, start=1)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("robust")
    rng = np.random.default_rng(0)
    f: dict[str, Path] = {"dir": d}
    f["equal"] = _long_csv(d / "equal.csv", {f"c{i}": [50.0] * 3 for i in range(6)})
    f["one"] = _long_csv(d / "one.csv", {"solo": [5.0, 7.0]})
    f["huge"] = _long_csv(d / "huge.csv", {f"c{i}": list(rng.uniform(0, 1e300, 4))
                                          for i in range(8)})
    f["big"] = _long_csv(d / "big.csv", {f"c{i}": list(rng.integers(0, 562_074_743, 15)
                                                       .astype(float)) for i in range(30)})
    f["tworuns"] = _long_csv(d / "tworuns.csv", {
        **{f"c{i:02d}": list(60 + i + rng.normal(0, 3, 30)) for i in range(12)},
        "short": [70.0, 74.0]})
    f["pool"] = FIXTURES / "pool.csv"
    f["pool1"] = d / "pool1.csv"
    f["pool1"].write_text("candidate_id,first_pass_score\np1,70\n")
    f["notdb"] = d / "notdb.duckdb"
    f["notdb"].write_text("not a database at all\n" * 50)
    f["afile"] = d / "afile.txt"
    f["afile"].write_text("x")
    f["toml_bad"] = d / "bad.toml"
    f["toml_bad"].write_text("[audit\nid = ")
    f["toml_kind"] = d / "kind.toml"
    f["toml_kind"].write_text((ROOT / "examples" / "audit.toml").read_text()
                              .replace('kind = "simulated"', 'kind = "telepathy"'))
    f["db"] = d / "demo.duckdb"
    subprocess.run([sys.executable, "-m", "core", "demo", "--db", str(f["db"])], cwd=str(ROOT),
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True,
                   capture_output=True)
    return f


def _cases(f: dict[str, Path]) -> list[list[str]]:
    db, under_file = str(f["db"]), str(f["afile"] / "x.duckdb")
    demo = "demo-ENG-2291"
    draws = str(FIXTURES / "draws_long.csv")
    return [
        # import
        ["import"],
        ["import", str(f["dir"] / "missing.csv"), "--db", db, "--audit", "X"],
        ["import", str(FIXTURES / "empty.csv"), "--db", db, "--audit", "X"],
        ["import", str(FIXTURES / "header_only.csv"), "--db", db, "--audit", "X"],
        ["import", str(FIXTURES / "bad_score_text.csv"), "--db", db, "--audit", "X"],
        ["import", str(FIXTURES / "bad_one_run.csv"), "--db", db, "--audit", "X"],
        ["import", str(f["dir"]), "--db", db, "--audit", "X"],
        ["import", draws, "--db", under_file, "--audit", "X"],
        ["import", draws, "--db", str(f["notdb"]), "--audit", "X"],
        ["import", draws, "--db", str(f["dir"]), "--audit", "X"],
        ["import", draws, "--db", db, "--audit", "X", "--criteria", "a:b:c:d"],
        ["import", draws, "--db", db, "--audit", "X", "--pool", str(f["afile"])],
        # report
        ["report"],
        ["report", draws, "--db", db],
        ["report", "--db", str(f["dir"] / "missing.duckdb"), "--audit", demo],
        ["report", "--db", db, "--audit", "typo"],
        ["report", "--db", db, "--audit", "typo", "--pool", str(f["pool"])],
        ["report", "--db", str(f["notdb"]), "--audit", demo],
        ["report", draws, "--pool", str(f["pool"]), "--top", "999"],
        ["report", draws, "--pool", str(f["pool1"]), "--top", "2"],
        ["report", draws, "--top", "3"],
        ["report", draws, "--top", "0"],
        ["report", draws, "--k", "-1"],
        ["report", draws, "--k", "nan"],
        ["report", draws, "--cutoff", "inf"],
        ["report", draws, "--capacity", "-5"],
        ["report", draws, "--applications-per-req", "0"],
        ["report", draws, "--format", "xml"],
        ["report", draws, "--pool", str(f["dir"] / "nopool.csv")],
        ["report", draws, "--out", str(f["afile"] / "r.txt")],
        ["report", draws, "--criteria", "total:-5"],
        ["report", str(f["equal"]), "--format", "json"],
        ["report", str(f["one"]), "--pool", str(f["pool"]), "--capacity", "0"],
        ["report", str(f["huge"]), "--format", "json"],
        ["report", str(f["big"]), "--pool", str(f["pool"]), "--format", "md"],
        ["report", str(f["tworuns"]), "--format", "html", "--out", str(f["dir"] / "r.html")],
        ["report", "--db", db, "--audit", demo, "--cutoff", "-1e300", "--capacity", "0"],
        ["report", "--db", db, "--audit", demo, "--top", "100000"],
        ["report", "--db", db, "--audit", demo, "--k", "1e308"],
        ["report", "--db", db, "--audit", demo, "--top", "5", "--of", "3"],
        # sample
        ["sample"],
        ["sample", str(f["pool"]), "--spread", "0", "--cutoff", "70", "--out", "x.csv"],
        ["sample", str(f["pool"]), "--spread", "nan", "--cutoff", "70", "--out", "x.csv"],
        ["sample", str(f["pool"]), "--spread", "3", "--out", str(f["dir"] / "s.csv")],
        ["sample", str(f["pool"]), "--spread", "3", "--top", "999", "--out", "x.csv"],
        ["sample", str(f["pool"]), "--spread", "3", "--cutoff", "70", "--runs", "0",
         "--out", "x.csv"],
        ["sample", str(f["pool"]), "--spread", "3", "--cutoff", "70", "--band", "-1",
         "--out", "x.csv"],
        ["sample", str(f["pool"]), "--spread", "3", "--cutoff", "70",
         "--out", str(f["afile"] / "s.csv")],
        ["sample", str(f["pool1"]), "--spread", "1e308", "--cutoff", "70",
         "--out", str(f["dir"] / "s1.csv")],
        ["sample", str(f["dir"] / "missing.csv"), "--spread", "3", "--cutoff", "70",
         "--out", "x.csv"],
        ["sample", str(f["pool"]), "--spread", "3", "--cutoff", "70", "--seed", "-1",
         "--out", str(f["dir"] / "s2.csv")],
        ["sample", str(f["pool"]), "--spread", "3", "--cutoff", "70", "--runs", "1000000000",
         "--out", str(f["dir"] / "s3.csv")],
        ["sample", str(f["pool"]), "--spread", "3", "--cutoff", "70", "--top", "4",
         "--out", str(f["dir"] / "s4.csv")],
        # compare
        ["compare", "--db", db, "--audit", demo],
        ["compare", "--db", db, "--audit", demo, "--audit", "typo"],
        ["compare", "--db", db, "--audit", demo, "--audit", demo + "-v2", "--seed", "-1"],
        ["compare", "--db", db, "--audit", demo, "--audit", demo + "-v2", "--reps", "0"],
        ["compare", "--db", db, "--audit", demo, "--audit", demo + "-v2", "--k", "1e308"],
        ["compare", "--db", db, "--audit", demo, "--audit", demo + "-v2", "--cutoff", "nan"],
        ["compare", "--db", str(f["notdb"]), "--audit", "a", "--audit", "b"],
        # demo
        ["demo", "--db", under_file],
        ["demo", "--db", str(f["dir"])],
        ["demo", "--db", str(f["notdb"])],
        # audits
        ["audits", "--db", str(f["dir"] / "missing.duckdb")],
        ["audits", "--db", str(f["notdb"])],
        ["audits", "--db", str(f["dir"])],
        # run
        ["run"],
        ["run", "--config", str(f["dir"] / "missing.toml"), "--db", db],
        ["run", "--config", str(f["toml_bad"]), "--db", db],
        ["run", "--config", str(f["toml_kind"]), "--db", db],
        ["run", "--config", str(ROOT / "examples" / "audit.toml"), "--db", db, "--runs", "0",
         "--estimate"],
        ["run", "--config", str(ROOT / "examples" / "audit.toml"), "--db", str(f["dir"]),
         "--estimate"],
        ["run", "--config", str(ROOT / "examples" / "audit.toml"), "--db", under_file,
         "--estimate"],
        # drift
        ["drift"],
        ["drift", str(f["dir"] / "missing.csv")],
        ["drift", str(FIXTURES / "drift_bad_date.csv")],
        ["drift", str(FIXTURES / "drift_disconnected.csv")],
        ["drift", str(FIXTURES / "drift_small.csv"), "--reps", "-1"],
        ["drift", str(FIXTURES / "drift_small.csv"), "--db", db],
        ["drift", str(FIXTURES / "drift_small.csv"), "--D", "nan", "--reps", "0"],
        ["drift", str(FIXTURES / "drift_small.csv"), "--reps", "0", "--db", str(f["notdb"]),
         "--screener", "s"],
        ["drift", str(FIXTURES / "empty.csv")],
        ["drift", str(FIXTURES / "drift_small.csv"), "--seed", "-1"],
        ["drift", str(FIXTURES / "drift_small.csv"), "--reps", "100000000"],
    ]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUDIT_DB_WAIT_S": "5"}
    return subprocess.run([sys.executable, "-m", "core", *args], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=300)


def test_help_lists_every_subcommand_covered_here():
    r = _run(["--help"], ROOT)
    assert r.returncode == 0
    for cmd in COMMANDS:
        assert f"    {cmd} " in r.stdout or f"    {cmd}\n" in r.stdout, cmd
    listed = {line.split()[0] for line in r.stdout.splitlines()
              if line.startswith("    ") and line.split() and line.split()[0].isalpha()
              and line[4] != " "}
    assert listed <= set(COMMANDS) | {"compare"}, listed - set(COMMANDS)


def test_every_subcommand_answers_bad_input_with_one_line(files, tmp_path):
    cases = _cases(files)
    assert {c[0] for c in cases} == set(COMMANDS)
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda a: _run(a, tmp_path), cases))
    failures = []
    for args, r in zip(cases, results):
        err = r.stderr
        problem = None
        if "Traceback" in err or "Traceback" in r.stdout:
            problem = "traceback"
        elif r.returncode not in (0, 2):
            problem = f"exit {r.returncode}"
        elif r.returncode == 2:
            errors = [line for line in err.splitlines() if "error:" in line]
            # one line; or, for a file with several faults, one per fault and their count
            if len(errors) != 1 and not (len(errors) > 2 and "faults in all" in errors[-1]):
                problem = f"{len(errors)} error lines"
        elif r.returncode == 0 and args[0] == "report" and "--format" in args and \
                args[args.index("--format") + 1] == "json" and "--out" not in args:
            text = r.stdout
            if "NaN" in text or "Infinity" in text:
                problem = "NaN/Infinity in JSON"
            json.loads(text)
        if problem:
            failures.append(f"{' '.join(args)} -> {problem}: {err.strip()[-600:]}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", ["equal", "one", "huge", "big", "tworuns"])
@pytest.mark.parametrize("fmt", ["text", "md", "json", "html"])
def test_degenerate_files_give_numbers_or_withheld(files, tmp_path, name, fmt):
    r = _run(["report", str(files[name]), "--pool", str(files["pool"]), "--capacity", "0",
              "--format", fmt], tmp_path)
    if name in ("huge", "big") and r.returncode == 2:
        # an import may refuse implausible scores: then one line per fault naming its row
        # and column (and, for several, their count)
        lines = r.stderr.strip().splitlines()
        assert "Traceback" not in r.stderr
        if len(lines) > 1:
            assert "faults in all" in lines[-1]
            lines = lines[:-1]
        lines = [x for x in lines if "more fault(s) not listed" not in x]   # over the cap
        assert all(("row" in x or "line" in x) and "column" in x for x in lines), lines
        return
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "Warning" not in r.stderr
    out = r.stdout
    if fmt == "json":
        d = json.loads(out)
        assert "NaN" not in out and "Infinity" not in out
        if d["guards"]["statistics_withheld"]:
            assert d["flip"] is None
        else:
            assert d["flip"]["candidates"] >= 1
            for path in d["null_reasons"]:          # every null says why
                assert d["null_reasons"][path]
    else:
        low = out.lower().split("<script")[0]
        assert "statistics withheld" in low or "flip rate at cutoff" in low
        assert not re.search(r"\b(nan|inf|infinity)\b", low)


def test_huge_scores_json_says_why_a_number_is_missing(files, tmp_path):
    """Stored draws of 1e300 (written by a run, no import check): the report says overflow."""
    from core.store import Store

    db = tmp_path / "huge.duckdb"
    s = Store(db)
    s.save_audit("H", {"req_id": "H"}, "h", {})
    rng = np.random.default_rng(1)
    rows = [(f"c{i}", j, "total", float(rng.uniform(0, 1e300)), f"r{i}-{j}")
            for i in range(6) for j in range(1, 5)]
    import pandas as pd
    s.write_results("H", None, pd.DataFrame(rows, columns=["candidate_id", "run", "criterion",
                                                           "score", "request_id"]))
    r = _run(["report", "--db", str(db), "--audit", "H", "--format", "json"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Infinity" not in r.stdout and "NaN" not in r.stdout
    d = json.loads(r.stdout)
    assert d["total"]["within_sd"] is None
    assert "overflow" in d["null_reasons"]["total.within_sd"]


def test_mistyped_audit_never_creates_an_audit(files, tmp_path):
    r = _run(["report", "--db", str(files["db"]), "--audit", "typo", "--pool",
              str(files["pool"])], tmp_path)
    assert r.returncode == 2
    assert "no audit 'typo'" in r.stderr and "known: " in r.stderr
    assert "demo-ENG-2291" in r.stderr.split("known: ")[1]
    listing = _run(["audits", "--db", str(files["db"])], tmp_path).stdout
    assert "typo" not in listing


def test_stored_weight_of_inf_is_one_line_not_an_overflow(tmp_path):
    """A rubric stored with weight inf (an old import): the report names the criterion."""
    import pandas as pd

    from core.store import Store

    db = tmp_path / "w.duckdb"
    s = Store(db)
    s.save_audit("W", {"req_id": "W"}, "h", {"cutoff": 10})
    s.set_criteria("W", pd.DataFrame({"criterion": ["a", "b"], "position": [0, 1],
                                      "max_points": [10.0, 10.0],
                                      "weight": [float("inf"), 1.0]}))
    rows = [(f"c{i}", j, c, float((i + j) % 10), f"{i}-{j}") for i in range(6)
            for j in (1, 2, 3) for c in "ab"]
    s.write_results("W", None, pd.DataFrame(rows, columns=["candidate_id", "run", "criterion",
                                                           "score", "request_id"]))
    for fmt in ("text", "json"):
        r = _run(["report", "--db", str(db), "--audit", "W", "--format", fmt], tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert "criterion 'a' has weight inf" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


def test_stored_nan_cutoff_is_named_and_a_given_cutoff_overrides_it(tmp_path):
    from core.store import Store

    db = tmp_path / "n.duckdb"
    r = _run(["import", str(FIXTURES / "draws_long.csv"), "--db", str(db), "--audit", "N",
              "--cutoff", "nan"], tmp_path)
    assert r.returncode == 2 and "--cutoff" in r.stderr and "finite" in r.stderr
    assert _run(["import", str(FIXTURES / "draws_long.csv"), "--db", str(db), "--audit", "N"],
                tmp_path).returncode == 0
    Store(db).update_settings("N", {"cutoff": float("nan")})   # as an old version could
    r = _run(["report", "--db", str(db), "--audit", "N"], tmp_path)
    assert r.returncode == 2 and "the audit's cutoff is nan" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = _run(["report", "--db", str(db), "--audit", "N", "--cutoff", "8"], tmp_path)
    assert r.returncode == 0 and "FLIP RATE AT CUTOFF 8 " in r.stdout


def test_a_sample_for_a_mistyped_audit_writes_no_file(files, tmp_path):
    out = tmp_path / "sample.csv"
    r = _run(["sample", str(files["pool"]), "--spread", "3", "--cutoff", "70", "--db",
              str(files["db"]), "--audit", "typo", "--out", str(out)], tmp_path)
    assert r.returncode == 2 and "no audit 'typo'" in r.stderr
    assert not out.exists()


def test_absurd_band_width_and_a_top_k_beyond_its_list_are_refused_by_name(files, tmp_path):
    db, demo = str(files["db"]), "demo-ENG-2291"
    r = _run(["report", "--db", db, "--audit", demo, "--k", "1e308"], tmp_path)
    assert r.returncode == 2 and "--k" in r.stderr and "at most 10" in r.stderr
    assert "no within-candidate spread" not in r.stdout + r.stderr
    r = _run(["report", "--db", db, "--audit", demo, "--top", "5", "--of", "3"], tmp_path)
    assert r.returncode == 2 and "--top 5" in r.stderr and "--of 3" in r.stderr
    assert r.stdout == ""


def test_an_empty_audit_id_is_refused_and_creates_nothing(tmp_path):
    db = tmp_path / "e.duckdb"
    r = _run(["import", str(FIXTURES / "draws_long.csv"), "--db", str(db), "--audit", " "],
             tmp_path)
    assert r.returncode == 2 and "--audit" in r.stderr and "needs a name" in r.stderr
    assert not db.exists()


@pytest.mark.parametrize("option", ["--runs", "--concurrency"])
def test_a_zero_run_override_is_refused_not_ignored(tmp_path, option):
    """``run --runs 0`` printed the config's 15-run estimate as if the option were absent."""
    r = _run(["run", "--config", str(ROOT / "examples" / "audit.toml"), "--db",
              str(tmp_path / "z.duckdb"), "--estimate", option, "0"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert option.lstrip("-") in r.stderr and "got 0" in r.stderr
    assert "estimate:" not in r.stderr + r.stdout


def test_report_and_sample_list_every_fault_of_a_file_as_import_does(tmp_path):
    """Issue 9: "list every fault … in the upload panel and on the CLI". `report FILE` and
    `sample POOL` named only the first fault and a count of the rest."""
    draws = tmp_path / "five.csv"
    draws.write_text("candidate_id,run,criterion,score\n"
                     "a,1,total,50\na,2,total,abc\n"          # line 3: not a number
                     "b,1,total,1e400\nb,2,total,60\n"         # line 4: overflow
                     "b,2,total,61\n"                          # line 6: duplicate
                     "c,1,total,70\n"                          # line 7: one run
                     "=cmd,1,total,40\n=cmd,2,total,41\n")     # lines 8-9: formula-like id
    r = _run(["report", str(draws)], tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stdout == ""
    for where in ("line 3, column 'score'", "line 4, column 'score'",
                  "line 6, column 'criterion'", "line 7, column 'run'",
                  "line 8, column 'candidate_id'", "line 9, column 'candidate_id'"):
        assert where in r.stderr, where
    assert "6 faults in all" in r.stderr
    pool = tmp_path / "pool.csv"
    pool.write_text("candidate_id,first_pass_score\na,1\na,2\nb,x\n")
    r = _run(["sample", str(pool), "--spread", "3", "--cutoff", "2", "--out",
              str(tmp_path / "s.csv")], tmp_path)
    assert r.returncode == 2 and "line 3, column 'candidate_id'" in r.stderr
    assert "line 4, column 'first_pass_score'" in r.stderr and "2 faults in all" in r.stderr
    assert not (tmp_path / "s.csv").exists()
