"""The command line, run the way a user runs it: ``python -m core …`` in a subprocess."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from core.cli import build_parser, main
from tests.support import FIXTURES, run_cli


def _subcommands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(sub.choices)


def test_top_level_help_lists_commands():
    r = run_cli("--help")
    assert r.returncode == 0
    for cmd in ("import", "report", "sample", "demo", "audits", "compare", "run", "drift"):
        assert cmd in r.stdout


@pytest.mark.parametrize("cmd", _subcommands())
def test_help_for_every_command(cmd, capsys):
    with pytest.raises(SystemExit) as exc:
        main([cmd, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m core {cmd}")


def test_required_commands_exist():
    assert {"import", "report", "sample", "demo"} <= set(_subcommands())


def test_import_then_reimport_is_a_noop(tmp_path):
    db = tmp_path / "a.duckdb"
    r = run_cli("import", str(FIXTURES / "draws_long.csv"), "--db", str(db), "--audit", "A",
                "--criteria", "a:10,b:10", "--pool", str(FIXTURES / "pool.csv"), "--cutoff", "10")
    assert r.returncode == 0, r.stderr
    assert "imported: 9 evaluations of 3 candidates" in r.stdout
    assert "pool: 10 applicants" in r.stdout
    r = run_cli("import", str(FIXTURES / "draws_long.csv"), "--db", str(db), "--audit", "A")
    assert r.returncode == 0 and r.stdout.startswith("already imported")
    r = run_cli("report", "--db", str(db), "--audit", "A", "--format", "json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["sample"]["evaluations"] == 9 and d["flip"]["cutoff"] == 10
    assert d["band"]["applications_per_req"] == 10


@pytest.mark.parametrize("name, row, column", [("bad_score_text.csv", 5, "score"),
                                               ("bad_wide_cell.csv", 3, "b"),
                                               ("bad_duplicate.csv", 5, "criterion")])
def test_bad_input_exit_2_one_line_naming_file_row_column(tmp_path, name, row, column):
    db = tmp_path / "a.duckdb"
    r = run_cli("import", str(FIXTURES / name), "--db", str(db), "--audit", "A")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert name in lines[0] and f"line {row}" in lines[0] and f"column '{column}'" in lines[0]
    assert "Traceback" not in r.stderr
    assert r.stdout == ""


def test_report_from_file_bad_input_exit_2(tmp_path):
    r = run_cli("report", str(FIXTURES / "bad_out_of_range.csv"), "--cutoff", "3",
                "--criteria", "a:10")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1
    assert "bad_out_of_range.csv, line 6, column 'score'" in r.stderr


def test_report_from_file_json_and_effective_cutoff():
    r = run_cli("report", str(FIXTURES / "draws_long.csv"), "--pool", str(FIXTURES / "pool.csv"),
                "--cutoff", "9", "--top", "3", "--of", "10", "--format", "json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    # pool sorted desc: 16 14 12 … → 3rd highest = 12
    assert d["cutoff"]["audited"] == 12 and d["cutoff"]["configured"] == 9
    assert d["flip"]["cutoff"] == 12
    assert [c["criterion"] for c in d["criteria"]] == ["a", "b"]


def test_report_text_and_html_to_file(tmp_path):
    out = tmp_path / "r.html"
    r = run_cli("report", str(FIXTURES / "draws_long.csv"), "--cutoff", "9", "--format", "html",
                "--out", str(out))
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    assert "Plotly.newPlot" in page and "NOT ESTABLISHED BY THIS REPORT" in page


def test_clip_reported_by_import(tmp_path):
    r = run_cli("import", str(FIXTURES / "bad_out_of_range.csv"), "--db",
                str(tmp_path / "a.duckdb"), "--audit", "A", "--criteria", "a:10", "--clip")
    assert r.returncode == 0, r.stderr
    assert "warning: 1 score(s) outside 0..max were clipped" in r.stdout


def test_report_missing_database_exit_2(tmp_path):
    r = run_cli("report", "--db", str(tmp_path / "nope.duckdb"), "--audit", "A")
    assert r.returncode == 2 and "does not exist" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_sample_command(tmp_path, capsys):
    out = tmp_path / "s.csv"
    code = main(["sample", str(FIXTURES / "pool.csv"), "--cutoff", "10", "--spread", "1",
                 "--band", "3", "--high", "2", "--low", "2", "--seed", "1", "--out", str(out)])
    assert code == 0
    s = pd.read_csv(out)
    # band 10 ± 1.5 → 9 10 11 (3); high ≥ 13 → 14 16; low ≤ 7 → 3 5 7 (2 picked)
    assert sorted(s["stratum"].value_counts().items()) == [("band", 3), ("high", 2), ("low", 2)]
    printed = capsys.readouterr().out
    assert "0.73x - 1.58x" in printed
    assert "shortfall: fewer than 6 anchors" in printed
    code = main(["sample", str(FIXTURES / "pool.csv"), "--cutoff", "10", "--spread", "1",
                 "--reduced", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "only 3 band candidates available" in printed


def test_demo_then_report_prints_the_demo_report(tmp_path):
    db = tmp_path / "demo.duckdb"
    r = run_cli("demo", "--db", str(db))
    assert r.returncode == 0, r.stderr
    r = run_cli("report", "--db", str(db), "--audit", "demo-ENG-2291", "--format", "text")
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert text.startswith("SCREENING SCORE VARIANCE AUDIT — req ENG-2291")
    assert "Sample: 40 candidates (24 band, 8 high anchor, 8 low anchor) x 15 runs = 600" in text
    assert "Cutoff audited: 78 (effective; config field reads 70" in text
    for s in ("PER-CRITERION", "FLIP RATE AT CUTOFF 78 (single draw, not mean)", "RECOMMENDED",
              "REMEDIATE FIRST", "NOT ESTABLISHED BY THIS REPORT"):
        assert s in text


def test_clip_reported_by_report_from_file():
    # "clipped on request, counted and reported": the report a user reads must say so
    r = run_cli("report", str(FIXTURES / "bad_out_of_range.csv"), "--criteria", "a:10", "--clip",
                "--cutoff", "3", "--format", "text")
    assert r.returncode == 0, r.stderr
    assert "1 score(s) outside 0..max were clipped" in r.stdout


def test_locked_database_exit_2_says_in_use(tmp_path, capsys, monkeypatch):
    """A file held for longer than the wait (AUDIT_DB_WAIT_S) is named as in use, one line."""
    import subprocess
    import sys
    import textwrap

    db = tmp_path / "held.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import duckdb, time
        con = duckdb.connect({str(db)!r})
        print("ready", flush=True)
        time.sleep(30)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        monkeypatch.setenv("AUDIT_DB_WAIT_S", "1")
        code = main(["import", str(FIXTURES / "draws_long.csv"), "--db", str(db), "--audit", "A"])
        err = capsys.readouterr().err
        assert code == 2
        assert "in use" in err and len(err.strip().splitlines()) == 1
    finally:
        holder.kill()
        holder.wait()


def test_sample_out_never_carries_a_spreadsheet_formula(tmp_path, capsys):
    """A pool whose ids look like formulas is refused (one line per id, its line and column
    named) and no sample file is written; what is written goes through core.format.csv_safe."""
    pool = tmp_path / "pool.csv"
    ids = ["=HYPERLINK(\"http://x\",\"y\")", "+cmd|' /c calc'!A0", "@SUM(1)", "ok-id"]
    pool.write_text("candidate_id,first_pass_score\n" + "\n".join(
        f"\"{i.replace(chr(34), chr(34) * 2)}\",{60 + 5 * n}" for n, i in enumerate(ids)) + "\n")
    out = tmp_path / "sample.csv"
    code = main(["sample", str(pool), "--cutoff", "70", "--spread", "20", "--band", "4",
                 "--high", "0", "--low", "0", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    faults = [x for x in err.strip().splitlines() if "spreadsheet formula" in x]
    assert [f"line {n}, column 'candidate_id'" in x for n, x in zip((2, 3, 4), faults)] == \
        [True] * 3
    assert "3 faults in all" in err


def test_terminal_output_escapes_control_characters(tmp_path, capsys):
    """ANSI escapes and newlines in stored ids and criterion names (an import refuses them, a
    database from elsewhere may hold them) never reach the terminal raw."""
    from core.store import Store

    db = tmp_path / "a.duckdb"
    evil_id, evil_crit = "x\x1b[31mRED", "skill\n## forged"
    s = Store(db)
    s.save_audit("audit\x1b[2J", {"req_id": "r"}, "h", {"cutoff": 5})
    rows = [(c, r, crit, float(base + r if crit != "fit" else 2), f"{c}-{r}")
            for c, base in ((evil_id, 1), ("b", 6)) for r in (1, 2, 3)
            for crit in (evil_crit, "fit")]
    s.write_results("audit\x1b[2J", None, pd.DataFrame(
        rows, columns=["candidate_id", "run", "criterion", "score", "request_id"]))
    s.close()
    assert main(["audits", "--db", str(db)]) == 0
    listed = capsys.readouterr().out
    assert "\x1b" not in listed and "audit\\x1b[2J" in listed
    assert main(["report", "--db", str(db), "--audit", "audit\x1b[2J"]) == 0
    text = capsys.readouterr().out
    assert "\x1b" not in text and "x\\x1b[31mRED" in text
    assert "\n## forged" not in text and "skill\\n## forged" in text
    assert main(["report", "--db", str(db), "--audit", "audit\x1b[2J", "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert not any(line.startswith("## forged") or line.startswith("\\#\\# forged")
                   for line in md.splitlines())
    assert "\x1b" not in md


def test_report_top_beyond_the_pool_is_one_line(capsys):
    code = main(["report", str(FIXTURES / "draws_long.csv"), "--pool",
                 str(FIXTURES / "pool.csv"), "--top", "999"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "top k must be between 1 and the pool size 10; got 999" in err


def test_output_into_a_closed_pipe_stops_quietly(tmp_path):
    """`python -m core import … | head -1`: the reader leaves before the summary is printed;
    the command stops without a traceback or an 'unexpected error' line, like the shell's own
    tools (exit 141), and the import it made stays made."""
    import os
    import subprocess
    import sys

    from tests.support import ROOT

    db = tmp_path / "a.duckdb"
    read, write = os.pipe()
    os.close(read)                      # the reader is gone before the first line
    proc = subprocess.Popen([sys.executable, "-m", "core", "import", str(FIXTURES / "draws_long.csv"),
                             "--db", str(db), "--audit", "piped"], cwd=str(ROOT),
                            stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "unexpected" not in err, err
    assert run_cli("audits", "--db", str(db)).stdout.count("piped") == 1
