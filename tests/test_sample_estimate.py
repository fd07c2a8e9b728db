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

sys.path.insert(0, str(Path(__file__).parent))
from apptest_helpers import app_on, open_page, plain  # noqa: E402

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


def _line(out: str, name: str) -> str:
    m = re.search(rf"^  {name}: (.*)$", out, re.M)
    assert m, out
    return m.group(1)


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
    out = res.stdout
    calls = _line(out, "calls to make").split(" ")[0]
    cost = _line(out, "cost").split(" — ")[0]
    wall = _line(out, "wall time").split(" at ")[0]
    assert calls == "35"                                   # 7 candidates × 5 runs
    assert ("Calls to make", calls) in metrics
    assert ("Cost", cost) in metrics and cost.startswith("$")
    assert ("Wall time", wall) in metrics
    # each number's source, word for word: typed latency, no application text, the price
    for name in ("latency", "input tokens", "cost"):
        src = _line(out, name if name != "latency" else "wall time").split(" — ", 1)[-1]
        if name == "latency":
            src = src.removeprefix("latency ")
            assert src == "3.00 s a call, typed on the Sample page"
        assert src in captions, (name, src)


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
    assert _line(out, "cost").startswith("unknown — unknown: no screener model chosen yet")
    assert _line(out, "wall time") == ("10 s at 8 calls in flight — latency 2.00 s a call, a "
                                       "default until the pre-flight measures it")  # ⌈35/8⌉·2
    assert _line(typed.stdout, "wall time") == ("20 s at 8 calls in flight — latency 4.00 s a "
                                                "call, given with --latency")       # ⌈35/8⌉·4
    bad = _sample_cli("--out", "x.csv", "--db", "only-db.duckdb")
    assert bad.returncode == 2 and "give --db and --audit together" in bad.stderr
