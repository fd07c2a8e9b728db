"""What short-lived access to the DuckDB file costs (issue 8 item 9).

The store attaches the file for each call and detaches it afterwards (so a terminal can use the
file while the app is open). This measures, against the previous design (one connection held
for the process's life, taken from git at ``--before``):

1. the reads of one page run (sidebar + a statistics page's prerequisites: list_audits,
   get_audit, n_draws, get_candidates, get_pool, completed_pairs ×2, data_version) on the demo
   and on a 5,000 × 30 × 7 audit (1,050,000 draw rows);
2. one batch write of 64 calls and their draws (what the runner's writer commits);
3. ``data_version`` alone (what a page reads to pick its cached analysis).

A slider move reads nothing from the file (the fragment answers from core.live); see
benchmarks/bench_engine.py for it.

    .venv/bin/python benchmarks/bench_store.py [--repeats 30] [--before f71de0b]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _data import long_draws  # noqa: E402

from core.demo import DEMO_AUDIT_ID, ensure_demo  # noqa: E402
from core.store import Store  # noqa: E402


def old_store_class(commit: str) -> type:
    src = subprocess.run(["git", "show", f"{commit}:core/store.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_store.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_store", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.Store


def page_reads(s, audit_id: str) -> None:
    s.list_audits()
    s.get_audit(audit_id)
    s.n_draws(audit_id)
    s.get_candidates(audit_id)
    s.get_pool(audit_id)
    s.completed_pairs(audit_id)
    s.completed_pairs(audit_id)
    s.data_version(audit_id)


def batch(i: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    ids = [f"b{i}-{j}" for j in range(64)]
    calls = pd.DataFrame({"request_id": ids, "candidate_id": [f"x{j}" for j in range(64)],
                          "run": i + 1, "status": "ok", "attempts": 1})
    draws = pd.DataFrame({"candidate_id": [f"x{j}" for j in range(64) for _ in range(5)],
                          "run": i + 1, "criterion": [f"c{k}" for _ in range(64)
                                                      for k in range(5)],
                          "score": 3.0, "request_id": [r for r in ids for _ in range(5)],
                          "model": "m", "clipped": False})
    return calls, draws


def timed(fn, repeats: int) -> tuple[float, float]:
    ts = []
    for i in range(repeats):
        t = time.perf_counter()
        fn(i)
        ts.append((time.perf_counter() - t) * 1000)
    ts.sort()
    return statistics.median(ts), ts[min(len(ts) - 1, int(round(0.95 * (len(ts) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--before", default="f71de0b")
    a = ap.parse_args()
    Old = old_store_class(a.before)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        demo_db = Path(tmp) / "demo.duckdb"
        s = Store(demo_db)
        ensure_demo(s)
        big_db = Path(tmp) / "big.duckdb"
        big = Store(big_db)
        long = long_draws()
        big.write_results("big", None, long.assign(request_id=None, model=None, clipped=False))
        for label, cls in (("before: one connection held", Old),
                           ("now: attach per call", Store)):
            for name, db, aid in (("demo", demo_db, DEMO_AUDIT_ID),
                                  ("1,050,000 draw rows", big_db, "big")):
                st = cls(db)
                med, p95 = timed(lambda i, st=st, aid=aid: page_reads(st, aid), a.repeats)
                rows.append((label, f"reads of one page run, {name}", med, p95))
                med, p95 = timed(lambda i, st=st, aid=aid: st.data_version(aid), a.repeats)
                rows.append((label, f"data_version, {name}", med, p95))
                if hasattr(st, "close") and cls is Old:
                    st.close()
            w = cls(Path(tmp) / f"w-{cls.__module__}.duckdb")
            med, p95 = timed(lambda i, w=w: w.write_results("w", *batch(i)), a.repeats)
            rows.append((label, "one runner batch (64 calls + 320 draws)", med, p95))
            if cls is Old:
                w.close()
    lines = ["## Short-lived access to the DuckDB file (`benchmarks/bench_store.py`)", "",
             f"Machine: {platform.platform()}, Python {platform.python_version()}, "
             f"{os.cpu_count()} CPU(s); {a.repeats} repeats each; before = `core/store.py` at "
             f"{a.before}.", "",
             "| design | what | median (ms) | p95 (ms) |", "|---|---|---:|---:|"]
    for label, what, med, p95 in rows:
        lines.append(f"| {label} | {what} | {med:.1f} | {p95:.1f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
