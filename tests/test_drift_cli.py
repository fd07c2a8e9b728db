"""The ``drift`` subcommand through a tiny argparse harness built with add_drift_parser."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from core.drift.cli import add_drift_parser, run_drift

FIX = Path(__file__).parent / "fixtures"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m core")
    sub = parser.add_subparsers(dest="command", required=True)
    add_drift_parser(sub)
    args = parser.parse_args(argv)
    assert args.func is run_drift
    return run_drift(args)


def test_json_output_has_the_issue_keys(capsys):
    code = run(["drift", str(FIX / "drift_small.csv"), "--deployments", "2026-04-05",
                "--reps", "99", "--format", "json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("reference_rater", "raters", "batches", "q", "q_ci95", "innovation_sd", "lr",
                "lr_pvalue", "horizon", "trend"):
        assert key in out
    assert out["reference_rater"] == "A"
    b = out["raters"][0]
    assert b["rater"] == "B" and set(b) >= {"rater", "severity", "se", "ci95"}
    assert b["ci95"][0] < b["severity"] < b["ci95"][1] < 0  # B is harsher (true gap −0.7)
    assert set(out["batches"][0]) >= {"batch", "n", "raw_mean", "adjusted", "se", "smoothed",
                                      "smoothed_se"}
    assert len(out["batches"]) == 8
    h = out["horizon"]
    assert set(h) >= {"D", "weeks", "weeks_ci95", "date", "sd_at_weeks"}
    assert set(h["sd_at_weeks"]) == {"4", "8", "12"}
    assert out["deployments"] == ["2026-04-05"]
    assert out["trend"]["reps"] == 99


def test_explicit_reference_and_D(capsys):
    assert run(["drift", str(FIX / "drift_small.csv"), "--reference", "B", "--D", "0.5",
                "--reps", "0", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reference_rater"] == "B"
    assert out["raters"][0]["rater"] == "A" and out["raters"][0]["severity"] > 0
    assert out["horizon"]["D"] == 0.5


def test_text_output(capsys):
    assert run(["drift", str(FIX / "drift_small.csv"), "--reps", "0"]) == 0
    text = capsys.readouterr().out
    assert "reference rater: A" in text and "re-audit by" in text and "LR test" in text


# (the line a spreadsheet shows: data row 5 is line 6)
@pytest.mark.parametrize("fixture,row,column", [("drift_bad_date.csv", 6, "batch"),
                                                ("drift_bad_score.csv", 8, "score")])
def test_bad_row_exit_2_with_one_line_naming_file_row_column(capsys, fixture, row, column):
    code = run(["drift", str(FIX / fixture), "--format", "json"])
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert fixture in lines[0] and f"line {row}" in lines[0] and f"column '{column}'" in lines[0]


def test_a_panel_with_several_faults_prints_one_line_per_fault(capsys, tmp_path):
    panel = tmp_path / "panel.csv"
    panel.write_text("batch,rater,score\nnotadate,A,1\n2026-01-08,,2\n2026-01-08,B,inf\n")
    assert run(["drift", str(panel)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert [e.split(": ", 2)[1] for e in err[:3]] == [
        "panel.csv, line 2, column 'batch'", "panel.csv, line 3, column 'rater'",
        "panel.csv, line 4, column 'score'"]
    assert err[-1] == "error: 3 faults in all; nothing was analysed"


def test_disconnected_panel_exit_2_names_groups(capsys):
    assert run(["drift", str(FIX / "drift_disconnected.csv")]) == 2
    err = capsys.readouterr().err
    assert "not connected" in err and "rater(s) B, C" in err


def test_missing_file_and_bad_deployment_exit_2(capsys):
    assert run(["drift", str(FIX / "nope.csv")]) == 2
    assert "not found" in capsys.readouterr().err
    assert run(["drift", str(FIX / "drift_small.csv"), "--deployments", "April"]) == 2
    assert "deployments" in capsys.readouterr().err


def test_db_and_screener_save_the_result_for_the_report(tmp_path, capsys):
    from core.store import Store

    db = tmp_path / "audit.duckdb"
    assert run(["drift", str(FIX / "drift_small.csv"), "--reps", "0", "--db", str(db),
                "--screener", "acme-screener", "--D", "0.6", "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    store = Store(db)
    try:
        saved = store.latest_drift_result("acme-screener")
    finally:
        store.close()
    assert saved is not None
    assert saved["horizon"]["date"] == printed["horizon"]["date"]
    assert saved["reference_rater"] == "A"


def test_db_without_screener_is_refused(tmp_path, capsys):
    assert run(["drift", str(FIX / "drift_small.csv"), "--db", str(tmp_path / "x.duckdb")]) == 2
    assert "--screener" in capsys.readouterr().err


def test_text_output_shows_escape_sequences_in_rater_names_instead_of_obeying_them(
        tmp_path, capsys):
    """A rater named with an ANSI escape (a hostile or broken export) is printed as ``\\x1b…``:
    the terminal never receives the raw escape that would recolour or rewrite its screen."""
    src = (FIX / "drift_small.csv").read_text(encoding="utf-8")
    panel = tmp_path / "panel.csv"
    panel.write_text(src.replace(",B,", ",B\x1b[2J,"), encoding="utf-8")
    code = run(["drift", str(panel), "--deployments", "2026-04-05", "--reps", "99",
                "--format", "text"])
    out = capsys.readouterr().out
    assert code == 0
    assert "\x1b" not in out
    assert "B\\x1b[2J" in out


def test_markdown_output_is_a_document_with_the_json_numbers(capsys):
    assert run(["drift", str(FIX / "drift_small.csv"), "--reps", "0", "--D", "0.6",
                "--format", "json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert run(["drift", str(FIX / "drift_small.csv"), "--reps", "0", "--D", "0.6",
                "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("# Drift and grader severity — drift\\_small\\.csv\n")
    for heading in ("## Grader severity", "## Batches", "## Drift", "## Horizon", "## Trend"):
        assert f"\n{heading}" in md
    assert f"**re-audit by {res['horizon']['date']}" in md
    assert f"| B | {res['raters'][0]['severity']:.3f} |" in md
