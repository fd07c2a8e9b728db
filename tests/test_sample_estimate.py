"""``python -m core sample`` prints the estimate the Sample page shows (core.estimate, one
function): the same calls, cost and wall time, and the same stated source of each number."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from core.demo import demo_freeze_sheet
from core.ingest import criteria_frame
from core.store import Store
from tests.apptest_helpers import app_on, open_page, plain

ROOT = Path(__file__).resolve().parents[1]
POOL = ROOT / "tests" / "fixtures" / "pool.csv"


@pytest.fixture()
def db(tmp_path, monkeypatch):
    path = tmp_path / "audits.duckdb"
    monkeypatch.setenv("AUDIT_DB", str(path))
    return path


def _sample_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core", "sample", str(POOL), "--cutoff", "10",
                           "--spread", "1", "--band", "3", "--high", "2", "--low", "2",
                           "--runs", "5", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def _estimate(out: str) -> dict[str, str]:
    """The numbers of the ``estimate:`` line, and the source lines as ``"<name> source"``."""
    m = re.search(r"^estimate: ([\d,]+) calls, ~([\d,]+) input and ~([\d,]+) output tokens, "
                  r"cost (.+), wall time (.+) at concurrency (\d+)$", out, re.M)
    assert m, out
    found = dict(zip(("calls", "input", "output", "cost", "wall", "concurrency"), m.groups()))
    for name, source in re.findall(r"^  ([a-z ]+): (.*)$", out, re.M):
        found[f"{name} source"] = source
    return found


def test_the_sample_command_and_the_sample_page_show_one_estimate(db, tmp_path):
    sheet = demo_freeze_sheet()
    settings = {"runs": 5, "latency_s": 3.0,
                "screener": {"kind": "openai-chat", "base_url": "http://127.0.0.1:9/v1"},
                "prices": {sheet.model: {"input": 2.5, "output": 10.0}}}
    store = Store(db)
    store.save_audit("est", sheet.to_dict(), sheet.hash, settings)
    store.set_criteria("est", criteria_frame(list(sheet.criteria)))
    store.set_pool("est", pd.read_csv(POOL))
    store.close()
    out_csv = tmp_path / "s.csv"
    res = _sample_cli("--db", str(db), "--audit", "est", "--out", str(out_csv))
    assert res.returncode == 0, res.stderr
    # the drawn sample becomes the audit's saved sample; the page estimates it
    store = Store(db)
    store.set_candidates("est", pd.read_csv(out_csv))
    store.close()
    at = open_page(app_on("est"), "sample")
    metrics = [(m.label, m.value) for m in at.metric]
    captions = " ".join(plain(c.value) for c in at.caption)
    est = _estimate(res.stdout)
    assert est["calls"] == "35"                            # 7 candidates × 5 runs
    assert ("Calls to make", est["calls"]) in metrics
    assert ("Input tokens", est["input"]) in metrics
    assert ("Output tokens", est["output"]) in metrics
    assert ("Cost", est["cost"]) in metrics and est["cost"].startswith("$")
    assert ("Wall time", est["wall"]) in metrics
    # each number's source, word for word: typed latency, no application text, the price
    assert est["latency source"] == "3.00 s a call, typed on the Sample page"
    for name in ("latency", "input tokens", "output tokens", "cost"):
        assert est[f"{name} source"] in captions, (name, est[f"{name} source"])


def test_without_an_audit_the_sample_command_says_what_it_does_not_know():
    """No audit: no made-up "$0.00, ~0 s" — the cost is unknown and the latency a default,
    both said as such; --latency is a typed latency, said as given on the command line."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        res = _sample_cli("--out", str(Path(tmp) / "s.csv"))
        typed = _sample_cli("--out", str(Path(tmp) / "s.csv"), "--latency", "4")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "$0.00" not in out and "~0 s" not in out
    est = _estimate(out)
    assert est["cost"] == "unknown"
    assert est["calls"] == "35"
    assert "  cost: unknown: no screener model chosen yet, so nothing to price" in out
    assert est["wall"] == "10 s"                                       # ⌈35/8⌉·2 s
    assert est["latency source"] == "2.00 s a call, a default until the pre-flight measures it"
    typed_est = _estimate(typed.stdout)
    assert typed_est["wall"] == "20 s"                                 # ⌈35/8⌉·4 s
    assert typed_est["latency source"] == "4.00 s a call, given with --latency"
    bad = _sample_cli("--out", "x.csv", "--db", "only-db.duckdb")
    assert bad.returncode == 2 and "give --db and --audit together" in bad.stderr
